// The hand-written scanner against the regexes it replaces: PCRE2 runs the very patterns
// from tokenizer.json, and both must cut every input identically.
#include "pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <memory>

#include "tokenizer_fixture.h"
#include "unicode_classes.h"

namespace ladle::tokenizer {
namespace {

using ::ladle::testing::RandomTrickyText;

PreTokenizer DeepSeek() {
  auto r = PreTokenizer::Create({kDeepSeekDigitPattern, kDeepSeekCjkPattern, kDeepSeekMainPattern});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::vector<std::string> Pieces(const PreTokenizer& pt, std::string_view s) {
  std::vector<Piece> ps;
  pt.Split(s, &ps);
  std::vector<std::string> out;
  for (auto p : ps) out.emplace_back(s.substr(p.begin, p.end - p.begin));
  return out;
}

TEST(PreTokenizer, RecognisesDeepSeekPatterns) {
  EXPECT_TRUE(DeepSeek().fast_path());
  EXPECT_FALSE(DeepSeek().WithRegexOnly().fast_path());
}

TEST(PreTokenizer, HandPickedCases) {
  auto pt = DeepSeek();
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces(pt, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Pieces(pt, "a   b"), (V{"a", "  ", " b"}));          // \s+(?!\S) leaves one space
  EXPECT_EQ(Pieces(pt, "a   "), (V{"a", "   "}));                // at the end it takes all
  EXPECT_EQ(Pieces(pt, "x \n\n y"), (V{"x", " \n\n", " y"}));    // \s*[\r\n]+ to the last newline
  EXPECT_EQ(Pieces(pt, "1234567"), (V{"123", "456", "7"}));      // \p{N}{1,3}
  EXPECT_EQ(Pieces(pt, "ab12cd"), (V{"ab", "12", "cd"}));
  EXPECT_EQ(Pieces(pt, "你好abc"), (V{"你好", "abc"}));           // CJK split
  EXPECT_EQ(Pieces(pt, "カ・カ"), (V{"カ", "・", "カ"}));         // U+30FB is punctuation
  EXPECT_EQ(Pieces(pt, ".hello"), (V{".hello"}));                // ASCII punct + letters
  EXPECT_EQ(Pieces(pt, " !!\n\nx"), (V{" !!\n\n", "x"}));        // " ?[PS]+[\r\n]*"
  EXPECT_EQ(Pieces(pt, "\xE2\x80\x8D" "abc"), (V{"\xE2\x80\x8D" "abc"}));  // Cf prefix joins
  EXPECT_EQ(Pieces(pt, "\xE2\x80\x8D\xE2\x80\x8D"), (V{"\xE2\x80\x8D\xE2\x80\x8D"}));  // unmatched gap
}

TEST(PreTokenizer, ScannerMatchesRegexOnRandomText) {
  auto fast = DeepSeek();
  auto slow = fast.WithRegexOnly();
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s = RandomTrickyText(rng, 1 + iter % 40);
    ASSERT_EQ(Pieces(fast, s), Pieces(slow, s)) << "input: " << s;
  }
}

// The class flags PCRE2 (Unicode 14) gives cp, to skip code points whose category differs
// between its tables and Ladle's Unicode 16 ones (HF's version): there the regex is not the
// oracle, the HF corpus (unicode_sweep.txt) is.
uint8_t Pcre2Class(uint32_t cp) {
  struct Prop {
    uint8_t bit;
    std::unique_ptr<pcre2_code, void (*)(pcre2_code*)> code;
  };
  static const std::vector<Prop> kProps = [] {
    std::vector<Prop> v;
    const std::pair<uint8_t, const char*> props[] = {
        {unicode::kLetter, "^\\p{L}$"}, {unicode::kMark, "^\\p{M}$"}, {unicode::kNumber, "^\\p{N}$"},
        {unicode::kPunct, "^\\p{P}$"},  {unicode::kSymbol, "^\\p{S}$"}, {unicode::kSpace, "^\\s$"}};
    for (auto [bit, pat] : props) {
      int err;
      PCRE2_SIZE off;
      v.push_back(Prop{bit, {pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat), PCRE2_ZERO_TERMINATED,
                                           PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr),
                             pcre2_code_free}});
    }
    return v;
  }();
  std::string s;
  ::ladle::testing::AppendUtf8(&s, cp);
  uint8_t flags = 0;
  for (const auto& [bit, code] : kProps) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code.get(), nullptr);
    if (pcre2_match(code.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) >= 0) flags |= bit;
    pcre2_match_data_free(md);
  }
  return flags;
}

