// Token classification per DFA state and its caches (mask_cache.h).
#include "mask_cache.h"

#include <algorithm>
#include <unordered_map>

#include <xxhash.h>

#include "matcher_sim.h"

namespace ladle::grammar {

namespace {

// Sub-automata larger than this are not hashed: the hash would cost more than it saves, and
// such states are rarely shared across grammars anyway.
constexpr size_t kMaxHashedStates = 4096;
// The process-wide table stops growing past this (entries already in use stay valid).
constexpr size_t kSharedCacheMaxBytes = size_t{1} << 30;
// Past this many accepted tokens off the commonest completion length, an entry carries no
// budget data (the matcher walks its tokens when the budget is tight).
constexpr size_t kMaxBudgetExceptions = 16384;

struct PairHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& k) const { return k.first ^ (k.second * 0x9E3779B97F4A7C15ULL); }
};

struct SharedCache {
  std::mutex mu;
  std::unordered_map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const MaskEntry>, PairHash> map;
  size_t bytes = 0, hits = 0, misses = 0;
};

SharedCache& Shared() {
  static SharedCache* c = new SharedCache();  // never destroyed: matchers may outlive statics
  return *c;
}

}  // namespace

void MaskEntry::OrInto(uint64_t* bits) const {
  if (!accepted_bits.empty()) {
    for (size_t i = 0; i < accepted_bits.size(); ++i) bits[i] |= accepted_bits[i];
  } else {
    for (TokenId id : accepted_ids) bits[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

namespace {

// The classifier's view of the pushdown automaton as a lazily built DFA over closed stack
// sets: inside one frame the same few sets recur at every trie depth, so each trie step is
// a table lookup after the first time. Past kMaxSets the table stops growing and steps
// are simulated directly.
class SetDfa {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kUnknown = -2;
  static constexpr size_t kMaxSets = 4096;

  SetDfa(const Automaton& a) : sim_(a, arena_) { sim_.SetMaxStacks(kMaxStacks); }
  // The classification is incomplete past this many stacks in one closure (see Simulator).
  static constexpr size_t kMaxStacks = 4096;
  bool overflowed() const { return sim_.overflowed(); }

  int32_t Start(int32_t state) {
    const int32_t root = arena_.Intern(sim_.automaton(), state, kBarrier);
    StackSet s;
    sim_.Close(std::span<const int32_t>(&root, 1), s);
    return Intern(std::move(s));
  }
  bool Barrier(int32_t set) const { return sets_[set].barrier; }
  // Shortest completion of the frame from this set: 0 if it can pop here, else the best top.
  uint32_t Short(int32_t set) {
    if (short_.size() < sets_.size()) short_.resize(sets_.size(), kUnset);
    uint32_t& d = short_[set];
    if (d == kUnset) d = sets_[set].barrier ? 0 : sim_.Shortest(sets_[set]);
    return d;
  }
  int32_t Step(int32_t set, uint8_t b) {
    if (static_cast<size_t>(set) < memo_rows_) {
      const size_t slot = static_cast<size_t>(set) * 256 + b;
      if (trans_[slot] != kUnknown) return trans_[slot];
      // Compute() may grow trans_ (Intern), so no reference into it may live across the call.
      const int32_t t = Compute(set, b);
      trans_[slot] = t;
      return t;
    }
    return Compute(set, b);
  }

 private:
  int32_t Compute(int32_t set, uint8_t b) {
    StackSet out;
    if (!sim_.StepByte(sets_[set], b, out)) return kDead;
    return Intern(std::move(out));
  }
  int32_t Intern(StackSet s) {
    std::string key(reinterpret_cast<const char*>(s.tops.data()), s.tops.size() * sizeof(int32_t));
    key.push_back(static_cast<char>(s.barrier | (s.can_end << 1)));
    auto [it, fresh] = index_.try_emplace(std::move(key), static_cast<int32_t>(sets_.size()));
    if (fresh) {
      sets_.push_back(std::move(s));
      if (sets_.size() <= kMaxSets) {
        trans_.resize(sets_.size() * 256, kUnknown);
        memo_rows_ = sets_.size();
      }
    }
    return it->second;
  }

  static constexpr uint32_t kUnset = kInfDist - 1;
  Arena arena_;
  Simulator sim_;
  std::vector<StackSet> sets_;
  std::vector<uint32_t> short_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<int32_t> trans_;
  size_t memo_rows_ = 0;
};

}  // namespace

MaskEntry ClassifyState(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
  SetDfa dfa(a);
  std::vector<int32_t> lv(1, dfa.Start(state));
  std::vector<uint8_t> anyb(1, 0);  // anyb[d]: the frame could pop before byte d
  std::vector<TokenId> acc;
  std::vector<uint32_t> acc_short;  // parallel to acc
  MaskEntry e;
  const size_t n = v.sorted.size();
  size_t valid = 0;
  for (size_t i = 0; i < n;) {
    std::string_view tok = v.SortedBytes(static_cast<uint32_t>(i));
    const size_t len = tok.size();
    if (lv.size() < len + 1) {
      lv.resize(len + 1);
      anyb.resize(len + 1);
    }
    size_t p = std::min<size_t>(v.lcp[i], valid);
    for (; p < len; ++p) {
      anyb[p + 1] = anyb[p] || dfa.Barrier(lv[p]);
      lv[p + 1] = dfa.Step(lv[p], static_cast<uint8_t>(tok[p]));
      if (lv[p + 1] == SetDfa::kDead) break;
    }
    if (p == len) {
      acc.push_back(v.sorted[i]);
      acc_short.push_back(dfa.Short(lv[len]));
      valid = len;
      ++i;
      continue;
    }
    // Dead at byte p without popping: every token sharing tok[0..p] fails the same way, and
    // is uncertain if the frame could have popped before.
    valid = p;
    const uint32_t end = v.GroupEnd(static_cast<uint32_t>(i), p + 1);
    if (anyb[p + 1]) {
      if (!e.uncertain.empty() && e.uncertain.back().second == i) {
        e.uncertain.back().second = end;
      } else {
        e.uncertain.push_back({static_cast<uint32_t>(i), end});
      }
      e.uncertain_count += end - i;
    }
    i = end;
  }
  if (dfa.overflowed()) {
    // Too ambiguous to classify from one frame: every token is left to the runtime walk,
    // which simulates against the real stacks (under the matcher's own stack limit).
    MaskEntry all;
    all.uncertain.push_back({0, static_cast<uint32_t>(n)});
    all.uncertain_count = n;
    return all;
  }
  e.accepted_count = acc.size();
  if (!acc.empty()) {
    // The commonest completion is the base; the others are listed, unless there are so many
    // that the list would cost more than a walk.
    std::unordered_map<uint32_t, size_t> freq;
    for (uint32_t d : acc_short) ++freq[d];
    auto top = std::max_element(freq.begin(), freq.end(), [](auto& x, auto& y) { return x.second < y.second; });
    e.budget_base = top->first;
    e.budget_min = std::min_element(freq.begin(), freq.end())->first;
    const size_t others = acc.size() - top->second;
    if (others > kMaxBudgetExceptions) {
      e.budget_known = false;
    } else {
      e.budget_exceptions.reserve(others);
      for (size_t k = 0; k < acc.size(); ++k) {
        if (acc_short[k] != e.budget_base) e.budget_exceptions.push_back({acc[k], acc_short[k]});
      }
      std::sort(e.budget_exceptions.begin(), e.budget_exceptions.end());
    }
  }
  if (acc.size() * 32 >= v.vocab_size) {
    e.accepted_bits.assign(v.words(), 0);
    for (TokenId id : acc) e.accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  } else {
    std::sort(acc.begin(), acc.end());
    e.accepted_ids = std::move(acc);
  }
  return e;
}

bool StructuralKey(const Automaton& a, int32_t state, size_t max_bytes, std::pair<uint64_t, uint64_t>* key) {
  // 1. Byte distance from `state` (calls reach the callee's start at no cost and the return
  //    state after the callee's shortest run), by a bucket queue up to the horizon.
  const auto horizon = static_cast<uint32_t>(max_bytes);
  // Per-thread scratch indexed by state with generation stamps: no allocation per call.
  struct Scratch {
    std::vector<uint32_t> dist, dist_gen, num, num_gen;
    uint32_t gen = 0;
  };
  thread_local Scratch sc;
  if (sc.dist.size() < a.num_states()) {
    sc.dist.assign(a.num_states(), 0);
    sc.dist_gen.assign(a.num_states(), 0);
    sc.num.assign(a.num_states(), 0);
    sc.num_gen.assign(a.num_states(), 0);
  }
  if (++sc.gen == 0) {
    std::fill(sc.dist_gen.begin(), sc.dist_gen.end(), 0);
    std::fill(sc.num_gen.begin(), sc.num_gen.end(), 0);
    sc.gen = 1;
  }
  const uint32_t gen = sc.gen;
  auto has_dist = [&](int32_t g) { return sc.dist_gen[g] == gen; };
  sc.dist[state] = 0;
  sc.dist_gen[state] = gen;
  std::vector<std::vector<int32_t>> bucket(horizon + 1);
  bucket[0].push_back(state);
  size_t near = 0;
  auto relax = [&](int32_t t, uint64_t d) {
    if (d > horizon) return;
    if (has_dist(t) && sc.dist[t] <= d) return;
    sc.dist[t] = static_cast<uint32_t>(d);
    sc.dist_gen[t] = gen;
    bucket[d].push_back(t);
  };
  for (uint32_t d = 0; d <= horizon; ++d) {
    for (size_t k = 0; k < bucket[d].size(); ++k) {
      const int32_t g = bucket[d][k];
      if (sc.dist[g] != d) continue;  // a stale entry: reached closer later
      if (++near > kMaxHashedStates) return false;
      const int32_t u = a.unit_of[g];
      for (uint16_t c = 0; c < a.num_classes[u]; ++c) {
        int32_t t = a.next[a.trans_off[g] + c];
        if (t >= 0) relax(t, d + 1);
      }
      for (uint32_t i = a.call_begin[g]; i < a.call_begin[g + 1]; ++i) {
        relax(a.calls[i].callee, d);
        if (a.dist[a.calls[i].callee] != kInfDist) relax(a.calls[i].ret, uint64_t{d} + a.dist[a.calls[i].callee]);
      }
    }
  }
  // 2. Canonical numbering by BFS over the near states in edge order; far targets are one
  //    marker, dead ones another. Specials are left out: tokens never contain them.
  constexpr uint32_t kFar = 0xFFFFFFFEu, kDeadT = 0xFFFFFFFFu;
  std::unordered_map<int32_t, uint32_t> unit_num;
  std::vector<int32_t> order{state};
  sc.num[state] = 0;
  sc.num_gen[state] = gen;
  std::vector<uint32_t> buf;
  auto id = [&](int32_t g) -> uint32_t {
    if (g < 0) return kDeadT;
    if (!has_dist(g)) return kFar;
    if (sc.num_gen[g] != gen) {
      sc.num_gen[g] = gen;
      sc.num[g] = static_cast<uint32_t>(order.size());
      order.push_back(g);
    }
    return sc.num[g];
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const int32_t g = order[k];
    const int32_t u = a.unit_of[g];
    auto [uit, ufresh] = unit_num.try_emplace(u, static_cast<uint32_t>(unit_num.size()));
    buf.push_back(0xA0000000u | (a.accepting[g] ? 1u : 0u));
    buf.push_back(uit->second);
    if (ufresh) {
      // The unit's byte classes, once: rows below are per class.
      for (int b = 0; b < 256; b += 4) {
        buf.push_back(uint32_t{a.class_map[u][b]} | uint32_t{a.class_map[u][b + 1]} << 8 |
                      uint32_t{a.class_map[u][b + 2]} << 16 | uint32_t{a.class_map[u][b + 3]} << 24);
      }
    }
    for (uint16_t c = 0; c < a.num_classes[u]; ++c) buf.push_back(id(a.next[a.trans_off[g] + c]));
    buf.push_back(0xC0000000u);
    for (uint32_t i = a.call_begin[g]; i < a.call_begin[g + 1]; ++i) {
      buf.push_back(id(a.calls[i].callee));
      buf.push_back(id(a.calls[i].ret));
    }
  }
  XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size() * sizeof(uint32_t));
  *key = {h.high64, h.low64};
  return true;
}

MaskCache::MaskCache(size_t num_states) : slots_(new std::atomic<const MaskEntry*>[num_states]), n_(num_states) {
  for (size_t i = 0; i < n_; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
}
MaskCache::~MaskCache() = default;

const MaskEntry& MaskCache::Get(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
  if (const MaskEntry* e = slots_[state].load(std::memory_order_acquire)) return *e;
  std::shared_ptr<const MaskEntry> entry;
  std::pair<uint64_t, uint64_t> key;
  bool keyed = StructuralKey(a, state, v.max_token_len, &key);
  if (keyed) {
    key.first ^= v.fingerprint;
    SharedCache& sc = Shared();
    std::lock_guard<std::mutex> lock(sc.mu);
    auto it = sc.map.find(key);
    if (it != sc.map.end()) {
      entry = it->second;
      ++sc.hits;
    } else {
      ++sc.misses;
    }
  }
  if (!entry) {
    entry = std::make_shared<const MaskEntry>(ClassifyState(a, v, state));
    if (keyed) {
      SharedCache& sc = Shared();
      std::lock_guard<std::mutex> lock(sc.mu);
      if (sc.bytes + entry->MemoryBytes() <= kSharedCacheMaxBytes) {
        auto [it, fresh] = sc.map.try_emplace(key, entry);
        if (fresh) {
          sc.bytes += entry->MemoryBytes();
        } else {
          entry = it->second;
        }
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (const MaskEntry* e = slots_[state].load(std::memory_order_acquire)) return *e;
  owned_.push_back(entry);
  bytes_ += entry->MemoryBytes();
  slots_[state].store(entry.get(), std::memory_order_release);
  return *entry;
}

size_t MaskCache::MemoryBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_ * sizeof(void*) + bytes_;
}

SharedMaskCacheStats GetSharedMaskCacheStats() {
  SharedCache& sc = Shared();
  std::lock_guard<std::mutex> lock(sc.mu);
  return {sc.map.size(), sc.bytes, sc.hits, sc.misses};
}

}  // namespace ladle::grammar
