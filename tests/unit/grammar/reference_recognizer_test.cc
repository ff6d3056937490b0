// The reference recognizer is the oracle for every other grammar test, so it is tested against
// hand-checked languages: counted and unbounded repeats, nullable nesting, recursion (left
// recursion included), UTF-8 decoding of code-point classes, special tokens, and prefixes.
#include "reference_recognizer.h"

#include <gtest/gtest.h>

#include <string>

namespace ladle::grammar {
namespace {

Grammar BuildOrDie(GrammarBuilder& b, RuleId root) {
  auto g = b.Build(root);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

ReferenceRecognizer Rec(const Grammar& g) {
  auto r = ReferenceRecognizer::Create(g);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

TEST(ReferenceRecognizer, LiteralsAltsAndSeqs) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Seq({b.Literal("ab"), b.Alt({b.Literal("c"), b.Literal("de")}), b.ByteRange('0', '9')}));
  auto r = Rec(BuildOrDie(b, root));
  EXPECT_TRUE(r.Matches("abc7"));
  EXPECT_TRUE(r.Matches("abde0"));
  EXPECT_FALSE(r.Matches("abd0"));
  EXPECT_FALSE(r.Matches("abc"));
  EXPECT_FALSE(r.Matches("abc77"));
  EXPECT_FALSE(r.Matches(""));
  EXPECT_TRUE(r.IsPrefix(""));
  EXPECT_TRUE(r.IsPrefix("abd"));
  EXPECT_TRUE(r.IsPrefix("abc7"));
  EXPECT_FALSE(r.IsPrefix("abx"));
  EXPECT_FALSE(r.IsPrefix("abc77"));
}

TEST(ReferenceRecognizer, CountedRepeats) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Seq({b.Repeat(b.Literal("ab"), 2, 4), b.Literal(";")}));
  auto r = Rec(BuildOrDie(b, root));
  EXPECT_FALSE(r.Matches("ab;"));
  EXPECT_TRUE(r.Matches("abab;"));
  EXPECT_TRUE(r.Matches("ababab;"));
  EXPECT_TRUE(r.Matches("abababab;"));
  EXPECT_FALSE(r.Matches("ababababab;"));
  EXPECT_FALSE(r.IsPrefix("ababababa"));
  EXPECT_TRUE(r.IsPrefix("abababa"));
}

TEST(ReferenceRecognizer, UnboundedRepeatsAndNullableNesting) {
  GrammarBuilder b;
  // ((a*)*){2,} b? — every inner piece is nullable; a naive Earley loses completions here.
  ExprId a = b.Literal("a");
  ExprId inner = b.Star(b.Star(a));
  RuleId root = b.AddRule("root", b.Seq({b.Repeat(inner, 2, kUnbounded), b.Optional(b.Literal("b"))}));
  auto r = Rec(BuildOrDie(b, root));
  EXPECT_TRUE(r.Matches(""));
  EXPECT_TRUE(r.Matches("b"));
  EXPECT_TRUE(r.Matches(std::string(50, 'a') + "b"));
  EXPECT_FALSE(r.Matches("ba"));
  EXPECT_FALSE(r.Matches("bb"));
}

TEST(ReferenceRecognizer, RecursionIncludingLeftRecursion) {
  {
    // parens ::= "(" parens* ")"
    GrammarBuilder b;
    RuleId p = b.DeclareRule("root");
    b.DefineRule(p, b.Seq({b.Literal("("), b.Star(b.Ref(p)), b.Literal(")")}));
    auto r = Rec(BuildOrDie(b, p));
    EXPECT_TRUE(r.Matches("()"));
    EXPECT_TRUE(r.Matches("(()(()))"));
    EXPECT_FALSE(r.Matches("(()"));
    EXPECT_FALSE(r.Matches("())"));
    EXPECT_TRUE(r.IsPrefix("((()"));
    EXPECT_FALSE(r.IsPrefix("())"));
  }
  {
    // expr ::= expr "-" num | num   (left recursive)
    GrammarBuilder b;
    RuleId e = b.DeclareRule("root");
    ExprId num = b.Plus(b.ByteRange('0', '9'));
    b.DefineRule(e, b.Alt({b.Seq({b.Ref(e), b.Literal("-"), num}), num}));
    auto r = Rec(BuildOrDie(b, e));
    EXPECT_TRUE(r.Matches("1-22-333"));
    EXPECT_FALSE(r.Matches("1--2"));
    EXPECT_FALSE(r.Matches("-1"));
  }
}