TEST(PreTokenizer, ScannerMatchesRegexOnEveryCodePoint) {
  // Each scalar value between context characters, exercising its class in every rule.
  auto fast = DeepSeek();
  auto slow = fast.WithRegexOnly();
  std::string s;
  size_t checked = 0, skipped = 0;
  const uint8_t kCompared = unicode::kLetter | unicode::kMark | unicode::kNumber | unicode::kPunct |
                            unicode::kSymbol | unicode::kSpace;
  // Every code point in Release; every 8th under the sanitizers (ladle::testing::kSanitized).
  const uint32_t stride = ::ladle::testing::kSanitized ? 8 : 1;
  for (uint32_t cp = 1; cp <= 0x10FFFF; cp += stride) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if ((unicode::ClassOf(cp) & kCompared) != Pcre2Class(cp)) {
      ++skipped;  // Unicode 15/16 additions, and NEL (White_Space, but not PCRE2's \s)
      continue;
    }
    for (const char* ctx : {"a", " ", "\n", "1", ".", "\xE4\xB8\xAD"}) {
      s.clear();
      s += ctx;
      ::ladle::testing::AppendUtf8(&s, cp);
      s += "b ";
      ::ladle::testing::AppendUtf8(&s, cp);
      s += ctx;
      ASSERT_EQ(Pieces(fast, s), Pieces(slow, s)) << "code point U+" << std::hex << cp;
      ++checked;
    }
  }
  EXPECT_GT(checked, 6u * 1000000 / stride);
  EXPECT_LT(skipped, 12000u) << "more than the Unicode 15/16 additions differ";
  std::printf("[ unicode ] %zu code points differ between PCRE2 (Unicode 14) and Ladle (16)\n", skipped);
}

// The generated Unicode 16 tables against utf8proc (Unicode 15): every code point utf8proc
// knows must get the same class, so only characters new in 16.0 may differ.
TEST(UnicodeTables, AgreeWithUtf8procOnItsAssignedCodePoints) {
  size_t differ = 0, assigned = 0;
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (cat == UTF8PROC_CATEGORY_CN) continue;
    ++assigned;
    uint8_t want = 0;
    switch (cat) {
      case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
      case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: want = unicode::kLetter; break;
      case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: want = unicode::kMark; break;
      case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: want = unicode::kNumber; break;
      case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
      case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO: want = unicode::kPunct; break;
      case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
      case UTF8PROC_CATEGORY_SO: want = unicode::kSymbol; break;
      default: break;
    }
    const uint8_t got = unicode::ClassOf(cp) & (unicode::kLetter | unicode::kMark | unicode::kNumber |
                                                unicode::kPunct | unicode::kSymbol);
    if (got != want) {
      ++differ;
      ADD_FAILURE() << "U+" << std::hex << cp << " utf8proc class " << int(want) << " tables " << int(got);
      if (differ > 20) break;
    }
  }
  EXPECT_GT(assigned, 280000u);
  EXPECT_EQ(differ, 0u);
}

TEST(PreTokenizer, InvalidUtf8NeverCrashesAndCoversInput) {
  auto pt = DeepSeek();
  std::mt19937 rng(7);
  for (int iter = 0; iter < 5000; ++iter) {
    std::string s(1 + iter % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    std::vector<Piece> ps;
    pt.Split(s, &ps);
    uint32_t pos = 0;
    for (auto p : ps) {
      ASSERT_EQ(p.begin, pos);
      ASSERT_GT(p.end, p.begin);
      pos = p.end;
    }
    ASSERT_EQ(pos, s.size());
  }
}

TEST(PreTokenizer, CustomRegexFallsBackToPcre2) {
  auto r = PreTokenizer::Create({"\\s+|\\w+"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->fast_path());
  EXPECT_EQ(Pieces(*r, "ab  cd!"), (std::vector<std::string>{"ab", "  ", "cd", "!"}));
  auto bad = PreTokenizer::Create({"(unclosed"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace ladle::tokenizer
