// Grammar IR -> per-unit DFAs (automaton.h): subset construction over each unit's NFA
// (automaton_nfa.cc builds those), layered repeats, joined sequences, the process-wide cache
// of call-free unit DFAs, left-recursion check and global numbering; shortest completion and
// pruning are automaton_finish.cc.
#include "automaton.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include <fmt/format.h>
#include <xxhash.h>

#include "automaton_nfa.h"
#include "ladle/core/logging.h"

namespace ladle::grammar {

namespace {

using namespace automaton_internal;


// ---- Subset construction -------------------------------------------------------------------

struct Dfa {
  std::array<uint8_t, 256> class_map{};
  uint16_t num_classes = 1;
  std::vector<uint8_t> accepting;
  std::vector<int32_t> next;  // state * num_classes + class, local ids
  std::vector<std::vector<std::pair<RuleId, int32_t>>> calls;
  std::vector<std::vector<std::pair<uint32_t, int32_t>>> specials;
  size_t size() const { return accepting.size(); }
};

// Lists of NFA states stored back to back (one allocation for all of them, instead of a
// vector per DFA state), with an open-addressing index by hash. Lookups compare the list
// itself, so hash collisions are harmless.
class ListPool {
 public:
  size_t size() const { return off_.size() - 1; }
  std::span<const int32_t> operator[](size_t i) const {
    return {pool_.data() + off_[i], pool_.data() + off_[i + 1]};
  }
  // The id of an equal list already interned, or -1.
  int32_t Find(uint64_t h, std::span<const int32_t> list) const {
    if (slots_.empty()) return -1;
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& sl = slots_[i];
      if (sl.id < 0) return -1;
      if (sl.hash == h) {
        auto have = (*this)[static_cast<size_t>(sl.id)];
        if (std::equal(have.begin(), have.end(), list.begin(), list.end())) return sl.id;
      }
    }
  }
  int32_t Add(uint64_t h, std::span<const int32_t> list) {
    const auto id = static_cast<int32_t>(size());
    pool_.insert(pool_.end(), list.begin(), list.end());
    off_.push_back(pool_.size());
    if (2 * (size() + 1) > slots_.size()) Grow();
    Place({h, id});
    return id;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    int32_t id = -1;
  };
  void Place(Slot s) {
    const size_t mask = slots_.size() - 1;
    size_t i = s.hash & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(64, old.size() * 2), Slot{});
    for (const Slot& s : old) {
      if (s.id >= 0) Place(s);
    }
  }
  std::vector<int32_t> pool_;
  std::vector<size_t> off_{0};
  std::vector<Slot> slots_;
};

class Determinizer {
 public:
  Determinizer(const Nfa& nfa, Budget& budget) : nfa_(nfa), budget_(budget) {}

