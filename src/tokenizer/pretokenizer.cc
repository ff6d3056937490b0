#include "pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "unicode_classes.h"

namespace ladle::tokenizer {

const char* const kDeepSeekDigitPattern = "\\p{N}{1,3}";
const char* const kDeepSeekCjkPattern = "[一-龥぀-ゟ゠-ヿ]+";
const char* const kDeepSeekMainPattern =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

namespace {

using unicode::ClassTable;
using unicode::DecodeUtf8;
using uchar = unsigned char;

constexpr uint8_t kLM = unicode::kLetter | unicode::kMark;
constexpr uint8_t kLPS = unicode::kLetter | unicode::kPunct | unicode::kSymbol;
constexpr uint8_t kPS = unicode::kPunct | unicode::kSymbol;

// Class and length of the code point at p.
struct Cp {
  uint32_t cp;
  uint32_t len;
  uint8_t cls;
};

inline Cp At(const uint8_t* table, const uchar* p, const uchar* e) {
  if (*p < 0x80) return {*p, 1, table[*p]};
  auto d = DecodeUtf8(p, e);
  return {d.cp, d.len, table[d.cp]};
}

inline bool IsAsciiLetter(uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

// Runs DeepSeek's main regex (the third Split) over one piece [b, e), leftmost-first like
// Oniguruma. Each alternative is mirrored in order; see docs/tokenizer.md for the derivation.
class MainScanner {
 public:
  explicit MainScanner(const uint8_t* t) : t_(t) {}

  // End of the match starting at p, or nullptr when no alternative matches at p.
  const uchar* MatchAt(const uchar* p, const uchar* e) const {
    const Cp c0 = At(t_, p, e);
    const uchar* p1 = p + c0.len;
    Cp c1{0, 0, 0};
    if (p1 < e) c1 = At(t_, p1, e);
    // [ascii punct][A-Za-z]+
    if ((c0.cls & unicode::kAsciiPunct) && p1 < e && IsAsciiLetter(c1.cp)) {
      const uchar* q = p1 + 1;
      while (q < e && IsAsciiLetter(*q)) ++q;
      return q;
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    if (!(c0.cls & kLPS) && c0.cp != '\r' && c0.cp != '\n' && p1 < e && (c1.cls & kLM)) {
      return ScanWhile(p1 + c1.len, e, kLM);
    }
    if (c0.cls & kLM) return ScanWhile(p1, e, kLM);
    // " ?[\p{P}\p{S}]+[\r\n]*"
    if (c0.cp == ' ' && p1 < e && (c1.cls & kPS)) return ScanNewlines(ScanWhile(p1 + c1.len, e, kPS), e);
    if (c0.cls & kPS) return ScanNewlines(ScanWhile(p1, e, kPS), e);
    if (c0.cls & unicode::kSpace) return MatchSpace(p, e);
    return nullptr;
  }

 private:
  const uchar* ScanWhile(const uchar* q, const uchar* e, uint8_t mask) const {
    while (q < e) {
      Cp c = At(t_, q, e);
      if (!(c.cls & mask)) break;
      q += c.len;
    }
    return q;
  }
  static const uchar* ScanNewlines(const uchar* q, const uchar* e) {
    while (q < e && (*q == '\r' || *q == '\n')) ++q;
    return q;
  }
  // \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace character.
  const uchar* MatchSpace(const uchar* p, const uchar* e) const {
    const uchar* q = p;
    const uchar* after_last_newline = nullptr;
    const uchar* last_start = p;
    size_t count = 0;
    while (q < e) {
      Cp c = At(t_, q, e);
      if (!(c.cls & unicode::kSpace)) break;
      if (c.cp == '\r' || c.cp == '\n') after_last_newline = q + 1;
      last_start = q;
      q += c.len;
      ++count;
    }
    if (after_last_newline) return after_last_newline;  // \s*[\r\n]+ backtracks to the last newline
    if (q == e) return q;                               // (?!\S) holds at the end of the piece
    if (count >= 2) return last_start;                  // leave one space for the next word
    return q;                                           // \s+
  }

  const uint8_t* t_;
};

template <typename EmitFn>
void RunMain(const uint8_t* table, const uchar* base, const uchar* b, const uchar* e, EmitFn&& emit) {
  MainScanner scanner(table);
  const uchar* gap = b;
  const uchar* p = b;
  while (p < e) {
    const uchar* m = scanner.MatchAt(p, e);
    if (!m) {
      p += At(table, p, e).len;
      continue;
    }
    if (gap < p) emit(gap - base, p - base);
    emit(p - base, m - base);
    p = gap = m;
  }
  if (gap < e) emit(gap - base, e - base);
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

Result<PreTokenizer> PreTokenizer::Create(const std::vector<std::string>& patterns) {
  PreTokenizer pt;
  pt.patterns_ = patterns;
  for (const auto& pat : patterns) {
    auto re = std::make_shared<Regex>();
    int err = 0;
    PCRE2_SIZE off = 0;
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!re->code) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof(buf));
      return Unsupported(fmt::format("pre_tokenizer Split regex '{}' does not compile at offset {}: {}",
                                     pat, off, reinterpret_cast<char*>(buf)));
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // best effort; interpreter otherwise
    pt.regexes_.push_back(std::move(re));
  }
  pt.fast_ = patterns.size() == 3 && patterns[0] == kDeepSeekDigitPattern &&
             patterns[1] == kDeepSeekCjkPattern && patterns[2] == kDeepSeekMainPattern;
  return pt;
}

PreTokenizer PreTokenizer::WithRegexOnly() const {
  PreTokenizer copy = *this;
  copy.fast_ = false;
  return copy;
}

void PreTokenizer::Split(std::string_view text, std::vector<Piece>* out, uint32_t base) const {
  const auto* b = reinterpret_cast<const uchar*>(text.data());
  const uchar* e = b + text.size();
  if (!fast_) {
    // Offsets relative to (b - base) so callers can pass sub-views of a larger buffer.
    std::vector<Piece> tmp;
    SplitRegexStage(0, b, 0, static_cast<uint32_t>(text.size()), &tmp);
    for (auto& p : tmp) out->push_back({p.begin + base, p.end + base});
    return;
  }
  const uint8_t* table = ClassTable();
  const uchar* origin = b - base;
  auto emit = [out](size_t s, size_t t) {
    out->push_back({static_cast<uint32_t>(s), static_cast<uint32_t>(t)});
  };
  // Stages one and two fused: maximal runs of \p{N} (cut in threes), of the CJK ranges, and of
  // everything else. Stage three then runs on each run; a run of numbers is never split by it.
  const uchar* p = b;
  while (p < e) {
    Cp c = At(table, p, e);
    const uchar* q = p + c.len;
    if (c.cls & unicode::kNumber) {
      int n = 1;
      while (q < e) {
        Cp d = At(table, q, e);
        if (!(d.cls & unicode::kNumber)) break;
        if (n == 3) {
          emit(p - origin, q - origin);
          p = q;
          n = 0;
        }
        q += d.len;
        ++n;
      }
      emit(p - origin, q - origin);
    } else {
      const uint8_t kind = c.cls & unicode::kCjk;
      while (q < e) {
        Cp d = At(table, q, e);
        if ((d.cls & unicode::kNumber) || (d.cls & unicode::kCjk) != kind) break;
        q += d.len;
      }
      RunMain(table, origin, p, q, emit);
    }
    p = q;
  }
}

void PreTokenizer::SplitRegexStage(size_t stage, const uchar* base, uint32_t b, uint32_t e,
                                   std::vector<Piece>* out) const {
  if (stage == regexes_.size()) {
    out->push_back({b, e});
    return;
  }
  pcre2_code* code = regexes_[stage]->code;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const PCRE2_SPTR subject = base + b;
  const PCRE2_SIZE len = e - b;
  PCRE2_SIZE start = 0, gap = 0;
  while (start < len) {
    int rc = pcre2_match(code, subject, len, start, 0, md, nullptr);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // empty match: step one code point, as HF's Split does
      start = ov[0] + 1;
      while (start < len && (subject[start] & 0xC0) == 0x80) ++start;
      continue;
    }
    if (gap < ov[0]) SplitRegexStage(stage + 1, base, b + gap, b + ov[0], out);
    SplitRegexStage(stage + 1, base, b + ov[0], b + ov[1], out);
    start = gap = ov[1];
  }
  if (gap < len) SplitRegexStage(stage + 1, base, b + gap, e, out);
  pcre2_match_data_free(md);
}

bool PreTokenizer::IsSafeSplit(std::string_view text, size_t p) const {
  if (!fast_ || p == 0 || p >= text.size()) return false;
  const auto* b = reinterpret_cast<const uchar*>(text.data());
  const uchar* e = b + text.size();
  if ((b[p] & 0xC0) == 0x80) return false;  // not at a code-point boundary
  size_t q = p - 1;
  while (q > 0 && p - q < 4 && (b[q] & 0xC0) == 0x80) --q;
  const uint8_t* table = ClassTable();
  const Cp prev = At(table, b + q, e);
  if (b + q + prev.len != b + p) return false;  // p sits inside an invalid sequence
  const Cp cur = At(table, b + p, e);
  // Boundaries of stages one and two: every later stage runs per piece.
  if ((prev.cls & unicode::kNumber) != (cur.cls & unicode::kNumber)) return true;
  if ((prev.cls & unicode::kCjk) != (cur.cls & unicode::kCjk)) return true;
  // "\n" then a letter: the match holding the newline ends at it whatever follows, and a
  // letter can only start a fresh match.
  if (prev.cp == '\n' && (cur.cls & unicode::kLetter)) return true;
  // "a b" between ASCII letters: the word ends at the space, and " b" starts the next one.
  if (IsAsciiLetter(prev.cp) && cur.cp == ' ' && p + 1 < text.size() && IsAsciiLetter(b[p + 1])) {
    return true;
  }
  return false;
}

}  // namespace ladle::tokenizer