TEST(ReferenceRecognizer, UnproductiveRulesAreNeverPrefixes) {
  // loop ::= "x" loop  derives no finite string, so "x" is not a viable prefix.
  GrammarBuilder b;
  RuleId loop = b.DeclareRule("loop");
  b.DefineRule(loop, b.Seq({b.Literal("x"), b.Ref(loop)}));
  RuleId root = b.AddRule("root", b.Alt({b.Literal("y"), b.Ref(loop)}));
  auto r = Rec(BuildOrDie(b, root));
  EXPECT_TRUE(r.Matches("y"));
  EXPECT_FALSE(r.IsPrefix("x"));
  EXPECT_TRUE(r.IsPrefix(""));

  GrammarBuilder n;
  RuleId nothing = n.AddRule("root", n.Nothing());
  auto rn = Rec(BuildOrDie(n, nothing));
  EXPECT_FALSE(rn.Matches(""));
  EXPECT_FALSE(rn.IsPrefix(""));
}

TEST(ReferenceRecognizer, CodePointsDecodeUtf8) {
  GrammarBuilder b;
  // Greek lower case and CJK ideographs, or any astral code point.
  ExprId cls = b.CodePoints({{0x3B1, 0x3C9}, {0x4E00, 0x9FFF}, {0x10000, 0x10FFFF}});
  RuleId root = b.AddRule("root", b.Plus(cls));
  auto r = Rec(BuildOrDie(b, root));
  EXPECT_TRUE(r.Matches("\xCE\xB1\xCF\x89"));          // αω
  EXPECT_TRUE(r.Matches("\xE4\xB8\xAD\xF0\x9F\x98\x80"));  // 中😀
  EXPECT_FALSE(r.Matches("a"));
  EXPECT_FALSE(r.Matches("\xCE\x91"));  // Α (upper case)
  EXPECT_FALSE(r.Matches("\xCE"));      // truncated
  EXPECT_FALSE(r.Matches("\xC0\xB1"));  // overlong
  EXPECT_FALSE(r.Matches("\xED\xA0\x80"));  // encoded surrogate
  EXPECT_FALSE(r.Matches("\xF4\x90\x80\x80"));  // past U+10FFFF
  // Prefixes that end inside a sequence.
  EXPECT_TRUE(r.IsPrefix("\xCE"));        // CE B1..BF are α..ο
  EXPECT_TRUE(r.IsPrefix("\xE4\xB8"));
  EXPECT_TRUE(r.IsPrefix("\xF0"));
  EXPECT_FALSE(r.IsPrefix("\xE0"));       // U+0800..0FFF: none in the class
  EXPECT_FALSE(r.IsPrefix("\xCE\xB1\xC0"));
  EXPECT_FALSE(r.IsPrefix("\xED\xA0"));   // would be a surrogate

  GrammarBuilder any;
  RuleId aroot = any.AddRule("root", any.Star(any.AnyCodePoint()));
  auto ra = Rec(BuildOrDie(any, aroot));
  EXPECT_TRUE(ra.Matches("plain \xE2\x80\xA8 text \x7F"));
  EXPECT_FALSE(ra.Matches("bad \xFF"));
  EXPECT_TRUE(ra.IsPrefix("ok \xEF\xBF"));
}

TEST(ReferenceRecognizer, SpecialTokensAreNotBytes) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Seq({b.Literal("<"), b.SpecialToken(128825), b.Star(b.ByteRange(0, 255))}));
  auto r = Rec(BuildOrDie(b, root));
  std::vector<Symbol> ok{ByteSymbol('<'), SpecialSymbol(128825), ByteSymbol('x')};
  EXPECT_TRUE(r.Matches(ok));
  std::vector<Symbol> wrong_id{ByteSymbol('<'), SpecialSymbol(128826)};
  EXPECT_FALSE(r.Matches(wrong_id));
  // A special token never matches a byte class, even [\x00-\xFF]*.
  std::vector<Symbol> trailing{ByteSymbol('<'), SpecialSymbol(128825), SpecialSymbol(128825)};
  EXPECT_FALSE(r.Matches(trailing));
  EXPECT_FALSE(r.Matches("<x"));
  EXPECT_TRUE(r.IsPrefix("<"));
}