  Result<Dfa> Run() {
    ComputeClasses();
    mark_.assign(nfa_.size(), 0);
    InternClosure({nfa_.start});
    // Per-thread scratch kept across units: most units are small, and allocating a vector per
    // class for each of them was a visible share of compile time.
    thread_local std::vector<std::vector<int32_t>> bucket;
    if (bucket.size() < dfa_.num_classes) bucket.resize(dfa_.num_classes);
    for (size_t d = 0; d < states_.size(); ++d) {
      LADLE_RETURN_IF_ERROR(budget_.Charge(kDfaStateBytes + dfa_.num_classes * sizeof(int32_t)));
      for (uint16_t c = 0; c < dfa_.num_classes; ++c) bucket[c].clear();
      calls_.clear();
      specials_.clear();
      bool acc = false;
      for (int32_t s : states_[d]) {  // InternClosure (which appends) is not called in this loop
        if (s == nfa_.final) acc = true;
        nfa_.ForEdges(s, [&](const NfaEdge& e) {
          switch (e.kind) {
            case EdgeKind::kBytes:
              for (uint32_t k = set_class_off_[e.arg]; k < set_class_off_[e.arg + 1]; ++k) {
                bucket[set_class_pool_[k]].push_back(e.to);
              }
              break;
            case EdgeKind::kCall: calls_.push_back({e.arg, e.to}); break;
            case EdgeKind::kSpecial: specials_.push_back({e.arg, e.to}); break;
            case EdgeKind::kEps: break;
          }
        });
      }
      dfa_.accepting.push_back(acc);
      const size_t row = dfa_.next.size();
      dfa_.next.resize(row + dfa_.num_classes, -1);
      // Wide edges (any code point) put the same targets in many classes: determinise each
      // distinct bucket once (a small open-addressing table, reset by generation).
      ++same_gen_;
      for (uint16_t c = 0; c < dfa_.num_classes; ++c) {
        if (bucket[c].empty()) continue;
        const uint64_t h = XXH3_64bits(bucket[c].data(), bucket[c].size() * sizeof(int32_t));
        size_t i = h & (kSameSlots - 1);
        for (; same_[i].gen == same_gen_; i = (i + 1) & (kSameSlots - 1)) {
          if (same_[i].hash == h && bucket[same_[i].cls] == bucket[c]) break;
        }
        if (same_[i].gen == same_gen_) {
          dfa_.next[row + c] = dfa_.next[row + same_[i].cls];
        } else {
          same_[i] = {h, same_gen_, c};
          LADLE_ASSIGN_OR_RETURN(dfa_.next[row + c], SeededClosure(h, bucket[c]));
        }
      }
      dfa_.calls.emplace_back();
      ForGroups(calls_, [&](int32_t r, const std::vector<int32_t>& targets) {
        dfa_.calls.back().push_back({r, InternClosure(targets)});
      });
      dfa_.specials.emplace_back();
      ForGroups(specials_, [&](int32_t t, const std::vector<int32_t>& targets) {
        dfa_.specials.back().push_back({static_cast<uint32_t>(t), InternClosure(targets)});
      });
    }
    return std::move(dfa_);
  }

 private:
  void ComputeClasses() {
    // Partition 0..255 by membership in every byte set of the NFA. Each set XORs its own
    // 64-bit key into the signature of its bytes (cost: the sets' sizes, not 256 per set),
    // bytes with equal signatures share a class, and the partition is then verified exactly
    // (each set must hold whole classes), falling back to refinement one set at a time on a
    // collision. Classes are numbered by their first byte either way.
    std::array<uint16_t, 256> cls{};
    const std::optional<uint16_t> fast = SignatureClasses(cls);
    const uint16_t n = fast ? *fast : RefineClasses(cls);
#ifndef NDEBUG
    {  // Builds with asserts (the sanitizer stage of CI) check the fast path against the slow.
      std::array<uint16_t, 256> slow{};
      LADLE_CHECK(RefineClasses(slow) == n && slow == cls);
    }
#endif
    dfa_.num_classes = n;
    for (int b = 0; b < 256; ++b) dfa_.class_map[b] = static_cast<uint8_t>(cls[b]);
    set_class_off_.assign(1, 0);
    set_class_pool_.clear();
    std::array<uint8_t, 256> seen;
    for (size_t i = 0; i < nfa_.sets.size(); ++i) {
      std::fill(seen.begin(), seen.begin() + n, uint8_t{0});
      ForBits(nfa_.sets[i], [&](int b) {
        if (!seen[cls[b]]) {
          seen[cls[b]] = 1;
          set_class_pool_.push_back(static_cast<uint8_t>(cls[b]));
        }
      });
      set_class_off_.push_back(static_cast<uint32_t>(set_class_pool_.size()));
    }
  }

