// Objects in any key order (JsonSchemaOptions::KeyOrder::kAny, the default): each listed key
// at most once, in any order, required ones present; unlisted keys after them.
//
// Why subset states: "each of N keys at most once, in any order" needs an automaton that
// remembers which keys were used — 2^N states, and no grammar trick avoids it (permutation
// languages need exponential grammars). So each object becomes one expression per state
// (group g, the keys of g already used, the listed-key count when min/maxProperties count), and
// every state refers to the same "name": value expression of each key, whose value is a rule
// reference: the automaton compiler then keeps a big or unbounded value (a string body) one
// unit with one mask cache for all 2^N states instead of a copy per state.
//
// Bound: exact while the object has at most kExactKeys listed keys and its states fit the
// object's and the schema's budgets. Beyond that the listed keys are split into consecutive
// groups (schema order) of the largest size that fits: any order within a group, groups in
// schema order. Unlisted keys (additionalProperties / patternProperties) come after the
// listed ones, as in schema order: interleaving them put the unlisted-key loop (a call: it
// occurs in every state) at every member boundary and made masks 4-6x slower. Both are
// restrictions, never loosenings (no duplicate, no missing required key is ever accepted),
// and both are reported. When even groups of one do not fit (min/maxProperties counting
// too far), the schema-order grammar of CountedObject is used, also reported.
//
// The grammar is unambiguous (a key's name decides the path), so the matcher keeps one stack
// per prefix, and the closing "}" sits inside the states so that whitespace before it and
// before a "," are told apart inside one unit.
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "json_schema_compiler.h"

