// FindJumpForwardString: the longest byte string every continuation starts with, stopping
// where more than one byte is possible, where the grammar may end, before a special token,
// and never inside a UTF-8 sequence.
#include <gtest/gtest.h>

#include "ladle/grammar/matcher.h"
#include "matcher_test_util.h"

namespace ladle::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> Compile(GrammarBuilder& b, RuleId root) {
  auto g = b.Build(root);
  EXPECT_TRUE(g.ok());
  auto cg = CompiledGrammar::Compile(*g, testing::SmallVocab());
  EXPECT_TRUE(cg.ok()) << cg.status().ToString();
  return *cg;
}

TEST(JumpForward, ForcedPrefixThroughRuleCalls) {
  GrammarBuilder b;
  RuleId str = b.AddRule("string", b.Seq({b.Literal("\""), b.Star(b.ByteRange('a', 'z')), b.Literal("\"")}));
  RuleId root = b.AddRule("root", b.Seq({b.Literal("{\"name\": "), b.Ref(str), b.Literal("}")}));
  GrammarMatcher m(Compile(b, root));
  EXPECT_EQ(m.FindJumpForwardString(), "{\"name\": \"");
  ASSERT_TRUE(m.AcceptString("{\"name\": \"ab"));
  EXPECT_EQ(m.FindJumpForwardString(), "");  // more letters or the closing quote
  ASSERT_TRUE(m.AcceptString("\""));
  EXPECT_EQ(m.FindJumpForwardString(), "}");
  ASSERT_TRUE(m.AcceptString("}"));
  EXPECT_EQ(m.FindJumpForwardString(), "");  // the grammar can (must) end
  EXPECT_TRUE(m.CanTerminate());
}

TEST(JumpForward, DoesNotChangeTheMatcher) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Literal("abc"));
  GrammarMatcher m(Compile(b, root));
  auto before = testing::Mask(m, testing::kVocabSize);
  EXPECT_EQ(m.FindJumpForwardString(), "abc");
  EXPECT_EQ(testing::Mask(m, testing::kVocabSize), before);
  EXPECT_TRUE(m.AcceptString(m.FindJumpForwardString()));
  EXPECT_TRUE(m.CanTerminate());
}

TEST(JumpForward, StopsBeforeAnIncompleteCodePoint) {
  GrammarBuilder b;
  // "ab" then é (C3 A9) or ê (C3 AA): C3 is forced but is not a whole character.
  RuleId root = b.AddRule("root", b.Seq({b.Literal("ab"), b.CodePoints({{0xE9, 0xEA}}), b.Literal("!")}));
  GrammarMatcher m(Compile(b, root));
  EXPECT_EQ(m.FindJumpForwardString(), "ab");
  ASSERT_TRUE(m.AcceptString("ab\xC3\xA9"));
  EXPECT_EQ(m.FindJumpForwardString(), "!");
}

TEST(JumpForward, CompletesACodePointStartedByTheLastToken) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Seq({b.Literal("\xE4\xB8\xAD"), b.Literal("x")}));  // 中x
  GrammarMatcher m(Compile(b, root));
  ASSERT_TRUE(m.AcceptToken(38));  // "\xE4\xB8"
  EXPECT_EQ(m.FindJumpForwardString(), "\xADx");
}

TEST(JumpForward, StopsAtEndAndSpecialTokens) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Seq({b.Literal("a"), b.SpecialToken(testing::kSpecialA), b.Literal("b"),
                                         b.Optional(b.Literal("cc"))}));
  GrammarMatcher m(Compile(b, root));
  EXPECT_EQ(m.FindJumpForwardString(), "a");
  ASSERT_TRUE(m.AcceptString("a"));
  EXPECT_EQ(m.FindJumpForwardString(), "");  // the special token is next
  ASSERT_TRUE(m.AcceptToken(testing::kSpecialA));
  EXPECT_EQ(m.FindJumpForwardString(), "b");
  ASSERT_TRUE(m.AcceptString("b"));
  EXPECT_EQ(m.FindJumpForwardString(), "");  // may end or continue
}

}  // namespace
}  // namespace ladle::grammar
