// Regex front-end (grammar.h: AddRegex, RegexGrammar): ECMAScript pattern syntax, read with
// the `u` flag's code-point semantics that JSON Schema 2020-12 asks for, lowered to the IR.
// A recursive-descent parser straight to GrammarBuilder calls; no regex AST of our own.
//
// Leniencies taken from ECMAScript Annex B because real-world `pattern`s rely on them: a `{`
// that does not start a valid quantifier is a literal, as are a stray `}` or `]`; identity
// escapes of any punctuation (`\-`, `\/`, `\"`) are accepted anywhere; a class escape at a
// range end (`[\w-.]`) makes the `-` literal. What cannot be expressed as a regular language
// over the IR (lookaround, backreferences, word boundaries, anchors in the middle) is a
// kUnsupported error naming the byte offset, never silently approximated.
//
// docs/grammar_syntax.md is the user-facing description of this dialect.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ladle/grammar/grammar.h"
#include "ladle/tokenizer/tokenizer.h"
#include "regex_unicode.h"

namespace ladle::grammar {

namespace {

// Nesting of groups: the parser recurses once per level, so it must be bounded.
constexpr int kMaxDepth = 256;
// Largest counted repeat bound: a{100000} expands to that many states in the compiler.
constexpr uint32_t kMaxCount = 10000;

using tokenizer::AppendUtf8;

bool IsSurrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// ECMAScript's \s: WhiteSpace plus LineTerminator (ECMA-262 §22.2.2.9, CharacterClassEscape).
const std::vector<CodeRange>& SpaceRanges() {
  static const std::vector<CodeRange> r = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},
                                           {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                                           {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                           {0xFEFF, 0xFEFF}};
  return r;
}
const std::vector<CodeRange>& WordRanges() {
  static const std::vector<CodeRange> r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
const std::vector<CodeRange>& DigitRanges() {
  static const std::vector<CodeRange> r = {{'0', '9'}};
  return r;
}

// A class escape or a single character, as escapes and class atoms produce them.
struct Atom {
  bool is_class = false;
  uint32_t cp = 0;
  std::vector<CodeRange> ranges;  // when is_class
  bool negate = false;            // when is_class
};

std::vector<CodeRange> Complement(std::vector<CodeRange> r) {
  std::sort(r.begin(), r.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (CodeRange c : r) {
    if (c.lo > next) out.push_back({next, c.lo - 1});
    if (c.hi + 1 > next) next = c.hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view p, const RegexOptions& o) : b_(b), p_(p), opts_(o) {}

  Result<ExprId> Parse() {
    LADLE_ASSIGN_OR_RETURN(Spine top, Disjunction(0));
    if (pos_ < p_.size()) return Err(StatusCode::kParseError, "unmatched ')'", pos_);
    const Ctx ctx = opts_.search ? Ctx::kPad : Ctx::kAnchored;
    return Emit(top, ctx, ctx);
  }

 private:
  Status Err(StatusCode code, std::string_view what, size_t at) const {
    return Status(code, fmt::format("regex: {} at offset {}", what, at));
  }

  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }

  // Decodes the UTF-8 code point at pos_ and advances past it.
  Result<uint32_t> NextCodePoint() {
    const auto b0 = static_cast<unsigned char>(p_[pos_]);
    int len = b0 < 0x80 ? 1 : b0 >= 0xC2 && b0 <= 0xDF ? 2 : b0 >= 0xE0 && b0 <= 0xEF ? 3 : b0 >= 0xF0 && b0 <= 0xF4 ? 4 : 0;
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (len == 0 || pos_ + static_cast<size_t>(len) > p_.size()) return Err(StatusCode::kParseError, "invalid UTF-8", pos_);
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto c = static_cast<unsigned char>(p_[pos_ + static_cast<size_t>(i)]);
      if ((c & 0xC0) != 0x80) return Err(StatusCode::kParseError, "invalid UTF-8", pos_);
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < kMin[len] || cp > 0x10FFFF || IsSurrogate(cp)) return Err(StatusCode::kParseError, "invalid UTF-8", pos_);
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  ExprId AnyStar() { return b_.Star(b_.AnyCodePoint()); }

  // Anchors are kept structural until emission: `^` may open and `$` may close any
  // alternative, but they are only meaningful where that alternative touches the start (end)
  // of the whole match, through unquantified groups that are first (last) in theirs. Only
  // then do we know, per innermost alternative, whether search mode needs an any-string pad.
  struct Spine;
  struct Term {
    ExprId expr = -1;
    std::shared_ptr<Spine> group;  // an unquantified group with anchors inside
  };
  struct AltSpine {
    size_t caret_at = std::string_view::npos, dollar_at = std::string_view::npos;
    std::vector<Term> terms;
  };
  struct Spine {
    std::vector<AltSpine> alts;
    size_t anchor_at = std::string_view::npos;  // the first anchor anywhere inside
  };
  // Where an alternative sits relative to the match start (or end): not there (anchors
  // there are unsupported), there and already pinned (no pad), or there in search mode (pad
  // with .* unless anchored).
  enum class Ctx : uint8_t { kNot, kAnchored, kPad };

  Result<ExprId> Emit(const Spine& sp, Ctx start, Ctx end) {
    std::vector<ExprId> alts;
    for (const AltSpine& alt : sp.alts) {
      Ctx s = start, e = end;
      if (alt.caret_at != std::string_view::npos) {
        if (s == Ctx::kNot) return Err(StatusCode::kUnsupported, "'^' anchor not at the start of the match", alt.caret_at);
        s = Ctx::kAnchored;
      }
      if (alt.dollar_at != std::string_view::npos) {
        if (e == Ctx::kNot) return Err(StatusCode::kUnsupported, "'$' anchor not at the end of the match", alt.dollar_at);
        e = Ctx::kAnchored;
      }
      const size_t n = alt.terms.size();
      std::vector<ExprId> parts;
      if (s == Ctx::kPad && (n == 0 || !alt.terms[0].group)) parts.push_back(AnyStar());
      for (size_t i = 0; i < n; ++i) {
        const Term& t = alt.terms[i];
        if (!t.group) {
          parts.push_back(t.expr);
          continue;
        }
        LADLE_ASSIGN_OR_RETURN(ExprId g, Emit(*t.group, i == 0 ? s : Ctx::kNot, i + 1 == n ? e : Ctx::kNot));
        parts.push_back(g);
      }
      if (e == Ctx::kPad && (n == 0 || !alt.terms[n - 1].group)) parts.push_back(AnyStar());
      alts.push_back(b_.Seq(std::move(parts)));
    }
    return b_.Alt(std::move(alts));
  }

  Result<Spine> Disjunction(int depth) {
    Spine sp;
    while (true) {
      LADLE_ASSIGN_OR_RETURN(AltSpine a, Alternative(depth));
      for (size_t at : {a.caret_at, a.dollar_at}) sp.anchor_at = std::min(sp.anchor_at, at);
      for (const Term& t : a.terms) {
        if (t.group) sp.anchor_at = std::min(sp.anchor_at, t.group->anchor_at);
      }
      sp.alts.push_back(std::move(a));
      if (Peek() != '|' || AtEnd()) break;
      ++pos_;
    }
    return sp;
  }

  // One alternative, up to `|`, `)` or the end.
  Result<AltSpine> Alternative(int depth) {
    AltSpine out;
    if (Peek() == '^' && !AtEnd()) out.caret_at = pos_++;
    std::string literal;  // consecutive unquantified characters, merged into one Literal
    auto flush = [&] {
      if (!literal.empty()) out.terms.push_back(Term{b_.Literal(literal), nullptr});
      literal.clear();
    };
    while (!AtEnd()) {
      const char c = Peek();
      if (c == '|' || c == ')') break;
      const size_t start = pos_;
      if (c == '^') return Err(StatusCode::kUnsupported, "'^' anchor not at the start of an alternative", start);
      if (c == '$') {
        ++pos_;
        if (AtEnd() || Peek() == '|' || Peek() == ')') {
          out.dollar_at = start;
          break;
        }
        return Err(StatusCode::kUnsupported, "'$' anchor not at the end of an alternative", start);
      }
      if (c == '*' || c == '+' || c == '?' || (c == '{' && IsQuantifierBrace())) {
        return Err(StatusCode::kParseError, "nothing to repeat", start);
      }
      // The atom: either a single character (kept as a code point so it can merge into a
      // literal run) or a term.
      std::optional<uint32_t> ch;
      Term atom;
      if (c == '(') {
        LADLE_ASSIGN_OR_RETURN(atom, Group(depth));
      } else if (c == '[') {
        LADLE_ASSIGN_OR_RETURN(atom.expr, Class());
      } else if (c == '.') {
        ++pos_;
        atom.expr = b_.CodePoints({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, /*negate=*/true);
      } else if (c == '\\') {
        LADLE_ASSIGN_OR_RETURN(Atom a, Escape(/*in_class=*/false));
        if (a.is_class) {
          atom.expr = b_.CodePoints(a.ranges, a.negate);
        } else {
          if (IsSurrogate(a.cp)) {
            return Err(StatusCode::kUnsupported, "lone surrogate escape cannot match UTF-8 text", start);
          }
          ch = a.cp;
        }
      } else {
        LADLE_ASSIGN_OR_RETURN(uint32_t cp, NextCodePoint());
        ch = cp;
      }
      LADLE_ASSIGN_OR_RETURN(auto q, Quantifier());
      if (!q) {
        if (ch) {
          AppendUtf8(literal, *ch);
        } else {
          flush();
          out.terms.push_back(std::move(atom));
        }
        continue;
      }
      flush();
      if (atom.group) {
        return Err(StatusCode::kUnsupported, "anchor inside a quantified group", atom.group->anchor_at);
      }
      if (ch) {
        std::string s;
        AppendUtf8(s, *ch);
        atom.expr = b_.Literal(s);
      }
      out.terms.push_back(Term{b_.Repeat(atom.expr, q->first, q->second), nullptr});
    }
    flush();
    return out;
  }

  // At a '{': does it start {n}, {n,} or {n,m}? (Otherwise it is a literal, Annex B.)
  bool IsQuantifierBrace() const {
    size_t i = pos_ + 1;
    auto digits = [&] {
      size_t s = i;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') ++i;
      return i > s;
    };
    if (!digits()) return false;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      digits();
    }
    return i < p_.size() && p_[i] == '}';
  }

  uint32_t ReadCount() {
    uint64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = std::min<uint64_t>(v * 10 + static_cast<uint64_t>(Peek() - '0'), uint64_t{kMaxCount} + 1);
      ++pos_;
    }
    return static_cast<uint32_t>(v);
  }

  // Parses an optional quantifier (and its lazy `?`, which does not change the language).
  Result<std::optional<std::pair<uint32_t, uint32_t>>> Quantifier() {
    std::optional<std::pair<uint32_t, uint32_t>> q;
    const size_t start = pos_;
    switch (Peek()) {
      case '*': q = {0, kUnbounded}; ++pos_; break;
      case '+': q = {1, kUnbounded}; ++pos_; break;
      case '?': q = {0, 1}; ++pos_; break;
      case '{': {
        if (AtEnd() || !IsQuantifierBrace()) break;
        ++pos_;
        uint32_t lo = ReadCount(), hi = lo;
        if (Peek() == ',') {
          ++pos_;
          hi = Peek() == '}' ? kUnbounded : ReadCount();
        }
        ++pos_;  // '}'
        if (lo > kMaxCount || (hi != kUnbounded && hi > kMaxCount)) {
          return Err(StatusCode::kResourceExhausted, fmt::format("counted repeat above {}", kMaxCount), start);
        }
        if (hi < lo) return Err(StatusCode::kParseError, "numbers out of order in {} quantifier", start);
        q = {lo, hi};
        break;
      }
      default: break;
    }
    if (q && !AtEnd() && Peek() == '?') ++pos_;
    return q;
  }

  Result<Term> Group(int depth) {
    const size_t start = pos_;
    if (depth + 1 > kMaxDepth) {
      return Err(StatusCode::kResourceExhausted, fmt::format("groups nested deeper than {}", kMaxDepth), start);
    }
    ++pos_;  // '('
    if (Peek() == '?' && !AtEnd()) {
      ++pos_;
      const char k = Peek();
      if (k == ':') {
        ++pos_;
      } else if (k == '=' || k == '!') {
        return Err(StatusCode::kUnsupported, "lookahead", start);
      } else if (k == '<' && (Peek(1) == '=' || Peek(1) == '!')) {
        return Err(StatusCode::kUnsupported, "lookbehind", start);
      } else if (k == '<') {
        ++pos_;
        const size_t name = pos_;
        while (!AtEnd() && (std::isalnum(static_cast<unsigned char>(Peek())) || Peek() == '_' || Peek() == '$')) ++pos_;
        if (pos_ == name || Peek() != '>' || std::isdigit(static_cast<unsigned char>(p_[name]))) {
          return Err(StatusCode::kParseError, "invalid group name", name);
        }
        ++pos_;
      } else {
        return Err(StatusCode::kUnsupported, "group modifier '(?...' (only (?: and (?<name> are regular)", start);
      }
    }
    LADLE_ASSIGN_OR_RETURN(Spine inner, Disjunction(depth + 1));
    if (AtEnd() || Peek() != ')') return Err(StatusCode::kParseError, "missing ')' for the group", start);
    ++pos_;
    if (inner.anchor_at != std::string_view::npos) return Term{-1, std::make_shared<Spine>(std::move(inner))};
    LADLE_ASSIGN_OR_RETURN(ExprId e, Emit(inner, Ctx::kNot, Ctx::kNot));
    return Term{e, nullptr};
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
    auto add_atom = [&](const Atom& a) {
      if (!a.is_class) {
        ranges.push_back({a.cp, a.cp});
      } else if (!a.negate) {
        ranges.insert(ranges.end(), a.ranges.begin(), a.ranges.end());
      } else {
        auto c = Complement(a.ranges);
        ranges.insert(ranges.end(), c.begin(), c.end());
      }
    };
    while (true) {
      if (AtEnd()) return Err(StatusCode::kParseError, "missing ']' for the class", start);
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      LADLE_ASSIGN_OR_RETURN(Atom lo, ClassAtom());
      if (Peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        const size_t dash = pos_;
        ++pos_;
        LADLE_ASSIGN_OR_RETURN(Atom hi, ClassAtom());
        if (lo.is_class || hi.is_class) {
          // Annex B: [\w-.] is \w, '-' and '.'.
          add_atom(lo);
          ranges.push_back({'-', '-'});
          add_atom(hi);
          continue;
        }
        if (hi.cp < lo.cp) return Err(StatusCode::kParseError, "range out of order in class", dash);
        ranges.push_back({lo.cp, hi.cp});
        continue;
      }
      add_atom(lo);
    }
    return b_.CodePoints(std::move(ranges), negate);
  }

  Result<Atom> ClassAtom() {
    if (Peek() == '\\') return Escape(/*in_class=*/true);
    LADLE_ASSIGN_OR_RETURN(uint32_t cp, NextCodePoint());
    return Atom{.cp = cp};
  }

  Result<uint32_t> Hex(size_t digits, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const int h = HexValue(Peek());
      if (AtEnd() || h < 0) return Err(StatusCode::kParseError, "malformed hex escape", at);
      v = v * 16 + static_cast<uint32_t>(h);
      ++pos_;
    }
    return v;
  }

