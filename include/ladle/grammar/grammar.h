// The grammar IR: what every constraint front-end (JSON Schema, regex, EBNF, tool calling)
// emits and what the automaton compiler (matcher.h) consumes.
//
// A Grammar is a set of named rules. Each rule's body is an expression over bytes: literals,
// byte sets, UTF-8 code-point classes, sequences, alternations, bounded or unbounded repeats,
// references to other rules (recursion allowed, left recursion is a compile error), and
// special-token terminals (one control token by id, e.g. `｜DSML｜` = 128825 in V4, which can
// only be produced as that id, never spelled with ordinary tokens).
//
// Expressions are built through GrammarBuilder and are immutable once built. Ids are indices
// into the builder's node table; an ExprId from one builder means nothing in another.
//
// Why an expression IR and not a direct automaton: the front-ends stay simple and testable
// (tests/unit/grammar compares them against a slow reference recognizer over this IR,
// src/grammar/reference_recognizer.cc), and the automaton compiler owns every optimisation
// (byte classes, determinisation, per-state mask caches) in one place.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::json {
class Value;
}

namespace ladle::grammar {

using ExprId = int32_t;
using RuleId = int32_t;
inline constexpr uint32_t kUnbounded = UINT32_MAX;

// 256 bits: one per byte value.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  void Set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void SetRange(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) Set(static_cast<uint8_t>(b));
  }
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  bool Empty() const { return !(bits[0] | bits[1] | bits[2] | bits[3]); }
};

// An inclusive range of Unicode scalar values.
struct CodeRange {
  uint32_t lo = 0, hi = 0;
};

enum class ExprKind : uint8_t {
  kEmpty,         // matches the empty string
  kNothing,       // matches nothing (e.g. `false` schema, empty enum)
  kLiteral,       // exact bytes: `text`
  kByteSet,       // one byte in `bytes`
  kCodePoints,    // one UTF-8-encoded scalar value in `ranges` (sorted, disjoint, no surrogates)
  kSpecialToken,  // exactly the token `token_id` (a control token; not spelled by bytes)
  kSeq,           // children in order
  kAlt,           // one of the children
  kRepeat,        // children[0] repeated min..max times (max may be kUnbounded)
  kRuleRef,       // the body of rule `rule`
};

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::string text;                 // kLiteral
  ByteSet bytes;                    // kByteSet
  std::vector<CodeRange> ranges;    // kCodePoints
  uint32_t token_id = 0;            // kSpecialToken
  std::vector<ExprId> children;     // kSeq, kAlt, kRepeat (one child)
  uint32_t min = 0, max = 0;        // kRepeat
  RuleId rule = -1;                 // kRuleRef
};

struct Rule {
  std::string name;
  ExprId body = -1;  // -1 until defined
};

// The built grammar: plain data, cheap to copy, safe to share.
struct Grammar {
  std::vector<Expr> exprs;
  std::vector<Rule> rules;
  RuleId root = 0;

  // Human-readable GBNF-like dump (stable; used in tests and `ladle grammar --dump`).
  std::string ToString() const;
};

class GrammarBuilder {
 public:
  ExprId Empty();
  ExprId Nothing();
  ExprId Literal(std::string_view bytes);
  ExprId Bytes(const ByteSet& set);
  ExprId ByteRange(uint8_t lo, uint8_t hi);
  // One code point in the ranges (normalised: sorted, merged, surrogates removed). With
  // `negate`, one code point *not* in them (still a valid scalar value).
  ExprId CodePoints(std::vector<CodeRange> ranges, bool negate = false);
  ExprId AnyCodePoint();  // any valid UTF-8 scalar value
  ExprId SpecialToken(uint32_t token_id);
  ExprId Seq(std::vector<ExprId> parts);  // flattens nested Seq; Seq{} == Empty
  // Seq(parts..., rest) that keeps `rest` one child even when it is a Seq, so a tail shared by
  // several sequences stays one expression (the compiler emits a shared expression once per
  // exit state; flattening would copy it into every sequence).
  ExprId SeqThen(std::vector<ExprId> parts, ExprId rest);
  ExprId Alt(std::vector<ExprId> alternatives);  // flattens nested Alt; Alt{} == Nothing
  ExprId Repeat(ExprId e, uint32_t min, uint32_t max);
  ExprId Optional(ExprId e) { return Repeat(e, 0, 1); }
  ExprId Star(ExprId e) { return Repeat(e, 0, kUnbounded); }
  ExprId Plus(ExprId e) { return Repeat(e, 1, kUnbounded); }

