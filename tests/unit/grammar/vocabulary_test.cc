// TokenVocabulary: token bytes by id, special/EOS/non-token ids, and the implicit sorted trie
// (lcp, subtree ends, group ends) checked against brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ladle/grammar/matcher.h"
#include "ladle/tokenizer/tokenizer.h"
#include "matcher_test_util.h"
#include "test_data.h"
#include "token_trie.h"

namespace ladle::grammar {
namespace {

void CheckTrie(const TokenVocabulary::Impl& v) {
  const size_t n = v.sorted.size();
  for (size_t i = 0; i < n; ++i) {
    std::string_view t = v.SortedBytes(static_cast<uint32_t>(i));
    ASSERT_EQ(t, v.bytes[v.sorted[i]]);
    ASSERT_EQ(v.position[v.sorted[i]], i);
    if (i > 0) {
      std::string_view p = v.SortedBytes(static_cast<uint32_t>(i - 1));
      ASSERT_LE(p, t);
      size_t k = 0;
      while (k < p.size() && k < t.size() && p[k] == t[k]) ++k;
      ASSERT_EQ(v.lcp[i], k);
    }
    size_t e = i + 1;
    while (e < n && v.SortedBytes(static_cast<uint32_t>(e)).starts_with(t)) ++e;
    ASSERT_EQ(v.subtree_end[i], e) << "token " << i;
  }
}

void CheckGroupEnds(const TokenVocabulary::Impl& v, size_t samples, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t n = v.sorted.size();
  for (size_t s = 0; s < samples; ++s) {
    auto i = static_cast<uint32_t>(rng() % n);
    std::string_view t = v.SortedBytes(i);
    size_t len = 1 + rng() % t.size();
    uint32_t e = i + 1;
    while (e < n && v.SortedBytes(e).substr(0, len) == t.substr(0, len)) ++e;
    ASSERT_EQ(v.GroupEnd(i, len), e) << "position " << i << " len " << len;
  }
}

TEST(Vocabulary, SmallTrieMatchesBruteForce) {
  auto v = testing::SmallVocab();
  const auto& impl = v->impl();
  CheckTrie(impl);
  for (uint32_t i = 0; i < impl.sorted.size(); ++i) {
    for (size_t len = 1; len <= impl.SortedBytes(i).size(); ++len) {
      uint32_t e = i + 1;
      while (e < impl.sorted.size() && impl.SortedBytes(e).substr(0, len) == impl.SortedBytes(i).substr(0, len)) ++e;
      EXPECT_EQ(impl.GroupEnd(i, len), e);
    }
  }
}

TEST(Vocabulary, SpecialEosAndNonTokens) {
  auto v = testing::SmallVocab();
  EXPECT_EQ(v->vocab_size(), testing::kVocabSize);
  EXPECT_TRUE(v->IsSpecial(testing::kSpecialA));
  EXPECT_TRUE(v->IsSpecial(testing::kEos));  // EOS is never spelled by bytes
  EXPECT_TRUE(v->TokenBytes(testing::kSpecialA).empty());
  EXPECT_TRUE(v->TokenBytes(testing::kNumTokens + 3).empty());
  EXPECT_TRUE(v->TokenBytes(100000).empty());
  EXPECT_FALSE(v->IsSpecial(testing::kNumTokens + 3));
  EXPECT_EQ(v->TokenBytes(21), "abc");
  ASSERT_EQ(v->eos().size(), 1u);
  EXPECT_EQ(v->eos()[0], testing::kEos);
  EXPECT_EQ(v->impl().sorted.size(), testing::kNumTokens - 3);
}

TEST(Vocabulary, FingerprintSeesEveryField) {
  auto a = testing::SmallVocab();
  auto b = testing::SmallVocab();
  EXPECT_EQ(a->Fingerprint(), b->Fingerprint());
  std::vector<std::string> toks = testing::SmallTokens();
  toks.resize(testing::kNumTokens);
  auto c = TokenVocabulary::FromTokens(toks, {testing::kSpecialA, testing::kSpecialB}, {testing::kEos},
                                       testing::kVocabSize + 1);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->Fingerprint(), (*c)->Fingerprint());
  toks[0] = "A";
  auto d = TokenVocabulary::FromTokens(toks, {testing::kSpecialA, testing::kSpecialB}, {testing::kEos},
                                       testing::kVocabSize);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(a->Fingerprint(), (*d)->Fingerprint());
}

TEST(Vocabulary, RejectsOutOfRangeIds) {
  EXPECT_FALSE(TokenVocabulary::FromTokens({"a"}, {}, {5}, 4).ok());
  EXPECT_FALSE(TokenVocabulary::FromTokens({"a"}, {9}, {}, 4).ok());
}

TEST(Vocabulary, DeepSeek) {
  const std::string path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(path);
  auto tok = tokenizer::Tokenizer::FromFile(path);
  ASSERT_TRUE(tok.ok());
  auto v = TokenVocabulary::FromTokenizer(*tok, {1});
  ASSERT_TRUE(v.ok());
  const auto& impl = (*v)->impl();
  EXPECT_EQ((*v)->vocab_size(), 129280u);
  EXPECT_TRUE((*v)->IsSpecial(1));
  EXPECT_TRUE((*v)->IsSpecial(128000));
  for (TokenId id = static_cast<TokenId>(tok->VocabSize()); id < 129280; ++id) {
    EXPECT_TRUE((*v)->TokenBytes(id).empty());
    EXPECT_FALSE((*v)->IsSpecial(id));
  }
  // Budget-aware completion relies on every single byte being a token.
  std::vector<bool> single(256, false);
  for (TokenId id : impl.sorted) {
    if (impl.bytes[id].size() == 1) single[static_cast<uint8_t>(impl.bytes[id][0])] = true;
  }
  EXPECT_EQ(std::count(single.begin(), single.end(), true), 256);
  CheckTrie(impl);
  CheckGroupEnds(impl, 20000, 7);
  EXPECT_GT(impl.sorted.size(), 127000u);
}

}  // namespace
}  // namespace ladle::grammar
