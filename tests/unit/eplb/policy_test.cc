// Replica choice, the per-layer replica budget, and the skewed-load generator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>

#include "ladle/eplb/placement.h"
#include "ladle/eplb/replica_policy.h"
#include "ladle/eplb/skewed_load.h"

namespace ladle::eplb {
namespace {

// 4 experts on 2 ranks with 2 slots each... plus one replica of expert 0: 6 slots, 3 per rank.
LayerPlacement TwoRankLayer() {
  ExpertLoads w = *ExpertLoads::FromRows({{100, 10, 10, 10}});
  return RebalanceExperts(w, {.num_physical = 6, .num_groups = 1, .num_nodes = 1, .num_ranks = 2})->layers[0];
}

TEST(EplbReplicaPolicy, RoundRobinAlternatesReplicas) {
  const LayerPlacement layer = TwoRankLayer();
  ASSERT_EQ(layer.logcnt[0], 3);  // 100 needs three replicas before 33.3 falls under... 10
  auto rr = MakeReplicaPolicy("round-robin");
  ASSERT_TRUE(rr.ok());
  (*rr)->BeginLayer(layer, 2);
  std::vector<int32_t> picks;
  for (int i = 0; i < 6; ++i) picks.push_back((*rr)->Choose(0));
  const auto& slots = layer.log2phy[0];
  EXPECT_EQ(picks, (std::vector<int32_t>{slots[0], slots[1], slots[2], slots[0], slots[1], slots[2]}));
  EXPECT_EQ((*rr)->Choose(1), layer.log2phy[1][0]);
  // A new layer (or step) starts over.
  (*rr)->BeginLayer(layer, 2);
  EXPECT_EQ((*rr)->Choose(0), slots[0]);
}

TEST(EplbReplicaPolicy, LeastLoadedFillsTheLighterRank) {
  const LayerPlacement layer = TwoRankLayer();
  auto ll = MakeReplicaPolicy("least-loaded");
  ASSERT_TRUE(ll.ok());
  // Counts that do not split evenly by expert: round-robin leaves the ranks apart, least-loaded
  // evens them out using expert 0's replicas on both ranks.
  const std::vector<uint64_t> counts{90, 30, 0, 0};
  auto rr = MakeReplicaPolicy("round-robin");
  auto by_ll = DispatchCounts(**ll, layer, 2, counts);
  auto by_rr = DispatchCounts(**rr, layer, 2, counts);
  EXPECT_EQ(by_ll[0] + by_ll[1], 120u);
  EXPECT_EQ(by_rr[0] + by_rr[1], 120u);
  auto spread = [](const std::vector<uint64_t>& r) { return std::max(r[0], r[1]) - std::min(r[0], r[1]); };
  EXPECT_LE(spread(by_ll), 1u);
  EXPECT_LE(spread(by_ll), spread(by_rr));
  EXPECT_FALSE(MakeReplicaPolicy("random").ok());
}

TEST(EplbReplicaPolicy, UnitsStayWholeAndLeastLoadedCountsTheirTokens) {
  const LayerPlacement layer = TwoRankLayer();
  const uint32_t per = layer.slots_per_rank(2);
  auto ll = MakeReplicaPolicy("least-loaded");
  ASSERT_TRUE(ll.ok());
  (*ll)->BeginLayer(layer, 2);
  // A unit of 50 tokens of expert 0 lands on one rank; the next unit of expert 0 must go to a
  // replica on the other rank, and a one-token unit after that again to the lighter one.
  const int32_t a = (*ll)->ChooseUnit(0, 50);
  const int32_t b = (*ll)->ChooseUnit(0, 10);
  EXPECT_NE(a / per, b / per);
  const int32_t c = (*ll)->ChooseUnit(0, 1);
  EXPECT_EQ(c / per, b / per);
  // Round-robin counts units, whatever their size.
  auto rr = MakeReplicaPolicy("round-robin");
  (*rr)->BeginLayer(layer, 2);
  const auto& slots = layer.log2phy[0];
  EXPECT_EQ((*rr)->ChooseUnit(0, 40), slots[0]);
  EXPECT_EQ((*rr)->ChooseUnit(0, 2), slots[1]);
  EXPECT_EQ((*rr)->Choose(0), slots[2]);
}

TEST(EplbReplicaPolicy, DispatchSendsEveryTokenToAReplica) {
  auto gen = SkewedLoadGenerator::Create({.layers = 2, .experts = 32, .top_k = 4, .seed = 5});
  ASSERT_TRUE(gen.ok());
  ExpertLoads w = gen->Sample(0, 2000);
  auto p = RebalanceExperts(w, {.num_physical = PhysicalExpertCount(32, 2, 4), .num_groups = 1, .num_nodes = 1,
                                .num_ranks = 4});
  ASSERT_TRUE(p.ok());
  for (const char* name : {"round-robin", "least-loaded"}) {
    auto policy = MakeReplicaPolicy(name);
    std::vector<uint64_t> counts(32);
    for (uint32_t e = 0; e < 32; ++e) counts[e] = static_cast<uint64_t>(w.At(1, e));
    auto ranks = DispatchCounts(**policy, p->layers[1], 4, counts);
    EXPECT_EQ(std::accumulate(ranks.begin(), ranks.end(), uint64_t{0}),
              std::accumulate(counts.begin(), counts.end(), uint64_t{0}))
        << name;
    std::vector<double> even(4);
    RankLoads(p->layers[1], 4, w.Row(1), even);
    if (std::string_view(name) == "round-robin") {
      // Within one token per replica of the even split EPLB planned with.
      for (uint32_t r = 0; r < 4; ++r) EXPECT_NEAR(static_cast<double>(ranks[r]), even[r], 3 * 8.0) << r;
    } else {
      // Least-loaded is myopic: it sends a replicated expert's early tokens to the rank that is
      // lightest so far, which may be the rank whose unreplicated experts' tokens come later.
      // On this load it ends ~3% above the planned even split, not below (docs/eplb.md).
      EXPECT_LE(static_cast<double>(*std::max_element(ranks.begin(), ranks.end())),
                1.05 * *std::max_element(even.begin(), even.end()));
    }
  }
}

PlacementConfig Ep8(uint32_t experts, uint32_t redundant) {
  return {.num_physical = PhysicalExpertCount(experts, redundant, 8), .num_groups = 1, .num_nodes = 1, .num_ranks = 8};
}

TEST(EplbLayerBudget, NeverWorseThanUniformAndKeepsTheTotal) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    // Layers of very different skew, so the budget has somewhere to go.
    ExpertLoads w(6, 64);
    for (uint32_t l = 0; l < 6; ++l) {
      auto gen = SkewedLoadGenerator::Create({.layers = 1, .experts = 64, .zipf_s = 0.2 * l, .seed = seed * 10 + l});
      ExpertLoads one = gen->Sample(0, 8192);
      for (uint32_t e = 0; e < 64; ++e) w.At(l, e) = one.At(0, e);
    }
    for (uint32_t redundant : {1u, 2u, 4u}) {
      const PlacementConfig cfg = Ep8(64, redundant);
      auto uniform = RebalanceExperts(w, cfg);
      auto budget = RebalanceWithLayerBudget(w, cfg);
      ASSERT_TRUE(uniform.ok() && budget.ok());
      ASSERT_TRUE(ValidatePlacement(*budget, 64).ok()) << ValidatePlacement(*budget, 64).ToString();
      size_t slots = 0;
      for (const auto& layer : budget->layers) {
        EXPECT_EQ(layer.phy2log.size() % 8, 0u);
        EXPECT_GE(layer.phy2log.size(), 64u);
        slots += layer.phy2log.size();
      }
      EXPECT_EQ(slots, size_t{6} * cfg.num_physical);
      EXPECT_LE(SlowestRankTotal(*budget, w), SlowestRankTotal(*uniform, w)) << "seed " << seed;
      EXPECT_LE(MeasureMoeLb(*budget, w).mean, MeasureMoeLb(*uniform, w).mean + 1e-12);
    }
  }
}