  // The class count, or nullopt on a signature collision.
  std::optional<uint16_t> SignatureClasses(std::array<uint16_t, 256>& cls) {
    std::array<uint64_t, 256> sig{};
    for (size_t i = 0; i < nfa_.sets.size(); ++i) {
      uint64_t key = (i + 1) * 0x9E3779B97F4A7C15ULL;  // splitmix64 of the set's index
      key = (key ^ (key >> 30)) * 0xBF58476D1CE4E5B9ULL;
      key = (key ^ (key >> 27)) * 0x94D049BB133111EBULL;
      key ^= key >> 31;
      ForBits(nfa_.sets[i], [&](int b) { sig[b] ^= key; });
    }
    std::array<uint64_t, 512> slot_sig;
    std::array<int16_t, 512> slot_cls;
    slot_cls.fill(-1);
    uint16_t n = 0;
    for (int b = 0; b < 256; ++b) {
      if (b > 0 && sig[b] == sig[b - 1]) {  // runs of bytes are the common case
        cls[b] = cls[b - 1];
        continue;
      }
      size_t i = (sig[b] ^ (sig[b] >> 32)) & 511;
      while (slot_cls[i] >= 0 && slot_sig[i] != sig[b]) i = (i + 1) & 511;
      if (slot_cls[i] < 0) {
        slot_sig[i] = sig[b];
        slot_cls[i] = static_cast<int16_t>(n++);
      }
      cls[b] = static_cast<uint16_t>(slot_cls[i]);
    }
    std::array<uint16_t, 256> size{}, hit{};
    for (int b = 0; b < 256; ++b) ++size[cls[b]];
    for (const ByteSet& s : nfa_.sets) {
      bool ok = true;
      ForBits(s, [&](int b) { ++hit[cls[b]]; });
      ForBits(s, [&](int b) {
        if (hit[cls[b]] != 0 && hit[cls[b]] != size[cls[b]]) ok = false;
        hit[cls[b]] = 0;
      });
      if (!ok) return std::nullopt;
    }
    return n;
  }

  uint16_t RefineClasses(std::array<uint16_t, 256>& cls) {
    std::array<int16_t, 512> remap;
    uint16_t n = 1;
    cls.fill(0);
    for (const ByteSet& s : nfa_.sets) {
      std::fill(remap.begin(), remap.begin() + 2 * n, int16_t{-1});
      uint16_t m = 0;
      for (int b = 0; b < 256; ++b) {
        int16_t& slot = remap[cls[b] * 2 + (s.Has(static_cast<uint8_t>(b)) ? 1 : 0)];
        if (slot < 0) slot = static_cast<int16_t>(m++);
        cls[b] = static_cast<uint16_t>(slot);
      }
      n = m;
    }
    return n;
  }

  template <typename F>
  static void ForBits(const ByteSet& s, F&& f) {
    for (int w = 0; w < 4; ++w) {
      for (uint64_t bits = s.bits[w]; bits; bits &= bits - 1) f(w * 64 + __builtin_ctzll(bits));
    }
  }

  // Calls (specials) grouped by rule (token), in ascending order, targets merged.
  template <typename F>
  void ForGroups(std::vector<std::pair<int32_t, int32_t>>& edges, F&& f) {
    std::sort(edges.begin(), edges.end());
    for (size_t i = 0; i < edges.size();) {
      group_.clear();
      size_t j = i;
      for (; j < edges.size() && edges[j].first == edges[i].first; ++j) group_.push_back(edges[j].second);
      f(edges[i].first, group_);
      i = j;
    }
  }

  // InternClosure memoised by the seed list itself: other rows (other states, often every
  // state of a search-mode regex) step to the same targets, and the closure walk plus its
  // sort was most of the construction's time. The seeds are kept for an exact comparison,
  // charged to the budget like the states.
  Result<int32_t> SeededClosure(uint64_t h, const std::vector<int32_t>& seeds) {
    if (int32_t i = seed_lists_.Find(h, seeds); i >= 0) return seed_state_[static_cast<size_t>(i)];
    LADLE_RETURN_IF_ERROR(budget_.Charge(seeds.size() * sizeof(int32_t) + 48));
    const int32_t d = InternClosure(seeds);
    seed_lists_.Add(h, seeds);
    seed_state_.push_back(d);
    return d;
  }

  // The DFA state of the epsilon closure of `seeds`. The closure is built in scratch buffers
  // and only copied when it is a new state: most rows lead back to states already built, and
  // allocating a vector per transition (plus a second copy as the map key) was a large share
  // of compile time.
  int32_t InternClosure(const std::vector<int32_t>& seeds) {
    ++stamp_;
    closure_.clear();
    worklist_.clear();
    for (int32_t s : seeds) {
      if (mark_[s] != stamp_) {
        mark_[s] = stamp_;
        worklist_.push_back(s);
      }
    }
    while (!worklist_.empty()) {
      int32_t s = worklist_.back();
      worklist_.pop_back();
      closure_.push_back(s);
      nfa_.ForEdges(s, [&](const NfaEdge& e) {
        if (e.kind == EdgeKind::kEps && mark_[e.to] != stamp_) {
          mark_[e.to] = stamp_;
          worklist_.push_back(e.to);
        }
      });
    }
    std::sort(closure_.begin(), closure_.end());
    const uint64_t h = XXH3_64bits(closure_.data(), closure_.size() * sizeof(int32_t));
    if (int32_t id = states_.Find(h, closure_); id >= 0) return id;
    return states_.Add(h, closure_);
  }

