// Objects in any key order (JsonSchemaOptions::KeyOrder::kAny, the default): each listed key
// at most once, in any order, required ones present, unlisted keys anywhere between them.
//
// Why subset states: "each of N keys at most once, in any order" needs an automaton that
// remembers which keys were used — 2^N states, and no grammar trick avoids it (permutation
// languages need exponential grammars). So each object becomes one rule per state
// (group g, the keys of g already used, the member count when min/maxProperties count), and
// every state refers to the same "name": value expression of each key, whose value is a rule
// reference: the automaton compiler then keeps a big or unbounded value (a string body) one
// unit with one mask cache for all 2^N states instead of a copy per state.
//
// Bound: exact while the object has at most kExactKeys listed keys and the states fit
// kStateBudget. Beyond that the listed keys are split into consecutive groups (schema order)
// of the largest size that fits: any order within a group, groups in schema order, unlisted
// keys still anywhere. That is a restriction, never a loosening (no duplicate, no missing
// required key is ever accepted), and it is reported. When even groups of one do not fit
// (a large min/maxProperties with unlisted keys), the schema-order grammar of CountedObject
// is used, also reported.
//
// The grammar is unambiguous (a key's name decides the path), so the matcher keeps one stack
// per prefix, and the closing "}" sits inside the state rules so that whitespace before it and
// before a "," are told apart inside one unit.
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "json_schema_compiler.h"

namespace ladle::grammar::schema_internal {

namespace {

constexpr size_t kExactKeys = 8;         // listed keys tracked exactly: 2^8 = 256 subsets
constexpr uint64_t kStateBudget = 1024;  // subset × count states per object

enum Kind : int { kRest, kInner, kFirst };

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
  // Counted states: c = members so far, saturating at `cap` (when only minProperties counts,
  // "at least min" is all that matters past it).
  const uint64_t cap = max_p != kUnbounded ? max_p : min_p;

  auto states = [&](size_t k) -> uint64_t {
    const uint64_t groups = (n + k - 1) / k;
    if (cap >= kStateBudget) return kUnbounded;
    return groups * (uint64_t{1} << k) * (cap + 1);
  };
  size_t k = std::min(n, kExactKeys);
  while (k > 1 && states(k) > kStateBudget) --k;
  if (states(k) > kStateBudget) {
    Approx(path + "/properties",
           "properties in schema order only (min/maxProperties with unlisted keys: too many states for any order)");
    return CountedObject(props, extra, has_extra, min_p, max_p, path, depth);
  }
  if (k < n) {
    Approx(path + "/properties",
           fmt::format("{} listed properties: any order within consecutive groups of {}, groups in schema order", n, k));
  }
  const size_t groups = (n + k - 1) / k;
  std::vector<uint32_t> req(groups, 0);  // bit j: key g*k+j is required
  for (size_t i = 0; i < n; ++i) {
    if (props[i].required) req[i / k] |= uint32_t{1} << (i % k);
  }
  auto size_of = [&](size_t g) { return std::min(n, (g + 1) * k) - g * k; };

  const ExprId sep = Sep(depth);
  const ExprId end = b_.Seq({Close(depth), b_.Literal("}")});
  const ExprId extras = has_extra ? b_.Star(b_.Seq({sep, extra})) : b_.Empty();
  auto next = [&](uint64_t c) { return std::min(c + 1, cap); };

  // Rules are made on first reference: only reachable states exist.
  using Key = std::tuple<int, size_t, uint32_t, uint64_t>;  // kind, group, used, count
  std::map<Key, RuleId> rules;
  std::vector<Key> todo;
  auto ref = [&](Kind kind, size_t g, uint32_t used, uint64_t c) {
    auto [it, fresh] = rules.emplace(Key{kind, g, used, c}, -1);
    if (fresh) {
      static constexpr const char* kNames[] = {"keys", "group", "first"};
      it->second = b_.DeclareRule(fmt::format("{}/{}_{}_{:x}_{}", path, kNames[kind], g, used, c));
      todo.push_back(it->first);
    }
    return b_.Ref(it->second);
  };
  // After at least one member, no unlisted key since the last listed one: a "," and an unused
  // key of group g; or, once g's required keys are in, group g+1 (or the end).
  auto inner = [&](size_t g, uint32_t used, uint64_t c) {
    std::vector<ExprId> alts;
    if (c < max_p) {
      for (size_t j = 0; j < size_of(g); ++j) {
        if (used >> j & 1) continue;
        alts.push_back(b_.Seq({sep, props[g * k + j].kv, ref(kRest, g, used | uint32_t{1} << j, next(c))}));
      }
    }
    if ((req[g] & ~used) == 0) {
      if (g + 1 < groups) {
        alts.push_back(ref(kInner, g + 1, 0, c));
      } else if (c >= min_p) {
        alts.push_back(end);
      }
    }
    return b_.Alt(std::move(alts));
  };
  // No member yet: a key of group g, or group g+1 when g has no required key.
  auto first = [&](size_t g) {
    std::vector<ExprId> alts;
    if (max_p >= 1) {
      for (size_t j = 0; j < size_of(g); ++j) alts.push_back(b_.Seq({props[g * k + j].kv, ref(kRest, g, uint32_t{1} << j, next(0))}));
    }
    if (req[g] == 0 && g + 1 < groups) alts.push_back(ref(kFirst, g + 1, 0, 0));
    return b_.Alt(std::move(alts));
  };

  std::vector<ExprId> top{first(0)};
  if (has_extra && max_p >= 1) top.push_back(b_.Seq({extra, ref(kRest, 0, 0, next(0))}));
  ExprId members = b_.Alt(std::move(top));
  while (!todo.empty()) {
    auto [kind, g, used, c] = todo.back();
    todo.pop_back();
    ExprId body;
    if (kind == kFirst) {
      body = first(g);
    } else if (kind == kInner) {
      body = inner(g, used, c);
    } else if (!has_extra) {
      body = inner(g, used, c);
    } else if (c < cap) {
      // Unlisted keys one at a time while they count; past the cap, a run of them. Either way
      // they come before the next listed key, so each split of a text is parsed one way.
      body = b_.Alt({b_.Seq({sep, extra, ref(kRest, g, used, c + 1)}), inner(g, used, c)});
    } else if (max_p == kUnbounded) {
      body = b_.SeqThen({extras}, inner(g, used, c));
    } else {
      body = inner(g, used, c);
    }
    b_.DefineRule(rules[{kind, g, used, c}], body);
    LADLE_RETURN_IF_ERROR(Check(path, nesting_));
  }

  ExprId full = b_.Seq({b_.Literal("{"), Open(depth), members});
  if (nreq > 0 || min_p > 0) return full;
  // The empty object, spelled as Container spells it.
  ExprId empty = opts_.whitespace == JsonSchemaOptions::Whitespace::kBounded ? b_.Seq({b_.Literal("{"), Ws(), b_.Literal("}")})
                                                                            : b_.Literal("{}");
  return b_.Alt({empty, full});
}

}  // namespace ladle::grammar::schema_internal
