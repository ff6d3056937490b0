// Mask caches: lazy and eager caches give the same masks, compiles are deterministic, many
// matchers on one CompiledGrammar in threads see identical masks, and identical
// sub-automata share one process-wide cache entry across grammars.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "ladle/grammar/matcher.h"
#include "ladle/tokenizer/tokenizer.h"
#include "mask_cache.h"
#include "matcher_test_util.h"
#include "test_data.h"

namespace ladle::grammar {
namespace {

// The masks along a fixed walk (the first allowed token after a seeded shuffle each step).
std::vector<std::vector<uint64_t>> Walk(const std::shared_ptr<const CompiledGrammar>& cg, uint32_t seed,
                                        int steps) {
  const size_t n = cg->vocab().vocab_size();
  std::mt19937 rng(seed);
  GrammarMatcher m(cg);
  std::vector<std::vector<uint64_t>> out;
  for (int s = 0; s < steps && !m.IsTerminated(); ++s) {
    out.push_back(testing::Mask(m, n));
    std::vector<TokenId> allowed;
    for (TokenId id = 0; id < n; ++id) {
      if (testing::Bit(out.back(), id)) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    EXPECT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
  }
  return out;
}

std::shared_ptr<const TokenVocabulary> VocabForThreads() {
  const std::string path = ladle::testing::TokenizerPath();
  if (std::filesystem::exists(path)) {
    auto tok = tokenizer::Tokenizer::FromFile(path);
    if (tok.ok()) {
      auto v = TokenVocabulary::FromTokenizer(*tok, {1});
      if (v.ok()) return *v;
    }
  }
  return testing::SmallVocab();  // the race still exists, just with less to compute
}

TEST(Mask, EagerAndLazyAgree) {
  auto v = testing::SmallVocab();
  CompileOptions eager;
  eager.eager_mask_cache = true;
  auto a = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  auto b = CompiledGrammar::Compile(testing::JsonGrammar(), v, eager);
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint32_t seed = 0; seed < 10; ++seed) EXPECT_EQ(Walk(*a, seed, 40), Walk(*b, seed, 40));
}

TEST(Mask, CompileIsDeterministic) {
  auto v = testing::SmallVocab();
  auto a = CompiledGrammar::Compile(testing::StringHeavyGrammar(), v);
  auto b = CompiledGrammar::Compile(testing::StringHeavyGrammar(), v);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->Serialize(), (*b)->Serialize());
  for (uint32_t seed = 0; seed < 5; ++seed) EXPECT_EQ(Walk(*a, seed, 40), Walk(*b, seed, 40));
}

TEST(Mask, ThreadsShareOneCompiledGrammar) {
  auto v = VocabForThreads();
  // A fresh grammar (its own states) so the threads race on first uses of the caches.
  GrammarBuilder b;
  RuleId item = b.AddRule("item", b.Seq({b.Literal("<"), b.Star(b.CodePoints({{'>', '>'}}, true)), b.Literal(">")}));
  RuleId root = b.AddRule("root", b.Seq({b.Literal("["), b.Ref(item), b.Star(b.Seq({b.Literal(","), b.Ref(item)})),
                                         b.Literal("]")}));
  auto serial_cg = CompiledGrammar::Compile(*b.Build(root), v);
  ASSERT_TRUE(serial_cg.ok());
  std::vector<std::vector<std::vector<uint64_t>>> expect;
  for (uint32_t t = 0; t < 6; ++t) expect.push_back(Walk(*serial_cg, t, 12));
  auto cg = CompiledGrammar::Compile((*serial_cg)->grammar(), v);
  ASSERT_TRUE(cg.ok());
  std::vector<std::vector<std::vector<uint64_t>>> got(6);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 6; ++t) threads.emplace_back([&, t] { got[t] = Walk(*cg, t, 12); });
  for (auto& th : threads) th.join();
  for (uint32_t t = 0; t < 6; ++t) EXPECT_EQ(got[t], expect[t]) << "thread " << t;
}

TEST(Mask, IdenticalSubAutomataShareAcrossGrammars) {
  auto v = testing::SmallVocab();
  auto make = [&](const std::string& key) {
    GrammarBuilder b;
    // Lower-case letters only: a body the string-body slice does not cover (it would not go
    // through the shared table at all).
    RuleId str = b.AddRule("string", b.Seq({b.Literal("\""), b.Star(b.ByteRange('a', 'z')), b.Literal("\"")}));
    RuleId root = b.AddRule("root", b.Seq({b.Literal("{\"" + key + "\": "), b.Ref(str), b.Literal("}")}));
    return *CompiledGrammar::Compile(*b.Build(root), v);
  };
  auto g1 = make("alpha");
  GrammarMatcher m1(g1);
  ASSERT_TRUE(m1.AcceptString("{\"alpha\": \"x"));
  testing::Mask(m1, testing::kVocabSize);
  const auto before = GetSharedMaskCacheStats();
  auto g2 = make("beta");
  GrammarMatcher m2(g2);
  ASSERT_TRUE(m2.AcceptString("{\"beta\": \"x"));
  auto mask2 = testing::Mask(m2, testing::kVocabSize);
  const auto after = GetSharedMaskCacheStats();
  EXPECT_GT(after.hits, before.hits);  // the string body came from g1's entry
  GrammarMatcher m1b(g1);
  ASSERT_TRUE(m1b.AcceptString("{\"alpha\": \"x"));
  EXPECT_EQ(testing::Mask(m1b, testing::kVocabSize), mask2);
}

}  // namespace
}  // namespace ladle::grammar