TEST(ReferenceRecognizer, CopesWithKilobyteInputs) {
  // A JSON-ish list of quoted strings, 8 KB long.
  GrammarBuilder b;
  ExprId str = b.Seq({b.Literal("\""), b.Star(b.CodePoints({{'"', '"'}, {'\\', '\\'}}, true)), b.Literal("\"")});
  RuleId root = b.AddRule("root", b.Seq({b.Literal("["), b.Optional(b.Seq({str, b.Star(b.Seq({b.Literal(","), str}))})), b.Literal("]")}));
  auto r = Rec(BuildOrDie(b, root));
  std::string input = "[";
  while (input.size() < 8000) input += "\"h\xC3\xA9llo w\xE4\xB8\xADrld\",";
  input += "\"end\"]";
  EXPECT_TRUE(r.Matches(input));
  input += "\"";
  EXPECT_FALSE(r.Matches(input));
}

TEST(ReferenceRecognizer, HugeRepeatsAreResourceExhausted) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Repeat(b.Literal("a"), 0, 1u << 30));
  auto g = BuildOrDie(b, root);
  auto r = ReferenceRecognizer::Create(g, /*max_symbols=*/1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  Status err;
  EXPECT_FALSE(ReferenceMatches(g, std::string_view("a"), &err));
  EXPECT_EQ(err.code(), StatusCode::kResourceExhausted);
}

TEST(ReferenceRecognizer, OneShotHelpers) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Literal("hi"));
  auto g = BuildOrDie(b, root);
  Status err;
  EXPECT_TRUE(ReferenceMatches(g, std::string_view("hi"), &err));
  EXPECT_TRUE(err.ok());
  EXPECT_TRUE(ReferenceIsPrefix(g, std::string_view("h")));
  EXPECT_FALSE(ReferenceIsPrefix(g, BytesToSymbols("x")));
}

TEST(ReferenceRecognizer, RandomSentencesAreSentences) {
  GrammarBuilder b;
  // value ::= "[" (value ("," value)*)? "]" | digit+ | <[7]> ; loop ::= loop | ""  (a cycle
  // that consumes nothing); dead ::= "x" dead (no finite sentence).
  RuleId value = b.DeclareRule("value");
  RuleId loop = b.DeclareRule("loop");
  b.DefineRule(loop, b.Alt({b.Ref(loop), b.Empty()}));
  RuleId dead = b.DeclareRule("dead");
  b.DefineRule(dead, b.Seq({b.Literal("x"), b.Ref(dead)}));
  ExprId list = b.Seq({b.Literal("["), b.Optional(b.Seq({b.Ref(value), b.Star(b.Seq({b.Literal(","), b.Ref(value)}))})),
                       b.Literal("]")});
  b.DefineRule(value, b.Alt({list, b.Plus(b.ByteRange('0', '9')), b.SpecialToken(7), b.Ref(dead),
                             b.Seq({b.Ref(loop), b.CodePoints({{0x80, 0x10FFFF}})})}));
  auto g = BuildOrDie(b, value);
  auto r = Rec(g);
  size_t specials = 0, nested = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    auto s = RandomSentence(g, seed);
    ASSERT_TRUE(s.has_value());
    EXPECT_TRUE(r.Matches(*s)) << seed;
    for (Symbol x : *s) specials += x.special;
    nested += s->size() > 2 && (*s)[1] == ByteSymbol('[');
  }
  EXPECT_GT(specials, 0u);
  EXPECT_GT(nested, 0u);

  GrammarBuilder n;
  RuleId d = n.DeclareRule("root");
  n.DefineRule(d, n.Seq({n.Literal("x"), n.Ref(d)}));
  EXPECT_FALSE(RandomSentence(BuildOrDie(n, d), 1).has_value());
}

}  // namespace
}  // namespace ladle::grammar
