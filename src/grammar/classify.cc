// Token classification of one DFA state (mask_cache.h): a walk of the token trie through a
// lazily built DFA over closed stack sets, with whole groups accepted at once where the state
// loops on every byte below a trie node. The walk can cover every token, only the short ones
// (whose class is shared between states alike within kShortTokenBytes) or only the long ones.
#include <algorithm>
#include <array>
#include <string>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <xxhash.h>

#include "mask_cache.h"
#include "matcher_sim.h"

namespace ladle::grammar {

namespace {

// Refines a partition of the bytes (each byte's block named by the first byte in it) by
// key_of(b) < 256: afterwards two bytes share a block iff they shared one and their keys
// agree. The (block, key) table is per thread with generation stamps (an entry is
// generation << 8 | the block's first byte), so a refinement costs 256 steps.
template <typename KeyOf>
void RefineBlocks(std::array<uint8_t, 256>& block, KeyOf&& key_of) {
  thread_local std::vector<uint32_t> table(1 << 16, 0);
  thread_local uint32_t gen = 0;
  if (++gen == (1u << 24)) {
    std::fill(table.begin(), table.end(), 0);
    gen = 1;
  }
  for (int b = 0; b < 256; ++b) {
    uint32_t& e = table[static_cast<size_t>(block[b]) << 8 | static_cast<uint8_t>(key_of(b))];
    if (e >> 8 != gen) e = gen << 8 | static_cast<uint32_t>(b);
    block[b] = static_cast<uint8_t>(e & 0xFF);
  }
}

// Past this many accepted tokens off the commonest completion length, an entry carries no
// budget data (the matcher walks its tokens when the budget is tight).
constexpr size_t kMaxBudgetExceptions = 16384;

struct PairKeyHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& k) const { return k.first ^ (k.second * 0x9E3779B97F4A7C15ULL); }
};

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
  // Whether Step(set, b) == set for every b in `bytes` (memoised per set and byte).
  bool LoopsOn(int32_t set, const ByteSet& bytes) {
    if (loop_known_.size() < sets_.size()) {
      loop_known_.resize(sets_.size());
      loop_yes_.resize(sets_.size());
    }
    for (int w = 0; w < 4; ++w) {
      // Bytes already known not to loop: no.
      if (bytes.bits[w] & loop_known_[set].bits[w] & ~loop_yes_[set].bits[w]) return false;
    }
    for (int w = 0; w < 4; ++w) {
      uint64_t unknown = bytes.bits[w] & ~loop_known_[set].bits[w];
      while (unknown) {
        const int b = w * 64 + __builtin_ctzll(unknown);
        unknown &= unknown - 1;
        const bool loops = Step(set, static_cast<uint8_t>(b)) == set;
        // Step may grow sets_ (and so these vectors' owners): index again after it.
        if (loop_known_.size() < sets_.size()) {
          loop_known_.resize(sets_.size());
          loop_yes_.resize(sets_.size());
        }
        loop_known_[set].Set(static_cast<uint8_t>(b));
        if (!loops) return false;
        loop_yes_[set].Set(static_cast<uint8_t>(b));
      }
    }
    return true;
  }
  // Shortest completion of the frame from this set: 0 if it can pop here, else the best top.
  uint32_t Short(int32_t set) {
    if (short_.size() < sets_.size()) short_.resize(sets_.size(), kUnset);
    uint32_t& d = short_[set];
    if (d == kUnset) d = sets_[set].barrier ? 0 : sim_.Shortest(sets_[set]);
    return d;
  }
  // A byte that steps like `b` from `set` (b itself past the memo table).
  uint8_t Rep(int32_t set, uint8_t b) const {
    return static_cast<size_t>(set) < memo_rows_ ? rep_[static_cast<size_t>(set) * 256 + b] : b;
  }
  int32_t Step(int32_t set, uint8_t b) {
    if (static_cast<size_t>(set) < memo_rows_) {
      const size_t slot = static_cast<size_t>(set) * 256 + b;
      if (trans_[slot] != kUnknown) return trans_[slot];
      // Bytes in one byte class of every unit the set's tops are in step alike: compute
      // the class's first byte once (a simulated step plus an intern costs far more than
      // the lookup), then copy.
      const uint8_t r = rep_[slot];
      const size_t rslot = static_cast<size_t>(set) * 256 + r;
      // Compute() may grow trans_ (Intern), so no reference into it may live across the call.
      const int32_t t = trans_[rslot] != kUnknown ? trans_[rslot] : Compute(set, r);
      trans_[rslot] = t;
      trans_[slot] = t;
      return t;
    }
    return Compute(set, b);
  }

 private:
  // rep_[set * 256 + b]: the least byte that every top's unit puts in b's class.
  void BuildReps(const StackSet& s) {
    const Automaton& a = sim_.automaton();
    units_.clear();
    for (int32_t n : s.tops) {
      const int32_t u = a.unit_of[arena_[n].state];
      if (std::find(units_.begin(), units_.end(), u) == units_.end()) units_.push_back(u);
    }
    // The one-block partition refined by each unit's classes.
    std::array<uint8_t, 256> block{};
    for (int32_t u : units_) RefineBlocks(block, [&](int b) { return a.class_map[u][b]; });
    rep_.insert(rep_.end(), block.begin(), block.end());
  }

  // A DFA state whose one-stack set is itself: no calls (no callee stacks join) and not
  // accepting (the frame cannot pop).
  bool Plain(int32_t g) const {
    const Automaton& a = sim_.automaton();
    return !a.accepting[g] && a.call_begin[g] == a.call_begin[g + 1];
  }
  int32_t Compute(int32_t set, uint8_t b) {
    // The common case inside a frame, stepped on the DFA alone: no simulated step, and the
    // set found by state instead of by its key string.
    if (const int32_t g = plain_of_[set]; g >= 0) {
      const Automaton& a = sim_.automaton();
      const int32_t t = a.next[a.trans_off[g] + a.class_map[a.unit_of[g]][b]];
      if (t < 0) return kDead;
      if (Plain(t)) {
        if (auto it = by_plain_.find(t); it != by_plain_.end()) return it->second;
        StackSet one;
        one.tops.push_back(arena_.Intern(a, t, kBarrier));
        return Intern(std::move(one));
      }
    }
    StackSet out;
    if (!sim_.StepByte(sets_[set], b, out)) return kDead;
    return Intern(std::move(out));
  }
  int32_t Intern(StackSet s) {
    std::string key(reinterpret_cast<const char*>(s.tops.data()), s.tops.size() * sizeof(int32_t));
    key.push_back(static_cast<char>(s.barrier | (s.can_end << 1)));
    auto [it, fresh] = index_.try_emplace(std::move(key), static_cast<int32_t>(sets_.size()));
    if (fresh) {
      if (sets_.size() < kMaxSets) BuildReps(s);
      int32_t plain = -1;
      if (s.tops.size() == 1 && !s.barrier && !s.can_end && arena_[s.tops[0]].parent == kBarrier &&
          Plain(arena_[s.tops[0]].state)) {
        plain = arena_[s.tops[0]].state;
        by_plain_.emplace(plain, it->second);
      }
      plain_of_.push_back(plain);
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
  std::vector<ByteSet> loop_known_, loop_yes_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<int32_t> trans_;
  std::vector<uint8_t> rep_;  // parallel to trans_
  std::vector<int32_t> plain_of_;  // by set: its one DFA state when Plain, else -1
  std::unordered_map<int32_t, int32_t> by_plain_;  // Plain DFA state -> its set
  std::vector<int32_t> units_;
  size_t memo_rows_ = 0;
};


// Accepted tokens with their post-token completion lengths, before they become an entry.
struct Accepted {
  std::vector<TokenId> ids;
  std::vector<uint32_t> after;  // parallel to ids
};

void AddUncertain(MaskEntry& e, uint32_t begin, uint32_t end) {
  if (!e.uncertain.empty() && e.uncertain.back().second == begin) {
    e.uncertain.back().second = end;
  } else {
    e.uncertain.push_back({begin, end});
  }
  e.uncertain_count += end - begin;
}

// The short (or every) token walk over the sorted trie.
// False when it stops after `max_steps` trie steps (the entry is then incomplete).
bool WalkSorted(SetDfa& dfa, const TokenVocabulary::Impl& v, int32_t start, TokenSpan span, Accepted& acc,
                MaskEntry& e, size_t max_steps = SIZE_MAX) {
  size_t steps = 0;
  const size_t max_len = span == TokenSpan::kShort ? TokenVocabulary::Impl::kShortTokenBytes : SIZE_MAX;
  std::vector<int32_t> lv(1, start);
  std::vector<uint8_t> anyb(1, 0);  // anyb[d]: the frame could pop before byte d
  const size_t n = v.sorted.size();
  size_t valid = 0;  // lv[0..valid] hold the prefix of the last token walked
  for (size_t i = 0; i < n;) {
    std::string_view tok = v.SortedBytes(static_cast<uint32_t>(i));
    const size_t len = tok.size();
    if (len > max_len) {
      // Not ours; the next token shares with the last walked one at most what it shares
      // with this one.
      valid = std::min<size_t>(valid, v.lcp[i]);
      ++i;
      continue;
    }
    if (lv.size() < len + 1) {
      lv.resize(len + 1);
      anyb.resize(len + 1);
    }
    size_t p = std::min<size_t>(v.lcp[i], valid);
    size_t bulk_end = 0;
    if ((steps += len - p + 1) > max_steps) return false;
    for (; p < len; ++p) {
      anyb[p + 1] = anyb[p] || dfa.Barrier(lv[p]);
      lv[p + 1] = dfa.Step(lv[p], static_cast<uint8_t>(tok[p]));
      if (lv[p + 1] == SetDfa::kDead) break;
      // Entering a large node at its first token: if the state loops on every byte below
      // it, every token of the group is accepted and ends in this very state.
      if (const auto* ns = v.Summary(static_cast<uint32_t>(i), p + 1); ns && dfa.LoopsOn(lv[p + 1], ns->below)) {
        bulk_end = ns->end;
        ++p;
        break;
      }
    }
    if (bulk_end) {
      const uint32_t d = dfa.Short(lv[p]);
      for (size_t j = i; j < bulk_end; ++j) {
        if (v.sorted_off[j + 1] - v.sorted_off[j] > max_len) continue;
        acc.ids.push_back(v.sorted[j]);
        acc.after.push_back(d);
      }
      // Levels 0..p hold the group's common prefix, which is all a later token can share.
      valid = p;
      i = bulk_end;
      continue;
    }
    if (p == len) {
      acc.ids.push_back(v.sorted[i]);
      acc.after.push_back(dfa.Short(lv[len]));
      valid = len;
      ++i;
      continue;
    }
    // Dead at byte p without popping: every token sharing tok[0..p] fails the same way, and
    // is uncertain if the frame could have popped before. (Long tokens in such a group
    // are listed too; the runtime walk simulates them, which is merely extra work.)
    valid = p;
    const uint32_t end = v.GroupEnd(static_cast<uint32_t>(i), p + 1);
    if (anyb[p + 1]) AddUncertain(e, static_cast<uint32_t>(i), end);
    i = end;
  }
  return true;
}

// One sublist in sorted order (the long tokens, about 900 of DeepSeek's 128k; or those the
// string-body slice leaves to a walk), each sharing its common prefix with the previous one.
// Uncertain positions are appended in order, so one list's ranges stay sorted.
void WalkList(SetDfa& dfa, const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos,
              const std::vector<uint16_t>& lcp, int32_t start, Accepted& acc, MaskEntry& e) {
  std::vector<int32_t> lv(1, start);
  std::vector<uint8_t> anyb(1, 0);
  const size_t n = pos.size();
  size_t valid = 0;
  for (size_t k = 0; k < n;) {
    const uint32_t i = pos[k];
    std::string_view tok = v.SortedBytes(i);
    const size_t len = tok.size();
    if (lv.size() < len + 1) {
      lv.resize(len + 1);
      anyb.resize(len + 1);
    }
    size_t p = std::min<size_t>(lcp[k], valid);
    for (; p < len; ++p) {
      anyb[p + 1] = anyb[p] || dfa.Barrier(lv[p]);
      lv[p + 1] = dfa.Step(lv[p], static_cast<uint8_t>(tok[p]));
      if (lv[p + 1] == SetDfa::kDead) break;
    }
    if (p == len) {
      acc.ids.push_back(v.sorted[i]);
      acc.after.push_back(dfa.Short(lv[len]));
      valid = len;
      ++k;
      continue;
    }
    valid = p;
    // Every later listed token sharing tok[0..p] dies the same way.
    const bool uncertain = anyb[p + 1];
    do {
      if (uncertain) AddUncertain(e, pos[k], pos[k] + 1);
      ++k;
    } while (k < n && lcp[k] > p);
  }
}

// Budget data and the accepted set's representation.
void FinishEntry(const TokenVocabulary::Impl& v, Accepted acc, MaskEntry& e) {
  e.accepted_count = acc.ids.size();
  if (!acc.ids.empty()) {
    // The commonest completion is the base; the others are listed, unless there are so many
    // that the list would cost more than a walk. Few distinct lengths per state (usually one
    // to three): a short list beats a map.
    std::vector<std::pair<uint32_t, size_t>> freq;
    for (uint32_t d : acc.after) {
      auto it = std::find_if(freq.begin(), freq.end(), [d](const auto& f) { return f.first == d; });
      if (it == freq.end()) {
        freq.push_back({d, 1});
      } else {
        ++it->second;
      }
    }
    auto top = std::max_element(freq.begin(), freq.end(), [](auto& x, auto& y) { return x.second < y.second; });
    e.budget_base = top->first;
    e.budget_min = std::min_element(freq.begin(), freq.end())->first;
    e.budget_max = std::max_element(freq.begin(), freq.end())->first;
    const size_t others = acc.ids.size() - top->second;
    if (others > kMaxBudgetExceptions) {
      e.budget_known = false;
    } else {
      e.budget_exceptions.reserve(others);
      for (size_t k = 0; k < acc.ids.size(); ++k) {
        if (acc.after[k] != e.budget_base) e.budget_exceptions.push_back({acc.ids[k], acc.after[k]});
      }
      std::sort(e.budget_exceptions.begin(), e.budget_exceptions.end());
    }
  }
  if (acc.ids.size() * 32 >= v.vocab_size) {
    e.accepted_bits.assign(v.words(), 0);
    for (TokenId id : acc.ids) e.accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  } else {
    std::sort(acc.ids.begin(), acc.ids.end());
    e.accepted_ids = std::move(acc.ids);
  }
}

MaskEntry AllUncertain(const TokenVocabulary::Impl& v) {
  MaskEntry all;
  all.uncertain.push_back({0, static_cast<uint32_t>(v.sorted.size())});
  all.uncertain_count = v.sorted.size();
  return all;
}

}  // namespace

