// The pushdown automaton as a lazily built DFA over closed stack sets, and the trie walk that
// runs on it. The classifier (classify*.cc) walks one frame sitting on the kBarrier sentinel;
// the matcher (matcher.cc) walks a mask's uncertain tokens from its real stacks. In both,
// the same few sets recur at every trie depth (inside a string body every letter leads back
// to the set it came from), so after the first time a trie step is a table lookup instead of
// a simulated step, and a set that loops on every byte below a trie node accepts the node's
// whole group at once.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "matcher_sim.h"
#include "token_trie.h"

namespace ladle::grammar {

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

// Sets are named by small ids; Step(set, byte) is memoised for the first max_sets() sets and
// simulated directly past them. Ids name sets of the arena's node ids, so they are valid only
// while that arena is unchanged (the matcher clears this table when it compacts or resets).
class SetDfa {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kUnknown = -2;
  static constexpr size_t kMaxSets = 4096;
  // The classification is incomplete past this many stacks in one closure (see Simulator).
  static constexpr size_t kMaxStacks = 4096;

  // The classifier's: its own arena and simulator.
  explicit SetDfa(const Automaton& a)
      : own_arena_(std::make_unique<Arena>()),
        own_sim_(std::make_unique<Simulator>(a, *own_arena_)),
        arena_(*own_arena_),
        sim_(*own_sim_) {
    sim_.SetMaxStacks(kMaxStacks);
  }
  // The matcher's: steps the matcher's own stacks, with its simulator (and its stack cap).
  // A memo row is 1.25 KiB (a step and a representative byte per byte value), so a matcher,
  // which lives as long as its request, memoises at most `max_sets` sets.
  SetDfa(Simulator& sim, size_t max_sets) : arena_(sim.arena()), sim_(sim), max_sets_(max_sets) {}

  bool overflowed() const { return sim_.overflowed(); }
  size_t size() const { return sets_.size(); }
  size_t max_sets() const { return max_sets_; }
  // Forgets every set (their node ids are about to change).
  void Clear();

  // The set of one frame in `state` on the kBarrier sentinel (the classifier's start).
  int32_t Start(int32_t state) {
    const int32_t root = arena_.Intern(sim_.automaton(), state, kBarrier);
    StackSet s;
    sim_.Close(std::span<const int32_t>(&root, 1), s);
    return Intern(std::move(s));
  }
  // The id of a closed set (the matcher's current stacks).
  int32_t Enter(const StackSet& s) { return Intern(StackSet(s)); }
  bool Barrier(int32_t set) const { return sets_[set].barrier; }
  // Whether Step(set, b) == set for every b in `bytes` (memoised per set and byte).
  bool LoopsOn(int32_t set, const ByteSet& bytes);
  // Shortest completion from this set: 0 if it can pop the barrier or end here, else the
  // best top's (for the matcher, of its whole stack).
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
  void BuildReps(const StackSet& s);
  // A DFA state whose one-stack set is itself: no calls (no callee stacks join) and not
  // accepting (the frame cannot pop).
  bool Plain(int32_t g) const {
    const Automaton& a = sim_.automaton();
    return !a.accepting[g] && a.call_begin[g] == a.call_begin[g + 1];
  }
  int32_t Compute(int32_t set, uint8_t b);
  int32_t Intern(StackSet s);

  static constexpr uint32_t kUnset = kInfDist - 1;
  std::unique_ptr<Arena> own_arena_;
  std::unique_ptr<Simulator> own_sim_;
  Arena& arena_;
  Simulator& sim_;
  size_t max_sets_ = kMaxSets;  // sets with a memo row
  std::vector<StackSet> sets_;
  std::vector<uint32_t> short_;
  std::vector<ByteSet> loop_known_, loop_yes_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<int32_t> trans_;
  std::vector<uint8_t> rep_;       // parallel to trans_
  std::vector<int32_t> plain_of_;  // by set: its one top node when its state is Plain, else -1
  std::unordered_map<int32_t, int32_t> by_plain_;  // that top node -> its set
  std::vector<int32_t> units_;
  size_t memo_rows_ = 0;
};

// Walks the trie positions in `ranges` (sorted, disjoint) from set `start`, sharing the steps
// of common prefixes with the previous walked token, jumping over the whole group below a
// prefix that died, and taking a whole group at once where the set loops on every byte below
// its trie node. Positions with skip(pos) are not walked; done(pos, end_set) is called for
// each token consumed entirely. `levels` is scratch.
template <typename Skip, typename Done>
void WalkRanges(SetDfa& dfa, const TokenVocabulary::Impl& v, int32_t start, std::span<const PosRange> ranges,
                std::vector<int32_t>& levels, Skip&& skip, Done&& done) {
  levels.assign(1, start);
  std::string_view prev;
  size_t valid = 0;  // levels[0..valid] hold the prefix of `prev`
  for (const PosRange& r : ranges) {
    for (uint32_t i = r.first; i < r.second;) {
      if (skip(i)) {
        ++i;
        continue;
      }
      std::string_view tok = v.SortedBytes(i);
      size_t l = 0;
      const size_t lim = std::min({prev.size(), tok.size(), valid});
      while (l < lim && prev[l] == tok[l]) ++l;
      if (levels.size() < tok.size() + 1) levels.resize(tok.size() + 1);
      size_t p = l;
      uint32_t bulk_end = 0;
      for (; p < tok.size(); ++p) {
        const int32_t nx = dfa.Step(levels[p], static_cast<uint8_t>(tok[p]));
        if (nx == SetDfa::kDead) break;
        levels[p + 1] = nx;
        // At the first token of a large trie node: if the set loops on every byte below it,
        // every token of the group is consumed and ends in this very set.
        if (const auto* ns = v.Summary(i, p + 1); ns && dfa.LoopsOn(nx, ns->below)) {
          bulk_end = std::min(ns->end, r.second);
          ++p;
          break;
        }
      }
      prev = tok;
      if (bulk_end) {
        for (uint32_t j = i; j < bulk_end; ++j) {
          if (!skip(j)) done(j, levels[p]);
        }
        valid = p;  // levels 0..p hold the group's common prefix, all a later token can share
        i = bulk_end;
        continue;
      }
      if (p < tok.size()) {
        valid = p;
        i = v.GroupEnd(i, p + 1);
        continue;
      }
      valid = tok.size();
      done(i, levels[tok.size()]);
      ++i;
    }
  }
}

}  // namespace ladle::grammar
