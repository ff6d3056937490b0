// GrammarBuilder: normalisation of code-point classes and the structural simplifications the
// front-ends rely on (empty/nothing absorption, flattening), and Build()'s validation.
#include <gtest/gtest.h>

#include "ladle/grammar/grammar.h"

namespace ladle::grammar {
namespace {

TEST(GrammarBuilder, CodePointsDropSurrogatesAndMerge) {
  GrammarBuilder b;
  ExprId e = b.CodePoints({{0xD000, 0xE100}, {0x41, 0x5A}, {0x5B, 0x60}});
  const Expr& x = b.expr(e);
  ASSERT_EQ(x.kind, ExprKind::kCodePoints);
  ASSERT_EQ(x.ranges.size(), 3u);
  EXPECT_EQ(x.ranges[0].lo, 0x41u);
  EXPECT_EQ(x.ranges[0].hi, 0x60u);
  EXPECT_EQ(x.ranges[1].lo, 0xD000u);
  EXPECT_EQ(x.ranges[1].hi, 0xD7FFu);
  EXPECT_EQ(x.ranges[2].lo, 0xE000u);
  EXPECT_EQ(x.ranges[2].hi, 0xE100u);
}

TEST(GrammarBuilder, NegatedClassIsTheComplementOfScalarValues) {
  GrammarBuilder b;
  const Expr& x = b.expr(b.CodePoints({{0, 0x7F}}, /*negate=*/true));
  ASSERT_EQ(x.ranges.size(), 2u);
  EXPECT_EQ(x.ranges[0].lo, 0x80u);
  EXPECT_EQ(x.ranges[0].hi, 0xD7FFu);
  EXPECT_EQ(x.ranges[1].lo, 0xE000u);
  EXPECT_EQ(x.ranges[1].hi, 0x10FFFFu);
  EXPECT_EQ(b.expr(b.CodePoints({{0, 0x10FFFF}}, true)).kind, ExprKind::kNothing);
}

TEST(GrammarBuilder, SeqAndAltSimplify) {
  GrammarBuilder b;
  ExprId a = b.Literal("a");
  ExprId c = b.Literal("c");
  EXPECT_EQ(b.Seq({b.Empty(), a, b.Empty()}), a);
  EXPECT_EQ(b.expr(b.Seq({a, b.Nothing()})).kind, ExprKind::kNothing);
  EXPECT_EQ(b.Alt({b.Nothing(), c}), c);
  ExprId nested = b.Seq({a, b.Seq({c, a})});
  EXPECT_EQ(b.expr(nested).children.size(), 3u);
  EXPECT_EQ(b.expr(b.Repeat(a, 3, 1)).kind, ExprKind::kNothing);
  EXPECT_EQ(b.expr(b.Repeat(a, 0, 0)).kind, ExprKind::kEmpty);
  EXPECT_EQ(b.Repeat(a, 1, 1), a);
}

TEST(GrammarBuilder, BuildRejectsUndefinedRules) {
  GrammarBuilder b;
  RuleId root = b.DeclareRule("root");
  RuleId item = b.DeclareRule("item");
  b.DefineRule(root, b.Star(b.Ref(item)));
  auto bad = b.Build(root);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("item"), std::string::npos);
}

TEST(GrammarBuilder, ToStringPrintsRootFirst) {
  GrammarBuilder b;
  RuleId item = b.AddRule("item", b.Alt({b.Literal("x\n"), b.ByteRange('0', '9')}));
  RuleId root = b.AddRule("root", b.Seq({b.Literal("["), b.Star(b.Ref(item)), b.SpecialToken(128825)}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->ToString(),
            "root ::= (\"[\" item{0,} <[128825]>)\n"
            "item ::= (\"x\\n\" | <bytes 30-39>)\n");
}

}  // namespace
}  // namespace ladle::grammar
