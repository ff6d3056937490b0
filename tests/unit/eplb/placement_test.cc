// DeepSeek EPLB: the published example exactly, the padding rule, invariants, moe_lb.
#include "ladle/eplb/placement.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "ladle/eplb/skewed_load.h"

namespace ladle::eplb {
namespace {

// deepseek-ai/EPLB README, "Interface and Example": 2 layers x 12 experts, 16 replicas,
// 4 groups, 2 nodes, 8 GPUs.
ExpertLoads GoldenLoads() {
  return *ExpertLoads::FromRows({{90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
                                 {20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27}});
}
const PlacementConfig kGolden{.num_physical = 16, .num_groups = 4, .num_nodes = 2, .num_ranks = 8};

TEST(EplbPlacement, GoldenExamplePhy2Log) {
  auto p = RebalanceExperts(GoldenLoads(), kGolden);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->layers.size(), 2u);
  EXPECT_EQ(p->layers[0].phy2log, (std::vector<int32_t>{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1}));
  EXPECT_EQ(p->layers[1].phy2log, (std::vector<int32_t>{7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}));
  EXPECT_EQ(p->layers[0].logcnt, (std::vector<int32_t>{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1}));
  EXPECT_EQ(p->layers[1].logcnt, (std::vector<int32_t>{1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1}));
  EXPECT_TRUE(ValidatePlacement(*p, 12).ok());
}

TEST(EplbPlacement, GoldenExampleMaxOverMean) {
  auto p = RebalanceExperts(GoldenLoads(), kGolden);
  ASSERT_TRUE(p.ok());
  MoeLbSummary s = MeasureMoeLb(*p, GoldenLoads());
  ASSERT_EQ(s.per_layer.size(), 2u);
  EXPECT_EQ(fmt::format("{:.3f}", s.per_layer[0]), "1.208");
  EXPECT_EQ(fmt::format("{:.3f}", s.per_layer[1]), "1.242");
  EXPECT_EQ(fmt::format("{:.3f}", s.max), "1.242");
  EXPECT_DOUBLE_EQ(s.mean, (s.per_layer[0] + s.per_layer[1]) / 2);
  // Layer 0's ranks, by hand: GPU 4 holds 10 (183 / 2) and 9 (56) = 147.5 ... the slowest is
  // GPU 6 with 0 (90) + 1 (132 / 2) = 156; the mean is 1033 / 8.
  std::vector<double> ranks(8);
  RankLoads(p->layers[0], 8, GoldenLoads().Row(0), ranks);
  EXPECT_DOUBLE_EQ(ranks[6], 156.0);
  EXPECT_DOUBLE_EQ(MoeLb(ranks), 156.0 / (1033.0 / 8));
}

TEST(EplbPlacement, GoldenLog2PhyByReplicaRank) {
  auto p = RebalanceExperts(GoldenLoads(), kGolden);
  ASSERT_TRUE(p.ok());
  // log2phy lists replicas by replica rank (0 = the expert's own slot before replication, as
  // the reference's scatter does), not by slot: expert 1's original went to slot 15 when node
  // 1's replicas were packed, its copy to 13.
  EXPECT_EQ(p->layers[0].log2phy[5], (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(p->layers[0].log2phy[1], (std::vector<int32_t>{15, 13}));
  EXPECT_EQ(p->layers[0].log2phy[7], (std::vector<int32_t>{3}));
}

TEST(EplbPlacement, HierarchicalKeepsGroupsOnOneNode) {
  auto p = RebalanceExperts(GoldenLoads(), kGolden);
  ASSERT_TRUE(p.ok());
  for (const auto& layer : p->layers) {
    for (int32_t e = 0; e < 12; ++e) {
      // Group e / 3 lives on one node: all its experts' slots are in the same half.
      const int32_t node = layer.log2phy[(e / 3) * 3][0] / 8;
      for (int32_t s : layer.log2phy[e]) EXPECT_EQ(s / 8, node) << "expert " << e;
    }
  }
}

TEST(EplbPlacement, GlobalPolicyWhenGroupsDoNotDivideNodes) {
  // 3 groups over 2 nodes: the global policy, which is hierarchical with one group and node.
  PlacementConfig cfg = kGolden;
  cfg.num_groups = 3;
  auto global = RebalanceExperts(GoldenLoads(), cfg);
  PlacementConfig flat{.num_physical = 16, .num_groups = 1, .num_nodes = 1, .num_ranks = 8};
  auto expected = RebalanceExperts(GoldenLoads(), flat);
  ASSERT_TRUE(global.ok() && expected.ok());
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(global->layers[l].phy2log, expected->layers[l].phy2log);
  EXPECT_TRUE(ValidatePlacement(*global, 12).ok());
  // Free of the node constraint, it is at least as balanced as the hierarchical plan here.
  auto hier = RebalanceExperts(GoldenLoads(), kGolden);
  EXPECT_LE(MeasureMoeLb(*global, GoldenLoads()).max, MeasureMoeLb(*hier, GoldenLoads()).max);
}

TEST(EplbPlacement, PaddingRule) {
  EXPECT_EQ(PhysicalExpertCount(256, 4, 2), 264u);   // prefill EP2: 132 per rank
  EXPECT_EQ(PhysicalExpertCount(256, 4, 4), 272u);   // prefill EP4: 68 per rank
  EXPECT_EQ(PhysicalExpertCount(256, 1, 64), 320u);  // decode EP64: 5 per rank
  EXPECT_EQ(PhysicalExpertCount(384, 1, 64), 448u);  // the recipe's 7 per GPU at EP64
  EXPECT_EQ(PhysicalExpertCount(12, 0, 8), 16u);     // padding alone
  EXPECT_EQ(PhysicalExpertCount(257, 1, 64), 384u);  // 321 rounds up to 6 per rank
  EXPECT_EQ(PhysicalExpertCount(10, 1, 4), 16u);
  for (uint32_t ep : {1u, 2u, 3u, 8u, 64u}) {
    for (uint32_t e : {1u, 7u, 256u}) {
      const uint32_t n = PhysicalExpertCount(e, 2, ep);
      EXPECT_EQ(n % ep, 0u);
      EXPECT_GE(n, e + 2 * ep);
      EXPECT_LT(n, e + 2 * ep + ep);
    }
  }
}

TEST(EplbPlacement, ShapeErrors) {
  const ExpertLoads w = GoldenLoads();
  auto bad = [&](PlacementConfig c) { return RebalanceExperts(w, c).status().code(); };
  EXPECT_EQ(bad({.num_physical = 18, .num_groups = 4, .num_nodes = 2, .num_ranks = 8}), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad({.num_physical = 8, .num_groups = 4, .num_nodes = 2, .num_ranks = 8}), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad({.num_physical = 16, .num_groups = 5, .num_nodes = 1, .num_ranks = 8}), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad({.num_physical = 16, .num_groups = 4, .num_nodes = 3, .num_ranks = 8}), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad({.num_physical = 16, .num_groups = 4, .num_nodes = 2, .num_ranks = 0}), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ExpertLoads::FromRows({{1, 2}, {3}}).ok());
  EXPECT_FALSE(ExpertLoads::FromRows({{1, -2}}).ok());
  EXPECT_FALSE(ExpertLoads::FromRows({}).ok());
}

// Random loads and shapes: every placement is valid, and EPLB with redundancy is never worse
// than no EPLB on the loads it planned from... which greedy packing does not promise in
// general, so this checks the invariants and that replication lowers the hottest replica.
TEST(EplbPlacement, InvariantsOnRandomLoads) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const uint32_t ranks = 1u << (rng() % 4);       // 1..8
    const uint32_t nodes = ranks >= 2 && rng() % 2 ? 2 : 1;
    const uint32_t groups = nodes * (1 + rng() % 3);
    const uint32_t experts = groups * (1 + rng() % 6);
    const uint32_t redundant = rng() % 4;
    PlacementConfig cfg{.num_physical = PhysicalExpertCount(experts, redundant, ranks), .num_groups = groups,
                        .num_nodes = nodes, .num_ranks = ranks};
    ExpertLoads w(3, experts);
    for (uint32_t l = 0; l < 3; ++l) {
      for (uint32_t e = 0; e < experts; ++e) w.At(l, e) = static_cast<double>(rng() % 1000);
    }
    auto p = RebalanceExperts(w, cfg);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE(ValidatePlacement(*p, experts).ok()) << ValidatePlacement(*p, experts).ToString();
    for (const auto& layer : p->layers) {
      ASSERT_EQ(layer.phy2log.size(), cfg.num_physical);
      int32_t total = 0;
      for (int32_t c : layer.logcnt) total += c;
      EXPECT_EQ(total, static_cast<int32_t>(cfg.num_physical));
    }
  }
}

TEST(EplbPlacement, ValidateCatchesBrokenPlacements) {
  auto p = RebalanceExperts(GoldenLoads(), kGolden);
  ASSERT_TRUE(p.ok());
  Placement missing = *p;
  missing.layers[0].phy2log[1] = 5;  // expert 6 loses its only slot
  EXPECT_FALSE(ValidatePlacement(missing, 12).ok());
  Placement count = *p;
  count.layers[1].logcnt[0] = 2;
  EXPECT_FALSE(ValidatePlacement(count, 12).ok());
  Placement inverse = *p;
  std::swap(inverse.layers[0].log2phy[5][0], inverse.layers[0].log2phy[6][0]);
  EXPECT_FALSE(ValidatePlacement(inverse, 12).ok());
  Placement slots = *p;
  slots.layers[0].phy2log.push_back(0);
  EXPECT_FALSE(ValidatePlacement(slots, 12).ok());
}

TEST(EplbMoeLb, WithoutEplbIsContiguous) {
  // 4 experts on 2 ranks: {0,1} and {2,3}.
  ExpertLoads w = *ExpertLoads::FromRows({{10, 30, 20, 0}, {0, 0, 0, 0}});
  MoeLbSummary s = MeasureMoeLbWithoutEplb(w, 2);
  EXPECT_DOUBLE_EQ(s.per_layer[0], 40.0 / 30.0);
  EXPECT_DOUBLE_EQ(s.per_layer[1], 1.0);  // no load: balanced by definition
  EXPECT_DOUBLE_EQ(s.max, 40.0 / 30.0);
  EXPECT_DOUBLE_EQ(s.mean, (40.0 / 30.0 + 1.0) / 2);
  // 12 experts on 8 ranks: ranks get 1 or 2 experts, in order.
  ExpertLoads ones(1, 12);
  for (uint32_t e = 0; e < 12; ++e) ones.At(0, e) = 1;
  EXPECT_DOUBLE_EQ(MeasureMoeLbWithoutEplb(ones, 8).max, 2.0 / 1.5);
}

TEST(EplbMoeLb, EplbBeatsNoEplbOnSkewedLoad) {
  auto gen = SkewedLoadGenerator::Create({.layers = 8, .experts = 64, .seed = 3});
  ASSERT_TRUE(gen.ok());
  ExpertLoads w = gen->Sample(0, 4096);
  PlacementConfig cfg{.num_physical = PhysicalExpertCount(64, 2, 8), .num_groups = 8, .num_nodes = 1, .num_ranks = 8};
  auto p = RebalanceExperts(w, cfg);
  ASSERT_TRUE(p.ok());
  const double before = MeasureMoeLbWithoutEplb(w, 8).mean, after = MeasureMoeLb(*p, w).mean;
  EXPECT_GT(before, 1.2);
  EXPECT_LT(after, 1.05);
}

}  // namespace
}  // namespace ladle::eplb