MaskEntry ClassifyState(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, TokenSpan span) {
  MaskEntry e;
  ClassifyStateWithin(a, v, state, span, SIZE_MAX, &e);
  return e;
}

bool ClassifyStateWithin(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, TokenSpan span,
                         size_t max_steps, MaskEntry* out) {
  SetDfa dfa(a);
  const int32_t start = dfa.Start(state);
  Accepted acc;
  MaskEntry& e = *out;
  e = MaskEntry{};
  if (span == TokenSpan::kLong) {
    WalkList(dfa, v, v.long_pos, v.long_lcp, start, acc, e);
  } else if (!WalkSorted(dfa, v, start, span, acc, e, max_steps)) {
    return false;
  }
  // Too ambiguous to classify from one frame: every token is left to the runtime walk,
  // which simulates against the real stacks (under the matcher's own stack limit).
  if (dfa.overflowed()) {
    e = AllUncertain(v);
    return true;
  }
  FinishEntry(v, std::move(acc), e);
  return true;
}

namespace {

constexpr uint32_t kUnsetDist = kInfDist - 1;
using BodyShorts = std::array<uint32_t, StringBody::kStates>;

enum class Containment { kYes, kNo, kUnknown };

// Records the completion length after a path that ends in body state c; false once body
// state c has been seen with two different lengths (budget data would not be exact).
inline bool NoteShort(BodyShorts& s, int c, uint32_t d) {
  if (s[c] == kUnsetDist) s[c] = d;
  return s[c] == d && d != kInfDist;
}

// The containment check on the DFAs themselves, without stacks: a path is followed in
// every DFA state it may be in (up to kMaxAlts), a call adding the callee's start. Returns
// and pops are not followed, so this only ever proves containment too rarely, never too
// often: every stack it follows is one of the classifier's. With one state and no calls met,
// the classifier's set after a path is the closure of that state, whose completion length is
// the state's own (callee stacks the closure adds complete no sooner), and a dead path is a
// dead set (kNo); otherwise budget data is not derived here (`budget` = false) and a dead
// path says nothing (kUnknown: the set-level check decides).
Containment RawContainment(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, const ByteSet& skip,
                           BodyShorts& shorts, bool& budget, bool& one_state) {
  constexpr size_t kMaxAlts = 4, kMaxPairs = 4096;
  using Alts = std::array<int32_t, kMaxAlts>;  // sorted, -1 padded
  bool calls_met = false;
  auto close = [&](Alts& x) {
    if (x[1] < 0 && a.call_begin[x[0]] == a.call_begin[x[0] + 1]) return true;
    for (size_t i = 0; i < kMaxAlts && x[i] >= 0; ++i) {
      const int32_t g = x[i];
      for (uint32_t k = a.call_begin[g]; k < a.call_begin[g + 1]; ++k) {
        calls_met = true;
        const int32_t callee = a.calls[k].callee;
        if (std::find(x.begin(), x.end(), callee) != x.end()) continue;
        auto free = std::find(x.begin(), x.end(), -1);
        if (free == x.end()) return false;
        *free = callee;
      }
    }
    std::sort(x.begin(), x.end(), [](int32_t p, int32_t q) { return static_cast<uint32_t>(p) < static_cast<uint32_t>(q); });
    return true;
  };
  struct Pair {
    Alts x;
    int8_t body;
    uint8_t depth;
  };
  struct KeyHash {
    size_t operator()(const std::pair<Alts, int8_t>& k) const {
      uint64_t h = static_cast<uint64_t>(k.second);
      for (int32_t g : k.first) h = h * 0x9E3779B97F4A7C15ULL + static_cast<uint32_t>(g);
      return h ^ (h >> 29);
    }
  };
  // Seen pairs: a single DFA state's body states as a bit mask (generation-stamped scratch
  // by state: the common case), several states' in a map.
  struct Scratch {
    std::vector<uint16_t> mask;
    std::vector<uint32_t> gen_of;
    uint32_t gen = 0;
  };
  thread_local Scratch sc;
  if (sc.mask.size() < a.num_states()) {
    sc.mask.assign(a.num_states(), 0);
    sc.gen_of.assign(a.num_states(), 0);
  }
  if (++sc.gen == 0) {
    std::fill(sc.gen_of.begin(), sc.gen_of.end(), 0);
    sc.gen = 1;
  }
  std::unordered_map<std::pair<Alts, int8_t>, char, KeyHash> seen;
  auto fresh = [&](const Alts& x, int8_t c) {
    if (x[1] >= 0) return seen.emplace(std::make_pair(x, c), 0).second;
    const int32_t g = x[0];
    if (sc.gen_of[g] != sc.gen) {
      sc.gen_of[g] = sc.gen;
      sc.mask[g] = 0;
    }
    const bool f = !(sc.mask[g] >> c & 1);
    sc.mask[g] |= static_cast<uint16_t>(1u << c);
    return f;
  };
  // One byte per block of bytes that step alike: the same body target (the quote and dead
  // bytes left out) and the same class in every alternative's unit. Cached by (units, body
  // state): a walk meets few combinations.
  struct RepEntry {
    Alts units;
    int8_t body;
    std::vector<uint8_t> reps;
    std::vector<ByteSet> blocks;  // parallel to reps: every byte of the block
  };
  std::vector<RepEntry> rep_cache;
  auto Reps = [&](const Alts& x, int8_t body) -> const RepEntry& {
    Alts units;
    units.fill(-1);
    for (size_t i = 0; i < kMaxAlts && x[i] >= 0; ++i) units[i] = a.unit_of[x[i]];
    std::sort(units.begin(), units.end());
    for (const RepEntry& r : rep_cache) {
      if (r.body == body && r.units == units) return r;
    }
    // Refined by body target (the quote apart), then by each unit's classes.
    std::array<uint8_t, 256> block{};
    RefineBlocks(block, [&](int b) { return b == '"' ? 0 : StringBody::Step(body, static_cast<uint8_t>(b)) + 1; });
    for (int32_t u : units) {
      if (u >= 0) RefineBlocks(block, [&](int b) { return a.class_map[u][b]; });
    }
    RepEntry r{units, body, {}, {}};
    std::array<int16_t, 256> slot;
    slot.fill(-1);
    for (int b = 0; b < 256; ++b) {
      if (b == '"' || StringBody::Step(body, static_cast<uint8_t>(b)) < 0) continue;
      if (block[b] == b) {
        slot[b] = static_cast<int16_t>(r.reps.size());
        r.reps.push_back(static_cast<uint8_t>(b));
        r.blocks.emplace_back();
      }
      r.blocks[static_cast<size_t>(slot[block[b]])].Set(static_cast<uint8_t>(b));
    }
    rep_cache.push_back(std::move(r));
    return rep_cache.back();
  };
  Alts s0;
  s0.fill(-1);
  s0[0] = state;
  if (!close(s0)) return Containment::kUnknown;
  std::vector<Pair> queue{{s0, 0, 0}};
  fresh(s0, 0);
  for (size_t k = 0; k < queue.size(); ++k) {
    const Pair p = queue[k];
    const bool single = !calls_met && p.x[1] < 0;
    if (p.depth > 0) {
      if (single) {
        budget &= NoteShort(shorts, p.body, a.dist[p.x[0]]);
      } else {
        budget = false;
      }
    }
    if (p.depth == TokenVocabulary::Impl::kShortTokenBytes) continue;
    const RepEntry& reps = Reps(p.x, p.body);
    // Only bytes some token has here (at this offset, in this body state).
    ByteSet next = v.body_next[p.depth * StringBody::kStates + static_cast<size_t>(p.body)];
    if (p.depth == 0) {
      for (int w = 0; w < 4; ++w) next.bits[w] &= ~skip.bits[w];
    }
    for (size_t r = 0; r < reps.reps.size(); ++r) {
      const ByteSet& blk = reps.blocks[r];
      if (!((blk.bits[0] & next.bits[0]) | (blk.bits[1] & next.bits[1]) | (blk.bits[2] & next.bits[2]) |
            (blk.bits[3] & next.bits[3]))) {
        continue;
      }
      const uint8_t b = reps.reps[r];
      const int c = StringBody::Step(p.body, b);
      Alts y;
      y.fill(-1);
      size_t n = 0;
      for (size_t i = 0; i < kMaxAlts && p.x[i] >= 0; ++i) {
        const int32_t g = p.x[i];
        const int32_t t = a.next[a.trans_off[g] + a.class_map[a.unit_of[g]][b]];
        if (t >= 0 && std::find(y.begin(), y.begin() + n, t) == y.begin() + n) y[n++] = t;
      }
      if (n == 0) return calls_met ? Containment::kUnknown : Containment::kNo;
      if (!close(y)) return Containment::kUnknown;
      if (fresh(y, static_cast<int8_t>(c))) {
        if (queue.size() >= kMaxPairs) return Containment::kUnknown;
        queue.push_back({y, static_cast<int8_t>(c), static_cast<uint8_t>(p.depth + 1)});
      }
    }
  }
  if (calls_met) budget = false;
  one_state = !calls_met;
  return Containment::kYes;
}

// Listed tokens walked on the DFA from `state` alone, which is exact while the path meets
// no state with calls (callee stacks would join) and no accepting one (the frame could pop)
// before the token's last byte. Tokens that do are left in `rest` for the set walk.
void RawWalkList(const Automaton& a, const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos,
                 const std::vector<uint16_t>& lcp, int32_t state, Accepted& acc, std::vector<uint32_t>& rest) {
  std::vector<int32_t> lv(1, state);
  size_t valid = 0;
  for (size_t k = 0; k < pos.size(); ++k) {
    std::string_view tok = v.SortedBytes(pos[k]);
    const size_t len = tok.size();
    if (lv.size() < len + 1) lv.resize(len + 1);
    size_t p = std::min<size_t>(lcp[k], valid);
    bool left = false, dead = false;
    for (; p < len; ++p) {
      const int32_t g = lv[p];
      if (a.accepting[g] || a.call_begin[g] != a.call_begin[g + 1]) {
        left = true;
        break;
      }
      const int32_t t = a.next[a.trans_off[g] + a.class_map[a.unit_of[g]][static_cast<uint8_t>(tok[p])]];
      if (t < 0) {
        dead = true;
        break;
      }
      lv[p + 1] = t;
    }
    valid = p;
    if (left) {
      rest.push_back(pos[k]);
    } else if (!dead) {
      acc.ids.push_back(v.sorted[pos[k]]);
      acc.after.push_back(a.dist[lv[len]]);
    }
  }
}

// Common-prefix lengths of consecutive positions of a sorted sublist.
std::vector<uint16_t> ListLcp(const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos) {
  std::vector<uint16_t> lcp(pos.size(), 0);
  for (size_t k = 1; k < pos.size(); ++k) {
    std::string_view x = v.SortedBytes(pos[k - 1]), y = v.SortedBytes(pos[k]);
    size_t n = 0;
    while (n < x.size() && n < y.size() && x[n] == y[n]) ++n;
    lcp[k] = static_cast<uint16_t>(n);
  }
  return lcp;
}

// The same check over the classifier's sets (calls followed, several stacks at once).
bool SetContainment(SetDfa& dfa, int32_t start, const ByteSet& skip, BodyShorts& shorts, bool& budget) {
  constexpr size_t kMaxPairs = 4096;
  struct Pair {
    int32_t set;
    int8_t body;
    uint8_t depth;
  };
  std::vector<Pair> queue{{start, 0, 0}};
  std::vector<uint16_t> seen;  // by set: the body states paired with it so far
  auto mark = [&](int32_t x, int c) {
    if (seen.size() <= static_cast<size_t>(x)) seen.resize(static_cast<size_t>(x) + 64, 0);
    const bool fresh = !(seen[x] >> c & 1);
    seen[x] |= static_cast<uint16_t>(1u << c);
    return fresh;
  };
  mark(start, 0);
  for (size_t k = 0; k < queue.size(); ++k) {
    const Pair p = queue[k];
    if (p.depth > 0) budget &= NoteShort(shorts, p.body, dfa.Short(p.set));
    if (p.depth == TokenVocabulary::Impl::kShortTokenBytes) continue;
    // One byte per (automaton byte block, body target): the others step alike.
    uint64_t done[4 * StringBody::kStates] = {};
    for (int b = 0; b < 256; ++b) {
      if (b == '"' || (p.depth == 0 && skip.Has(static_cast<uint8_t>(b)))) continue;
      const int c = StringBody::Step(p.body, static_cast<uint8_t>(b));
      if (c < 0) continue;
      const uint8_t r = dfa.Rep(p.set, static_cast<uint8_t>(b));
      uint64_t& w = done[c * 4 + (r >> 6)];
      if (w >> (r & 63) & 1) continue;
      w |= uint64_t{1} << (r & 63);
      const int32_t x = dfa.Step(p.set, static_cast<uint8_t>(b));
      if (x == SetDfa::kDead || dfa.overflowed()) return false;
      if (mark(x, c)) {
        if (queue.size() >= kMaxPairs) return false;
        queue.push_back({x, static_cast<int8_t>(c), static_cast<uint8_t>(p.depth + 1)});
      }
    }
  }
  return true;
}

}  // namespace

