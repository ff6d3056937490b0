// Rollback(n) restores exactly the earlier state: masks, CanTerminate, IsTerminated and the
// shortest completion equal what they were before the n tokens.
#include <gtest/gtest.h>

#include <random>

#include "ladle/grammar/matcher.h"
#include "matcher_test_util.h"

namespace ladle::grammar {
namespace {

using testing::Mask;

struct Observed {
  std::vector<uint64_t> mask;
  bool can_end, terminated;
  uint32_t shortest;
  std::string jump;
  bool operator==(const Observed&) const = default;
};

Observed Observe(GrammarMatcher& m) {
  return {Mask(m, testing::kVocabSize), m.CanTerminate(), m.IsTerminated(), m.ShortestCompletionTokens(),
          m.FindJumpForwardString()};
}

std::vector<TokenId> Allowed(const std::vector<uint64_t>& bits) {
  std::vector<TokenId> out;
  for (TokenId id = 0; id < testing::kVocabSize; ++id) {
    if (testing::Bit(bits, id)) out.push_back(id);
  }
  return out;
}

TEST(Rollback, RestoresEveryObservableState) {
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), testing::SmallVocab());
  ASSERT_TRUE(cg.ok());
  std::mt19937 rng(11);
  for (int walk = 0; walk < 20; ++walk) {
    GrammarMatcher m(*cg, MatcherOptions{.max_rollback = 6});
    std::vector<Observed> seen{Observe(m)};
    uint32_t undoable = 0;  // the matcher keeps the last max_rollback states
    for (int step = 0; step < 40; ++step) {
      auto allowed = Allowed(seen.back().mask);
      if (allowed.empty()) break;
      ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
      seen.push_back(Observe(m));
      undoable = std::min(undoable + 1, 6u);
      if (rng() % 3 == 0) {
        uint32_t n = 1 + rng() % undoable;
        undoable -= n;
        ASSERT_TRUE(m.Rollback(n).ok());
        seen.resize(seen.size() - n);
        ASSERT_EQ(Observe(m), seen.back()) << "walk " << walk << " step " << step << " n " << n;
      }
    }
  }
}

TEST(Rollback, RejectsMoreThanHistory) {
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), testing::SmallVocab());
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg, MatcherOptions{.max_rollback = 2});
  EXPECT_EQ(m.Rollback(1).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(m.AcceptToken(8));   // [
  ASSERT_TRUE(m.AcceptToken(16));  // 1
  ASSERT_TRUE(m.AcceptToken(11));  // ,
  EXPECT_EQ(m.Rollback(3).code(), StatusCode::kOutOfRange);  // only 2 kept
  EXPECT_TRUE(m.Rollback(0).ok());
  EXPECT_TRUE(m.Rollback(2).ok());
  EXPECT_TRUE(m.AcceptToken(9));  // ] right after [
}

TEST(Rollback, UndoesTermination) {
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), testing::SmallVocab());
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  ASSERT_TRUE(m.AcceptToken(16));  // 1
  Observed before = Observe(m);
  ASSERT_TRUE(m.AcceptToken(testing::kEos));
  EXPECT_TRUE(m.IsTerminated());
  ASSERT_TRUE(m.Rollback(1).ok());
  EXPECT_FALSE(m.IsTerminated());
  EXPECT_EQ(Observe(m), before);
  ASSERT_TRUE(m.AcceptToken(15));  // 10
  m.Reset();
  EXPECT_EQ(m.Rollback(1).code(), StatusCode::kOutOfRange);
}

TEST(Rollback, RejectedTokensLeaveNoTrace) {
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), testing::SmallVocab());
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  ASSERT_TRUE(m.AcceptToken(6));  // {
  Observed before = Observe(m);
  EXPECT_FALSE(m.AcceptToken(7 + 100));
  EXPECT_FALSE(m.AcceptToken(16));  // a number cannot be a key
  EXPECT_FALSE(m.AcceptToken(testing::kEos));
  EXPECT_EQ(Observe(m), before);
  ASSERT_TRUE(m.Rollback(1).ok());  // undoes "{", not the rejected ones
  EXPECT_FALSE(m.Rollback(1).ok());
}

// A stack deep enough to pass the arena's compaction threshold (2^20 nodes): the live stacks
// and the rollback history survive compaction unchanged.
TEST(Rollback, SurvivesArenaCompaction) {
  GrammarBuilder b;
  RuleId r = b.DeclareRule("root");
  b.DefineRule(r, b.Alt({b.Seq({b.Literal("("), b.Ref(r), b.Literal(")")}), b.Literal("x")}));
  auto cg = CompiledGrammar::Compile(*b.Build(r), testing::SmallVocab());
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  const size_t depth = 400000;
  for (size_t i = 0; i < depth; ++i) ASSERT_TRUE(m.AcceptToken(4));  // "("
  Observed open = Observe(m);
  ASSERT_TRUE(m.AcceptToken(3));  // "x"
  ASSERT_TRUE(m.AcceptToken(5));  // ")"
  ASSERT_TRUE(m.Rollback(2).ok());
  EXPECT_EQ(Observe(m), open);
  EXPECT_EQ(m.ShortestCompletionTokens(), depth + 1);
  ASSERT_TRUE(m.AcceptToken(3));
  ASSERT_TRUE(m.AcceptString(std::string(depth - 1, ')')));
  EXPECT_FALSE(m.CanTerminate());
  ASSERT_TRUE(m.AcceptToken(5));
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_FALSE(m.AcceptToken(5));
}

}  // namespace
}  // namespace ladle::grammar
