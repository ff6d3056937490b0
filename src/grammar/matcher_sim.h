// The pushdown simulation shared by the matcher and the mask cache.
//
// A stack is a chain of interned nodes (state, parent): identical stacks are the same node id,
// so a set of stacks dedups by id, forking shares every frame below the fork, and a snapshot
// for rollback is just the vector of top ids. Two sentinels sit below the bottom frame:
// kEnd (popping it ends the document) and kBarrier (used by the mask cache: popping it means
// the outcome depends on the unknown stack below).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "automaton.h"
#include "token_trie.h"

namespace ladle::grammar {

inline constexpr int32_t kEnd = -1;
inline constexpr int32_t kBarrier = -2;

struct StackNode {
  int32_t state;
  int32_t parent;
  uint32_t dist;  // shortest completion of the whole stack (saturating)
};

class Arena {
 public:
  Arena() { table_.assign(1024, -1); }
  int32_t Intern(const Automaton& a, int32_t state, int32_t parent);
  const StackNode& operator[](int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  size_t MemoryBytes() const { return nodes_.capacity() * sizeof(StackNode) + table_.capacity() * 4; }
  void Clear();

 private:
  static uint64_t Key(int32_t s, int32_t p) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(s)) << 32) | static_cast<uint32_t>(p);
  }
  void Grow();
  std::vector<StackNode> nodes_;
  std::vector<int32_t> table_;  // open addressing over node ids
};

// A set of stacks after epsilon closure: only the tops that can consume something (a byte or a
// special token) are kept; finishing is a flag.
struct StackSet {
  std::vector<int32_t> tops;  // sorted node ids
  bool can_end = false;       // some stack pops past the root
  bool barrier = false;       // some stack pops the kBarrier frame
  bool Empty() const { return tops.empty() && !can_end && !barrier; }
};

class Simulator {
 public:
  Simulator(const Automaton& a, Arena& arena) : a_(a), arena_(arena) {}

  // out = closure of the stacks `seeds` (node ids).
  void Close(std::span<const int32_t> seeds, StackSet& out);
  // out = closure after consuming byte b from `in`; false (out empty) if no stack can.
  bool StepByte(const StackSet& in, uint8_t b, StackSet& out);
  bool StepSpecial(const StackSet& in, uint32_t token, StackSet& out);
  bool StepBytes(const StackSet& in, std::string_view bytes, StackSet& out);
  // Shortest completion over the set (kInfDist if none).
  uint32_t Shortest(const StackSet& s) const;

  Arena& arena() { return arena_; }
  const Automaton& automaton() const { return a_; }

  // A very ambiguous grammar can keep exponentially many distinct stacks alive (every
  // nesting level doubling them). A closure that would visit more than `max` stacks stops
  // and sets overflowed(); the result is then incomplete and callers must give up on it.
  void SetMaxStacks(size_t max) { max_stacks_ = max; }
  bool overflowed() const { return overflowed_; }
  void ClearOverflow() { overflowed_ = false; }

 private:
  void Visit(int32_t n);
  size_t max_stacks_ = SIZE_MAX;
  bool overflowed_ = false;
  size_t visited_ = 0;
  const Automaton& a_;
  Arena& arena_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  std::vector<int32_t> work_, seeds_;
  StackSet tmp_;
};

using PosRange = std::pair<uint32_t, uint32_t>;  // [begin, end) of sorted trie positions

// Sorts `r` and merges overlapping or touching ranges in place.
inline void MergeRanges(std::vector<PosRange>& r) {
  std::sort(r.begin(), r.end());
  size_t k = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (k > 0 && r[i].first <= r[k - 1].second) {
      r[k - 1].second = std::max(r[k - 1].second, r[i].second);
    } else {
      r[k++] = r[i];
    }
  }
  r.resize(k);
}

}  // namespace ladle::grammar
