// Internals of the automaton compiler shared by automaton.cc (subset construction, pruning)
// and automaton_nfa.cc (IR -> Thompson NFA per unit, inlining and extraction policy).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "automaton.h"

namespace ladle::grammar::automaton_internal {

using Clock = std::chrono::steady_clock;

// Rough heap cost of one NFA state with its edges, and of one DFA state's bookkeeping.
inline constexpr size_t kNfaStateBytes = 64;
inline constexpr size_t kDfaStateBytes = 96;

enum class EdgeKind : uint8_t { kEps, kBytes, kCall, kSpecial };

struct NfaEdge {
  EdgeKind kind;
  int32_t to;
  int32_t arg;   // byte-set index, rule id or token id
  int32_t next;  // the state's next edge (-1: last)
};

// Edges in one flat array linked per state: grammars have hundreds of thousands of states
// with one or two edges each, and a vector per state is a malloc per state.
struct Nfa {
  std::vector<int32_t> head;  // by state: first edge or -1
  std::vector<NfaEdge> edges;
  std::vector<ByteSet> sets;
  int32_t start = 0, final = 1;
  size_t size() const { return head.size(); }
  template <typename F>
  void ForEdges(int32_t s, F&& f) const {
    for (int32_t e = head[s]; e >= 0; e = edges[e].next) f(edges[e]);
  }
};

struct Budget {
  Clock::time_point deadline;
  size_t max_bytes;
  size_t used = 0;
  uint32_t max_ms;
  uint32_t tick = 0;
  Status Charge(size_t bytes) {
    used += bytes;
    if (used > max_bytes) {
      return ResourceExhausted(fmt::format("grammar compile exceeded {} MiB", max_bytes >> 20));
    }
    if ((++tick & 255) == 0 && Clock::now() > deadline) {
      return ResourceExhausted(fmt::format("grammar compile exceeded {} ms", max_ms));
    }
    return Status::Ok();
  }
};

// What gets compiled: every non-inlined rule reachable from the root, plus extracted large
// repeats (deduplicated by structural hash).
struct UnitTable {
  struct Unit {
    ExprId body;
    RuleId rule;  // the rule itself, or the rule an extracted expression came from
  };
  std::vector<Unit> units;
  std::vector<int32_t> of_rule;
  std::map<std::pair<uint64_t, uint64_t>, int32_t> of_expr;

  int32_t ForRule(const Grammar& g, RuleId r) {
    if (of_rule.empty()) of_rule.assign(g.rules.size(), -1);
    if (of_rule[r] < 0) {
      of_rule[r] = static_cast<int32_t>(units.size());
      units.push_back({g.rules[r].body, r});
    }
    return of_rule[r];
  }
  int32_t ForExpr(ExprId e, RuleId within, std::pair<uint64_t, uint64_t> hash) {
    auto [it, fresh] = of_expr.try_emplace(hash, static_cast<int32_t>(units.size()));
    if (fresh) units.push_back({e, within});
    return it->second;
  }
};

// A unit whose whole body is `body{min,max}`.
struct CountedRepeat {
  ExprId body;
  uint32_t min, max;
};
// Counted repeats with at least this many copies are built by layering the body's DFA
// (automaton.cc, LayerRepeat) when that DFA allows it.
inline constexpr uint32_t kLayeredMinCopies = 8;

// Builds each unit's NFA; registers called rules and extracted expressions in `units` as it
// meets them.
class NfaCompiler {
 public:
  NfaCompiler(const Grammar& g, Budget& budget, UnitTable& units);
  ~NfaCompiler();
  Result<Nfa> Build(int32_t unit);
  // The unit's body is a counted repeat of a small body that could be layered, or nullopt.
  std::optional<CountedRepeat> LayeredRepeat(int32_t unit) const;
  // A key for the unit's body that is equal in any grammar whose unit has the same body (up
  // to inlined rules), or nullopt when the body reaches a rule that is not inlined: the
  // process-wide cache of call-free unit DFAs (automaton.cc) is keyed by it.
  std::optional<std::pair<uint64_t, uint64_t>> UnitKey(int32_t unit);
  // The unit's body is a two-part sequence (head, tail), or nullopt.
  std::optional<std::pair<ExprId, ExprId>> SequenceOfTwo(int32_t unit) const;
  // The NFA of one expression inside the unit (a repeat's body, a sequence's part), with the
  // unit's rule as the owner of anything it extracts.
  Result<Nfa> BuildPart(int32_t unit, ExprId e);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace ladle::grammar::automaton_internal
