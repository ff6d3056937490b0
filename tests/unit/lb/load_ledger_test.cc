// Topology addressing and the ledger's accounting.
#include <gtest/gtest.h>

#include "ladle/lb/load_ledger.h"

namespace ladle::lb {
namespace {

TEST(LbTopology, FlatIndices) {
  const Topology t({2, 3, 1});
  EXPECT_EQ(t.engines(), 3u);
  EXPECT_EQ(t.ranks(), 6u);
  EXPECT_EQ(t.Flat(1, 2), 4u);
  EXPECT_EQ(t.first_flat(2), 5u);
  EXPECT_EQ(t.TargetOf(4), (RankTarget{1, 2}));
  EXPECT_EQ(t.TargetOf(0), (RankTarget{0, 0}));
  EXPECT_EQ(t.TargetOf(5), (RankTarget{2, 0}));
}

TEST(LbLedger, AssignReleaseAdjust) {
  LoadLedger l(3);
  l.Assign(7, 1, 0.1);
  l.Assign(8, 1, 0.2);
  EXPECT_EQ(l.rank(1).requests, 2u);
  EXPECT_NEAR(l.rank(1).load, 0.3, 1e-12);
  EXPECT_TRUE(l.Adjust(7, 1.0));
  EXPECT_NEAR(*l.LoadOf(7), 1.1, 1e-12);
  EXPECT_TRUE(l.Set(8, 5));
  EXPECT_NEAR(l.rank(1).load, 6.1, 1e-12);
  EXPECT_EQ(l.RankOf(8), 1u);
  EXPECT_EQ(l.RequestsOn(1, 1), (std::vector<RequestId>{7, 8}));
  EXPECT_TRUE(l.Release(7));
  EXPECT_FALSE(l.Release(7));
  EXPECT_FALSE(l.Adjust(7, 1));
  EXPECT_TRUE(l.Release(8));
  // Empty is exactly zero, whatever float residue the sums left.
  EXPECT_EQ(l.rank(1).load, 0.0);
  EXPECT_EQ(l.size(), 0u);
}

TEST(LbLedgerDeath, DoubleAssignIsABug) {
  LoadLedger l(1);
  l.Assign(1, 0, 1);
  EXPECT_DEATH(l.Assign(1, 0, 1), "");
}

}  // namespace
}  // namespace ladle::lb