TEST(EplbLayerBudget, MovesSlotsFromFlatToSkewedLayers) {
  // Layer 0 uniform, layer 1 one very hot expert: the budget takes layer 0's slots.
  ExpertLoads w(2, 16);
  for (uint32_t e = 0; e < 16; ++e) w.At(0, e) = 100, w.At(1, e) = e == 3 ? 1600 : 100;
  const PlacementConfig cfg{.num_physical = 24, .num_groups = 1, .num_nodes = 1, .num_ranks = 4};
  auto uniform = RebalanceExperts(w, cfg);
  auto budget = RebalanceWithLayerBudget(w, cfg);
  ASSERT_TRUE(uniform.ok() && budget.ok());
  EXPECT_LT(budget->layers[0].phy2log.size(), 24u);
  EXPECT_GT(budget->layers[1].phy2log.size(), 24u);
  EXPECT_EQ(budget->layers[0].phy2log.size() + budget->layers[1].phy2log.size(), 48u);
  EXPECT_LT(SlowestRankTotal(*budget, w), SlowestRankTotal(*uniform, w));
  EXPECT_DOUBLE_EQ(MeasureMoeLb(*budget, w).per_layer[0], 1.0);
  // Bounds: a floor of 2 per rank is the uniform split here, so nothing moves.
  auto floored = RebalanceWithLayerBudget(w, cfg, {.min_redundant_per_rank = 2});
  EXPECT_EQ(floored->layers[0].phy2log.size(), 24u);
  EXPECT_EQ(ParsePlacementPolicy("layer-budget").value(), PlacementPolicy::kLayerBudget);
  EXPECT_FALSE(ParsePlacementPolicy("lplb").ok());
}