bool ClassifyStringBody(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, MaskEntry* out) {
  if (v.body_ok_count == 0) return false;
  // 1. Containment: every path of at most kShortTokenBytes non-quote bytes that the string
  //    body takes from a character boundary must be alive from `state` too. A breadth-first
  //    walk over (state, body state) pairs; a pair is expanded once, at its least depth,
  //    which covers every longer way to it. Along the way: whether a body state fixes the
  //    completion length after the paths that end in it (then budget data is exact without
  //    walking the 125k tokens; past depth 0 only, since no token is empty).
  BodyShorts short_of;
  short_of.fill(kUnsetDist);
  bool budget = true;
  bool one_state = false;
  // First bytes the state has no transition on, when dying there rejects (no pop, no callee):
  // the tokens that start with them are left out of the check and of the accepted set. The
  // rest of an unlisted key starts this way (one excluded character, then any string).
  ByteSet skip;
  if (!a.accepting[state] && a.call_begin[state] == a.call_begin[state + 1]) {
    for (int b = 0x20; b < 0x80; ++b) {
      if (b != '"' && a.next[a.trans_off[state] + a.class_map[a.unit_of[state]][b]] < 0) skip.Set(static_cast<uint8_t>(b));
    }
  }
  const Containment raw = RawContainment(a, v, state, skip, short_of, budget, one_state);
  if (raw == Containment::kNo) return false;
  SetDfa dfa(a);
  const int32_t start = dfa.Start(state);
  if (raw == Containment::kUnknown) {
    short_of.fill(kUnsetDist);
    budget = true;
    if (!SetContainment(dfa, start, skip, short_of, budget)) return false;
  }
  // 2. Every body-accepted token is accepted here; the rest are walked: on the DFA alone
  //    where that is exact, else (and for the tokens that leave those conditions) as sets.
  Accepted acc;
  MaskEntry e;
  const std::vector<uint32_t>* lists[] = {&v.body_bad_pos, &v.quote_pos, &v.long_pos};
  const std::vector<uint16_t>* lcps[] = {&v.body_bad_lcp, &v.quote_lcp, &v.long_lcp};
  for (int l = 0; l < 3; ++l) {
    if (!one_state) {
      WalkList(dfa, v, *lists[l], *lcps[l], start, acc, e);
      continue;
    }
    std::vector<uint32_t> rest;
    RawWalkList(a, v, *lists[l], *lcps[l], state, acc, rest);
    if (!rest.empty()) WalkList(dfa, v, rest, ListLcp(v, rest), start, acc, e);
  }
  if (dfa.overflowed()) return false;
  MergeRanges(e.uncertain);
  e.uncertain_count = 0;
  for (auto [lo, hi] : e.uncertain) e.uncertain_count += hi - lo;
  e.accepted_bits = v.body_ok;
  size_t skipped = 0;
  if (!skip.Empty()) {
    for (int b = 0x20; b < 0x80; ++b) {
      if (!skip.Has(static_cast<uint8_t>(b))) continue;
      for (uint32_t i = v.first_byte_end[b - 1]; i < v.first_byte_end[b]; ++i) {
        const TokenId id = v.sorted[i];
        uint64_t& w = e.accepted_bits[id >> 6];
        const uint64_t bit = uint64_t{1} << (id & 63);
        skipped += (w & bit) != 0;
        w &= ~bit;
      }
    }
    budget = false;  // body_end's exceptions would include the skipped tokens
  }
  for (TokenId id : acc.ids) e.accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  e.accepted_count = v.body_ok_count - skipped + acc.ids.size();  // the walked lists are disjoint from it
  // 3. Budget data: the body-accepted tokens at the completion length of their end state's
  //    sets, the walked ones at their own.
  budget &= short_of[0] != kUnsetDist;
  if (budget) {
    e.budget_base = e.budget_min = e.budget_max = short_of[0];
    auto note = [&](uint32_t d) {
      e.budget_min = std::min(e.budget_min, d);
      e.budget_max = std::max(e.budget_max, d);
    };
    for (int c = 1; c < StringBody::kStates && budget; ++c) {
      if (v.body_end[c].empty()) continue;
      budget = short_of[c] != kUnsetDist;  // every body path was walked, so it is set
      if (!budget || short_of[c] == e.budget_base) continue;
      note(short_of[c]);
      for (TokenId id : v.body_end[c]) e.budget_exceptions.push_back({id, short_of[c]});
    }
    for (size_t k = 0; k < acc.ids.size(); ++k) {
      note(acc.after[k]);
      if (acc.after[k] != e.budget_base) e.budget_exceptions.push_back({acc.ids[k], acc.after[k]});
    }
    std::sort(e.budget_exceptions.begin(), e.budget_exceptions.end());
    budget = budget && e.budget_exceptions.size() <= kMaxBudgetExceptions;
  }
  if (!budget) {
    e.budget_known = false;
    e.budget_deferred = true;
    e.budget_exceptions.clear();
  }
  *out = std::move(e);
  return true;
}

