// The automaton compiler: bounded repeats expand exactly, compile budgets end in
// kResourceExhausted (never a hang), and Serialize/Deserialize round-trips with identical
// masks and a vocabulary check.
#include <gtest/gtest.h>

#include <random>

#include "ladle/grammar/matcher.h"
#include "matcher_test_util.h"

namespace ladle::grammar {
namespace {

using testing::Mask;

TEST(Automaton, LargeBoundedRepeatIsExact) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Repeat(b.ByteRange('a', 'c'), 2, 1000));
  auto cg = CompiledGrammar::Compile(*b.Build(root), v);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  GrammarMatcher m(*cg);
  EXPECT_FALSE(m.CanTerminate());
  ASSERT_TRUE(m.AcceptString(std::string(999, 'b')));
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_FALSE(m.AcceptToken(21));  // "abc" would make 1002
  EXPECT_FALSE(m.AcceptToken(20));  // "ab" would make 1001
  ASSERT_TRUE(m.AcceptToken(2));    // "c"
  auto bits = Mask(m, testing::kVocabSize);
  EXPECT_EQ(testing::Count(bits), 1u);
  EXPECT_TRUE(testing::Bit(bits, testing::kEos));
  EXPECT_GT((*cg)->MemoryBytes(), 1000u);
}

TEST(Automaton, NestedHugeRepeatExhaustsTheBudget) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  ExprId inner = b.Repeat(b.ByteRange('a', 'z'), 0, 100000);
  RuleId root = b.AddRule("root", b.Repeat(b.Seq({inner, b.Literal(",")}), 0, 100000));
  CompileOptions opts;
  opts.max_memory_bytes = 16 << 20;  // the automaton needs ~300K states: far more than this
  auto cg = CompiledGrammar::Compile(*b.Build(root), v, opts);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kResourceExhausted) << cg.status().ToString();
}

TEST(Automaton, HugeAlternationExhaustsASmallMemoryBudget) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  std::vector<ExprId> alts;
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    for (int k = 0; k < 12; ++k) s.push_back(static_cast<char>('a' + rng() % 26));
    alts.push_back(b.Literal(s));
  }
  RuleId root = b.AddRule("root", b.Alt(alts));
  Grammar g = *b.Build(root);
  CompileOptions opts;
  opts.max_memory_bytes = 16 << 20;
  auto cg = CompiledGrammar::Compile(g, v, opts);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(cg.status().message().find("MiB"), std::string::npos) << cg.status().message();
}

TEST(Automaton, DeadlineIsChecked) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Repeat(b.Repeat(b.AnyCodePoint(), 0, 3000), 0, 3000));
  CompileOptions opts;
  opts.max_compile_ms = 1;
  opts.max_memory_bytes = size_t{64} << 30;  // only the clock can stop it
  auto cg = CompiledGrammar::Compile(*b.Build(root), v, opts);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(cg.status().message().find("ms"), std::string::npos) << cg.status().message();
}

TEST(Automaton, SerializeRoundTripsWithIdenticalMasks) {
  auto v = testing::SmallVocab();
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  ASSERT_TRUE(cg.ok());
  std::string blob = (*cg)->Serialize();
  auto back = CompiledGrammar::Deserialize(blob, v);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->grammar().ToString(), (*cg)->grammar().ToString());
  EXPECT_EQ((*back)->Serialize(), blob);
  std::mt19937 rng(9);
  for (int walk = 0; walk < 10; ++walk) {
    GrammarMatcher a(*cg), b(*back);
    for (int step = 0; step < 30; ++step) {
      auto ma = Mask(a, testing::kVocabSize), mb = Mask(b, testing::kVocabSize);
      ASSERT_EQ(ma, mb);
      std::vector<TokenId> allowed;
      for (TokenId id = 0; id < testing::kVocabSize; ++id) {
        if (testing::Bit(ma, id)) allowed.push_back(id);
      }
      if (allowed.empty() || a.IsTerminated()) break;
      TokenId pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(a.AcceptToken(pick));
      ASSERT_TRUE(b.AcceptToken(pick));
    }
  }
}

TEST(Automaton, DeserializeChecksTheVocabulary) {
  auto v = testing::SmallVocab();
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  ASSERT_TRUE(cg.ok());
  auto other = TokenVocabulary::FromTokens({"a", "b"}, {}, {}, 2);
  ASSERT_TRUE(other.ok());
  auto back = CompiledGrammar::Deserialize((*cg)->Serialize(), *other);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kFailedPrecondition);
}

TEST(Automaton, DeserializeRejectsCorruptBlobs) {
  auto v = testing::SmallVocab();
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  ASSERT_TRUE(cg.ok());
  const std::string blob = (*cg)->Serialize();
  for (size_t cut = 0; cut < blob.size(); cut += 7) {
    EXPECT_FALSE(CompiledGrammar::Deserialize(blob.substr(0, cut), v).ok()) << cut;
  }
  // Flipped bytes past the header either fail validation or still give a usable grammar;
  // they must never crash (run under ASan in CI).
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    std::string bad = blob;
    bad[16 + rng() % (bad.size() - 16)] ^= static_cast<char>(1 + rng() % 255);
    auto r = CompiledGrammar::Deserialize(bad, v);
    if (r.ok()) {
      GrammarMatcher m(*r);
      auto bits = Mask(m, testing::kVocabSize);
      (void)bits;
    }
  }
}

}  // namespace
}  // namespace ladle::grammar