TEST(EplbLayerBudget, PreviousWindowMode) {
  // Gains measured across one interval of drift: plan from the previous window, score on this one.
  auto gen = SkewedLoadGenerator::Create({.layers = 6, .experts = 64, .half_life_steps = 2000, .seed = 8});
  const ExpertLoads previous = gen->Sample(1000, 20000), now = gen->Sample(2000, 20000);
  const PlacementConfig cfg = Ep8(64, 2);
  auto budget = RebalanceWithLayerBudget(now, cfg, {}, &previous);
  ASSERT_TRUE(budget.ok()) << budget.status().ToString();
  ASSERT_TRUE(ValidatePlacement(*budget, 64).ok());
  size_t slots = 0;
  for (const auto& layer : budget->layers) slots += layer.phy2log.size();
  EXPECT_EQ(slots, size_t{6} * cfg.num_physical);
  ExpertLoads wrong(5, 64);
  EXPECT_EQ(RebalanceWithLayerBudget(now, cfg, {}, &wrong).status().code(), StatusCode::kInvalidArgument);
}

TEST(EplbSkew, SharesAreZipfAndCapped) {
  auto gen = SkewedLoadGenerator::Create({.layers = 2, .experts = 256, .top_k = 8, .zipf_s = 0.5, .zipf_s_spread = 0, .seed = 9});
  ASSERT_TRUE(gen.ok());
  auto shares = gen->Shares(0, 0);
  EXPECT_NEAR(std::accumulate(shares.begin(), shares.end(), 0.0), 1.0, 1e-12);
  std::vector<double> sorted = shares;
  std::sort(sorted.rbegin(), sorted.rend());
  EXPECT_NEAR(sorted[0] / sorted[3], 2.0, 1e-9);  // (4 / 1)^0.5
  EXPECT_NEAR(sorted[0] * 256, 8.4, 0.1);          // the documented default: 8.4x the mean
  // Layers differ; a steep skew is capped at 1 / top_k.
  EXPECT_NE(gen->Shares(0, 0), gen->Shares(0, 1));
  auto steep = SkewedLoadGenerator::Create({.layers = 1, .experts = 16, .top_k = 4, .zipf_s = 3, .seed = 1});
  auto capped = steep->Shares(0, 0);
  EXPECT_NEAR(*std::max_element(capped.begin(), capped.end()), 0.25, 1e-12);
  EXPECT_NEAR(std::accumulate(capped.begin(), capped.end(), 0.0), 1.0, 1e-12);
  // With the default spread, layers differ in skew too: the hottest share differs by layer
  // (each layer's exponent is in [0.25, 0.75]).
  auto spread = SkewedLoadGenerator::Create({.layers = 8, .experts = 256, .top_k = 8, .seed = 9});
  std::vector<double> tops;  // the hottest expert's share over the mean, per layer
  for (uint32_t l = 0; l < 8; ++l) {
    auto sh = spread->Shares(0, l);
    tops.push_back(*std::max_element(sh.begin(), sh.end()) * 256);
  }
  const auto [lo, hi] = std::minmax_element(tops.begin(), tops.end());
  EXPECT_GT(*lo, 2.5);   // s = 0.25 gives 3.0
  EXPECT_LT(*hi, 22.0);  // s = 0.75 gives 20.3
  EXPECT_GT(*hi, 1.5 * *lo);
  auto bias = gen->RouterBias(0, 0);
  EXPECT_NEAR(std::accumulate(bias.begin(), bias.end(), 0.0), 0.0, 1e-3);
  EXPECT_GT(bias[std::max_element(shares.begin(), shares.end()) - shares.begin()], 0.0f);
}