  // Rules may be referenced before they are defined (recursion).
  RuleId DeclareRule(std::string name);
  void DefineRule(RuleId rule, ExprId body);
  RuleId AddRule(std::string name, ExprId body);
  ExprId Ref(RuleId rule);
  // A rule by name, if declared.
  std::optional<RuleId> FindRule(std::string_view name) const;

  const Expr& expr(ExprId id) const { return g_.exprs[static_cast<size_t>(id)]; }
  size_t num_exprs() const { return g_.exprs.size(); }

  // Checks every rule is defined and every id is valid; the builder is left empty.
  Result<Grammar> Build(RuleId root);

 private:
  ExprId Push(Expr e);
  Grammar g_;
};

// ---- Front-ends -------------------------------------------------------------------------
// Each appends to a builder so constraints compose (a schema's `pattern` is a regex inside
// the schema's grammar; a tool call's arguments are a schema inside the tool-call syntax).

// Something the compiler enforces only approximately, reported with the JSON path of the
// keyword (e.g. "/properties/when/format": "date-time: leap seconds accepted on any date").
// Anything that cannot be enforced exactly *and* has no reported approximation is a compile
// error — never silently ignored.
struct Approximation {
  std::string path;
  std::string what;
};

struct CompileReport {
  std::vector<Approximation> approximations;
};

// Regular expressions: ECMAScript syntax as JSON Schema's `pattern` uses it (classes, \d \w \s
// and negations, \uXXXX, \u{...}, quantifiers incl. {m,n} and lazy forms (same language),
// groups (capturing, (?:...), named), alternation, ^ and $ anchors). Lookaround and
// backreferences are a kUnsupported error naming the offset.
struct RegexOptions {
  // JSON Schema `pattern` is unanchored: "abc" matches "xabcx". A response_format regex is a
  // whole-output match (anchored), which is the default.
  bool search = false;
};
Result<ExprId> AddRegex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& opts = {});
Result<Grammar> RegexGrammar(std::string_view pattern, const RegexOptions& opts = {});

// EBNF: llama.cpp's GBNF dialect (docs/grammar.md): `name ::= alternatives`, "literals" with
// escapes, [a-z] / [^...] classes, `.` any character, ( ) grouping, * + ? {m} {m,} {m,n},
// `#` comments; the start rule is `root`. Extension: `<[128825]>` is the special token with
// that id (matcher.h: an id that is no token of the vocabulary, or EOS, is never allowed).
// Errors are kParseError with line:column.
Result<Grammar> EbnfGrammar(std::string_view text);

// JSON Schema (draft 2020-12 plus the common older forms: definitions, dependencies,
// items-as-array, nullable). See src/grammar/json_schema.cc for the keyword table.
struct JsonSchemaOptions {
  // Whitespace between tokens. Compact: none. Pretty: newline + indentation as
  // json.dumps(indent=2) prints. Otherwise (kBounded) up to `max_whitespace` of [ \t\n\r]
  // at each place JSON allows it — never an unbounded run.
  enum class Whitespace : uint8_t { kCompact, kPretty, kBounded };
  Whitespace whitespace = Whitespace::kBounded;
  uint32_t max_whitespace = 4;
  // Properties not named in the schema when additionalProperties is absent: JSON Schema
  // allows them; LLM use mostly wants them off. Default: allowed (spec-conformant).
  bool allow_unlisted_properties = true;
  // Compile budget: a schema whose grammar would exceed this many IR nodes fails with
  // kResourceExhausted instead of growing without bound.
  size_t max_exprs = 1 << 20;
  // Order of an object's keys. kAny (default): any order, as JSON objects are unordered —
  // each listed key at most once, required ones present, unlisted keys anywhere between
  // them. Exact up to 8 listed keys per object (the grammar tracks the set of keys used:
  // 2^N states); beyond that, or past a state budget, any order within consecutive groups
  // of listed keys in schema order, reported as an approximation (a restriction, never a
  // loosening). kSchema: the schema's `properties` order, then required names not in
  // `properties`, then unlisted keys — the smaller grammar, reported on every object with
  // two or more listed names. docs/json_schema.md, "Property order".
  enum class KeyOrder : uint8_t { kAny, kSchema };
  KeyOrder key_order = KeyOrder::kAny;
};
Result<ExprId> AddJsonSchema(GrammarBuilder& b, const json::Value& schema,
                             const JsonSchemaOptions& opts, CompileReport* report);
Result<Grammar> JsonSchemaGrammar(const json::Value& schema, const JsonSchemaOptions& opts = {},
                                  CompileReport* report = nullptr);
// Any JSON value whose top level is an object (OpenAI's json_object), with the same
// whitespace options.
Result<Grammar> JsonObjectGrammar(const JsonSchemaOptions& opts = {});

}  // namespace ladle::grammar
