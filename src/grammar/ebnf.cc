// GBNF front-end (grammar.h: EbnfGrammar): llama.cpp's grammar dialect, parsed by recursive
// descent straight into GrammarBuilder calls.
//
// Layout rules follow llama.cpp: a rule is `name ::= alternatives`; inside parentheses and
// after `|` newlines are insignificant, elsewhere a newline ends the rule. Terminals are code
// points: "literals" and [classes] are UTF-8 text, escapes (\xHH, \uHHHH, \UHHHHHHHH) name
// code points, not bytes. `<[id]>` is our extension: the special token with that id.
//
// Errors are kParseError "gbnf: <what> at line L:C" (1-based, column in bytes); limits
// (nesting, counted repeats) are kResourceExhausted with the same position.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ladle/grammar/grammar.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::grammar {

namespace {

constexpr int kMaxDepth = 256;
constexpr uint32_t kMaxCount = 10000;

using tokenizer::AppendUtf8;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : t_(text) {}

  Result<Grammar> Parse() {
    SkipSpace(/*newlines=*/true);
    while (!AtEnd()) {
      LADLE_RETURN_IF_ERROR(ParseRule());
      SkipSpace(true);
    }
    auto root = rule_ids_.find("root");
    if (root == rule_ids_.end()) return Status(StatusCode::kParseError, "gbnf: no 'root' rule");
    for (const auto& [name, id] : rule_ids_) {
      if (!defined_[static_cast<size_t>(id)]) {
        return Err(StatusCode::kParseError, fmt::format("undefined rule '{}'", name), first_use_[static_cast<size_t>(id)]);
      }
    }
    return b_.Build(root->second);
  }

 private:
  Status Err(StatusCode code, std::string_view what, size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Status(code, fmt::format("gbnf: {} at line {}:{}", what, line, col));
  }
  Status Err(std::string_view what, size_t at) const { return Err(StatusCode::kParseError, what, at); }

  bool AtEnd() const { return pos_ >= t_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < t_.size() ? t_[pos_ + ahead] : '\0'; }

