#include "ladle/engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace ladle::engine {
namespace {

std::vector<float> Row() { return {0.1f, 2.0f, 1.5f, -1.0f, 1.9f, 0.0f}; }

Sampled Draw(SamplingParams p, uint64_t seed, const uint64_t* mask = nullptr, SamplerState* st = nullptr) {
  auto row = Row();
  SamplerState local(seed);
  return SampleToken(row, p, st ? st : &local, mask, row.size());
}

TEST(Sampler, GreedyIsArgmaxWithLogprob) {
  SamplingParams p;
  p.temperature = 0;
  p.top_logprobs = 3;
  auto r = Draw(p, 1);
  EXPECT_EQ(r.token, 1u);
  auto row = Row();
  double z = 0;
  for (float v : row) z += std::exp(v);
  EXPECT_NEAR(r.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(r.top_logprobs.size(), 3u);
  EXPECT_EQ(r.top_logprobs[0].first, 1u);
  EXPECT_EQ(r.top_logprobs[1].first, 4u);
  EXPECT_EQ(r.top_logprobs[2].first, 2u);
  EXPECT_GE(r.top_logprobs[0].second, r.top_logprobs[1].second);
}

TEST(Sampler, MaskAndValidVocab) {
  SamplingParams p;
  p.temperature = 0;
  uint64_t mask = (1u << 2) | (1u << 5);  // only 2 and 5
  EXPECT_EQ(Draw(p, 1, &mask).token, 2u);
  auto row = Row();
  SamplerState st(1);
  EXPECT_EQ(SampleToken(row, p, &st, nullptr, 1).token, 0u);  // only id 0 is real vocabulary
  for (int seed = 0; seed < 50; ++seed) {
    SamplingParams t;
    auto r = Draw(t, seed, &mask);
    EXPECT_TRUE(r.token == 2 || r.token == 5);
  }
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedsDiffer) {
  SamplingParams p;
  p.temperature = 1.0f;
  std::map<TokenId, int> seen;
  for (int seed = 0; seed < 200; ++seed) {
    EXPECT_EQ(Draw(p, seed).token, Draw(p, seed).token);
    seen[Draw(p, seed).token]++;
  }
  EXPECT_GE(seen.size(), 4u);  // a real distribution, not argmax
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  for (int seed = 0; seed < 30; ++seed) {
    SamplingParams k;
    k.top_k = 1;
    EXPECT_EQ(Draw(k, seed).token, 1u);
    SamplingParams tp;
    tp.top_p = 0.01f;
    EXPECT_EQ(Draw(tp, seed).token, 1u);
  }
}

TEST(Sampler, TopKTwoOnlyTopTwo) {
  SamplingParams p;
  p.top_k = 2;
  for (int seed = 0; seed < 100; ++seed) {
    auto t = Draw(p, seed).token;
    EXPECT_TRUE(t == 1 || t == 4) << t;
  }
}

TEST(Sampler, MinPDropsTheTail) {
  SamplingParams p;
  p.min_p = 0.5f;  // keeps tokens with prob ≥ half the top: 1 (e^2), 4 (e^1.9), 2 (e^1.5 ≈ 0.61)
  for (int seed = 0; seed < 200; ++seed) {
    auto t = Draw(p, seed).token;
    EXPECT_TRUE(t == 1 || t == 4 || t == 2) << t;
  }
}

TEST(Sampler, LowTemperatureConcentrates) {
  SamplingParams p;
  p.temperature = 0.01f;
  for (int seed = 0; seed < 50; ++seed) EXPECT_EQ(Draw(p, seed).token, 1u);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 0.2f;
  SamplerState st(0);
  auto row = Row();
  EXPECT_EQ(SampleToken(row, p, &st, nullptr, row.size()).token, 1u);
  row = Row();  // 1 now penalised by 0.2: 1.8 < 1.9
  EXPECT_EQ(SampleToken(row, p, &st, nullptr, row.size()).token, 4u);
  SamplingParams f;
  f.temperature = 0;
  f.frequency_penalty = 0.3f;
  SamplerState st2(0);
  st2.counts[1] = 1;
  st2.counts[4] = 2;
  row = Row();  // 1: 1.7, 4: 1.3, 2: 1.5
  EXPECT_EQ(SampleToken(row, f, &st2, nullptr, row.size()).token, 1u);
  st2.counts[1] = 2;  // 1: 1.4
  row = Row();
  EXPECT_EQ(SampleToken(row, f, &st2, nullptr, row.size()).token, 2u);
}

TEST(Sampler, UniformDrawsInRange) {
  SamplerState s(7);
  for (int i = 0; i < 1000; ++i) {
    double u = s.NextUniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace ladle::engine

namespace ladle::engine {
namespace {

// The plain-temperature path (vectorised float weights) draws from softmax(l / T): empirical
// frequencies over many draws match the exact probabilities.
TEST(Sampler, PlainTemperatureMatchesSoftmax) {
  for (float t : {1.0f, 0.7f}) {
    SamplingParams p;
    p.temperature = t;
    auto row = Row();
    std::vector<double> prob(row.size());
    double z = 0;
    for (size_t i = 0; i < row.size(); ++i) z += prob[i] = std::exp(row[i] / t);
    std::vector<int> hits(row.size());
    SamplerState st(7);
    const int draws = 40000;
    for (int k = 0; k < draws; ++k) {
      auto r = Row();
      ++hits[SampleToken(r, p, &st, nullptr, r.size()).token];
    }
    for (size_t i = 0; i < row.size(); ++i) {
      const double expect = prob[i] / z;
      EXPECT_NEAR(hits[i] / double(draws), expect, 4 * std::sqrt(expect * (1 - expect) / draws) + 1e-3)
          << "t=" << t << " id=" << i;
    }
  }
}

// Logprobs over a full-size row agree with a double-precision log-softmax.
TEST(Sampler, LogprobAccurateOnFullVocabulary) {
  std::vector<float> row(129280);
  uint64_t x = 12345;
  for (float& v : row) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((x >> 40) % 20000) / 1000.0f - 10.0f;  // [-10, 10)
  }
  double mx = *std::max_element(row.begin(), row.end());
  double z = 0;
  for (float v : row) z += std::exp(v - mx);
  for (float t : {0.0f, 1.0f, 0.5f}) {
    SamplingParams p;
    p.temperature = t;
    p.top_logprobs = 0;
    auto r = row;
    SamplerState st(3);
    auto out = SampleToken(r, p, &st, nullptr, r.size());
    EXPECT_NEAR(out.logprob, row[out.token] - mx - std::log(z), 1e-4) << "t=" << t;
  }
}

}  // namespace
}  // namespace ladle::engine