TEST(EplbSkew, DeterministicPerStepAndDrifting) {
  SkewConfig cfg{.layers = 3, .experts = 64, .half_life_steps = 1000, .drift_every_steps = 10, .seed = 4};
  auto a = SkewedLoadGenerator::Create(cfg);
  auto b = SkewedLoadGenerator::Create(cfg);
  // The same step gives the same counts whatever was sampled before, forward or back.
  ExpertLoads late = a->Sample(5000, 1000);
  (void)b->Sample(100, 1000);
  ExpertLoads again = b->Sample(5000, 1000);
  ExpertLoads early = a->Sample(100, 1000);  // back in time: recomputed from epoch 0
  for (uint32_t e = 0; e < 64; ++e) EXPECT_EQ(late.At(2, e), again.At(2, e));
  EXPECT_EQ(early.At(0, 0), b->Sample(100, 1000).At(0, 0));
  // Counts are tokens x top_k on average and never above tokens.
  double total = 0;
  for (uint32_t e = 0; e < 64; ++e) {
    total += late.At(0, e);
    EXPECT_LE(late.At(0, e), 1000);
  }
  EXPECT_NEAR(total, 8000, 4 * std::sqrt(8000.0));
  // The hot set drifts: shares 20 half-lives apart are nearly uncorrelated, 1/10 apart close.
  auto corr = [](const std::vector<double>& x, const std::vector<double>& y) {
    double mx = std::accumulate(x.begin(), x.end(), 0.0) / x.size(), my = std::accumulate(y.begin(), y.end(), 0.0) / y.size();
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx), syy += (y[i] - my) * (y[i] - my);
    return sxy / std::sqrt(sxx * syy);
  };
  const auto s0 = a->Shares(0, 0), s_near = a->Shares(100, 0), s_far = a->Shares(20000, 0);
  EXPECT_GT(corr(s0, s_near), 0.7);
  EXPECT_LT(std::abs(corr(s0, s_far)), 0.5);
  // Other seeds, other loads.
  cfg.seed = 5;
  EXPECT_NE(SkewedLoadGenerator::Create(cfg)->Shares(0, 0), a->Shares(0, 0));
}

TEST(EplbSkew, JitterKeepsTheMeanAndAddsSpread) {
  SkewConfig cfg{.layers = 1, .experts = 32, .top_k = 4, .zipf_s = 0, .seed = 2};
  auto flat = SkewedLoadGenerator::Create(cfg);
  cfg.step_jitter = 0.5;
  auto jittery = SkewedLoadGenerator::Create(cfg);
  double var_flat = 0, var_jit = 0, mean_jit = 0;
  for (uint64_t step = 0; step < 200; ++step) {
    ExpertLoads f = flat->Sample(step, 8000), j = jittery->Sample(step, 8000);
    for (uint32_t e = 0; e < 32; ++e) {
      var_flat += (f.At(0, e) - 1000) * (f.At(0, e) - 1000);
      var_jit += (j.At(0, e) - 1000) * (j.At(0, e) - 1000);
      mean_jit += j.At(0, e);
    }
  }
  EXPECT_NEAR(mean_jit / (200 * 32), 1000, 10);
  EXPECT_GT(var_jit, 20 * var_flat);  // Poisson alone: variance 1000; sigma 0.5: ~(500)^2
  EXPECT_FALSE(SkewedLoadGenerator::Create({.top_k = 300}).ok());
  EXPECT_FALSE(SkewedLoadGenerator::Create({.zipf_s = -1}).ok());
}

}  // namespace
}  // namespace ladle::eplb