  const Nfa& nfa_;
  Budget& budget_;
  Dfa dfa_;
  // The classes of byte set i: set_class_pool_[set_class_off_[i] .. set_class_off_[i + 1]).
  std::vector<uint8_t> set_class_pool_;
  std::vector<uint32_t> set_class_off_;
  std::vector<std::pair<int32_t, int32_t>> calls_, specials_;
  static constexpr size_t kSameSlots = 512;  // > 2 x the most byte classes (256)
  struct SameSlot {
    uint64_t hash = 0;
    uint32_t gen = 0;
    uint16_t cls = 0;
  };
  std::array<SameSlot, kSameSlots> same_{};
  uint32_t same_gen_ = 0;
  std::vector<int32_t> group_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  ListPool states_;      // DFA state -> its sorted NFA closure
  ListPool seed_lists_;  // seed lists already closed, by id
  std::vector<int32_t> seed_state_;  // seed list id -> DFA state
  std::vector<int32_t> closure_, worklist_;
};

// The numbering of a DFA's non-accepting states when the DFA is prefix-free (no accepting
// state has a byte, call or special edge) and its start cannot accept; nullopt otherwise, or
// when no state accepts. With `pure`, no state may call or take a special token at all.
struct Unfinished {
  std::vector<int32_t> idx;  // by state: its number among the non-accepting ones, or -1
  int32_t n = 0;
};
std::optional<Unfinished> PrefixFree(const Dfa& d, bool pure) {
  const size_t k = d.size();
  if (k == 0 || d.accepting[0]) return std::nullopt;
  Unfinished u;
  u.idx.assign(k, -1);
  for (size_t s = 0; s < k; ++s) {
    const bool edges = !d.calls[s].empty() || !d.specials[s].empty();
    if (pure && edges) return std::nullopt;
    if (!d.accepting[s]) {
      u.idx[s] = u.n++;
      continue;
    }
    if (edges) return std::nullopt;
    for (uint16_t c = 0; c < d.num_classes; ++c) {
      if (d.next[s * d.num_classes + c] >= 0) return std::nullopt;
    }
  }
  if (u.n == static_cast<int32_t>(k)) return std::nullopt;  // no copy ever completes
  return u;
}

// body{min,max} from the DFA of one copy of the body, without subset construction. When that
// DFA is prefix-free (no accepting state goes on), its start cannot accept and it calls
// nothing, the number of complete copies is known at every point, so the repeat's DFA is
// `max` layers of the body's non-accepting states, each layer's accepting transitions leading
// to the next layer's start (accepting from layer `min` on), plus one final state. A JSON
// string of at most 512 characters is then a fill of its 14K-state table instead of 14K
// closures. nullopt when the body's DFA does not qualify (the caller determinises as usual).
Result<std::optional<Dfa>> LayerRepeat(const Dfa& d, uint32_t min, uint32_t max, Budget& budget) {
  const size_t k = d.size();
  const uint16_t nc = d.num_classes;
  const std::optional<Unfinished> pf = PrefixFree(d, /*pure=*/true);
  if (!pf) return std::optional<Dfa>{};
  const std::vector<int32_t>& idx = pf->idx;
  const int32_t n = pf->n;
  const size_t total = static_cast<size_t>(max) * static_cast<size_t>(n) + 1;
  if (total > INT32_MAX / 2) return ResourceExhausted("grammar automaton has too many states");
  // Charged before the table is allocated: `x{0,1000000}` must fail on the budget, not in malloc.
  LADLE_RETURN_IF_ERROR(budget.Charge(total * (kDfaStateBytes + nc * sizeof(int32_t))));
  Dfa out;
  out.class_map = d.class_map;
  out.num_classes = nc;
  out.accepting.assign(total, 0);
  out.next.assign(total * nc, -1);
  out.calls.resize(total);
  out.specials.resize(total);
  for (uint32_t layer = 0; layer < max; ++layer) {
    const int32_t base = static_cast<int32_t>(layer) * n;
    for (size_t s = 0; s < k; ++s) {
      if (idx[s] < 0) continue;
      int32_t* row = &out.next[static_cast<size_t>(base + idx[s]) * nc];
      for (uint16_t c = 0; c < nc; ++c) {
        const int32_t t = d.next[s * nc + c];
        if (t >= 0) row[c] = d.accepting[t] ? base + n : base + idx[t];
      }
    }
    out.accepting[static_cast<size_t>(base)] = layer >= min;
  }
  out.accepting[total - 1] = 1;
  return std::optional<Dfa>{std::move(out)};
}

