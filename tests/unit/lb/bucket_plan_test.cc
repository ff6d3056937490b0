// Layer 1 of the prefill balancer: length buckets, the largest-remainder split of engines by
// demand, and the minimal-movement reassignment. Every expected split is computed by hand in
// the comment above it.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ladle/lb/bucket_plan.h"

namespace ladle::lb {
namespace {

using V = std::vector<uint32_t>;

TEST(LbBuckets, RecipeBounds) {
  const Buckets b = Buckets::Recipe();
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b.Of(0), 0u);
  EXPECT_EQ(b.Of(16383), 0u);
  EXPECT_EQ(b.Of(16384), 1u);  // 16K is the first token of the second bucket
  EXPECT_EQ(b.Of(65535), 1u);
  EXPECT_EQ(b.Of(65536), 2u);
  EXPECT_EQ(b.Of(262143), 2u);
  EXPECT_EQ(b.Of(262144), 3u);
  EXPECT_EQ(b.Of(1 << 30), 3u);
}

TEST(LbBuckets, ConfigurableAndValidated) {
  auto two = Buckets::Create({1000});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
  EXPECT_EQ(two->Of(999), 0u);
  EXPECT_EQ(two->Of(1000), 1u);
  EXPECT_EQ(Buckets::Create({})->size(), 1u);
  EXPECT_FALSE(Buckets::Create({100, 100}).ok());
  EXPECT_FALSE(Buckets::Create({200, 100}).ok());
  EXPECT_FALSE(Buckets::Create({0}).ok());
}

TEST(LbApportion, ExactSharesNeedNoRounding) {
  // 3:1 of 4 engines is exactly 3 and 1.
  EXPECT_EQ(ApportionEngines(std::vector<double>{3, 1, 0, 0}, 4), (V{3, 1, 0, 0}));
  // 8 engines by 50/25/12.5/12.5 %: 4, 2, 1, 1.
  EXPECT_EQ(ApportionEngines(std::vector<double>{4, 2, 1, 1}, 8), (V{4, 2, 1, 1}));
}

TEST(LbApportion, LargestRemainders) {
  // 10 engines, demand 47/33/20: exact 4.7, 3.3, 2.0 -> floors 4, 3, 2 (9), one left: largest
  // fraction .7 -> bucket 0: 5, 3, 2.
  EXPECT_EQ(ApportionEngines(std::vector<double>{47, 33, 20}, 10), (V{5, 3, 2}));
  // 7 engines, demand 10/20/30/40: exact 0.7, 1.4, 2.1, 2.8 -> floors 0, 1, 2, 2 (5), two
  // left: fractions .8 (b3), .7 (b0) -> 1, 1, 2, 3.
  EXPECT_EQ(ApportionEngines(std::vector<double>{10, 20, 30, 40}, 7), (V{1, 1, 2, 3}));
}

TEST(LbApportion, TiesGoToLargerDemandThenLowerIndex) {
  // 4 engines over three equal demands: 1.333 each -> 1, 1, 1 and one left; equal fractions
  // and equal demands -> the lowest index.
  EXPECT_EQ(ApportionEngines(std::vector<double>{1, 1, 1, 0}, 4), (V{2, 1, 1, 0}));
  // 2 engines, demand 3/1/3/1 (D = 8): exact 0.75, 0.25, 0.75, 0.25 -> floors all 0, two
  // left: fractions tie at .75 between b0 and b2, demands tie -> both get one.
  EXPECT_EQ(ApportionEngines(std::vector<double>{3, 1, 3, 1}, 2), (V{1, 0, 1, 0}));
  // 1 engine, demand 1/2/2 (D = 5): exact .2, .4, .4 -> b1 (tie with b2 on fraction and demand,
  // lower index).
  EXPECT_EQ(ApportionEngines(std::vector<double>{1, 2, 2}, 1), (V{0, 1, 0}));
}

TEST(LbApportion, EveryBucketWithDemandKeepsOne) {
  // 4 engines, demand 40/30/20/10: exact 1.6, 1.2, 0.8, 0.4 -> floors 1, 1, 0, 0, two left:
  // fractions .8 (b2), .6 (b0) -> 2, 1, 1, 0. Bucket 3 has demand and no engine: the donor is
  // the bucket with >= 2 engines most over its share: b0 (2 - 1.6 = .4) -> 1, 1, 1, 1.
  EXPECT_EQ(ApportionEngines(std::vector<double>{40, 30, 20, 10}, 4), (V{1, 1, 1, 1}));
  // 8 engines, demand 100/0/0/1: exact 7.92, 0, 0, .079 -> 7 + the remainder to b0 = 8, 0, 0,
  // 0; b3 takes one from b0 -> 7, 0, 0, 1. Buckets without demand get none.
  EXPECT_EQ(ApportionEngines(std::vector<double>{100, 0, 0, 1}, 8), (V{7, 0, 0, 1}));
  // 6 engines, demand 50/45/4/1 (D = 100): exact 3.0, 2.7, .24, .06 -> 3, 2, 0, 0, one left:
  // .7 -> b1: 3, 3, 0, 0. Starved b2 (demand 4) first: donors b0 (3 - 3.0 = 0), b1
  // (3 - 2.7 = .3) -> b1: 3, 2, 1, 0. Then b3: donors b0 (0), b1 (2 - 2.7 = -.7) -> b0:
  // 2, 2, 1, 1.
  EXPECT_EQ(ApportionEngines(std::vector<double>{50, 45, 4, 1}, 6), (V{2, 2, 1, 1}));
}

TEST(LbApportion, FewerEnginesThanBucketsWithDemand) {
  // 2 engines, demand 5/4/3/2 (D = 14): exact .71, .57, .43, .29 -> the two largest
  // fractions; no minimum is possible, so the rest stay at 0 (served by stealing).
  EXPECT_EQ(ApportionEngines(std::vector<double>{5, 4, 3, 2}, 2), (V{1, 1, 0, 0}));
}

TEST(LbApportion, DegenerateInputs) {
  EXPECT_EQ(ApportionEngines(std::vector<double>{0, 0, 0, 0}, 4), (V{0, 0, 0, 0}));
  EXPECT_EQ(ApportionEngines(std::vector<double>{1, 2, 3, 4}, 0), (V{0, 0, 0, 0}));
  EXPECT_EQ(ApportionEngines(std::vector<double>{-5, 1, 0, 0}, 3), (V{0, 3, 0, 0}));
  // The sum is always the engine count when there is demand.
  for (uint32_t engines = 1; engines <= 64; ++engines) {
    const V c = ApportionEngines(std::vector<double>{0.3, 1e-9, 7, 1.0 / 3}, engines);
    EXPECT_EQ(std::accumulate(c.begin(), c.end(), 0u), engines) << engines;
  }
}

TEST(LbReassign, EnginesStayWhenTheirBucketKeepsItsCount) {
  const std::vector<bool> up(6, true);
  // Current: engines 0,1,2 in b0, 3,4 in b1, 5 in b2. New counts 3, 1, 2: b0 unchanged, so
  // 0,1,2 stay; b1 keeps its lowest (3) and releases 4, which goes to b2.
  const V now = ReassignEngines(V{0, 0, 0, 1, 1, 2}, V{3, 1, 2}, up);
  EXPECT_EQ(now, (V{0, 0, 0, 1, 2, 2}));
  // The same counts again move nothing.
  EXPECT_EQ(ReassignEngines(now, V{3, 1, 2}, up), now);
}

TEST(LbReassign, MovesOnlyTheSurplus) {
  const std::vector<bool> up(8, true);
  // All 8 in b0; new split 5/2/1/0: b0 keeps 0-4, released 5,6,7 fill b1 (5,6) then b2 (7).
  const V now = ReassignEngines(V(8, 0), V{5, 2, 1, 0}, up);
  EXPECT_EQ(now, (V{0, 0, 0, 0, 0, 1, 1, 2}));
  // Then 4/2/1/1: only one engine moves (b0's highest, 4, to b3).
  const V next = ReassignEngines(now, V{4, 2, 1, 1}, up);
  EXPECT_EQ(next, (V{0, 0, 0, 0, 3, 1, 1, 2}));
  uint32_t moved = 0;
  for (size_t e = 0; e < 8; ++e) moved += now[e] != next[e];
  EXPECT_EQ(moved, 1u);
}

TEST(LbReassign, UnavailableEnginesHoldNoBucket) {
  std::vector<bool> up(4, true);
  up[1] = false;
  const V now = ReassignEngines(V{0, 0, 1, kNoBucket}, V{1, 2}, up);
  // Engine 0 stays in b0, engine 2 stays in b1, the new engine 3 fills b1's second place.
  EXPECT_EQ(now, (V{0, kNoBucket, 1, 1}));
}

TEST(LbBucketPlan, ResplitByDemandAndKeepOnIdleRound) {
  BucketPlan plan(Buckets::Recipe(), 4);
  EXPECT_EQ(plan.Counts(), (V{4, 0, 0, 0}));  // no demand known yet: all in bucket 0
  EXPECT_EQ(plan.Resplit(std::vector<double>{40, 30, 20, 10}), 3u);
  EXPECT_EQ(plan.Counts(), (V{1, 1, 1, 1}));
  EXPECT_EQ(plan.bucket_of(0), 0u);  // the lowest index stayed
  EXPECT_EQ(plan.Resplit(std::vector<double>{0, 0, 0, 0}), 0u);  // idle round: unchanged
  EXPECT_EQ(plan.Counts(), (V{1, 1, 1, 1}));
}

TEST(LbBucketPlan, EngineLeavingAndRejoining) {
  BucketPlan plan(Buckets::Recipe(), 4, std::vector<double>{1, 1, 0, 0});
  EXPECT_EQ(plan.Counts(), (V{2, 2, 0, 0}));
  // Engines 0, 1 in b0 and 2, 3 in b1. Without engine 0, 3 engines by 1:1 -> 2, 1 (tie: lower
  // index): engine 3 moves to b0, the others stay.
  plan.SetAvailable(0, false);
  EXPECT_EQ(plan.bucket_of(0), kNoBucket);
  EXPECT_EQ(plan.Counts(), (V{2, 1, 0, 0}));
  EXPECT_EQ(plan.bucket_of(1), 0u);
  EXPECT_EQ(plan.bucket_of(2), 1u);
  EXPECT_EQ(plan.bucket_of(3), 0u);
  plan.SetAvailable(0, true);  // back to 2, 2: engine 0 fills b1
  EXPECT_EQ(plan.Counts(), (V{2, 2, 0, 0}));
  EXPECT_EQ(plan.bucket_of(0), 1u);
}

}  // namespace
}  // namespace ladle::lb
