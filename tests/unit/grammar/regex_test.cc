// Regex front-end: the language of each construct (checked with the reference recognizer),
// search-mode anchoring, and the errors (code and offset) for what the dialect rejects.
// regex_pcre2_test.cc compares whole languages against PCRE2.
#include <gtest/gtest.h>

#include <string>

#include "ladle/grammar/grammar.h"
#include "reference_recognizer.h"

namespace ladle::grammar {
namespace {

ReferenceRecognizer Compile(std::string_view pattern, bool search = false) {
  auto g = RegexGrammar(pattern, RegexOptions{.search = search});
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status().ToString();
  if (!g.ok()) return std::move(ReferenceRecognizer::Create(*RegexGrammar("[]")).value());
  auto r = ReferenceRecognizer::Create(*g);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

bool Full(std::string_view pattern, std::string_view s) { return Compile(pattern).Matches(s); }
bool Search(std::string_view pattern, std::string_view s) { return Compile(pattern, true).Matches(s); }

Status ErrorOf(std::string_view pattern) {
  auto g = RegexGrammar(pattern);
  return g.ok() ? Status::Ok() : g.status();
}

TEST(Regex, LiteralsAndEscapes) {
  EXPECT_TRUE(Full("abc", "abc"));
  EXPECT_FALSE(Full("abc", "abcd"));
  EXPECT_TRUE(Full("a\\.b\\/c\\-d", "a.b/c-d"));
  EXPECT_TRUE(Full("\\n\\t\\r\\f\\v\\0", std::string_view("\n\t\r\f\v\0", 6)));
  EXPECT_TRUE(Full("\\x41\\u00e9\\u{1F600}", "A\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_TRUE(Full("\\uD83D\\uDE00", "\xF0\x9F\x98\x80"));  // surrogate pair escapes
  EXPECT_TRUE(Full("\\cJ", "\n"));
  EXPECT_TRUE(Full("caf\xC3\xA9", "caf\xC3\xA9"));  // UTF-8 in the pattern
  EXPECT_TRUE(Full("a{", "a{"));  // Annex B: not a quantifier
  EXPECT_TRUE(Full("a{1,x}", "a{1,x}"));
  EXPECT_TRUE(Full("}]", "}]"));
}

TEST(Regex, DotAndClassEscapes) {
  EXPECT_TRUE(Full(".", "\xE2\x82\xAC"));  // one code point, three bytes
  EXPECT_FALSE(Full(".", "\n"));
  EXPECT_FALSE(Full(".", "\r"));
  EXPECT_FALSE(Full(".", "\xE2\x80\xA8"));  // U+2028
  EXPECT_FALSE(Full(".", "ab"));
  EXPECT_TRUE(Full("\\d+", "0123456789"));
  EXPECT_FALSE(Full("\\d", "\xD9\xA3"));  // Arabic-Indic digit: \d is ASCII only
  EXPECT_TRUE(Full("\\w+", "az_AZ09"));
  EXPECT_FALSE(Full("\\w", "\xC3\xA9"));
  EXPECT_TRUE(Full("\\s+", " \t\n\v\f\r\xC2\xA0\xE3\x80\x80\xEF\xBB\xBF"));
  EXPECT_FALSE(Full("\\s", "\xC2\x85"));  // NEL is not ECMAScript whitespace
  EXPECT_TRUE(Full("\\S\\D\\W", "xa-"));
  EXPECT_FALSE(Full("\\S", " "));
}

TEST(Regex, Classes) {
  EXPECT_TRUE(Full("[a-c_]+", "abc_cba"));
  EXPECT_FALSE(Full("[a-c]", "d"));
  EXPECT_TRUE(Full("[^a-c]", "\xE4\xB8\xAD"));
  EXPECT_FALSE(Full("[^a-c]", "b"));
  EXPECT_TRUE(Full("[\\d.]+", "1.5"));
  EXPECT_TRUE(Full("[\\w-.]+", "a-b.c"));  // Annex B: '-' after a class escape is literal
  EXPECT_TRUE(Full("[-a]+", "-a"));
  EXPECT_TRUE(Full("[a-]+", "-a"));
  EXPECT_TRUE(Full("[\\]\\\\]+", "]\\"));
  EXPECT_TRUE(Full("[\\b]", "\b"));
  EXPECT_TRUE(Full("[^\\s]+", "ab"));
  EXPECT_FALSE(Full("[^\\s]", " "));
  EXPECT_TRUE(Full("[\\S\\s]", "\n"));
  EXPECT_FALSE(Full("[]", ""));  // the empty class matches nothing
  EXPECT_FALSE(Full("[]", "a"));
  EXPECT_TRUE(Full("[^]", "\n"));
  EXPECT_TRUE(Full("[\\u0400-\\u04FF]+", "\xD0\x96\xD0\xB8"));
  EXPECT_TRUE(Full("[\xF0\x9F\x98\x80-\xF0\x9F\x98\x8F]", "\xF0\x9F\x98\x85"));
}

TEST(Regex, Quantifiers) {
  EXPECT_TRUE(Full("a*", ""));
  EXPECT_TRUE(Full("a+?b??", "aaa"));
  EXPECT_TRUE(Full("(ab){2}", "abab"));
  EXPECT_FALSE(Full("(ab){2}", "ababab"));
  EXPECT_TRUE(Full("a{2,}", "aaaaa"));
  EXPECT_FALSE(Full("a{2,}", "a"));
  EXPECT_TRUE(Full("a{1,3}?b", "aaab"));
  EXPECT_FALSE(Full("a{1,3}b", "aaaab"));
  EXPECT_TRUE(Full("abc+", "abccc"));  // the quantifier binds to the last character only
  EXPECT_FALSE(Full("abc+", "abcabc"));
  EXPECT_TRUE(Full("\\d{0}x", "x"));
}

TEST(Regex, GroupsAndAlternation) {
  EXPECT_TRUE(Full("(a|bc)+", "abca"));
  EXPECT_TRUE(Full("(?:x|y)z", "yz"));
  EXPECT_TRUE(Full("(?<year>\\d{4})-(?<m>\\d\\d)", "2024-05"));
  EXPECT_TRUE(Full("a||b", ""));
  EXPECT_TRUE(Full("()", ""));
  EXPECT_TRUE(Full("a|", ""));
}

TEST(Regex, AnchorsInFullMatchMode) {
  EXPECT_TRUE(Full("^abc$", "abc"));
  EXPECT_TRUE(Full("^a|b$", "b"));
  EXPECT_TRUE(Full("^$", ""));
}

TEST(Regex, SearchModeRespectsAnchors) {
  EXPECT_TRUE(Search("abc", "xxabcxx"));
  EXPECT_TRUE(Search("abc", "abc"));
  EXPECT_FALSE(Search("abc", "ab"));
  EXPECT_TRUE(Search("^abc", "abcxx"));
  EXPECT_FALSE(Search("^abc", "xabc"));
  EXPECT_TRUE(Search("abc$", "xxabc"));
  EXPECT_FALSE(Search("abc$", "abcx"));
  EXPECT_FALSE(Search("abc$", "abc\n"));  // no "before a final newline" rule
  EXPECT_TRUE(Search("^a$|b", "xbx"));
  EXPECT_FALSE(Search("^a$|b", "xax"));
  EXPECT_TRUE(Search("x", "line\nx\nline"));  // the padding crosses newlines
  EXPECT_TRUE(Search("", "anything"));
}

TEST(Regex, AnchorsInsideGroupsAtTheEdges) {
  // Real schema patterns: "(^...$)", "(^a|^b|c)", "^(x|$)".
  EXPECT_TRUE(Search("(^[0-9]+\\.[0-9]+$)", "1.5"));
  EXPECT_FALSE(Search("(^[0-9]+\\.[0-9]+$)", "v1.5"));
  EXPECT_TRUE(Search("(^Hpt_|^Int_|_Armour_)", "Hpt_x"));
  EXPECT_TRUE(Search("(^Hpt_|^Int_|_Armour_)", "x_Armour_y"));
  EXPECT_FALSE(Search("(^Hpt_|^Int_|_Armour_)", "xHpt_"));
  EXPECT_TRUE(Search("^([^,]|$)", ""));
  EXPECT_TRUE(Search("^([^,]|$)", "ab,"));
  EXPECT_FALSE(Search("^([^,]|$)", ",a"));
  EXPECT_TRUE(Search("(^x|y$)", "xzz"));
  EXPECT_TRUE(Search("(^x|y$)", "zzy"));
  EXPECT_FALSE(Search("(^x|y$)", "zxyz"));
  EXPECT_TRUE(Search("(?:(^a))b", "abx"));
  EXPECT_FALSE(Search("(?:(^a))b", "xab"));
  EXPECT_TRUE(Full("(^a|b)(c|d$)", "bd"));
}

TEST(Regex, UnicodeProperties) {
  EXPECT_TRUE(Full("\\p{L}+", "abc\xC3\xA9\xE4\xB8\xAD"));
  EXPECT_FALSE(Full("\\p{L}", "1"));
  EXPECT_TRUE(Full("\\p{Lu}\\p{Ll}", "Ab"));
  EXPECT_TRUE(Full("\\P{L}", "1"));
  EXPECT_TRUE(Full("[\\p{N}\\p{Zs}]+", "1 \xD9\xA3"));
  EXPECT_TRUE(Full("\\p{General_Category=Decimal_Number}", "7"));
  EXPECT_EQ(ErrorOf("\\p{Script=Greek}").code(), StatusCode::kUnsupported);
}

TEST(Regex, UnsupportedConstructsNameTheOffset) {
  struct Case {
    const char* pattern;
    StatusCode code;
    const char* offset;
  };
  const Case cases[] = {
      {"ab(?=c)", StatusCode::kUnsupported, "offset 2"},
      {"a(?!c)", StatusCode::kUnsupported, "offset 1"},
      {"(?<=a)b", StatusCode::kUnsupported, "offset 0"},
      {"(?<!a)b", StatusCode::kUnsupported, "offset 0"},
      {"(a)\\1", StatusCode::kUnsupported, "offset 3"},
      {"(?<n>a)\\k<n>", StatusCode::kUnsupported, "offset 7"},
      {"a\\bc", StatusCode::kUnsupported, "offset 1"},
      {"\\B", StatusCode::kUnsupported, "offset 0"},
      {"a^b", StatusCode::kUnsupported, "offset 1"},
      {"(^a)*", StatusCode::kUnsupported, "offset 1"},
      {"a(^b)", StatusCode::kUnsupported, "offset 2"},
      {"(a$)b", StatusCode::kUnsupported, "offset 2"},
      {"^$a", StatusCode::kUnsupported, "offset 1"},
      {"a$b", StatusCode::kUnsupported, "offset 1"},
      {"(a|(b$))c", StatusCode::kUnsupported, "offset 5"},
      {"(?i)a", StatusCode::kUnsupported, "offset 0"},
      {"\\q", StatusCode::kUnsupported, "offset 0"},
      {"\\Z", StatusCode::kUnsupported, "offset 0"},
      {"\\012", StatusCode::kUnsupported, "offset 0"},
      {"\\uD800", StatusCode::kUnsupported, "offset 0"},
      {"a{10001}", StatusCode::kResourceExhausted, "offset 1"},
      {"a{2,99999999999}", StatusCode::kResourceExhausted, "offset 1"},
      {"*a", StatusCode::kParseError, "offset 0"},
      {"a**", StatusCode::kParseError, "offset 2"},
      {"a|+", StatusCode::kParseError, "offset 2"},
      {"a{3,2}", StatusCode::kParseError, "offset 1"},
      {"(ab", StatusCode::kParseError, "offset 0"},
      {"ab)", StatusCode::kParseError, "offset 2"},
      {"[ab", StatusCode::kParseError, "offset 0"},
      {"[z-a]", StatusCode::kParseError, "offset 2"},
      {"ab\\", StatusCode::kParseError, "offset 2"},
      {"\\x4", StatusCode::kParseError, "offset 0"},
      {"\\u{110000}", StatusCode::kParseError, "offset 0"},
      {"(?<1a>x)", StatusCode::kParseError, "offset 3"},
      {"a\xFF", StatusCode::kParseError, "offset 1"},
  };
  for (const Case& c : cases) {
    Status s = ErrorOf(c.pattern);
    EXPECT_EQ(s.code(), c.code) << c.pattern << " -> " << s.ToString();
    EXPECT_NE(s.message().find(c.offset), std::string::npos) << c.pattern << " -> " << s.ToString();
  }
}

TEST(Regex, NestingDepthIsBounded) {
  std::string ok(200, '(');
  ok += "a" + std::string(200, ')');
  EXPECT_TRUE(Full(ok, "a"));
  std::string deep(100000, '(');
  Status s = ErrorOf(deep);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("offset 256"), std::string::npos) << s.ToString();
}

TEST(Regex, AddRegexComposesIntoALargerGrammar) {
  GrammarBuilder b;
  auto inner = AddRegex(b, "[a-z]+\\d?");
  ASSERT_TRUE(inner.ok()) << inner.status().ToString();
  RuleId root = b.AddRule("root", b.Seq({b.Literal("\""), *inner, b.Literal("\"")}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(ReferenceMatches(*g, std::string_view("\"abc7\"")));
  EXPECT_FALSE(ReferenceMatches(*g, std::string_view("\"7\"")));
}

}  // namespace
}  // namespace ladle::grammar
