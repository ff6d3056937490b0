// The decode balancer: DualPath's rule, judged per candidate set; saturation; the recipe's
// short/long heuristic; dispatch-time counting; the naive alternatives.
#include <gtest/gtest.h>

#include <vector>

#include "ladle/lb/decode_lb.h"

namespace ladle::lb {
namespace {

using R = DecodeRankLoad;

DecodeLbConfig Verbatim() {
  DecodeLbConfig c;
  c.judge_with_incoming = false;
  return c;
}

TEST(LbDecodeRule, FewestRequestsAmongTheNotHigh) {
  // Mean tokens 1000, threshold 1050: rank 1 (1100) is high although it has the fewest
  // requests; among 0 and 2, rank 2 has fewer requests.
  const std::vector<R> ranks{{5, 1000}, {1, 1100}, {3, 900}};
  EXPECT_EQ(PickDecodeRank(ranks, 10, Verbatim()), 2u);
}

TEST(LbDecodeRule, AllHighTakesFewestTokens) {
  // With the incoming prompt counted, a 10,000-token prompt puts every rank over 1.05 × the
  // mean after it ((3000 + 10000) / 3 · 1.05 = 4550): the fewest tokens wins.
  const std::vector<R> ranks{{1, 1000}, {9, 900}, {4, 1100}};
  EXPECT_EQ(PickDecodeRank(ranks, 10000, DecodeLbConfig{}), 1u);
}

TEST(LbDecodeRule, TiesByIndex) {
  const std::vector<R> ranks{{2, 500}, {2, 500}, {2, 500}};
  EXPECT_EQ(PickDecodeRank(ranks, 1, Verbatim()), 0u);
  EXPECT_EQ(PickDecodeRank(ranks, 1, DecodeLbConfig{}), 0u);
  EXPECT_EQ(PickDecodeRank(std::vector<R>{}, 1, DecodeLbConfig{}), std::nullopt);
}

TEST(LbDecodeRule, ThresholdIsConfigurable) {
  const std::vector<R> ranks{{5, 1000}, {1, 1100}, {3, 900}};
  DecodeLbConfig c = Verbatim();
  c.high_factor = 1.2;  // threshold 1200: nobody is high, rank 1 has the fewest requests
  EXPECT_EQ(PickDecodeRank(ranks, 10, c), 1u);
}

TEST(LbDecodeRule, ImbalanceIsJudgedPerCandidateSet) {
  // Rank 0 is saturated with a huge KV. Fleet-wide the mean would be (90000 + 1000 + 1200) / 3
  // ≈ 30733 and no candidate would be high, so the fewest-requests rank 2 would win. Over the
  // candidate set {1, 2} the mean is 1100, threshold 1155: rank 2 (1200) is high, rank 1 wins.
  DecodeLbConfig c = Verbatim();
  c.max_requests = 10;
  const std::vector<R> ranks{{10, 90000}, {4, 1000}, {1, 1200}};
  EXPECT_EQ(PickDecodeRank(ranks, 10, c), 1u);
  // Same through the flag rather than the cap.
  const std::vector<R> flagged{{1, 90000, true}, {4, 1000}, {1, 1200}};
  EXPECT_EQ(PickDecodeRank(flagged, 10, Verbatim()), 1u);
}

TEST(LbDecodeRule, SaturatedNeverChosenWhileAnUnsaturatedExists) {
  DecodeLbConfig c;
  c.max_requests = 4;
  c.max_kv_tokens = 10000;
  // Rank 0: at max requests (and the lightest). Rank 1: its KV would pass the cap with this
  // prompt. Rank 2: flagged. Rank 3: heavy but unsaturated: the only choice.
  const std::vector<R> ranks{{4, 0}, {1, 9500}, {0, 0, true}, {3, 9000}};
  EXPECT_EQ(PickDecodeRank(ranks, 600, c), 3u);
  // Nobody fits: no route (the caller queues), never a saturated rank.
  EXPECT_EQ(PickDecodeRank(ranks, 1500, c), std::nullopt);
}

TEST(LbDecodeRule, ShortToLowConcurrencyHighKvLongToLowKv) {
  // Rank 0: 2 long requests (96K tokens); rank 1: 8 short ones (90K); rank 2: 8 (94K). Mean 93.3K.
  const std::vector<R> ranks{{2, 96000}, {8, 90000}, {8, 94000}};
  const DecodeLbConfig c;
  // A short prompt: the mean after it is 93.5K, threshold 98.2K, nobody crosses it, and rank 0
  // has the fewest requests although it holds the most KV: the batch sizes even out.
  EXPECT_EQ(PickDecodeRank(ranks, 500, c), 0u);
  // A long prompt (20K): mean after 100K, threshold 105K; every rank would pass it, so the one
  // with the least KV takes it: the attention costs even out.
  EXPECT_EQ(PickDecodeRank(ranks, 20000, c), 1u);
  // Without the incoming prompt the rule is length-blind: both go to rank 0.
  EXPECT_EQ(PickDecodeRank(ranks, 500, Verbatim()), 0u);
  EXPECT_EQ(PickDecodeRank(ranks, 20000, Verbatim()), 0u);
}

TEST(LbDecodeBalancer, CountedAtDispatch) {
  DecodeBalancer lb(DecodePolicy::kDualPath, DecodeLbConfig{}, Topology::Uniform(2, 2));
  // A burst of four routes with no report in between spreads over all four ranks: each Route
  // sees the ones before it.
  std::vector<uint32_t> flats;
  for (RequestId id = 1; id <= 4; ++id) {
    const auto t = lb.Route(id, 1000);
    ASSERT_TRUE(t.has_value());
    flats.push_back(lb.topology().Flat(*t));
  }
  std::sort(flats.begin(), flats.end());
  EXPECT_EQ(flats, (std::vector<uint32_t>{0, 1, 2, 3}));
  const uint32_t f1 = *lb.ledger().RankOf(1);
  EXPECT_EQ(lb.ledger().rank(f1).requests, 1u);
  EXPECT_DOUBLE_EQ(lb.ledger().rank(f1).load, 1000);
  EXPECT_TRUE(lb.Grow(1, 5));
  EXPECT_DOUBLE_EQ(lb.ledger().rank(f1).load, 1005);
  EXPECT_TRUE(lb.Release(1));
  EXPECT_FALSE(lb.Release(1));
  EXPECT_FALSE(lb.Grow(1, 1));
  EXPECT_EQ(lb.ledger().rank(f1).requests, 0u);
  EXPECT_DOUBLE_EQ(lb.ledger().rank(f1).load, 0);
}

TEST(LbDecodeBalancer, RerouteMovesTheLoad) {
  DecodeBalancer lb(DecodePolicy::kDualPath, DecodeLbConfig{}, Topology::Uniform(2, 1));
  ASSERT_EQ(lb.Route(1, 100)->engine, 0u);
  lb.SetAvailable(0, false);  // instance 0 dies: its request is re-routed
  for (RequestId id : lb.ledger().RequestsOn(0, 1)) {
    ASSERT_TRUE(lb.Release(id));
    ASSERT_EQ(lb.Route(id, 100)->engine, 1u);
  }
  EXPECT_EQ(lb.ledger().rank(0).requests, 0u);
  EXPECT_EQ(lb.ledger().rank(1).requests, 1u);
  lb.SetAvailable(1, false);
  EXPECT_FALSE(lb.Route(2, 100).has_value());  // no instance alive: the caller answers 503
}

TEST(LbDecodeBalancer, SaturationFromCapsAndReports) {
  DecodeLbConfig c;
  c.max_requests = 1;
  for (DecodePolicy p : {DecodePolicy::kDualPath, DecodePolicy::kRoundRobin, DecodePolicy::kLeastRequests}) {
    DecodeBalancer lb(p, c, Topology::Uniform(1, 3));
    lb.SetSaturated({0, 1}, true);
    const auto a = lb.Route(1, 10), b = lb.Route(2, 10);
    ASSERT_TRUE(a && b) << lb.name();
    EXPECT_NE(a->rank, 1u);
    EXPECT_NE(b->rank, 1u);
    EXPECT_NE(a->rank, b->rank);
    EXPECT_FALSE(lb.Route(3, 10).has_value()) << lb.name();  // 0, 2 full, 1 flagged
    lb.SetSaturated({0, 1}, false);
    EXPECT_EQ(lb.Route(3, 10)->rank, 1u);
  }
}

TEST(LbDecodeBalancer, NaivePolicies) {
  DecodeBalancer rr(DecodePolicy::kRoundRobin, DecodeLbConfig{}, Topology::Uniform(2, 2));
  std::vector<uint32_t> seen;
  for (RequestId id = 1; id <= 5; ++id) seen.push_back(rr.topology().Flat(*rr.Route(id, 100000 * id)));
  EXPECT_EQ(seen, (std::vector<uint32_t>{0, 1, 2, 3, 0}));  // blind to tokens

  DecodeBalancer lr(DecodePolicy::kLeastRequests, DecodeLbConfig{}, Topology::Uniform(1, 2));
  lr.Route(1, 100000);
  lr.Route(2, 10);
  EXPECT_EQ(lr.Route(3, 10)->rank, 0u);  // one request each: the lower index, under 100K tokens
  EXPECT_EQ(*ParseDecodePolicy("dualpath"), DecodePolicy::kDualPath);
  EXPECT_FALSE(ParseDecodePolicy("random").ok());
}

}  // namespace
}  // namespace ladle::lb