// head·tail from the DFAs of its parts, when head is prefix-free (no accepting state goes on)
// and cannot accept at its start: every way into a head acceptance becomes the tail's start,
// and each part's table is re-read through the refined byte classes. The tail's DFA is built
// once per compile and shared: the JSON Schema front-end's "rest of an unlisted key" rules
// (one per excluded character set, all ending in the same string tail) were half of all
// compile time when each was determinised whole. nullopt when head does not qualify.
Result<std::optional<Dfa>> Concat(const Dfa& head, const Dfa& tail, Budget& budget) {
  const size_t k = head.size();
  const std::optional<Unfinished> pf = tail.size() == 0 ? std::nullopt : PrefixFree(head, /*pure=*/false);
  if (!pf) return std::optional<Dfa>{};
  const std::vector<int32_t>& idx = pf->idx;
  const int32_t n = pf->n;
  Dfa out;
  // Byte classes: the common refinement of both parts' partitions.
  std::vector<int16_t> pair_class(static_cast<size_t>(head.num_classes) * tail.num_classes, -1);
  std::array<uint8_t, 256> proj_head{}, proj_tail{};
  uint16_t nc = 0;
  for (int b = 0; b < 256; ++b) {
    int16_t& c = pair_class[head.class_map[b] * tail.num_classes + tail.class_map[b]];
    if (c < 0) {
      c = static_cast<int16_t>(nc);
      proj_head[nc] = head.class_map[b];
      proj_tail[nc] = tail.class_map[b];
      ++nc;
    }
    out.class_map[b] = static_cast<uint8_t>(c);
  }
  out.num_classes = nc;
  const size_t total = static_cast<size_t>(n) + tail.size();
  LADLE_RETURN_IF_ERROR(budget.Charge(total * (kDfaStateBytes + nc * sizeof(int32_t))));
  out.accepting.assign(total, 0);
  out.next.assign(total * nc, -1);
  out.calls.resize(total);
  out.specials.resize(total);
  auto into = [&](int32_t t) { return head.accepting[t] ? n : idx[t]; };
  for (size_t s = 0; s < k; ++s) {
    if (idx[s] < 0) continue;
    const size_t d = static_cast<size_t>(idx[s]);
    for (uint16_t c = 0; c < nc; ++c) {
      const int32_t t = head.next[s * head.num_classes + proj_head[c]];
      if (t >= 0) out.next[d * nc + c] = into(t);
    }
    for (const auto& [r, ret] : head.calls[s]) out.calls[d].push_back({r, into(ret)});
    for (const auto& [tok, nx] : head.specials[s]) out.specials[d].push_back({tok, into(nx)});
  }
  for (size_t s = 0; s < tail.size(); ++s) {
    const size_t d = static_cast<size_t>(n) + s;
    out.accepting[d] = tail.accepting[s];
    for (uint16_t c = 0; c < nc; ++c) {
      const int32_t t = tail.next[s * tail.num_classes + proj_tail[c]];
      if (t >= 0) out.next[d * nc + c] = n + t;
    }
    for (const auto& [r, ret] : tail.calls[s]) out.calls[d].push_back({r, n + ret});
    for (const auto& [tok, nx] : tail.specials[s]) out.specials[d].push_back({tok, n + nx});
  }
  return std::optional<Dfa>{std::move(out)};
}

