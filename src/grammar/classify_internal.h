// Internals shared by the classifier's files (classify.cc: the full walk; classify_slices.cc:
// the string-body and layer slices): the stack-set DFA the walks run on and the helpers that
// turn walked tokens into a MaskEntry.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mask_cache.h"
#include "matcher_sim.h"

namespace ladle::grammar::classify_internal {

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

inline void AddUncertain(MaskEntry& e, uint32_t begin, uint32_t end) {
  if (!e.uncertain.empty() && e.uncertain.back().second == begin) {
    e.uncertain.back().second = end;
  } else {
    e.uncertain.push_back({begin, end});
  }
  e.uncertain_count += end - begin;
}

// One sublist in sorted order (the long tokens, about 900 of DeepSeek's 128k; or those the
// string-body slice leaves to a walk), each sharing its common prefix with the previous one.
// Uncertain positions are appended in order, so one list's ranges stay sorted.
void WalkList(SetDfa& dfa, const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos,
              const std::vector<uint16_t>& lcp, int32_t start, Accepted& acc, MaskEntry& e);

// Common-prefix lengths of consecutive positions of a sorted sublist.
std::vector<uint16_t> ListLcp(const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos);

}  // namespace ladle::grammar::classify_internal
