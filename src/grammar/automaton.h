// The compiled form of a Grammar: one DFA per non-inlined rule ("unit"), all states numbered
// in one global space so a stack frame is a single int. Edges are bytes (through a per-unit
// byte-class map), special tokens, and calls of other units (push the callee's start, resume
// at `ret` when the callee accepts and pops).
//
// Every state kept can still reach acceptance (dead states and calls of rules with an empty
// language are pruned at compile time), so any byte the automaton accepts is a prefix of some
// string in the language: masks need no lookahead to be exact.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"

namespace ladle::grammar {

inline constexpr uint32_t kInfDist = UINT32_MAX;

struct Automaton {
  struct Call {
    int32_t callee;  // the callee's start state
    int32_t ret;     // where this frame resumes after the callee pops
  };
  struct Special {
    uint32_t token;
    int32_t next;
  };

  int32_t start = -1;  // the root unit's start state (-1: the language is empty)

  // By unit (one compiled rule).
  std::vector<RuleId> unit_rule;
  std::vector<int32_t> unit_start;
  std::vector<std::array<uint8_t, 256>> class_map;  // byte -> class
  std::vector<uint16_t> num_classes;
  // Units built by layering a counted repeat's body (automaton.cc, LayerRepeat): local state
  // k * per_layer + q is state q of the body's DFA after k complete copies, and the last
  // state (max * per_layer) is the one after `max`. The classifier's layer slice
  // (classify.cc, ClassifyLayer) reads the count off the state number.
  struct Layered {
    int32_t unit = 0;
    int32_t per_layer = 0;
    uint32_t min = 0, max = 0;
  };
  std::vector<Layered> layered;
  // Units built by joining a prefix-free head's DFA to a shared tail's (automaton.cc, Concat).
  // A compile statistic: not serialised.
  uint32_t concatenated_units = 0;
  // Units whose DFA came from the process-wide cache of call-free unit DFAs (automaton.cc,
  // UnitDfaCache) instead of being built. A compile statistic: not serialised.
  uint32_t shared_units = 0;

  // By global state.
  std::vector<int32_t> unit_of;
  std::vector<uint8_t> accepting;
  std::vector<uint32_t> trans_off;  // row of num_classes[unit] entries in `next`
  std::vector<uint32_t> call_begin;     // size states + 1
  std::vector<uint32_t> special_begin;  // size states + 1
  std::vector<ByteSet> out_bytes;       // bytes with a transition
  std::vector<uint32_t> dist;           // shortest completion of this frame, in bytes/specials

  std::vector<int32_t> next;  // global target or -1
  std::vector<Call> calls;
  std::vector<Special> specials;

  size_t num_states() const { return unit_of.size(); }
  int32_t Next(int32_t g, uint8_t b) const {
    return next[trans_off[g] + class_map[unit_of[g]][b]];
  }
  bool HasBytes(int32_t g) const { return !out_bytes[g].Empty(); }
  bool HasSpecials(int32_t g) const { return special_begin[g] != special_begin[g + 1]; }
  bool Active(int32_t g) const { return HasBytes(g) || HasSpecials(g); }
  size_t MemoryBytes() const;
};

// Compiles every rule reachable from the root. Errors: kInvalidArgument for left recursion
// (naming the rule), kResourceExhausted when the deadline or memory budget is exceeded.
Result<Automaton> BuildAutomaton(const Grammar& g, const CompileOptions& opts,
                                 std::chrono::steady_clock::time_point deadline);

// Shortest completion per state (fills a.dist) and removal of everything that cannot reach
// acceptance.
void FinishAutomaton(Automaton& a);

}  // namespace ladle::grammar