// Left recursion: a unit that can call itself before consuming anything. Nullability is a
// fixpoint (a unit is nullable if its start reaches acceptance through calls of nullable
// units), then the "left-call" graph must be acyclic.
Status CheckLeftRecursion(const Automaton& a, const Grammar& g) {
  const size_t nu = a.unit_start.size();
  std::vector<uint8_t> nullable(nu, 0);
  auto left_walk = [&](size_t u, std::vector<int32_t>* called) {
    std::vector<int32_t> todo{a.unit_start[u]};
    std::vector<int32_t> seen{a.unit_start[u]};
    bool acc = false;
    while (!todo.empty()) {
      int32_t s = todo.back();
      todo.pop_back();
      if (a.accepting[s]) acc = true;
      for (uint32_t i = a.call_begin[s]; i < a.call_begin[s + 1]; ++i) {
        const auto& c = a.calls[i];
        int32_t cu = a.unit_of[c.callee];
        if (called) called->push_back(cu);
        if (nullable[cu] && std::find(seen.begin(), seen.end(), c.ret) == seen.end()) {
          seen.push_back(c.ret);
          todo.push_back(c.ret);
        }
      }
    }
    return acc;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t u = 0; u < nu; ++u) {
      if (!nullable[u] && left_walk(u, nullptr)) nullable[u] = changed = true;
    }
  }
  std::vector<std::vector<int32_t>> left(nu);
  for (size_t u = 0; u < nu; ++u) left_walk(u, &left[u]);
  std::vector<uint8_t> color(nu, 0);  // 0 new, 1 on path, 2 done
  for (size_t root = 0; root < nu; ++root) {
    if (color[root]) continue;
    std::vector<std::pair<int32_t, size_t>> st{{static_cast<int32_t>(root), 0}};
    color[root] = 1;
    while (!st.empty()) {
      auto& [u, i] = st.back();
      if (i < left[u].size()) {
        int32_t w = left[u][i++];
        if (color[w] == 1) {
          return InvalidArgument(fmt::format(
              "grammar rule '{}' is left-recursive (it can reach itself without consuming input)",
              g.rules[a.unit_rule[w]].name));
        }
        if (color[w] == 0) {
          color[w] = 1;
          st.push_back({w, 0});
        }
        continue;
      }
      color[u] = 2;
      st.pop_back();
    }
  }
  return Status::Ok();
}

// ---- Unit DFAs shared across grammars ----------------------------------------------------

// A call-free unit's DFA depends only on its body's structure (NfaCompiler::UnitKey), and the
// same bodies recur in grammar after grammar: a JSON string of each length range, the rest of
// an unlisted key after each excluded character, date and number patterns. Measured over a
// MaskBench sample, 80% of call-free unit construction time was for a body some earlier
// grammar had already built. The cache keeps them process-wide (like the shared mask table),
// immutable and shared by pointer; it stops growing at kUnitCacheBytes.
struct SharedUnit {
  Dfa dfa;
  std::optional<Automaton::Layered> layered;  // its `unit` is filled in per grammar
  bool concatenated = false;
  size_t Bytes() const { return dfa.size() * kDfaStateBytes + dfa.next.size() * sizeof(int32_t); }
};

constexpr size_t kUnitCacheBytes = size_t{256} << 20;

class UnitDfaCache {
 public:
  using Key = std::pair<uint64_t, uint64_t>;
  static UnitDfaCache& Instance() {
    static auto* cache = new UnitDfaCache;  // never destroyed: compiles may run at exit
    return *cache;
  }
  std::shared_ptr<const SharedUnit> Find(const Key& k) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(k);
    return it == map_.end() ? nullptr : it->second;
  }
  void Put(const Key& k, std::shared_ptr<const SharedUnit> u) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes_ + u->Bytes() > kUnitCacheBytes) return;
    if (map_.emplace(k, u).second) bytes_ += u->Bytes();
  }

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const { return k.first ^ (k.second * 0x9E3779B97F4A7C15ULL); }
  };
  std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<const SharedUnit>, KeyHash> map_;
  size_t bytes_ = 0;
};

