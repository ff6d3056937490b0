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
// Trie steps a classification may take before the structural key is worth computing.
constexpr size_t kQuickSteps = 8192;
// The process-wide table stops growing past this (entries already in use stay valid).
constexpr size_t kSharedCacheMaxBytes = size_t{1} << 30;

struct PairHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& k) const { return k.first ^ (k.second * 0x9E3779B97F4A7C15ULL); }
};

struct SharedCache {
  std::atomic<size_t> body_slices{0}, layer_slices{0};
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
  // Reused across calls: allocating horizon + 1 vectors per state was a third of its cost.
  thread_local std::vector<std::vector<int32_t>> bucket;
  if (bucket.size() < horizon + 1) bucket.resize(horizon + 1);
  for (uint32_t d = 0; d <= horizon; ++d) bucket[d].clear();
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
    // The frame's shortest completion from here: the budget data of an entry (completion
    // lengths after each token) is only shared between states that agree on it.
    buf.push_back(a.dist[g]);
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

MaskCache::MaskCache(size_t num_states)
    : budget_slots_(new std::atomic<const MaskEntry*>[num_states]),
      slots_(new std::atomic<const MaskEntry*>[num_states]),
      n_(num_states) {
  for (size_t i = 0; i < n_; ++i) {
    slots_[i].store(nullptr, std::memory_order_relaxed);
    budget_slots_[i].store(nullptr, std::memory_order_relaxed);
  }
}
MaskCache::~MaskCache() = default;

const MaskEntry& MaskCache::Get(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
  if (const MaskEntry* e = slots_[state].load(std::memory_order_acquire)) return *e;
  std::shared_ptr<const MaskEntry> entry;
  if (auto layer = ClassifyLayer(a, v, state)) {
    Shared().layer_slices.fetch_add(1, std::memory_order_relaxed);
    return Install(slots_.get(), state, std::move(layer));
  }
  if (MaskEntry body; ClassifyStringBody(a, v, state, &body)) {
    Shared().body_slices.fetch_add(1, std::memory_order_relaxed);
    entry = std::make_shared<const MaskEntry>(std::move(body));
    return Install(slots_.get(), state, std::move(entry));
  }
  return Install(slots_.get(), state, Classify(a, v, state));
}

const MaskEntry& MaskCache::GetWithBudget(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
  const MaskEntry& e = Get(a, v, state);
  if (!e.budget_deferred) return e;
  if (const MaskEntry* b = budget_slots_[state].load(std::memory_order_acquire)) return *b;
  return Install(budget_slots_.get(), state, Classify(a, v, state));
}

std::shared_ptr<const MaskEntry> MaskCache::Classify(const Automaton& a, const TokenVocabulary::Impl& v,
                                                     int32_t state) {
  std::shared_ptr<const MaskEntry> entry;
  // With long tokens in the vocabulary, the shared entry covers the short ones (keyed by what
  // lies within kShortTokenBytes) and the long ones are classified for this state alone.
  const bool split = !v.long_pos.empty();
  const TokenSpan span = split ? TokenSpan::kShort : TokenSpan::kAll;
  // Most states reject nearly every token at its first bytes: classified in fewer steps than
  // the structural key would take to hash their surroundings. (A vocabulary that small
  // throughout is classified through the key as before: nothing to save.)
  std::pair<uint64_t, uint64_t> key;
  bool keyed = false;
  if (MaskEntry quick;
      v.sorted.size() > kQuickSteps && ClassifyStateWithin(a, v, state, span, kQuickSteps, &quick)) {
    entry = std::make_shared<const MaskEntry>(std::move(quick));
  } else {
    keyed = StructuralKey(a, state, split ? TokenVocabulary::Impl::kShortTokenBytes : v.max_token_len, &key);
  }
  if (keyed) {
    key.first ^= v.fingerprint;
    key.second ^= static_cast<uint64_t>(span) * 0x9E3779B97F4A7C15ULL;
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
    entry = std::make_shared<const MaskEntry>(ClassifyState(a, v, state, span));
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
  if (split) {
    MaskEntry long_part = ClassifyState(a, v, state, TokenSpan::kLong);
    if (long_part.accepted_count > 0 || long_part.uncertain_count > 0) {
      entry = std::make_shared<const MaskEntry>(MergeEntries(v, *entry, long_part));
    }
  }
  return entry;
}

const MaskEntry& MaskCache::Install(std::atomic<const MaskEntry*>* slots, int32_t state,
                                    std::shared_ptr<const MaskEntry> entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const MaskEntry* e = slots[state].load(std::memory_order_acquire)) return *e;
  owned_.push_back(entry);
  bytes_ += entry->MemoryBytes();
  slots[state].store(entry.get(), std::memory_order_release);
  return *entry;
}

size_t MaskCache::MemoryBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return 2 * n_ * sizeof(void*) + bytes_;
}

SharedMaskCacheStats GetSharedMaskCacheStats() {
  SharedCache& sc = Shared();
  std::lock_guard<std::mutex> lock(sc.mu);
  return {sc.map.size(), sc.bytes, sc.hits, sc.misses, sc.body_slices.load(std::memory_order_relaxed),
          sc.layer_slices.load(std::memory_order_relaxed)};
}

}  // namespace ladle::grammar