namespace ladle::grammar::schema_internal {

namespace {

// Each state costs its own copy of the remaining keys' trie in the object's DFA (~3 µs of
// compile a DFA state on MaskBench), so the budgets are small: bench/grammar/README.md
// ("object keys in any order") measured several; 64/128 kept compile within ~2.2x of schema order.
constexpr size_t kExactKeys = 6;           // listed keys tracked exactly at most: 2^6 subsets
constexpr uint64_t kObjectBudget = 64;     // subset × count states of one object
constexpr uint64_t kSchemaBudget = 128;    // ... of all any-order objects of one schema
constexpr uint64_t kCountedStates = 4096;  // past this even groups of one: CountedObject's limit

}  // namespace

Result<ExprId> Compiler::AnyOrderObject(const std::vector<ObjectProp>& props, ExprId extra, bool has_extra,
                                        uint64_t min_p, uint64_t max_p, const std::string& path, int depth) {
  const size_t n = props.size();
  size_t nreq = 0;
  for (const ObjectProp& p : props) nreq += p.required;
  // Bounds the listed keys settle by themselves need no counter.
  const uint64_t most = has_extra ? kUnbounded : n;
  if (max_p < nreq || min_p > most) return b_.Nothing();
  if (min_p <= nreq) min_p = 0;
  if (max_p >= most) max_p = kUnbounded;
  // c = listed keys so far, tracked only when a bound counts, saturating at `cap` (past
  // min_p only "at least" matters; past n nothing changes). Unlisted keys are counted by the
  // repeat that generates them at the end.
  const uint64_t cap = min_p == 0 && max_p == kUnbounded ? 0 : std::min<uint64_t>(n, max_p != kUnbounded ? max_p : min_p);

  auto states = [&](size_t k) -> uint64_t { return (n + k - 1) / k * (uint64_t{1} << k) * (cap + 1); };
  // Groups of one or two cost two states a key, about what the schema-order chain costs:
  // always allowed. Larger groups spend the object's and the schema's budget, first come
  // first served (document order), so a schema's first objects get the exact grammar.
  const uint64_t free_states = states(std::min<size_t>(n, 2));
  const uint64_t allowed = std::max(free_states,
                                    std::min(kObjectBudget, kSchemaBudget > order_states_ ? kSchemaBudget - order_states_ : 0));
  size_t k = std::min(n, kExactKeys);
  while (k > 1 && states(k) > allowed) --k;
  if (states(k) > kCountedStates) {
    Approx(path + "/properties", "properties in schema order only (min/maxProperties: too many states for any order)");
    return CountedObject(props, extra, has_extra, min_p, max_p, path, depth);
  }
  order_states_ += states(k) > free_states ? states(k) - free_states : 0;
  if (k < n) {
    Approx(path + "/properties",
           fmt::format("{} listed properties: any order within consecutive groups of {}, groups in schema order", n, k));
  }
  if (has_extra) Approx(path + "/properties", "unlisted keys only after the listed ones");
  const size_t groups = (n + k - 1) / k;
  std::vector<uint32_t> req(groups, 0);  // bit j: key g*k+j is required
  for (size_t i = 0; i < n; ++i) {
    if (props[i].required) req[i / k] |= uint32_t{1} << (i % k);
  }
  auto size_of = [&](size_t g) { return std::min(n, (g + 1) * k) - g * k; };

  const ExprId sep = Sep(depth);
  const ExprId end = b_.Seq({Close(depth), b_.Literal("}")});
  auto clamp = [](uint64_t x) { return static_cast<uint32_t>(std::min<uint64_t>(x, kUnbounded)); };
  auto next = [&](uint64_t c) { return std::min(c + 1, cap); };
  // After the listed keys (c of them): the unlisted ones the counts still allow, then "}".
  auto tail = [&](uint64_t c) {
    if (!has_extra) return c >= min_p ? end : b_.Nothing();
    uint64_t kmin = min_p > c ? min_p - c : 0;
    uint64_t kmax = max_p == kUnbounded ? kUnbounded : max_p - c;
    return b_.SeqThen({b_.Repeat(b_.Seq({sep, extra}), clamp(kmin), clamp(kmax))}, end);
  };

  // States are expressions, not rules: each is built once (memo) and referenced as the shared
  // tail of every state that leads to it, so the whole object is one unit whose NFA holds one
  // fragment per state (automaton_nfa.cc emits a shared tail once per exit state): no call
  // and return between states at run time, one DFA walk across a member boundary.
  using Key = std::tuple<bool, size_t, uint32_t, uint64_t>;  // first?, group, used, count
  std::map<Key, ExprId> memo;
  auto state = [&](auto&& self, bool first, size_t g, uint32_t used, uint64_t c) -> ExprId {
    if (auto it = memo.find(Key{first, g, used, c}); it != memo.end()) return it->second;
    std::vector<ExprId> alts;
    if (c < max_p) {
      // An unused key of group g ("," before it unless it is the first member).
      for (size_t j = 0; j < size_of(g); ++j) {
        if (used >> j & 1) continue;
        std::vector<ExprId> head{props[g * k + j].kv};
        if (!first) head.insert(head.begin(), sep);
        alts.push_back(b_.SeqThen(std::move(head), self(self, false, g, used | uint32_t{1} << j, next(c))));
      }
    }
    // Once g's required keys are in: group g+1, or the end.
    if ((req[g] & ~used) == 0) {
      if (g + 1 < groups) {
        alts.push_back(self(self, first, g + 1, 0, c));
      } else if (!first) {
        alts.push_back(tail(c));
      }
    }
    ExprId e = b_.Alt(std::move(alts));
    memo[Key{first, g, used, c}] = e;
    return e;
  };

  std::vector<ExprId> members{state(state, true, 0, 0, 0)};
  if (has_extra && nreq == 0 && max_p >= 1) {
    // No listed key at all: unlisted ones only, as many as the counts allow.
    uint64_t kmin = std::max<uint64_t>(min_p, 1);
    members.push_back(b_.SeqThen({extra, b_.Repeat(b_.Seq({sep, extra}), clamp(kmin - 1),
                                                   clamp(max_p == kUnbounded ? kUnbounded : max_p - 1))},
                                 end));
  }
  LADLE_RETURN_IF_ERROR(Check(path, nesting_));

  ExprId full = b_.Seq({b_.Literal("{"), Open(depth), b_.Alt(std::move(members))});
  if (nreq > 0 || min_p > 0) return full;
  // The empty object, spelled as Container spells it.
  ExprId empty = opts_.whitespace == JsonSchemaOptions::Whitespace::kBounded ? b_.Seq({b_.Literal("{"), Ws(), b_.Literal("}")})
                                                                            : b_.Literal("{}");
  return b_.Alt({empty, full});
}

}  // namespace ladle::grammar::schema_internal