  // Spaces, tabs and comments; newlines too when `newlines`.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n' && Peek() != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  RuleId RuleFor(std::string_view name, size_t at) {
    auto it = rule_ids_.find(std::string(name));
    if (it != rule_ids_.end()) return it->second;
    RuleId id = b_.DeclareRule(std::string(name));
    rule_ids_.emplace(std::string(name), id);
    defined_.push_back(false);
    first_use_.push_back(at);
    return id;
  }

  std::string_view Name() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return t_.substr(start, pos_ - start);
  }

  Status ParseRule() {
    const size_t start = pos_;
    std::string_view name = Name();
    if (name.empty()) return Err("expected a rule name", start);
    SkipSpace(false);
    if (t_.substr(pos_, 3) != "::=") return Err("expected '::=' after the rule name", pos_);
    pos_ += 3;
    SkipSpace(true);
    RuleId id = RuleFor(name, start);
    if (defined_[static_cast<size_t>(id)]) return Err(fmt::format("rule '{}' defined twice", name), start);
    LADLE_ASSIGN_OR_RETURN(ExprId body, Alternatives(0));
    b_.DefineRule(id, body);
    defined_[static_cast<size_t>(id)] = true;
    // The rule must end at a newline or the end of the text.
    if (!AtEnd() && Peek() != '\n' && Peek() != '\r') {
      return Err(fmt::format("unexpected '{}' (expected the end of rule '{}')", Peek(), name), pos_);
    }
    return Status::Ok();
  }

  // depth > 0: inside parentheses, where newlines are spaces.
  Result<ExprId> Alternatives(int depth) {
    std::vector<ExprId> alts;
    while (true) {
      LADLE_ASSIGN_OR_RETURN(ExprId seq, Sequence(depth));
      alts.push_back(seq);
      if (Peek() != '|' || AtEnd()) break;
      ++pos_;
      SkipSpace(true);
    }
    return b_.Alt(std::move(alts));
  }

  Result<ExprId> Sequence(int depth) {
    std::vector<ExprId> parts;
    while (!AtEnd()) {
      const char c = Peek();
      const size_t start = pos_;
      std::optional<ExprId> atom;
      if (c == '"') {
        LADLE_ASSIGN_OR_RETURN(atom, Literal());
      } else if (c == '[') {
        LADLE_ASSIGN_OR_RETURN(atom, Class());
      } else if (c == '.') {
        ++pos_;
        atom = b_.AnyCodePoint();
      } else if (c == '(') {
        if (depth + 1 > kMaxDepth) {
          return Err(StatusCode::kResourceExhausted, fmt::format("parentheses nested deeper than {}", kMaxDepth), start);
        }
        ++pos_;
        SkipSpace(true);
        LADLE_ASSIGN_OR_RETURN(ExprId inner, Alternatives(depth + 1));
        if (Peek() != ')' || AtEnd()) return Err("missing ')'", start);
        ++pos_;
        atom = inner;
      } else if (c == '<') {
        LADLE_ASSIGN_OR_RETURN(atom, Token());
      } else if (IsNameChar(c)) {
        // A rule reference, unless it is the next rule's `name ::=` (a sequence at the top
        // level always ends at a newline first, so this only matters for error messages).
        std::string_view name = Name();
        atom = b_.Ref(RuleFor(name, start));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return Err(fmt::format("'{}' has nothing to repeat", c), start);
      } else {
        break;  // '|', ')', newline, or something the caller reports
      }
      SkipSpace(depth > 0);
      // Postfix repetition operators.
      while (!AtEnd()) {
        const char q = Peek();
        uint32_t lo = 0, hi = 0;
        if (q == '*') {
          lo = 0, hi = kUnbounded;
          ++pos_;
        } else if (q == '+') {
          lo = 1, hi = kUnbounded;
          ++pos_;
        } else if (q == '?') {
          lo = 0, hi = 1;
          ++pos_;
        } else if (q == '{') {
          LADLE_ASSIGN_OR_RETURN(auto bounds, Braces());
          lo = bounds.first, hi = bounds.second;
        } else {
          break;
        }
        *atom = b_.Repeat(*atom, lo, hi);
        SkipSpace(depth > 0);
      }
      parts.push_back(*atom);
    }
    return b_.Seq(std::move(parts));
  }

  Result<uint32_t> Count() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = std::min<uint64_t>(v * 10 + static_cast<uint64_t>(Peek() - '0'), uint64_t{kMaxCount} + 1);
      ++pos_;
    }
    if (pos_ == start) return Err("expected a number", start);
    if (v > kMaxCount) return Err(StatusCode::kResourceExhausted, fmt::format("counted repeat above {}", kMaxCount), start);
    return static_cast<uint32_t>(v);
  }

  Result<std::pair<uint32_t, uint32_t>> Braces() {
    const size_t start = pos_;
    ++pos_;  // '{'
    SkipSpace(false);
    LADLE_ASSIGN_OR_RETURN(uint32_t lo, Count());
    SkipSpace(false);
    uint32_t hi = lo;
    if (Peek() == ',') {
      ++pos_;
      SkipSpace(false);
      if (Peek() == '}') {
        hi = kUnbounded;
      } else {
        LADLE_ASSIGN_OR_RETURN(hi, Count());
        SkipSpace(false);
      }
    }
    if (Peek() != '}' || AtEnd()) return Err("expected '}'", pos_);
    ++pos_;
    if (hi < lo) return Err("repetition {m,n} with m > n", start);
    return std::make_pair(lo, hi);
  }

  // One code point of a literal or class, decoding UTF-8 and escapes. pos_ is on it.
  Result<uint32_t> Char() {
    const size_t start = pos_;
    const auto b0 = static_cast<unsigned char>(Peek());
    if (b0 == '\\') {
      ++pos_;
      if (AtEnd()) return Err("escape at the end of the text", start);
      const char e = Peek();
      ++pos_;
      auto hex = [&](int digits) -> Result<uint32_t> {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          const int h = HexValue(Peek());
          if (AtEnd() || h < 0) return Err(fmt::format("'\\{}' needs {} hex digits", e, digits), start);
          v = v * 16 + static_cast<uint32_t>(h);
          ++pos_;
        }
        if (v > 0x10FFFF) return Err("escape beyond U+10FFFF", start);
        return v;
      };
      switch (e) {
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case 't': return uint32_t{'\t'};
        case 'r': return uint32_t{'\r'};
        case 'n': return uint32_t{'\n'};
        case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(e);
        default: return Err(fmt::format("unknown escape '\\{}'", e), start);
      }
    }
    int len = b0 < 0x80 ? 1 : b0 >= 0xC2 && b0 <= 0xDF ? 2 : b0 >= 0xE0 && b0 <= 0xEF ? 3 : b0 >= 0xF0 && b0 <= 0xF4 ? 4 : 0;
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (len == 0 || pos_ + static_cast<size_t>(len) > t_.size()) return Err("invalid UTF-8", start);
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto c = static_cast<unsigned char>(t_[pos_ + static_cast<size_t>(i)]);
      if ((c & 0xC0) != 0x80) return Err("invalid UTF-8", start);
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return Err("invalid UTF-8", start);
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  Result<ExprId> Literal() {
    const size_t start = pos_;
    ++pos_;  // '"'
    std::string bytes;
    while (true) {
      if (AtEnd() || Peek() == '\n') return Err("unterminated string literal", start);
      if (Peek() == '"') break;
      const size_t at = pos_;
      LADLE_ASSIGN_OR_RETURN(uint32_t cp, Char());
      if (cp >= 0xD800 && cp <= 0xDFFF) return Err("a surrogate code point cannot be UTF-8 text", at);
      AppendUtf8(bytes, cp);
    }
    ++pos_;
    return b_.Literal(bytes);
  }

  Result<ExprId> Class() {
    const size_t start = pos_;
    ++pos_;  // '['
    bool negate = false;
    if (Peek() == '^' && !AtEnd()) {
      negate = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    while (true) {
      if (AtEnd() || Peek() == '\n') return Err("unterminated character class", start);
      if (Peek() == ']') break;
      LADLE_ASSIGN_OR_RETURN(uint32_t lo, Char());
      uint32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < t_.size()) {
        const size_t dash = pos_;
        ++pos_;
        LADLE_ASSIGN_OR_RETURN(hi, Char());
        if (hi < lo) return Err("character range out of order", dash);
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return b_.CodePoints(std::move(ranges), negate);
  }

  // `<[123]>`: a special token by id.
  Result<ExprId> Token() {
    const size_t start = pos_;
    if (Peek(1) != '[') return Err("expected '<[token-id]>'", start);
    pos_ += 2;
    const size_t digits = pos_;
    uint64_t id = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      id = std::min<uint64_t>(id * 10 + static_cast<uint64_t>(Peek() - '0'), uint64_t{UINT32_MAX} + 1);
      ++pos_;
    }
    if (pos_ == digits || id > UINT32_MAX) return Err("expected a token id in '<[...]>'", start);
    if (Peek() != ']' || Peek(1) != '>') return Err("expected ']>' to close the token", pos_);
    pos_ += 2;
    return b_.SpecialToken(static_cast<uint32_t>(id));
  }

  std::string_view t_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::map<std::string, RuleId> rule_ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
};

}  // namespace

Result<Grammar> EbnfGrammar(std::string_view text) {
  GbnfParser parser(text);
  return parser.Parse();
}

}  // namespace ladle::grammar