namespace {

// Per layered unit, what each token does from a layer boundary on the layer's own DFA (the
// body's): `chars` by sorted trie position is how many layers it advances — complete copies,
// plus one for a copy it leaves unfinished — or kWalk when it leaves the body (a quote, a
// byte the body rejects, past 254 copies); those are listed for a walk. Equal bodies (every
// JSON string with a maxLength, in any grammar) share one table, process-wide, and so do
// the entries built from it: an entry is frame-local, so at a boundary it depends only on
// the layers left and how many of them must still be taken, whichever grammar it is in.
struct LayerTokens {
  static constexpr uint8_t kWalk = 0xFF;
  std::vector<uint8_t> chars;
  uint8_t most = 0;                          // the largest `chars` below kWalk
  std::vector<std::vector<TokenId>> by_chars;  // [c]: the body tokens with chars == c
  std::vector<uint64_t> all_bits;            // every body token
  size_t all_count = 0;
  std::vector<uint32_t> walk_pos;
  std::vector<uint16_t> walk_lcp;
  mutable std::mutex mu;
  mutable std::map<std::pair<uint32_t, uint32_t>, std::shared_ptr<const MaskEntry>> entries;  // (left, need)
};

// Slices whose walked list is larger than this are no cheaper than a full classification.
constexpr size_t kMaxLayerWalk = 16384;

std::shared_ptr<const LayerTokens> LayerTokensFor(const Automaton& a, const TokenVocabulary::Impl& v,
                                                  const Automaton::Layered& l) {
  const int32_t u = l.unit, n = l.per_layer, s0 = a.unit_start[u];
  const uint16_t nc = a.num_classes[u];
  // The layer's table relative to its start: n rows, targets local (n = the next layer's start).
  std::vector<int32_t> rows(static_cast<size_t>(n) * nc);
  for (int32_t x = 0; x < n; ++x) {
    for (uint16_t c = 0; c < nc; ++c) {
      const int32_t t = a.next[a.trans_off[s0 + x] + c];
      rows[static_cast<size_t>(x) * nc + c] = t < s0 || t > s0 + n ? -1 : t - s0;
    }
  }
  XXH3_state_t* hs = XXH3_createState();
  XXH3_128bits_reset(hs);
  XXH3_128bits_update(hs, &v.fingerprint, sizeof v.fingerprint);
  XXH3_128bits_update(hs, &n, sizeof n);
  XXH3_128bits_update(hs, a.class_map[u].data(), 256);
  XXH3_128bits_update(hs, rows.data(), rows.size() * sizeof(int32_t));
  const XXH128_hash_t h = XXH3_128bits_digest(hs);
  XXH3_freeState(hs);
  const std::pair<uint64_t, uint64_t> key{h.low64, h.high64};
  static std::mutex mu;
  static auto* cache = new std::unordered_map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const LayerTokens>,
                                              PairKeyHash>();  // never destroyed, like the mask cache
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  auto lt = std::make_shared<LayerTokens>();
  const size_t total = v.sorted.size();
  lt->chars.assign(total, LayerTokens::kWalk);
  lt->by_chars.resize(LayerTokens::kWalk);
  lt->all_bits.assign(v.words(), 0);
  const auto& cm = a.class_map[u];
  std::vector<int32_t> at(1, 0);     // at[d]: layer-local state after d bytes of the current token
  std::vector<uint32_t> done(1, 0);  // done[d]: copies completed by then
  size_t valid = 0;
  for (size_t i = 0; i < total;) {
    std::string_view tok = v.SortedBytes(static_cast<uint32_t>(i));
    const size_t len = tok.size();
    if (at.size() < len + 1) {
      at.resize(len + 1);
      done.resize(len + 1);
    }
    size_t p = std::min<size_t>(v.lcp[i], valid);
    for (; p < len; ++p) {
      const int32_t t = rows[static_cast<size_t>(at[p]) * nc + cm[static_cast<uint8_t>(tok[p])]];
      if (t < 0) break;
      at[p + 1] = t == n ? 0 : t;
      done[p + 1] = done[p] + (t == n ? 1 : 0);
    }
    if (p < len) {  // every token below this prefix leaves the body the same way
      valid = p;
      const uint32_t end = v.GroupEnd(static_cast<uint32_t>(i), p + 1);
      for (uint32_t j = static_cast<uint32_t>(i); j < end; ++j) lt->walk_pos.push_back(j);
      i = end;
      continue;
    }
    valid = len;
    const uint32_t adv = done[len] + (at[len] != 0 ? 1 : 0);
    if (adv < LayerTokens::kWalk && adv > 0) {
      const TokenId id = v.sorted[i];
      lt->chars[i] = static_cast<uint8_t>(adv);
      lt->most = std::max(lt->most, static_cast<uint8_t>(adv));
      lt->by_chars[adv].push_back(id);
      lt->all_bits[id >> 6] |= uint64_t{1} << (id & 63);
      ++lt->all_count;
    } else {
      lt->walk_pos.push_back(static_cast<uint32_t>(i));
    }
    ++i;
  }
  lt->walk_lcp = ListLcp(v, lt->walk_pos);
  std::lock_guard<std::mutex> lock(mu);
  return cache->try_emplace(key, std::move(lt)).first->second;
}

}  // namespace

