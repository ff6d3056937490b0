// Internal pieces of the JSON Schema compiler (json_schema*.cc): lexical grammars (strings,
// numbers with exact decimal bounds, formats) and the allOf merge. Not a public interface.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/grammar/grammar.h"
#include "ladle/json/json.h"

namespace ladle::grammar::schema_internal {

// An exact decimal: sign, integer digits without leading zeros ("0" for zero) and fraction
// digits without trailing zeros. Number bounds stay decimal so 0.1 or 1e300 are exact.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;
  bool IsZero() const { return int_digits == "0" && frac_digits.empty(); }
  bool IsInteger() const { return frac_digits.empty(); }
};
// JSON number text ("-1.5e3") → Decimal; nullopt for non-numbers or exponents past ±1000.
std::optional<Decimal> ParseDecimal(std::string_view text);
int CompareDecimal(const Decimal& a, const Decimal& b);  // <0, 0, >0
std::string DecimalText(const Decimal& d);

struct Bound {
  Decimal value;
  bool exclusive = false;
};

// Shared lexical rules of one grammar, created on first use so every schema node reuses them
// (the runtime caches masks per rule state: shared rules mean shared caches).
class Lexical {
 public:
  explicit Lexical(GrammarBuilder& b) : b_(b) {}

  // Draft 6 on: 1.0 is an integer. Drafts 3/4 say an integer has no fraction part.
  bool integral_fraction = true;
  ExprId IntegralTail();  // (\.0+)? or nothing, per integral_fraction

  ExprId StringChar();   // one JSON string character: unescaped scalar or one escape
  ExprId Escape();       // the escape alternative of StringChar (\n, \uXXXX, surrogate pairs)
  ExprId UnicodeEscapeBody();  // what follows "\u": four hex digits, or a surrogate pair
  ExprId AnyString();    // "..." with any content
  ExprId AnyNumber();    // -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
  ExprId AnyInteger();   // -?(0|[1-9]\d*) IntegralTail
  ExprId Digits(uint32_t min, uint32_t max);

  // Numbers in [lo, hi] (each side optional) without exponent notation. `integer_only`
  // restricts to integral values (still accepting a ".0+" tail).
  // `max_places` limits the decimals that may be non-zero (multipleOf 0.01 → 2).
  ExprId NumberRange(const std::optional<Bound>& lo, const std::optional<Bound>& hi,
                     bool integer_only, uint32_t max_places = kUnbounded);
  // Integers n with n % k == 0 (k >= 1), no bounds.
  ExprId MultipleOf(uint64_t k);

  // String content (between the quotes) for `format`; nullopt if the format is unknown.
  // `approx` receives what is not enforced exactly (empty when exact).
  std::optional<ExprId> FormatContent(std::string_view format, std::string* approx);

  // Rewrites a grammar over decoded characters (a regex) into one over JSON string content:
  // characters that JSON must escape become their escapes, others also accept \uXXXX-free
  // spelling only. Fails on rule references (regex output has none).
  Result<ExprId> JsonEscaped(ExprId decoded);

 private:
  ExprId Cached(ExprId* slot, const char* name, ExprId body);
  ExprId IntRange(const std::string& lo, const std::optional<std::string>& hi);
  ExprId SameLength(const std::string& lo, const std::string& hi);
  ExprId FracTail(int kind, const std::string& s, bool ss, const std::string& t, bool ts, bool with_point,
                  uint32_t places);
  ExprId FracNe(int kind, const std::string& s, bool ss, const std::string& t, bool ts, uint32_t places);
  ExprId Magnitude(const Bound& lo, const std::optional<Bound>& hi, bool integer_only);
  ExprId Hex(uint32_t n);
  ExprId Dec(std::string_view lo_hi_pairs);

  GrammarBuilder& b_;
  uint32_t frac_places_ = kUnbounded;
  ExprId esc_ = -1, uesc_ = -1, char_ = -1, string_ = -1, number_ = -1, integer_ = -1, digit_ = -1;
};

// allOf intersection of two resolved schema objects (no $ref / allOf at the top). Fails
// with kUnsupported naming the keyword when the intersection cannot be expressed.
Result<json::Value> MergeSchemas(const json::Value& a, const json::Value& b, const std::string& path);
// JSON Schema equality (1 == 1.0, objects unordered).
bool SchemaValueEqual(const json::Value& a, const json::Value& b);

}  // namespace ladle::grammar::schema_internal