bool CallFree(const Dfa& d) {
  for (const auto& c : d.calls) {
    if (!c.empty()) return false;
  }
  return true;
}

}  // namespace

size_t Automaton::MemoryBytes() const {
  return unit_rule.size() * (sizeof(RuleId) + sizeof(int32_t) + 256 + 2) +
         num_states() * (sizeof(int32_t) + 1 + 3 * sizeof(uint32_t) + sizeof(ByteSet) + sizeof(uint32_t)) +
         next.size() * sizeof(int32_t) + calls.size() * sizeof(Call) + specials.size() * sizeof(Special);
}

Result<Automaton> BuildAutomaton(const Grammar& g, const CompileOptions& opts,
                                 Clock::time_point deadline) {
  Budget budget{deadline, opts.max_memory_bytes, 0, opts.max_compile_ms};
  UnitTable table;
  NfaCompiler nb(g, budget, table);
  table.ForRule(g, g.root);
  std::vector<std::shared_ptr<const Dfa>> dfas;
  std::vector<Automaton::Layered> layered;
  uint32_t concatenated_units = 0, shared_units = 0;
  std::unordered_map<ExprId, Dfa> tails;  // a sequence's last part -> its DFA, shared
  UnitDfaCache& cache = UnitDfaCache::Instance();
  std::optional<UnitDfaCache::Key> key;
  // Unit u's DFA, built here or found in the cache, with its layering and statistics.
  auto record = [&](size_t u, std::shared_ptr<const SharedUnit> su) {
    if (su->layered) {
      layered.push_back(*su->layered);
      layered.back().unit = static_cast<int32_t>(u);
    }
    concatenated_units += su->concatenated;
    dfas.push_back(std::shared_ptr<const Dfa>(su, &su->dfa));
  };
  // Records a DFA built here (and offers it to the cache when it makes no calls).
  auto add = [&](size_t u, Dfa dfa, std::optional<Automaton::Layered> lay, bool concatenated) {
    auto su = std::make_shared<SharedUnit>();
    su->dfa = std::move(dfa);
    su->layered = lay;
    su->concatenated = concatenated;
    if (key && CallFree(su->dfa)) cache.Put(*key, su);
    record(u, std::move(su));
  };
  for (size_t u = 0; u < table.units.size(); ++u) {
    key = opts.share_unit_dfas ? nb.UnitKey(static_cast<int32_t>(u)) : std::nullopt;
    if (key) {
      if (auto hit = cache.Find(*key)) {
        LADLE_RETURN_IF_ERROR(budget.Charge(hit->Bytes()));
        ++shared_units;
        record(u, std::move(hit));
        continue;
      }
    }
    if (auto rep = nb.LayeredRepeat(static_cast<int32_t>(u))) {
      LADLE_ASSIGN_OR_RETURN(Nfa body, nb.BuildPart(static_cast<int32_t>(u), rep->body));
      Determinizer det(body, budget);
      LADLE_ASSIGN_OR_RETURN(Dfa one, det.Run());
      budget.used -= std::min(budget.used, body.size() * kNfaStateBytes);
      LADLE_ASSIGN_OR_RETURN(std::optional<Dfa> layered_dfa, LayerRepeat(one, rep->min, rep->max, budget));
      budget.used -= std::min(budget.used, one.size() * (kDfaStateBytes + one.num_classes * sizeof(int32_t)));
      if (layered_dfa) {
        const Automaton::Layered lay{static_cast<int32_t>(u),
                                     static_cast<int32_t>((layered_dfa->size() - 1) / rep->max), rep->min, rep->max};
        add(u, std::move(*layered_dfa), lay, false);
        continue;
      }
    }
    if (auto parts = nb.SequenceOfTwo(static_cast<int32_t>(u))) {
      auto it = tails.find(parts->second);
      if (it == tails.end()) {
        LADLE_ASSIGN_OR_RETURN(Nfa tail_nfa, nb.BuildPart(static_cast<int32_t>(u), parts->second));
        Determinizer det(tail_nfa, budget);
        LADLE_ASSIGN_OR_RETURN(Dfa tail, det.Run());
        budget.used -= std::min(budget.used, tail_nfa.size() * kNfaStateBytes);
        it = tails.emplace(parts->second, std::move(tail)).first;
      }
      LADLE_ASSIGN_OR_RETURN(Nfa head_nfa, nb.BuildPart(static_cast<int32_t>(u), parts->first));
      Determinizer det(head_nfa, budget);
      LADLE_ASSIGN_OR_RETURN(Dfa head, det.Run());
      budget.used -= std::min(budget.used, head_nfa.size() * kNfaStateBytes);
      LADLE_ASSIGN_OR_RETURN(std::optional<Dfa> joined, Concat(head, it->second, budget));
      if (joined) {
        add(u, std::move(*joined), std::nullopt, true);
        continue;
      }
    }
    LADLE_ASSIGN_OR_RETURN(Nfa nfa, nb.Build(static_cast<int32_t>(u)));
    Determinizer det(nfa, budget);
    LADLE_ASSIGN_OR_RETURN(Dfa dfa, det.Run());
    budget.used -= std::min(budget.used, nfa.size() * kNfaStateBytes);  // the NFA is freed
    add(u, std::move(dfa), std::nullopt, false);
  }
  const size_t num_units = table.units.size();
  Automaton a;
  a.layered = std::move(layered);
  a.concatenated_units = concatenated_units;
  a.shared_units = shared_units;
  std::vector<int32_t> base(num_units);
  size_t total = 0;
  for (size_t u = 0; u < num_units; ++u) {
    base[u] = static_cast<int32_t>(total);
    total += dfas[u]->size();
  }
  if (total > INT32_MAX / 2) return ResourceExhausted("grammar automaton has too many states");
  for (const auto& unit : table.units) a.unit_rule.push_back(unit.rule);
  size_t entries = 0, num_calls = 0, num_specials = 0;
  for (const auto& d : dfas) {
    entries += d->next.size();
    for (const auto& c : d->calls) num_calls += c.size();
    for (const auto& sp : d->specials) num_specials += sp.size();
  }
  a.unit_of.reserve(total);
  a.accepting.reserve(total);
  a.trans_off.reserve(total);
  a.call_begin.reserve(total + 1);
  a.special_begin.reserve(total + 1);
  a.next.resize(entries);
  size_t off = 0;
  a.calls.reserve(num_calls);
  a.specials.reserve(num_specials);
  for (size_t u = 0; u < num_units; ++u) {
    const Dfa& d = *dfas[u];
    a.unit_start.push_back(base[u]);
    a.class_map.push_back(d.class_map);
    a.num_classes.push_back(d.num_classes);
    for (size_t s = 0; s < d.size(); ++s) {
      a.unit_of.push_back(static_cast<int32_t>(u));
      a.accepting.push_back(d.accepting[s]);
      a.trans_off.push_back(static_cast<uint32_t>(off));
      const int32_t* row = &d.next[s * d.num_classes];
      int32_t* out = &a.next[off];
      off += d.num_classes;
      const int32_t b = base[u];
      for (uint16_t c = 0; c < d.num_classes; ++c) out[c] = row[c] < 0 ? -1 : b + row[c];
      a.call_begin.push_back(static_cast<uint32_t>(a.calls.size()));
      for (const auto& [r, ret] : d.calls[s]) {
        a.calls.push_back({base[r], base[u] + ret});
      }
      a.special_begin.push_back(static_cast<uint32_t>(a.specials.size()));
      for (const auto& [t, nx] : d.specials[s]) a.specials.push_back({t, base[u] + nx});
    }
  }
  a.call_begin.push_back(static_cast<uint32_t>(a.calls.size()));
  a.special_begin.push_back(static_cast<uint32_t>(a.specials.size()));
  a.start = base[0];
  LADLE_RETURN_IF_ERROR(CheckLeftRecursion(a, g));
  if (Clock::now() > deadline) {
    return ResourceExhausted(fmt::format("grammar compile exceeded {} ms", opts.max_compile_ms));
  }
  FinishAutomaton(a);
  return a;
}

}  // namespace ladle::grammar