std::shared_ptr<const MaskEntry> ClassifyLayer(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
  const int32_t u = a.unit_of[state];
  const Automaton::Layered* l = nullptr;
  for (const auto& x : a.layered) {
    if (x.unit == u) l = &x;
  }
  if (!l) return nullptr;
  const int32_t local = state - a.unit_start[u];
  const uint32_t layer = static_cast<uint32_t>(local / l->per_layer);
  if (local % l->per_layer != 0 || layer >= l->max) return nullptr;  // inside a copy, or the end
  const std::shared_ptr<const LayerTokens> lt = LayerTokensFor(a, v, *l);
  if (lt->walk_pos.size() > kMaxLayerWalk) return nullptr;
  // A token crosses at most as many boundaries as it has bytes: counts past that look alike.
  const auto cap = static_cast<uint32_t>(v.max_token_len + 1);
  const uint32_t left = std::min(l->max - layer, cap);
  const uint32_t need = std::min(l->min > layer ? l->min - layer : 0u, cap);
  {
    std::lock_guard<std::mutex> lock(lt->mu);
    if (auto it = lt->entries.find({left, need}); it != lt->entries.end()) return it->second;
  }
  // Body tokens take `chars` layers: accepted while that many are left. The others reach the
  // last layer's end, where the frame may pop, before they are through: uncertain.
  auto e = std::make_shared<MaskEntry>();
  size_t within = 0;
  for (uint32_t c = 1; c <= std::min<uint32_t>(left, lt->most); ++c) within += lt->by_chars[c].size();
  if (2 * within >= lt->all_count) {
    e->accepted_bits = lt->all_bits;
    for (uint32_t c = left + 1; c <= lt->most; ++c) {
      for (TokenId id : lt->by_chars[c]) e->accepted_bits[id >> 6] &= ~(uint64_t{1} << (id & 63));
    }
  } else {
    e->accepted_bits.assign(v.words(), 0);
    for (uint32_t c = 1; c <= left; ++c) {
      for (TokenId id : lt->by_chars[c]) e->accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
  e->accepted_count = within;
  if (left < lt->most) {
    for (size_t i = 0; i < lt->chars.size(); ++i) {
      const uint8_t c = lt->chars[i];
      if (c != LayerTokens::kWalk && c > left) AddUncertain(*e, static_cast<uint32_t>(i), static_cast<uint32_t>(i) + 1);
    }
  }
  // The tokens that leave the body, walked on the stack sets as in a full classification.
  SetDfa dfa(a);
  Accepted acc;
  MaskEntry walked;
  WalkList(dfa, v, lt->walk_pos, lt->walk_lcp, dfa.Start(state), acc, walked);
  if (dfa.overflowed()) return nullptr;
  for (TokenId id : acc.ids) e->accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  e->accepted_count += acc.ids.size();
  e->uncertain.insert(e->uncertain.end(), walked.uncertain.begin(), walked.uncertain.end());
  std::sort(e->uncertain.begin(), e->uncertain.end());
  MergeRanges(e->uncertain);
  e->uncertain_count = 0;
  for (auto [lo, hi] : e->uncertain) e->uncertain_count += hi - lo;
  // Completion lengths vary with the count: budget narrowing takes the full classification.
  e->budget_known = false;
  e->budget_deferred = true;
  std::lock_guard<std::mutex> lock(lt->mu);
  return lt->entries.try_emplace({left, need}, std::move(e)).first->second;
}

MaskEntry MergeEntries(const TokenVocabulary::Impl& v, const MaskEntry& x, const MaskEntry& y) {
  MaskEntry e;
  std::vector<uint64_t> bits(v.words(), 0);
  x.OrInto(bits.data());
  y.OrInto(bits.data());
  e.accepted_count = x.accepted_count + y.accepted_count;  // disjoint token sets
  if (e.accepted_count * 32 >= v.vocab_size) {
    e.accepted_bits = std::move(bits);
  } else {
    e.accepted_ids.reserve(e.accepted_count);
    for (size_t w = 0; w < bits.size(); ++w) {
      for (uint64_t b = bits[w]; b; b &= b - 1) e.accepted_ids.push_back(static_cast<TokenId>(w * 64 + __builtin_ctzll(b)));
    }
  }
  e.uncertain = x.uncertain;
  e.uncertain.insert(e.uncertain.end(), y.uncertain.begin(), y.uncertain.end());
  MergeRanges(e.uncertain);
  e.uncertain_count = 0;
  for (auto [b, end] : e.uncertain) e.uncertain_count += end - b;
  // Budget: the larger side's base; the other side's tokens off that base are exceptions.
  const MaskEntry& big = x.accepted_count >= y.accepted_count ? x : y;
  const MaskEntry& small = &big == &x ? y : x;
  e.budget_known = x.budget_known && y.budget_known;
  e.budget_base = big.budget_base;
  e.budget_min = big.accepted_count == 0 ? small.budget_min
                 : small.accepted_count == 0 ? big.budget_min
                                             : std::min(big.budget_min, small.budget_min);
  e.budget_max = std::max(big.accepted_count ? big.budget_max : 0, small.accepted_count ? small.budget_max : 0);
  if (e.budget_known && small.accepted_count > 0) {
    e.budget_exceptions = big.budget_exceptions;
    auto add = [&](TokenId t, uint32_t d) {
      if (d != e.budget_base) e.budget_exceptions.push_back({t, d});
    };
    std::vector<uint64_t> listed(v.words(), 0);
    for (auto [t, d] : small.budget_exceptions) {
      add(t, d);
      listed[t >> 6] |= uint64_t{1} << (t & 63);
    }
    // The small side's base tokens: its accepted set minus its listed exceptions.
    std::vector<uint64_t> sb(v.words(), 0);
    small.OrInto(sb.data());
    if (small.budget_base != e.budget_base) {
      for (size_t w = 0; w < sb.size(); ++w) {
        for (uint64_t b = sb[w] & ~listed[w]; b; b &= b - 1) add(static_cast<TokenId>(w * 64 + __builtin_ctzll(b)), small.budget_base);
      }
    }
    std::sort(e.budget_exceptions.begin(), e.budget_exceptions.end());
    if (e.budget_exceptions.size() > kMaxBudgetExceptions) {
      e.budget_known = false;
      e.budget_exceptions.clear();
    }
  } else if (e.budget_known) {
    e.budget_exceptions = big.budget_exceptions;
  }
  if (!e.budget_known) e.budget_exceptions.clear();
  return e;
}

}  // namespace ladle::grammar
