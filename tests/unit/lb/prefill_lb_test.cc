// The prefill balancer's layers 2 and 3 (pull by remaining quota, lowest-quota DP rank), its
// load accounting on every path, and the naive routers. Quota is QuotaCost{a = 1}: a request's
// quota is its uncached tokens, so the arithmetic reads off the test.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "ladle/lb/prefill_lb.h"

namespace ladle::lb {
namespace {

PrefillLbConfig Config(Steal steal = Steal::kOrphans, std::vector<double> initial = {}) {
  PrefillLbConfig c;
  c.cost = QuotaCost{.a = 1};
  c.steal = steal;
  c.initial_demand = std::move(initial);
  return c;
}

std::vector<RequestId> Ids(const std::vector<PrefillDispatch>& ds) {
  std::vector<RequestId> out;
  for (const auto& d : ds) out.push_back(d.id);
  return out;
}

TEST(LbQuotaCost, MatchesTheEngineForm) {
  const QuotaCost c{.a = 2, .b = 0.5, .d = 0.25, .e = 100, .f = 3};
  // 2·10 + 0.5·10·20 + 0.25·100 + 3·20 + 100 = 20 + 100 + 25 + 60 + 100
  EXPECT_DOUBLE_EQ(c.Cost(10, 20), 305);
  EXPECT_DOUBLE_EQ(c.RequestCost(30, 20), 305);
  EXPECT_DOUBLE_EQ(c.RequestCost(30, 99), c.Cost(0, 30));  // an overstated hit is clamped
}

TEST(LbPickRank, LowestQuotaThenFewestRequestsThenIndex) {
  EXPECT_EQ(PickRank(std::vector<RankLoad>{{3, 50}, {1, 20}, {9, 30}}), 1u);
  EXPECT_EQ(PickRank(std::vector<RankLoad>{{3, 20}, {2, 20}, {2, 20}}), 1u);
  EXPECT_EQ(PickRank(std::vector<RankLoad>{{0, 0}, {0, 0}}), 0u);
}

TEST(LbPrefill, PullIsFifoWhileTheQuotaFits) {
  PrefillBalancer lb(Config(), Topology::Uniform(1, 1));
  lb.Submit({1, 10, 0});
  lb.Submit({2, 20, 0});
  lb.Submit({3, 5, 0});
  // 10 fits 25; 20 does not fit the 15 left, and 3 behind it does not jump the queue.
  EXPECT_EQ(Ids(lb.Pull(0, 25)), (std::vector<RequestId>{1}));
  EXPECT_EQ(Ids(lb.Pull(0, 25)), (std::vector<RequestId>{2, 3}));
  EXPECT_EQ(lb.queued(), 0u);
}

TEST(LbPrefill, AnIdleEngineAlwaysTakesOne) {
  PrefillBalancer lb(Config(), Topology::Uniform(2, 1));
  lb.Submit({1, 1000, 0});
  lb.Submit({2, 1000, 0});
  EXPECT_EQ(Ids(lb.Pull(0, 10)), (std::vector<RequestId>{1}));  // too big for any quota: still runs
  EXPECT_TRUE(lb.Pull(0, 10).empty());                         // not idle now: waits for room
  EXPECT_EQ(Ids(lb.Pull(1, 0)), (std::vector<RequestId>{2}));
}

TEST(LbPrefill, AnEmptyRankTakesTheHeadWhateverTheQuota) {
  // The DP ranks of a group meet at every step: an empty rank would idle, so it is fed first.
  PrefillBalancer lb(Config(), Topology::Uniform(1, 2));
  lb.Submit({1, 500, 0});
  lb.Submit({2, 500, 0});
  lb.Submit({3, 500, 0});
  const auto ds = lb.Pull(0, 100);  // none fits 100, but both ranks are empty
  ASSERT_EQ(Ids(ds), (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(ds[0].target.rank, 0u);
  EXPECT_EQ(ds[1].target.rank, 1u);
  EXPECT_TRUE(lb.Pull(0, 100).empty());
  lb.Release(2);
  EXPECT_EQ(lb.Pull(0, 0).at(0).target.rank, 1u);
}

TEST(LbPrefill, LoadIsCountedAtDispatch) {
  PrefillBalancer lb(Config(), Topology::Uniform(1, 2));
  for (RequestId id = 1; id <= 3; ++id) lb.Submit({id, 10, 0});
  const auto ds = lb.Pull(0, 100);
  ASSERT_EQ(ds.size(), 3u);
  // Each pick sees the ones before it, with no report in between: 0 (tie, lower index), then 1
  // (0 holds 10), then 0 (10 vs 10, one request each: lower index).
  EXPECT_EQ(ds[0].target.rank, 0u);
  EXPECT_EQ(ds[1].target.rank, 1u);
  EXPECT_EQ(ds[2].target.rank, 0u);
  EXPECT_DOUBLE_EQ(lb.ledger().rank(0).load, 20);
  EXPECT_EQ(lb.ledger().rank(0).requests, 2u);
  EXPECT_DOUBLE_EQ(lb.ledger().rank(1).load, 10);
  EXPECT_DOUBLE_EQ(lb.EngineLoad(0), 30);
}

TEST(LbPrefill, CachedPrefixLowersTheQuota) {
  PrefillBalancer lb(Config(), Topology::Uniform(1, 2));
  lb.Submit({1, 1000, 900});  // 100 uncached
  lb.Submit({2, 300, 0});
  const auto ds = lb.Pull(0, 1e9);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_DOUBLE_EQ(ds[0].quota, 100);
  EXPECT_DOUBLE_EQ(ds[1].quota, 300);
}

TEST(LbPrefill, EveryPathUpdatesLoad) {
  PrefillBalancer lb(Config(), Topology::Uniform(2, 1));
  lb.Submit({1, 10, 0});
  lb.Submit({2, 20, 0});
  // First try: engine 0 takes 1.
  ASSERT_EQ(Ids(lb.Pull(0, 10)), (std::vector<RequestId>{1}));
  EXPECT_DOUBLE_EQ(lb.EngineLoad(0), 10);
  // Retry (the send failed): off engine 0, back at the head, ahead of 2.
  EXPECT_TRUE(lb.Requeue(1));
  EXPECT_DOUBLE_EQ(lb.EngineLoad(0), 0);
  EXPECT_FALSE(lb.Requeue(1));  // not dispatched any more
  EXPECT_EQ(Ids(lb.Pull(1, 10)), (std::vector<RequestId>{1}));
  EXPECT_DOUBLE_EQ(lb.EngineLoad(1), 10);
  // Re-route (engine 1 dies): its requests come off and go to engine 0.
  lb.SetAvailable(1, false);
  EXPECT_TRUE(lb.Pull(1, 100).empty());
  for (RequestId id : lb.ledger().RequestsOn(lb.topology().first_flat(1), 1)) EXPECT_TRUE(lb.Requeue(id));
  EXPECT_DOUBLE_EQ(lb.EngineLoad(1), 0);
  EXPECT_EQ(Ids(lb.Pull(0, 100)), (std::vector<RequestId>{1, 2}));
  EXPECT_DOUBLE_EQ(lb.EngineLoad(0), 30);
  // Finish and cancel release once; a second release is a no-op.
  EXPECT_TRUE(lb.Release(1));
  EXPECT_FALSE(lb.Release(1));
  EXPECT_TRUE(lb.Cancel(2));
  EXPECT_FALSE(lb.Cancel(2));
  EXPECT_DOUBLE_EQ(lb.EngineLoad(0), 0);
  EXPECT_EQ(lb.ledger().size(), 0u);
}

TEST(LbPrefill, CancelWhileQueued) {
  PrefillBalancer lb(Config(), Topology::Uniform(1, 1));
  lb.Submit({1, 10, 0});
  lb.Submit({2, 10, 0});
  EXPECT_TRUE(lb.Cancel(1));
  EXPECT_EQ(Ids(lb.Pull(0, 100)), (std::vector<RequestId>{2}));
}

TEST(LbPrefill, EnginesServeTheirBucket) {
  // 2 engines, initial split 1:1 over buckets 0 and 1.
  PrefillBalancer lb(Config(Steal::kOrphans, {1, 1, 0, 0}), Topology::Uniform(2, 1));
  ASSERT_EQ(lb.plan().bucket_of(0), 0u);
  ASSERT_EQ(lb.plan().bucket_of(1), 1u);
  lb.Submit({1, 20000, 0});  // bucket 1
  lb.Submit({2, 100, 0});    // bucket 0
  EXPECT_EQ(Ids(lb.Pull(0, 1e9)), (std::vector<RequestId>{2}));
  EXPECT_EQ(Ids(lb.Pull(1, 1e9)), (std::vector<RequestId>{1}));
  // Bucket 0 has an engine, so an empty-queued bucket-1 engine does not steal from it.
  lb.Submit({3, 100, 0});
  EXPECT_TRUE(lb.Pull(1, 1e9).empty());
  // Bucket 2 has no engine: an orphan, so whoever runs dry serves it.
  lb.Submit({4, 70000, 0});
  EXPECT_EQ(Ids(lb.Pull(1, 1e9)), (std::vector<RequestId>{4}));
}

TEST(LbPrefill, StealPolicies) {
  for (Steal steal : {Steal::kNone, Steal::kOrphans, Steal::kIdleRanks, Steal::kAny}) {
    PrefillBalancer lb(Config(steal, {1, 1, 0, 0}), Topology::Uniform(2, 1));
    lb.Submit({1, 100, 0});      // bucket 0 (has engine 0)
    lb.Submit({2, 300000, 0});   // bucket 3 (orphan)
    const auto got = Ids(lb.Pull(1, 1e12));
    switch (steal) {
      case Steal::kNone: EXPECT_TRUE(got.empty()); break;
      case Steal::kOrphans: EXPECT_EQ(got, (std::vector<RequestId>{2})); break;
      // Nearest first (bucket 0), and only into the empty rank: one request.
      case Steal::kIdleRanks: EXPECT_EQ(got, (std::vector<RequestId>{1})); break;
      // Nearest length first: bucket 0 and bucket 2 are both one away from 1 (0 is lower), then 3.
      case Steal::kAny: EXPECT_EQ(got, (std::vector<RequestId>{1, 2})); break;
    }
  }
}

TEST(LbPrefill, RoundsResplitByQuotaDemand) {
  PrefillBalancer lb(Config(), Topology::Uniform(4, 2));
  EXPECT_EQ(lb.plan().Counts(), (std::vector<uint32_t>{4, 0, 0, 0}));
  // Demand this round: bucket 0 10K quota, bucket 1 20K, bucket 2 70K: of 4 engines, exact
  // .4, .8, 2.8 -> floors 0, 0, 2, and the two engines left go to the fractions .8 (b1, b2):
  // 0, 1, 3; b0 has demand and no engine: b2 (3 - 2.8 = .2 over) gives one: 1, 1, 2.
  lb.Submit({1, 10000, 0});
  lb.Submit({2, 20000, 0});
  lb.Submit({3, 70000, 0});
  EXPECT_DOUBLE_EQ(lb.round_demand()[2], 70000);
  lb.EndRound();
  EXPECT_EQ(lb.plan().Counts(), (std::vector<uint32_t>{1, 1, 2, 0}));
  EXPECT_DOUBLE_EQ(lb.round_demand()[2], 0);  // reset for the next round
  lb.EndRound();                              // an idle round keeps the split
  EXPECT_EQ(lb.plan().Counts(), (std::vector<uint32_t>{1, 1, 2, 0}));
}

TEST(LbPrefill, BacklogCountsAsDemand) {
  for (bool backlog : {false, true}) {
    PrefillLbConfig c = Config();
    c.backlog_in_demand = backlog;
    PrefillBalancer lb(c, Topology::Uniform(4, 1));
    lb.Submit({1, 20000, 0});  // bucket 1
    lb.Submit({2, 70000, 0});  // bucket 2, quota 70000
    lb.Submit({3, 20000, 0});  // bucket 1: 40000 in all
    // 40:70 of 4 engines: exact 1.45, 2.55 -> floors 1, 2; the last engine to the larger
    // fraction (.55, bucket 2): 0, 1, 3. This round's arrivals are not backlog yet.
    lb.EndRound();
    EXPECT_EQ(lb.plan().Counts(), (std::vector<uint32_t>{0, 1, 3, 0}));
    // Nobody pulled. Round two brings only a short prompt (4000). By arrivals bucket 0 takes
    // every engine. Counting the older backlog too (4000, 40000, 70000 of 114000: exact .14,
    // 1.40, 2.46 -> floors 0, 1, 2, the last engine to the largest fraction, .46 (bucket 2):
    // 0, 1, 3; bucket 0 has demand and no engine, and takes one from bucket 2, the only one
    // with two or more), the backlogged buckets keep engines: 1, 1, 2.
    lb.Submit({4, 4000, 0});
    lb.EndRound();
    EXPECT_EQ(lb.plan().Counts(), backlog ? (std::vector<uint32_t>{1, 1, 2, 0}) : (std::vector<uint32_t>{4, 0, 0, 0}))
        << backlog;
  }
}

// Random operations against a model of what must be counted: the ledger always equals the
// sum of the dispatched, unreleased requests' quotas, per engine.
TEST(LbPrefill, LedgerStaysConsistentUnderRandomOperations) {
  for (const char* name : {"lb", "round-robin", "least-requests"}) {
    auto router = MakePrefillRouter(name, Config(Steal::kAny), Topology::Uniform(3, 2));
    ASSERT_TRUE(router.ok());
    PrefillRouter& r = **router;
    std::mt19937_64 rng(7);
    std::map<RequestId, std::pair<uint32_t, double>> live;  // dispatched: engine, quota
    std::vector<RequestId> ids;
    RequestId next = 1;
    for (int step = 0; step < 3000; ++step) {
      const int op = static_cast<int>(rng() % 6);
      if (op <= 1) {
        const int64_t len = 1 + static_cast<int64_t>(rng() % 100000);
        r.Submit({next, len, static_cast<int64_t>(rng() % (len + 1))});
        ids.push_back(next++);
      } else if (op == 2) {
        const auto e = static_cast<uint32_t>(rng() % 3);
        for (const auto& d : r.Pull(e, static_cast<double>(rng() % 200000))) {
          EXPECT_EQ(d.target.engine, e);
          live[d.id] = {e, d.quota};
        }
      } else if (!ids.empty()) {
        const RequestId id = ids[rng() % ids.size()];
        const bool was = live.contains(id);
        if (op == 3) {
          EXPECT_EQ(r.Release(id), was);
          live.erase(id);
        } else if (op == 4) {
          EXPECT_EQ(r.Requeue(id), was);
          live.erase(id);
        } else {
          r.Cancel(id);
          live.erase(id);
        }
      }
      if (op == 5 && step % 50 == 0) r.EndRound();
      // Naive routers dispatch at Submit; collect what they routed so the model sees it.
      if (r.name() != "lb") {
        for (uint32_t e = 0; e < 3; ++e) {
          for (const auto& d : r.Pull(e, 0)) live[d.id] = {e, d.quota};
        }
      }
      std::vector<double> want(3, 0.0);
      for (const auto& [id, eq] : live) want[eq.first] += eq.second;
      for (uint32_t e = 0; e < 3; ++e) ASSERT_NEAR(r.EngineLoad(e), want[e], 1e-6 * (1 + want[e])) << name << step;
      ASSERT_EQ(r.ledger().size(), live.size()) << name;
    }
  }
}

TEST(LbPrefillNaive, RoundRobinCyclesOverEveryRank) {
  auto rr = MakePrefillRouter("round-robin", Config(), Topology::Uniform(2, 2));
  ASSERT_TRUE(rr.ok());
  for (RequestId id = 1; id <= 5; ++id) (*rr)->Submit({id, 10, 0});
  // Counted at Submit, before anyone pulls.
  EXPECT_DOUBLE_EQ((*rr)->EngineLoad(0), 30);  // flat ranks 0, 1 then 0 again (request 5)
  const auto e0 = (*rr)->Pull(0, 0), e1 = (*rr)->Pull(1, 0);
  EXPECT_EQ(Ids(e0), (std::vector<RequestId>{1, 2, 5}));
  EXPECT_EQ(Ids(e1), (std::vector<RequestId>{3, 4}));
  EXPECT_EQ(e0[1].target.rank, 1u);
  (*rr)->SetAvailable(0, false);
  (*rr)->Submit({6, 10, 0});
  EXPECT_EQ((*rr)->Pull(1, 0).at(0).target.engine, 1u);
}

TEST(LbPrefillNaive, LeastRequestsIgnoresSize) {
  auto lr = MakePrefillRouter("least-requests", Config(), Topology::Uniform(1, 2));
  ASSERT_TRUE(lr.ok());
  (*lr)->Submit({1, 100000, 0});
  (*lr)->Submit({2, 10, 0});
  (*lr)->Submit({3, 10, 0});  // ranks tie at one request: the lower index, under the big one
  const auto ds = (*lr)->Pull(0, 0);
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds[2].target.rank, 0u);
  EXPECT_FALSE(MakePrefillRouter("random", Config(), Topology::Uniform(1, 1)).ok());
}

}  // namespace
}  // namespace ladle::lb
