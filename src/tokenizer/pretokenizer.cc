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

// Class and length of the code point at p. `cp` is exact for ASCII; every other code
// point (and every invalid byte) reads as 0x80, which no rule compares against.
struct Cp {
  uint32_t cp;
  uint32_t len;
  uint8_t cls;
};

inline Cp At(const uint8_t* table, const uchar* p, const uchar* e) {
  if (*p < 0x80) return {*p, 1, table[*p]};
  auto d = DecodeUtf8(p, e);
  return {0x80, d.len, table[d.cp]};
}

// The text decoded once: class and byte length of the code point starting at each offset
// (entries inside a multi-byte sequence are unused). Every later scan reads these arrays
// instead of decoding UTF-8 again.
struct Decoded {
  const uchar* text;
  const uint8_t* cls;
  const uint8_t* len;
  Cp at(size_t i) const { return {text[i] < 0x80 ? text[i] : 0x80u, len[i], cls[i]}; }
};

inline bool IsAsciiLetter(uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

// Runs DeepSeek's main regex (the third Split) over one piece [b, e), leftmost-first like
// Oniguruma. Each alternative is mirrored in order; see docs/tokenizer.md for the derivation.
class MainScanner {
 public:
  explicit MainScanner(const Decoded& d) : d_(d) {}

  // End of the match starting at p, or 0 when no alternative matches at p.
  size_t MatchAt(size_t p, size_t e) const {
    const Cp c0 = d_.at(p);
    const size_t p1 = p + c0.len;
    Cp c1{0, 0, 0};
    if (p1 < e) c1 = d_.at(p1);
    // [ascii punct][A-Za-z]+
    if ((c0.cls & unicode::kAsciiPunct) && p1 < e && IsAsciiLetter(c1.cp)) {
      size_t q = p1 + 1;
      while (q < e && IsAsciiLetter(d_.text[q])) ++q;
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
    return 0;
  }

 private:
  size_t ScanWhile(size_t q, size_t e, uint8_t mask) const {
    while (q < e && (d_.cls[q] & mask)) q += d_.len[q];
    return q;
  }
  size_t ScanNewlines(size_t q, size_t e) const {
    while (q < e && (d_.text[q] == '\r' || d_.text[q] == '\n')) ++q;
    return q;
  }
  // \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace character.
  size_t MatchSpace(size_t p, size_t e) const {
    size_t q = p, after_last_newline = 0, last_start = p, count = 0;
    while (q < e && (d_.cls[q] & unicode::kSpace)) {
      if (d_.text[q] == '\r' || d_.text[q] == '\n') after_last_newline = q + 1;
      last_start = q;
      q += d_.len[q];
      ++count;
    }
    if (after_last_newline) return after_last_newline;  // \s*[\r\n]+ backtracks to the last newline
    if (q == e) return q;                               // (?!\S) holds at the end of the piece
    if (count >= 2) return last_start;                  // leave one space for the next word
    return q;                                           // \s+
  }

  const Decoded& d_;
};

template <typename EmitFn>
void RunMain(const Decoded& d, size_t b, size_t e, EmitFn&& emit) {
  MainScanner scanner(d);
  size_t gap = b, p = b;
  while (p < e) {
    const size_t m = scanner.MatchAt(p, e);
    if (!m) {
      p += d.len[p];
      continue;
    }
    if (gap < p) emit(gap, p);
    emit(p, m);
    p = gap = m;
  }
  if (gap < e) emit(gap, e);
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
  // Decode once into per-offset class and length arrays (reused per thread).
  const uint8_t* table = ClassTable();
  const size_t n = text.size();
  thread_local std::vector<uint8_t> cls_buf, len_buf;
  if (cls_buf.size() < n) {
    cls_buf.resize(n);
    len_buf.resize(n);
  }
  uint8_t* cls = cls_buf.data();
  uint8_t* len = len_buf.data();
  for (size_t i = 0; i < n;) {
    if (b[i] < 0x80) {
      cls[i] = table[b[i]];
      len[i] = 1;
      ++i;
    } else {
      auto d = DecodeUtf8(b + i, e);
      cls[i] = table[d.cp];
      len[i] = static_cast<uint8_t>(d.len);
      i += d.len;
    }
  }
  const Decoded dec{b, cls, len};
  auto emit = [out, base](size_t s, size_t t) {
    out->push_back({static_cast<uint32_t>(s + base), static_cast<uint32_t>(t + base)});
  };
  // Stages one and two fused: maximal runs of \p{N} (cut in threes), of the CJK ranges, and of
  // everything else. Stage three then runs on each run; a run of numbers is never split by it.
  size_t p = 0;
  while (p < n) {
    size_t q = p + len[p];
    if (cls[p] & unicode::kNumber) {
      int k = 1;
      while (q < n && (cls[q] & unicode::kNumber)) {
        if (k == 3) {
          emit(p, q);
          p = q;
          k = 0;
        }
        q += len[q];
        ++k;
      }
      emit(p, q);
    } else {
      const uint8_t kind = cls[p] & unicode::kCjk;
      while (q < n && !(cls[q] & unicode::kNumber) && (cls[q] & unicode::kCjk) == kind) q += len[q];
      RunMain(dec, p, q, emit);
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
