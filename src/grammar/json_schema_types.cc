// Per-type grammars of the JSON Schema compiler (one flat schema: no $ref or combinators
// left) and the public entry points of grammar.h.
#include <algorithm>

#include <fmt/format.h>

#include "json_schema_compiler.h"
#include "ladle/core/numbers.h"
#include "reference_recognizer.h"
#include "ladle/json/json.h"

namespace ladle::grammar {
namespace schema_internal {

namespace {

constexpr uint64_t kMaxCount = 512;  // largest enforced minLength/maxLength/minItems/maxItems

std::optional<uint64_t> Count(const Value* v) {
  if (!v || !v->is_number()) return std::nullopt;
  auto d = ParseDecimal(v->as_string());
  if (!d || d->negative) return std::nullopt;
  if (d->int_digits.size() > 9) return kUnbounded;
  uint64_t n = *ParseU64(d->int_digits);  // at most 9 digits
  // minLength 2.5 means at least 3; JSON Schema wants integers here anyway.
  if (!d->frac_digits.empty()) ++n;
  return n;
}

std::optional<uint64_t> CountFloor(const Value* v) {
  if (!v || !v->is_number()) return std::nullopt;
  auto d = ParseDecimal(v->as_string());
  if (!d || d->negative) return 0;
  if (d->int_digits.size() > 9) return kUnbounded;
  return *ParseU64(d->int_digits);  // at most 9 digits
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> DecodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace

Result<ExprId> Compiler::CompileFlat(const Value& s, const std::string& path, int depth) {
  for (const auto& [k, v] : s.as_object()) {
    if (!IsUnsupportedKeyword(k)) continue;
    bool trivial = (v.is_bool() && v.as_bool()) || (v.is_object() && v.as_object().empty());
    if (k == "not") continue;  // the forms Canonical left: {type} and {enum}, handled below
    if ((k == "propertyNames" || k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies" ||
         k == "unevaluatedProperties" || k == "unevaluatedItems") && trivial) {
      continue;
    }
    return Unsupported(fmt::format("{}/{}: keyword not supported", path, k));
  }
  unsigned mask = kAllTypes;
  if (const Value* t = s.Find("type")) {
    mask = 0;
    for (const Value& x : t->as_array()) mask |= TypeMask(x.as_string());
  }
  // not {type} removes types; not {enum}/{const} removes values (strings, booleans, null).
  std::vector<std::string> not_strings;
  unsigned not_bools = 0;  // 1: false excluded, 2: true excluded
  if (const Value* n = s.Find("not")) {
    LADLE_ASSIGN_OR_RETURN(Value neg, Canonical(*n, path + "/not"));
    for (const auto& [k, v] : neg.as_object()) {
      if (IsAnnotation(k)) continue;
      if (k == "type") {
        for (const Value& x : v.as_array()) mask &= ~TypeMask(x.as_string());
      } else if (k == "enum" && neg.as_object().size() == 1) {
        for (const Value& x : v.as_array()) {
          if (x.is_null()) {
            mask &= ~kNull;
          } else if (x.is_string()) {
            not_strings.push_back(x.as_string());
          } else if (x.is_bool()) {
            not_bools |= x.as_bool() ? 2 : 1;
          } else {
            return Unsupported(fmt::format("{}/not/enum: excluding numbers, arrays or objects is not supported", path));
          }
        }
      } else {
        return Unsupported(fmt::format("{}/not: only type, enum and const (and combinators of them) can be negated", path));
      }
    }
  }
  if (const Value* e = s.Find("enum")) {
    std::vector<ExprId> alts;
    for (const Value& v : e->as_array()) {
      if (!(ValueMask(v) & mask) || !EnumValueFits(v, s, path)) continue;
      if (v.is_string() && std::find(not_strings.begin(), not_strings.end(), v.as_string()) != not_strings.end()) continue;
      if (v.is_bool() && (not_bools & (v.as_bool() ? 2 : 1))) continue;
      LADLE_ASSIGN_OR_RETURN(ExprId lit, Literal(v, depth));
      alts.push_back(lit);
    }
    return b_.Alt(std::move(alts));
  }
  std::vector<ExprId> alts;
  if (mask & kNull) alts.push_back(b_.Literal("null"));
  if (mask & kBool) {
    if (!(not_bools & 2)) alts.push_back(b_.Literal("true"));
    if (!(not_bools & 1)) alts.push_back(b_.Literal("false"));
  }
  if ((mask & (kInt | kFrac)) == kFrac) {
    // Numbers that are not integers (what `not: {type: integer}` leaves).
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}) {
      if (s.Find(k)) return Unsupported(fmt::format("{}/{}: not supported on non-integer numbers", path, k));
    }
    Approx(path + "/not", "non-integer numbers: exponent notation not accepted");
    ExprId intpart = b_.Alt({b_.Literal("0"), b_.Seq({b_.ByteRange('1', '9'), lex_.Digits(0, kUnbounded)})});
    alts.push_back(b_.Seq({b_.Optional(b_.Literal("-")), intpart, b_.Literal("."), lex_.Digits(0, kUnbounded),
                           b_.ByteRange('1', '9'), lex_.Digits(0, kUnbounded)}));
  } else if (mask & (kInt | kFrac)) {
    LADLE_ASSIGN_OR_RETURN(ExprId e, NumberGrammar(s, path, !(mask & kFrac)));
    alts.push_back(e);
  }
  if (mask & kString) {
    if (!not_strings.empty()) {
      for (const char* k : {"minLength", "maxLength", "pattern", "format"}) {
        if (s.Find(k)) return Unsupported(fmt::format("{}/not: excluding strings together with {} is not supported", path, k));
      }
      alts.push_back(KeyNotIn(not_strings));
    } else {
      LADLE_ASSIGN_OR_RETURN(ExprId e, StringGrammar(s, path));
      alts.push_back(e);
    }
  }
  if (mask & kArray) {
    LADLE_ASSIGN_OR_RETURN(ExprId e, ArrayGrammar(s, path, depth));
    alts.push_back(e);
  }
  if (mask & kObject) {
    LADLE_ASSIGN_OR_RETURN(ExprId e, ObjectGrammar(s, path, depth));
    alts.push_back(e);
  }
  return b_.Alt(std::move(alts));
}

// Checks an enum/const value against the sibling keywords that can be evaluated cheaply;
// what cannot be is reported.
bool Compiler::EnumValueFits(const Value& v, const Value& s, const std::string& path) {
  if (v.is_number()) {
    auto d = ParseDecimal(v.as_string());
    if (!d) return true;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const Value* b = s.Find(k);
      auto bd = b && b->is_number() ? ParseDecimal(b->as_string()) : std::nullopt;
      if (!bd) continue;
      int c = CompareDecimal(*d, *bd);
      std::string_view kk(k);
      if ((kk == "minimum" && c < 0) || (kk == "exclusiveMinimum" && c <= 0) || (kk == "maximum" && c > 0) ||
          (kk == "exclusiveMaximum" && c >= 0)) {
        return false;
      }
    }
    if (s.Find("multipleOf")) Approx(path + "/enum", "enum values are not checked against multipleOf");
    return true;
  }
  if (v.is_string()) {
    size_t n = CodePointCount(v.as_string());
    if (auto lo = Count(s.Find("minLength")); lo && n < *lo) return false;
    if (auto hi = CountFloor(s.Find("maxLength")); hi && n > *hi) return false;
    if (s.Find("pattern") || s.Find("format")) Approx(path + "/enum", "enum values are not checked against pattern/format");
    return true;
  }
  if (v.is_array()) {
    size_t n = v.as_array().size();
    if (auto lo = Count(s.Find("minItems")); lo && n < *lo) return false;
    if (auto hi = CountFloor(s.Find("maxItems")); hi && n > *hi) return false;
    if (s.Find("items") || s.Find("prefixItems") || s.Find("uniqueItems")) {
      Approx(path + "/enum", "enum values are not checked against item keywords");
    }
    return true;
  }
  if (v.is_object()) {
    if (const Value* r = s.Find("required"); r && r->is_array()) {
      for (const Value& name : r->as_array()) {
        if (name.is_string() && !v.Find(name.as_string())) return false;
      }
    }
    if (s.Find("properties") || s.Find("additionalProperties") || s.Find("patternProperties") ||
        s.Find("minProperties") || s.Find("maxProperties")) {
      Approx(path + "/enum", "enum values are not checked against property keywords");
    }
  }
  return true;
}

ExprId Compiler::NumberLiteral(std::string_view text) {
  auto d = ParseDecimal(text);
  if (!d) return b_.Literal(text);
  ExprId zeros = b_.Optional(b_.Seq({b_.Literal("."), b_.Plus(b_.Literal("0"))}));
  if (d->IsZero()) return b_.Seq({b_.Optional(b_.Literal("-")), b_.Literal("0"), zeros});
  std::string head = (d->negative ? "-" : "") + d->int_digits;
  if (d->IsInteger()) return b_.Seq({b_.Literal(head), zeros});
  return b_.Seq({b_.Literal(head + "." + d->frac_digits), b_.Star(b_.Literal("0"))});
}

// Exactly the value v (numbers in any decimal spelling of it; keys in v's order).
Result<ExprId> Compiler::Literal(const Value& v, int depth) {
  switch (v.type()) {
    case Value::Type::kNull: return b_.Literal("null");
    case Value::Type::kBool: return b_.Literal(v.as_bool() ? "true" : "false");
    case Value::Type::kNumber: return NumberLiteral(v.as_string());
    case Value::Type::kString: {
      std::string q;
      json::AppendQuoted(v.as_string(), &q);
      return b_.Literal(q);
    }
    case Value::Type::kArray: {
      if (v.as_array().empty()) return Container('[', ']', b_.Nothing(), true, depth);
      std::vector<ExprId> parts;
      for (const Value& x : v.as_array()) {
        if (!parts.empty()) parts.push_back(Sep(depth));
        LADLE_ASSIGN_OR_RETURN(ExprId e, Literal(x, depth + 1));
        parts.push_back(e);
      }
      return Container('[', ']', b_.Seq(std::move(parts)), false, depth);
    }
    case Value::Type::kObject: {
      if (v.as_object().empty()) return Container('{', '}', b_.Nothing(), true, depth);
      // Key order does not matter to JSON Schema equality: small objects allow every order.
      std::vector<ExprId> members;
      for (const auto& [k, x] : v.as_object()) {
        std::string q;
        json::AppendQuoted(k, &q);
        LADLE_ASSIGN_OR_RETURN(ExprId e, Literal(x, depth + 1));
        members.push_back(b_.Seq({b_.Literal(q), Colon(), e}));
      }
      std::vector<size_t> order(members.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::vector<ExprId> alts;
      do {
        std::vector<ExprId> parts;
        for (size_t i : order) {
          if (!parts.empty()) parts.push_back(Sep(depth));
          parts.push_back(members[i]);
        }
        alts.push_back(b_.Seq(std::move(parts)));
      } while (members.size() <= 4 && std::next_permutation(order.begin(), order.end()));
      if (members.size() > 4) Approx("", "object literals in enum/const with more than 4 keys: keys in the listed order only");
      return Container('{', '}', b_.Alt(std::move(alts)), false, depth);
    }
  }
  return b_.Nothing();
}

Result<ExprId> Compiler::RegexContent(const std::string& pattern, const std::string& path) {
  auto re = AddRegex(b_, pattern, RegexOptions{.search = true});
  if (!re.ok()) return re.status().WithContext(path);
  auto esc = lex_.JsonEscaped(*re);
  if (!esc.ok()) return esc.status().WithContext(path);
  return *esc;
}

Result<ExprId> Compiler::StringGrammar(const Value& s, const std::string& path) {
  uint64_t min = Count(s.Find("minLength")).value_or(0);
  std::optional<uint64_t> max = CountFloor(s.Find("maxLength"));
  // A counted repeat costs automaton states per count: past kMaxCount it is dropped, reported.
  if (max && *max > kMaxCount) {
    Approx(path + "/maxLength", fmt::format("maxLength above {} not enforced", kMaxCount));
    max.reset();
  }
  if (min > kMaxCount) return Unsupported(fmt::format("{}/minLength: above {} is not supported", path, kMaxCount));
  uint32_t lo = static_cast<uint32_t>(std::min<uint64_t>(min, kUnbounded - 1));
  uint32_t hi = max ? static_cast<uint32_t>(std::min<uint64_t>(*max, kUnbounded)) : kUnbounded;
  bool has_length = lo > 0 || max.has_value();
  const Value* pattern = s.Find("pattern");
  const Value* format = s.Find("format");
  ExprId quote = b_.Literal("\"");
  if (pattern && pattern->is_string()) {
    LADLE_ASSIGN_OR_RETURN(ExprId content, RegexContent(pattern->as_string(), path + "/pattern"));
    if (format) Approx(path + "/format", "format not enforced together with pattern");
    if (has_length) Approx(path + "/maxLength", "minLength/maxLength not enforced together with pattern");
    return b_.Seq({quote, content, quote});
  }
  if (format && format->is_string()) {
    std::string approx;
    if (auto content = lex_.FormatContent(format->as_string(), &approx)) {
      if (!approx.empty()) Approx(path + "/format", approx);
      if (has_length) Approx(path + "/maxLength", "minLength/maxLength not enforced together with format");
      return b_.Seq({quote, *content, quote});
    }
    Approx(path + "/format", fmt::format("format '{}' not enforced", format->as_string()));
  }
  if (!has_length) return lex_.AnyString();
  // One rule per length range: many fields share "maxLength 255", and the runtime builds
  // (and caches masks for) each rule once.
  auto key = std::make_pair(lo, hi);
  if (auto it = length_rules_.find(key); it != length_rules_.end()) return it->second;
  ExprId body = b_.Seq({quote, b_.Repeat(lex_.StringChar(), lo, hi), quote});
  std::string name = hi == kUnbounded ? fmt::format("string_{}_", lo) : fmt::format("string_{}_{}", lo, hi);
  return length_rules_[key] = b_.Ref(b_.AddRule(name, body));
}

Result<ExprId> Compiler::NumberGrammar(const Value& s, const std::string& path, bool integer_only) {
  auto bound = [&](const char* incl, const char* excl, bool lower) -> Result<std::optional<Bound>> {
    std::optional<Bound> out;
    for (const char* k : {incl, excl}) {
      const Value* v = s.Find(k);
      if (!v) continue;
      auto d = v->is_number() ? ParseDecimal(v->as_string()) : std::nullopt;
      if (!d) return InvalidArgument(fmt::format("{}/{}: must be a number", path, k));
      Bound b{*d, k == excl};
      if (!out) {
        out = b;
        continue;
      }
      int c = CompareDecimal(b.value, out->value);
      if ((lower ? c > 0 : c < 0) || (c == 0 && b.exclusive)) out = b;
    }
    return out;
  };
  LADLE_ASSIGN_OR_RETURN(auto lo, bound("minimum", "exclusiveMinimum", true));
  LADLE_ASSIGN_OR_RETURN(auto hi, bound("maximum", "exclusiveMaximum", false));
  if (const Value* m = s.Find("multipleOf")) {
    auto d = m->is_number() ? ParseDecimal(m->as_string()) : std::nullopt;
    if (!d || d->negative || d->IsZero()) return InvalidArgument(fmt::format("{}/multipleOf: must be a positive number", path));
    bool pow10 = d->int_digits == "0" && d->frac_digits.back() == '1' &&
                 d->frac_digits.find_first_not_of('0') == d->frac_digits.size() - 1;
    if (d->IsInteger() && d->int_digits != "1") {
      if (d->int_digits.size() > 6) return Unsupported(fmt::format("{}/multipleOf: divisor too large", path));
      uint64_t k = *ParseU64(d->int_digits);  // at most 6 digits
      if (!lo && !hi) return lex_.MultipleOf(k);
      // Bounded: list the multiples when there are few.
      auto as_int = [](const Bound& b, bool lower) -> std::optional<int64_t> {
        if (b.value.int_digits.size() > 15) return std::nullopt;
        int64_t v = *ParseI64(b.value.int_digits) * (b.value.negative ? -1 : 1);  // at most 15 digits
        bool frac = !b.value.frac_digits.empty();
        if (lower) {
          if (frac && !b.value.negative) ++v;
          else if (!frac && b.exclusive) ++v;
        } else {
          if (frac && b.value.negative) --v;
          else if (!frac && b.exclusive) --v;
        }
        return v;
      };
      auto l = lo ? as_int(*lo, true) : std::nullopt;
      auto h = hi ? as_int(*hi, false) : std::nullopt;
      if (!l || !h || *h < *l || (*h - *l) / static_cast<int64_t>(k) > 4096) {
        return Unsupported(fmt::format("{}/multipleOf: only unbounded or narrowly bounded ranges are supported", path));
      }
      auto kk = static_cast<int64_t>(k);
      int64_t first = *l % kk == 0 ? *l : *l + ((kk - *l % kk) % kk);
      std::vector<ExprId> alts;
      for (int64_t v = first; v <= *h; v += kk) alts.push_back(NumberLiteral(std::to_string(v)));
      return b_.Alt(std::move(alts));
    }
    if (d->IsInteger()) {
      integer_only = true;
    } else if (!integer_only) {
      if (!pow10) {
        Approx(path + "/multipleOf", fmt::format("multipleOf {} not enforced", m->as_string()));
      } else if (lo || hi) {
        Approx(path + (lo ? "/minimum" : "/maximum"), "bounded numbers: exponent notation not accepted");
        return lex_.NumberRange(lo, hi, false, static_cast<uint32_t>(d->frac_digits.size()));
      } else {
        auto places = static_cast<uint32_t>(d->frac_digits.size());
        ExprId intpart = b_.Alt({b_.Literal("0"), b_.Seq({b_.ByteRange('1', '9'), lex_.Digits(0, kUnbounded)})});
        return b_.Seq({b_.Optional(b_.Literal("-")), intpart,
                       b_.Optional(b_.Seq({b_.Literal("."), lex_.Digits(1, places), b_.Star(b_.Literal("0"))}))});
      }
    } else if (!pow10) {
      return Unsupported(fmt::format("{}/multipleOf: non-integral divisor on integers", path));
    }
  }
  if (!lo && !hi) return integer_only ? lex_.AnyInteger() : lex_.AnyNumber();
  if (!integer_only) Approx(path + (lo ? "/minimum" : "/maximum"), "bounded numbers: exponent notation not accepted");
  return lex_.NumberRange(lo, hi, integer_only);
}

Result<ExprId> Compiler::ArrayGrammar(const Value& s, const std::string& path, int depth) {
  uint64_t min = Count(s.Find("minItems")).value_or(0);
  uint64_t max = CountFloor(s.Find("maxItems")).value_or(kUnbounded);
  if (max != kUnbounded && max > kMaxCount) {
    Approx(path + "/maxItems", fmt::format("maxItems above {} not enforced", kMaxCount));
    max = kUnbounded;
  }
  if (min > kMaxCount) return Unsupported(fmt::format("{}/minItems: above {} is not supported", path, kMaxCount));
  if (min > max) return b_.Nothing();
  if (const Value* u = s.Find("uniqueItems"); u && u->is_bool() && u->as_bool() && max > 1) {
    Approx(path + "/uniqueItems", "uniqueItems not enforced");
  }
  std::vector<ExprId> prefix;
  if (const Value* p = s.Find("prefixItems")) {
    if (!p->is_array()) return InvalidArgument(fmt::format("{}/prefixItems: must be an array", path));
    for (size_t i = 0; i < p->as_array().size() && i < max; ++i) {
      LADLE_ASSIGN_OR_RETURN(ExprId e, Compile(p->as_array()[i], fmt::format("{}/prefixItems/{}", path, i), depth + 1));
      prefix.push_back(e);
    }
  }
  ExprId rest = b_.Nothing();
  const Value* items = s.Find("items");
  if (max > prefix.size()) {
    if (items) {
      LADLE_ASSIGN_OR_RETURN(rest, Compile(*items, path + "/items", depth + 1));
    } else {
      rest = AnyValue(depth + 1);
    }
  }
  // Truncating the prefix is allowed (down to minItems); positions past it take `rest`.
  auto n = static_cast<uint64_t>(prefix.size());
  ExprId sep = Sep(depth);
  auto clamp = [](uint64_t x) { return static_cast<uint32_t>(std::min<uint64_t>(x, kUnbounded)); };
  uint64_t rest_min = min > n ? min - n : 0;
  uint64_t rest_max = max == kUnbounded ? kUnbounded : max - std::min(max, n);
  // after[i]: the items at positions >= i, each preceded by a separator.
  ExprId after = b_.Repeat(b_.Seq({sep, rest}), clamp(rest_min), clamp(rest_max));
  for (uint64_t i = n; i-- > 1;) {
    ExprId item = b_.Seq({sep, prefix[i], after});
    after = i < min ? item : b_.Optional(item);
  }
  ExprId list;
  if (n > 0) {
    list = b_.Seq({prefix[0], after});
  } else {
    uint64_t more_min = min > 0 ? min - 1 : 0;
    uint64_t more_max = max == kUnbounded ? kUnbounded : max - 1;
    list = b_.Seq({rest, b_.Repeat(b_.Seq({sep, rest}), clamp(more_min), clamp(more_max))});
  }
  if (max == 0) list = b_.Nothing();
  return Container('[', ']', list, min == 0, depth);
}

// A JSON string key that is not spelled exactly like any of `names`: a code-point trie over
// the names' escaped spellings where leaving the trie (or ending on a non-name node) goes on
// as an ordinary string. A name spelled differently (e.g. "\u0061" for "a") is not caught:
// documented in docs/json_schema.md.
ExprId Compiler::KeyNotIn(const std::vector<std::string>& names) {
  if (names.empty()) return lex_.AnyString();
  if (auto it = key_cache_.find(names); it != key_cache_.end()) return it->second;
  struct Node {
    std::map<uint32_t, size_t> kids;
    bool terminal = false;
    bool in_escape = false;  // the edge into this node was the '\' opening an escape
  };
  std::vector<Node> trie(1);
  for (const auto& n : names) {
    std::string spelled;
    json::AppendEscaped(n, &spelled);
    if (spelled.find("\\u") != std::string::npos) {
      Approx("", "an unlisted key may repeat a listed name that contains control characters");
      return key_cache_[names] = lex_.AnyString();
    }
    size_t cur = 0;
    for (uint32_t cp : DecodeUtf8(spelled)) {
      bool escape_start = cp == '\\' && !trie[cur].in_escape;
      auto it = trie[cur].kids.find(cp);
      if (it == trie[cur].kids.end()) {
        trie.push_back({});
        trie.back().in_escape = escape_start;
        it = trie[cur].kids.emplace(cp, trie.size() - 1).first;
      }
      cur = it->second;
    }
    trie[cur].terminal = true;
  }
  ExprId quote = b_.Literal("\"");
  if (key_tail_ < 0) key_tail_ = b_.Seq({b_.Star(lex_.StringChar()), quote});
  ExprId tail = key_tail_;
  auto gen = [&](auto&& self, size_t node) -> ExprId {
    const Node& nd = trie[node];
    std::vector<ExprId> alts;
    if (!nd.terminal && !nd.in_escape) alts.push_back(quote);
    for (auto& [cp, child] : nd.kids) {
      std::string u;
      AppendUtf8(cp, &u);
      alts.push_back(b_.Seq({b_.Literal(u), self(self, child)}));
    }
    // The rest of a key that left the trie here: one shared rule per excluded set (mostly a
    // single character), so tries of many objects reuse the same few rules.
    std::vector<uint32_t> excluded;
    for (auto& [cp, child] : nd.kids) excluded.push_back(cp);
    auto cache_key = std::make_pair(nd.in_escape, excluded);
    auto it = diverge_rules_.find(cache_key);
    if (it == diverge_rules_.end()) {
      ExprId other;
      if (nd.in_escape) {
        ByteSet simple;
        for (char c : std::string_view("\"\\/bfnrt")) {
          if (!nd.kids.count(static_cast<uint8_t>(c))) simple.Set(static_cast<uint8_t>(c));
        }
        other = b_.Alt({b_.Bytes(simple), b_.Seq({b_.Literal("u"), lex_.UnicodeEscapeBody()})});
      } else {
        std::vector<CodeRange> plain{{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}, rest;
        for (CodeRange r : plain) {
          uint32_t lo = r.lo;
          for (uint32_t cp : excluded) {
            if (cp < lo || cp > r.hi) continue;
            if (cp > lo) rest.push_back({lo, cp - 1});
            lo = cp + 1;
          }
          if (lo <= r.hi) rest.push_back({lo, r.hi});
        }
        other = b_.Alt({b_.CodePoints(rest), nd.kids.count('\\') ? b_.Nothing() : lex_.Escape()});
      }
      it = diverge_rules_.emplace(cache_key, b_.Ref(b_.AddRule("key_rest", b_.SeqThen({other}, tail)))).first;
    }
    alts.push_back(it->second);
    return b_.Alt(std::move(alts));
  };
  ExprId key = b_.Ref(b_.AddRule("unlisted_key", b_.Seq({quote, gen(gen, 0)})));
  return key_cache_[names] = key;
}

// Objects whose minProperties/maxProperties bind: rules (i, c) = "listed properties from i
// on, c emitted so far" (c saturates at minProperties when there is no maximum), then the
// unlisted ones. c == 0 always means the rest must be non-empty; "{}" is handled apart.
Result<ExprId> Compiler::CountedObject(const std::vector<ObjectProp>& props, ExprId extra, bool has_extra,
                                       uint64_t min_p, uint64_t max_p, const std::string& path, int depth) {
  const uint64_t cap = max_p != kUnbounded ? max_p : min_p;
  const size_t n = props.size();
  if ((n + 1) * (cap + 1) > 4096) {
    return Unsupported(fmt::format("{}/minProperties: property counting needs too many states", path));
  }
  ExprId sep = Sep(depth);
  auto clamp = [](uint64_t x) { return static_cast<uint32_t>(std::min<uint64_t>(x, kUnbounded)); };
  std::map<std::pair<size_t, uint64_t>, RuleId> rules;
  std::vector<std::pair<size_t, uint64_t>> todo;
  auto ref = [&](size_t i, uint64_t c) {
    auto [it, fresh] = rules.emplace(std::make_pair(i, c), -1);
    if (fresh) {
      it->second = b_.DeclareRule(fmt::format("{}/count_{}_{}", path, i, c));
      todo.emplace_back(i, c);
    }
    return b_.Ref(it->second);
  };
  ExprId root = ref(0, 0);
  while (!todo.empty()) {
    auto [i, c] = todo.back();
    todo.pop_back();
    ExprId body;
    if (i == n) {
      uint64_t kmin = min_p > c ? min_p - c : 0;
      uint64_t kmax = max_p == kUnbounded ? kUnbounded : max_p - c;
      if (c == 0) kmin = std::max<uint64_t>(kmin, 1);
      if (!has_extra || kmax < kmin) {
        body = kmin == 0 ? b_.Empty() : b_.Nothing();
      } else if (c == 0) {
        body = b_.Seq({extra, b_.Repeat(b_.Seq({sep, extra}), clamp(kmin - 1), clamp(kmax == kUnbounded ? kUnbounded : kmax - 1))});
      } else {
        body = b_.Repeat(b_.Seq({sep, extra}), clamp(kmin), clamp(kmax));
      }
    } else {
      std::vector<ExprId> alts;
      if (c < max_p) {
        uint64_t next = std::min(c + 1, cap);
        alts.push_back(b_.Seq({c > 0 ? sep : b_.Empty(), props[i].kv, ref(i + 1, next)}));
      }
      if (!props[i].required) alts.push_back(ref(i + 1, c));
      body = b_.Alt(std::move(alts));
    }
    b_.DefineRule(rules[{i, c}], body);
  }
  size_t nreq = 0;
  for (const ObjectProp& p : props) nreq += p.required;
  return Container('{', '}', root, nreq == 0 && min_p == 0, depth);
}

Result<ExprId> Compiler::ObjectGrammar(const Value& s, const std::string& path, int depth) {
  std::set<std::string> required;
  std::vector<std::string> required_order;  // unlisted required names appear in this order
  if (const Value* r = s.Find("required")) {
    if (!r->is_array()) return InvalidArgument(fmt::format("{}/required: must be an array", path));
    for (const Value& x : r->as_array()) {
      if (!x.is_string()) return InvalidArgument(fmt::format("{}/required: names must be strings", path));
      if (required.insert(x.as_string()).second) required_order.push_back(x.as_string());
    }
  }
  const Value* patterns = s.Find("patternProperties");
  if (patterns && (!patterns->is_object() || patterns->as_object().empty())) patterns = nullptr;
  Value add = Value::Bool(opts_.allow_unlisted_properties);
  if (const Value* a = s.Find("additionalProperties")) add = *a;
  if (!opts_.allow_unlisted_properties && !s.Find("additionalProperties") && !patterns) add = Value::Bool(false);
  bool add_false = add.is_bool() && !add.as_bool();

  // patternProperties also apply to listed names they match (checked on the name now).
  std::vector<std::pair<std::string, const Value*>> pats;
  bool pats_trivial = true;
  if (patterns) {
    for (const auto& [pat, schema] : patterns->as_object()) {
      pats.emplace_back(pat, &schema);
      pats_trivial = pats_trivial && ((schema.is_bool() && schema.as_bool()) || (schema.is_object() && schema.as_object().empty()));
    }
  }
  auto with_patterns = [&](const std::string& name, Value schema, bool* matched) -> Result<Value> {
    *matched = false;
    for (const auto& [pat, ps] : pats) {
      auto g = RegexGrammar(pat, RegexOptions{.search = true});
      if (!g.ok()) return g.status().WithContext(path + "/patternProperties/" + PointerEscape(pat));
      if (!ReferenceMatches(*g, name)) continue;
      *matched = true;
      schema = Value::MakeObject({{"allOf", Value::MakeArray({std::move(schema), *ps})}});
    }
    return schema;
  };
  std::vector<std::pair<std::string, Value>> listed;
  std::vector<std::string> names;
  if (const Value* p = s.Find("properties")) {
    if (!p->is_object()) return InvalidArgument(fmt::format("{}/properties: must be an object", path));
    for (const auto& [name, schema] : p->as_object()) {
      bool matched = false;
      LADLE_ASSIGN_OR_RETURN(Value sc, with_patterns(name, schema, &matched));
      if (matched && !pats_trivial) {
        Approx(path + "/patternProperties", fmt::format("a pattern key may also spell the listed name '{}'", name));
      }
      listed.emplace_back(name, std::move(sc));
      names.push_back(name);
    }
  }
  for (const std::string& r : required_order) {
    if (std::find(names.begin(), names.end(), r) != names.end()) continue;
    bool matched = false;
    LADLE_ASSIGN_OR_RETURN(Value sc, with_patterns(r, Value::Bool(true), &matched));
    if (!matched) {
      if (add_false) return b_.Nothing();
      sc = add;
    }
    listed.emplace_back(r, std::move(sc));
    names.push_back(r);
  }
  const bool any_order = opts_.key_order == JsonSchemaOptions::KeyOrder::kAny;
  if (!any_order && names.size() > 1) Approx(path + "/properties", "properties in schema order only");

  std::vector<ObjectProp> props;
  for (const auto& [name, schema] : listed) {
    size_t before = b_.num_exprs();
    LADLE_ASSIGN_OR_RETURN(ExprId v, Compile(schema, path + "/properties/" + PointerEscape(name), depth + 1));
    bool req = required.count(name) > 0;
    if (b_.expr(v).kind == ExprKind::kNothing) {
      if (req) return b_.Nothing();
      continue;
    }
    // Big values become rules: the object grammar below shares sub-expressions, and a rule
    // keeps each value's automaton (and mask cache) single.
    // In any order, every subset state refers to the value: always a rule there.
    if ((b_.num_exprs() - before > 24 || (any_order && listed.size() > 1)) && b_.expr(v).kind != ExprKind::kRuleRef) {
      v = b_.Ref(b_.AddRule(path + "/properties/" + PointerEscape(name), v));
    }
    std::string q;
    json::AppendQuoted(name, &q);
    props.push_back({name, b_.Seq({b_.Literal(q), Colon(), v}), req});
  }

  // Unlisted keys. A key matching no pattern cannot be told apart from one matching a
  // pattern (no regex complement), so with non-trivial patterns only pattern keys are
  // generated: a reported restriction, never a loosening.
  std::vector<ExprId> extra_alts;
  const bool add_true = (add.is_bool() && add.as_bool()) || (add.is_object() && add.as_object().empty());
  if (!add_false && (pats.empty() || (pats_trivial && add_true))) {
    LADLE_ASSIGN_OR_RETURN(ExprId v, Compile(add, path + "/additionalProperties", depth + 1));
    if (b_.expr(v).kind != ExprKind::kNothing) extra_alts.push_back(b_.Seq({KeyNotIn(names), Colon(), v}));
  } else if (!pats.empty()) {
    if (!add_false) {
      Approx(path + "/additionalProperties", "with patternProperties, unlisted keys must match one of the patterns");
    }
    if (pats.size() > 1) {
      Approx(path + "/patternProperties", "a key matching several patterns is checked against one of them only");
    }
    for (const auto& [pat, schema] : pats) {
      std::string ppath = path + "/patternProperties/" + PointerEscape(pat);
      LADLE_ASSIGN_OR_RETURN(ExprId key, RegexContent(pat, ppath));
      LADLE_ASSIGN_OR_RETURN(ExprId v, Compile(*schema, ppath, depth + 1));
      extra_alts.push_back(b_.Seq({b_.Literal("\""), key, b_.Literal("\""), Colon(), v}));
    }
  }
  ExprId extra = b_.Alt(std::move(extra_alts));
  bool has_extra = b_.expr(extra).kind != ExprKind::kNothing;
  if (has_extra) extra = b_.Ref(b_.AddRule(path + "/additional", extra));

  size_t nreq = 0;
  for (const ObjectProp& p : props) nreq += p.required;
  uint64_t min_p = Count(s.Find("minProperties")).value_or(0);
  uint64_t max_p = CountFloor(s.Find("maxProperties")).value_or(kUnbounded);
  if (min_p > max_p) return b_.Nothing();
  if (any_order && !props.empty()) return AnyOrderObject(props, extra, has_extra, min_p, max_p, path, depth);
  ExprId sep = Sep(depth);
  ExprId tail = has_extra ? b_.Star(b_.Seq({sep, extra})) : b_.Empty();
  ExprId first = has_extra ? b_.Seq({extra, tail}) : b_.Nothing();
  bool empty_ok = nreq == 0;
  if (props.empty()) {
    // Only unlisted keys: counts are exact.
    auto clamp = [](uint64_t x) { return static_cast<uint32_t>(std::min<uint64_t>(x, kUnbounded)); };
    first = max_p == 0 ? b_.Nothing()
                       : b_.Seq({extra, b_.Repeat(b_.Seq({sep, extra}), clamp(min_p > 0 ? min_p - 1 : 0),
                                                  clamp(max_p == kUnbounded ? kUnbounded : max_p - 1))});
    empty_ok = min_p == 0;
  } else {
    uint64_t most = has_extra ? kUnbounded : props.size();
    if (min_p > nreq || max_p < most) return CountedObject(props, extra, has_extra, min_p, max_p, path, depth);
  }
  for (size_t i = props.size(); i-- > 0;) {
    const ObjectProp& p = props[i];
    // SeqThen: each tail is shared by the alternative starting at property i and by the tail
    // before it (see GrammarBuilder::SeqThen).
    if (p.required) {
      first = b_.SeqThen({p.kv}, tail);
      tail = b_.SeqThen({sep, p.kv}, tail);
    } else {
      first = b_.Alt({b_.SeqThen({p.kv}, tail), first});
      tail = b_.SeqThen({b_.Optional(b_.Seq({sep, p.kv}))}, tail);
    }
  }
  return Container('{', '}', first, empty_ok, depth);
}

}  // namespace schema_internal

Result<ExprId> AddJsonSchema(GrammarBuilder& b, const json::Value& schema, const JsonSchemaOptions& opts,
                             CompileReport* report) {
  schema_internal::Compiler c(b, schema, opts, report);
  return c.Compile(schema, "", 0);
}

Result<Grammar> JsonSchemaGrammar(const json::Value& schema, const JsonSchemaOptions& opts, CompileReport* report) {
  GrammarBuilder b;
  LADLE_ASSIGN_OR_RETURN(ExprId e, AddJsonSchema(b, schema, opts, report));
  return b.Build(b.AddRule("root", e));
}

Result<Grammar> JsonObjectGrammar(const JsonSchemaOptions& opts) {
  GrammarBuilder b;
  json::Value none;
  schema_internal::Compiler c(b, none, opts, nullptr);
  return b.Build(b.AddRule("root", c.AnyObject(0)));
}

}  // namespace ladle::grammar
