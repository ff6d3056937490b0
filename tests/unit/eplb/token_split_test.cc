// The per-batch min-max token split (LPLB-style): optimal on cases small enough to enumerate,
// never worse than the even split, tokens conserved and kept on their own expert's replicas.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "ladle/eplb/placement.h"
#include "ladle/eplb/skewed_load.h"
#include "ladle/eplb/token_split.h"

namespace ladle::eplb {
namespace {

LayerPlacement FromPhy2Log(std::vector<int32_t> phy2log, uint32_t experts) {
  LayerPlacement lp;
  lp.phy2log = std::move(phy2log);
  lp.log2phy.assign(experts, {});
  lp.logcnt.assign(experts, 0);
  for (size_t s = 0; s < lp.phy2log.size(); ++s) {
    lp.log2phy[static_cast<size_t>(lp.phy2log[s])].push_back(static_cast<int32_t>(s));
    ++lp.logcnt[static_cast<size_t>(lp.phy2log[s])];
  }
  return lp;
}

TEST(EplbTokenSplit, MovesAHotExpertsTokensToItsLighterReplica) {
  // Rank 0: experts 0 and 1; rank 1: a replica of 0 and expert 2.
  const LayerPlacement lp = FromPhy2Log({0, 1, 0, 2}, 3);
  const std::vector<uint64_t> counts{100, 60, 0};
  TokenSplit s = SplitTokensMinMax(lp, 2, counts);
  EXPECT_EQ(s.max_rank_tokens, 80u);  // 60 + 20 | 80, where the even split gives 110 | 50
  EXPECT_EQ(s.rank_tokens, (std::vector<double>{80, 80}));
  EXPECT_EQ(s.slot_tokens, (std::vector<uint64_t>{20, 60, 80, 0}));
  std::vector<double> even(2);
  std::vector<double> loads(counts.begin(), counts.end());
  RankLoads(lp, 2, loads, even);
  EXPECT_DOUBLE_EQ(MoeLb(even), 110.0 / 80.0);
  EXPECT_DOUBLE_EQ(MoeLb(s.rank_tokens), 1.0);
}

// Every split of each replicated expert's tokens, for tiny cases.
uint64_t BruteForce(const LayerPlacement& lp, uint32_t ranks, const std::vector<uint64_t>& counts) {
  const size_t per = lp.phy2log.size() / ranks;
  uint64_t best = UINT64_MAX;
  std::vector<uint64_t> load(ranks, 0);
  std::function<void(size_t)> go = [&](size_t e) {
    if (e == counts.size()) {
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      return;
    }
    const auto& slots = lp.log2phy[e];
    std::function<void(size_t, uint64_t)> put = [&](size_t i, uint64_t left) {
      const size_t r = static_cast<size_t>(slots[i]) / per;
      if (i + 1 == slots.size()) {
        load[r] += left;
        go(e + 1);
        load[r] -= left;
        return;
      }
      for (uint64_t k = 0; k <= left; ++k) {
        load[r] += k;
        put(i + 1, left - k);
        load[r] -= k;
      }
    };
    put(0, counts[e]);
  };
  go(0);
  return best;
}

TEST(EplbTokenSplit, OptimalOnEnumerableCasesAndNeverWorseThanTheEvenSplit) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const uint32_t experts = 3 + rng() % 2, ranks = 2 + rng() % 2, per = 2;
    std::vector<int32_t> phy2log(ranks * per);
    for (uint32_t e = 0; e < experts && e < phy2log.size(); ++e) phy2log[e] = static_cast<int32_t>(e);
    for (size_t s = experts; s < phy2log.size(); ++s) phy2log[s] = static_cast<int32_t>(rng() % experts);
    std::shuffle(phy2log.begin(), phy2log.end(), rng);
    const LayerPlacement lp = FromPhy2Log(phy2log, experts);
    std::vector<uint64_t> counts(experts);
    for (auto& c : counts) c = rng() % 9;
    const TokenSplit s = SplitTokensMinMax(lp, ranks, counts);
    EXPECT_EQ(s.max_rank_tokens, BruteForce(lp, ranks, counts)) << "trial " << trial;
    // Conservation: each expert's tokens all placed, on its own slots only.
    for (uint32_t e = 0; e < experts; ++e) {
      uint64_t got = 0;
      for (int32_t slot : lp.log2phy[e]) got += s.slot_tokens[static_cast<size_t>(slot)];
      EXPECT_EQ(got, counts[e]);
    }
    EXPECT_EQ(std::accumulate(s.rank_tokens.begin(), s.rank_tokens.end(), 0.0),
              static_cast<double>(std::accumulate(counts.begin(), counts.end(), uint64_t{0})));
  }
}

TEST(EplbTokenSplit, BeatsTheEvenSplitOnASkewedStepAtScale) {
  auto gen = SkewedLoadGenerator::Create({.layers = 4, .experts = 256, .top_k = 8, .seed = 3});
  ASSERT_TRUE(gen.ok());
  const ExpertLoads window = gen->Sample(0, 64 * 128);
  auto p = RebalanceExperts(window, {.num_physical = PhysicalExpertCount(256, 1, 64), .num_groups = 8,
                                     .num_nodes = 1, .num_ranks = 64});
  ASSERT_TRUE(p.ok());
  const ExpertLoads next = gen->Sample(1, 64 * 128);  // the next step: the same hot set, other noise
  double lp_sum = 0, even_sum = 0;
  for (uint32_t l = 0; l < 4; ++l) {
    std::vector<uint64_t> counts(256);
    for (uint32_t e = 0; e < 256; ++e) counts[e] = static_cast<uint64_t>(next.At(l, e));
    const TokenSplit s = SplitTokensMinMax(p->layers[l], 64, counts);
    std::vector<double> even(64);
    RankLoads(p->layers[l], 64, next.Row(l), even);
    EXPECT_LE(static_cast<double>(s.max_rank_tokens), std::ceil(*std::max_element(even.begin(), even.end())));
    EXPECT_LE(MoeLb(s.rank_tokens), MoeLb(even)) << "layer " << l;
    lp_sum += MoeLb(s.rank_tokens);
    even_sum += MoeLb(even);
  }
  EXPECT_LT(lp_sum, even_sum);
}

}  // namespace
}  // namespace ladle::eplb