  // After a backslash: a character, a class escape, or an error. pos_ is at the backslash.
  Result<Atom> Escape(bool in_class) {
    const size_t start = pos_;
    ++pos_;
    if (AtEnd()) return Err(StatusCode::kParseError, "pattern ends with a backslash", start);
    const char c = Peek();
    auto cls = [&](const std::vector<CodeRange>& r, bool neg) {
      ++pos_;
      return Atom{.is_class = true, .ranges = r, .negate = neg};
    };
    auto chr = [&](uint32_t cp) {
      ++pos_;
      return Atom{.cp = cp};
    };
    switch (c) {
      case 'd': return cls(DigitRanges(), false);
      case 'D': return cls(DigitRanges(), true);
      case 'w': return cls(WordRanges(), false);
      case 'W': return cls(WordRanges(), true);
      case 's': return cls(SpaceRanges(), false);
      case 'S': return cls(SpaceRanges(), true);
      case 'n': return chr('\n');
      case 't': return chr('\t');
      case 'r': return chr('\r');
      case 'f': return chr('\f');
      case 'v': return chr('\v');
      case 'b':
        if (in_class) return chr('\b');
        return Err(StatusCode::kUnsupported, "word boundary \\b", start);
      case 'B': return Err(StatusCode::kUnsupported, "word boundary \\B", start);
      case 'k': return Err(StatusCode::kUnsupported, "backreference \\k", start);
      case 'c': {
        const char l = Peek(1);
        if (!std::isalpha(static_cast<unsigned char>(l))) return Err(StatusCode::kParseError, "\\c needs a letter", start);
        pos_ += 2;
        return Atom{.cp = static_cast<uint32_t>(l) % 32};
      }
      case '0':
        if (std::isdigit(static_cast<unsigned char>(Peek(1)))) {
          return Err(StatusCode::kUnsupported, "legacy octal escape", start);
        }
        return chr(0);
      case 'x': {
        ++pos_;
        LADLE_ASSIGN_OR_RETURN(uint32_t v, Hex(2, start));
        return Atom{.cp = v};
      }
      case 'u': {
        ++pos_;
        if (Peek() == '{') {
          ++pos_;
          uint64_t v = 0;
          size_t n = 0;
          while (!AtEnd() && HexValue(Peek()) >= 0) {
            v = std::min<uint64_t>(v * 16 + static_cast<uint64_t>(HexValue(Peek())), 0x110000);
            ++pos_;
            ++n;
          }
          if (n == 0 || Peek() != '}' || v > 0x10FFFF) return Err(StatusCode::kParseError, "malformed \\u{...} escape", start);
          ++pos_;
          return Atom{.cp = static_cast<uint32_t>(v)};
        }
        LADLE_ASSIGN_OR_RETURN(uint32_t v, Hex(4, start));
        // A UTF-16 surrogate pair spelled as two escapes is one code point.
        if (v >= 0xD800 && v <= 0xDBFF && Peek() == '\\' && Peek(1) == 'u' && HexValue(Peek(2)) >= 0) {
          const size_t save = pos_;
          pos_ += 2;
          auto lo = Hex(4, save);
          if (lo.ok() && *lo >= 0xDC00 && *lo <= 0xDFFF) return Atom{.cp = 0x10000 + ((v - 0xD800) << 10) + (*lo - 0xDC00)};
          pos_ = save;
        }
        return Atom{.cp = v};
      }
      case 'p':
      case 'P': {
        const bool neg = c == 'P';
        ++pos_;
        if (Peek() != '{') return Err(StatusCode::kParseError, "\\p needs {Property}", start);
        const size_t name_at = ++pos_;
        while (!AtEnd() && Peek() != '}') ++pos_;
        if (AtEnd()) return Err(StatusCode::kParseError, "unterminated \\p{...}", start);
        std::string_view name = p_.substr(name_at, pos_ - name_at);
        ++pos_;
        auto ranges = UnicodePropertyRanges(name);
        if (!ranges) {
          return Err(StatusCode::kUnsupported, fmt::format("Unicode property \\p{{{}}} (general categories only)", name), start);
        }
        return Atom{.is_class = true, .ranges = std::move(*ranges), .negate = neg};
      }
      default: break;
    }
    if (c >= '1' && c <= '9') {
      if (in_class) return Err(StatusCode::kParseError, "backreference inside a class", start);
      return Err(StatusCode::kUnsupported, "backreference", start);
    }
    if (std::isalnum(static_cast<unsigned char>(c))) {
      return Err(StatusCode::kUnsupported, fmt::format("'\\{}' is not an ECMAScript escape", c), start);
    }
    // Identity escape: any other character stands for itself.
    LADLE_ASSIGN_OR_RETURN(uint32_t cp, NextCodePoint());
    return Atom{.cp = cp};
  }

  GrammarBuilder& b_;
  std::string_view p_;
  RegexOptions opts_;
  size_t pos_ = 0;
};

}  // namespace

Result<ExprId> AddRegex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& opts) {
  RegexParser parser(b, pattern, opts);
  return parser.Parse();
}

Result<Grammar> RegexGrammar(std::string_view pattern, const RegexOptions& opts) {
  GrammarBuilder b;
  LADLE_ASSIGN_OR_RETURN(ExprId e, AddRegex(b, pattern, opts));
  RuleId root = b.AddRule("root", e);
  return b.Build(root);
}

}  // namespace ladle::grammar
