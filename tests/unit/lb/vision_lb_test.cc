// The Vision Encoder Load Balancer: patch counting, the fewest-patches worker pick (ties, dead
// workers, none left), the per-machine ledger against a brute-force model over random
// sequences, the random machine pick (uniformity, dead machines, re-route excluding the machines
// already tried) and the round-robin alternative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "ladle/lb/vision_lb.h"

namespace ladle::lb {
namespace {

using W = VisionWorkerLoad;

TEST(VisionPatches, CeilingOfEachSide) {
  EXPECT_EQ(ImagePatches(224, 224, 14), 16 * 16);  // exact grid: floor and ceiling agree
  EXPECT_EQ(ImagePatches(2048, 1024, 16), 128 * 64);
  EXPECT_EQ(ImagePatches(225, 224, 14), 17 * 16);  // one pixel over: a padded edge column
  EXPECT_EQ(ImagePatches(10, 10, 14), 1);          // smaller than a patch still costs one
  EXPECT_EQ(ImagePatches(0, 512, 16), 0);
  EXPECT_EQ(ImagePatches(512, 0, 16), 0);
}

TEST(VisionPatches, SixtyFourBitsAndChecks) {
  const int big = std::numeric_limits<int>::max();  // (2^31 - 1)^2 overflows 32 bits
  EXPECT_EQ(ImagePatches(big, big, 1), int64_t{big} * big);
  EXPECT_EQ(ImagePatches(big, big, big), 1);
  EXPECT_DEATH(ImagePatches(16, 16, 0), "patch > 0");
  EXPECT_DEATH(ImagePatches(-1, 16, 16), "width >= 0");
}

TEST(VisionWorkerPick, FewestPatches) {
  const std::vector<W> w{{5000, 1}, {1200, 3}, {4096, 1}, {1300, 1}};
  EXPECT_EQ(PickVisionWorker(w), 1u);  // patches, not images: three small images beat one big one
}

TEST(VisionWorkerPick, TiesFewerImagesThenLowerIndex) {
  EXPECT_EQ(PickVisionWorker(std::vector<W>{{1000, 4}, {1000, 2}, {1000, 2}, {2000, 0}}), 1u);
  EXPECT_EQ(PickVisionWorker(std::vector<W>{{0, 0}, {0, 0}, {0, 0}}), 0u);
  EXPECT_EQ(PickVisionWorker(std::vector<W>{{7, 1}, {3, 1}, {3, 1}}), 1u);
}

TEST(VisionWorkerPick, DeadWorkersSkipped) {
  // The idle worker 0 is dead; among the live ones worker 2 has the fewest.
  const std::vector<W> w{{0, 0, false}, {900, 1}, {800, 2}, {100, 1, false}};
  EXPECT_EQ(PickVisionWorker(w), 2u);
}

TEST(VisionWorkerPick, AllDeadOrNoneIsNothing) {
  EXPECT_EQ(PickVisionWorker(std::vector<W>{{0, 0, false}, {5, 1, false}}), std::nullopt);
  EXPECT_EQ(PickVisionWorker(std::vector<W>{}), std::nullopt);
}

TEST(VisionPolicy, Names) {
  EXPECT_EQ(*ParseVisionWorkerPolicy("lb"), VisionWorkerPolicy::kFewestPatches);
  EXPECT_EQ(*ParseVisionWorkerPolicy("fewest-patches"), VisionWorkerPolicy::kFewestPatches);
  EXPECT_EQ(*ParseVisionWorkerPolicy("round-robin"), VisionWorkerPolicy::kRoundRobin);
  EXPECT_EQ(*ParseVisionWorkerPolicy("fewest-images"), VisionWorkerPolicy::kFewestImages);
  EXPECT_FALSE(ParseVisionWorkerPolicy("random").ok());
  for (auto p : {VisionWorkerPolicy::kFewestPatches, VisionWorkerPolicy::kRoundRobin, VisionWorkerPolicy::kFewestImages})
    EXPECT_EQ(*ParseVisionWorkerPolicy(VisionWorkerPolicyName(p)), p);
}

TEST(VisionLedger, CountedAtDispatch) {
  // A burst of four 1024-patch images on 2 idle workers alternates: each Assign sees the last.
  VisionWorkerLedger l(2);
  std::vector<uint32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(*l.Assign(1024));
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1, 0, 1}));
  EXPECT_EQ(l.InFlight(0), 2048);
  EXPECT_EQ(l.Images(1), 2u);
  EXPECT_EQ(l.TotalInFlight(), 4096);
  // A big image, then small ones fill the other worker up to it.
  VisionWorkerLedger m(2);
  EXPECT_EQ(m.Assign(8192), 0u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m.Assign(1024), 1u);
  EXPECT_EQ(m.Assign(196), 0u);  // 8192 vs 8192: fewer images wins
  m.Complete(0, 8192);
  EXPECT_EQ(m.InFlight(0), 196);
  EXPECT_EQ(m.Assign(100), 0u);
}

TEST(VisionLedger, FewestPatchesBeatsRoundRobinOnAlternatingSizes) {
  // Big, small, big, small... with 2 workers: round-robin puts every big image on worker 0.
  VisionWorkerLedger lb(2), rr(2, VisionWorkerPolicy::kRoundRobin);
  for (int i = 0; i < 20; ++i) {
    const int64_t p = i % 2 == 0 ? 8192 : 196;
    lb.Assign(p);
    rr.Assign(p);
  }
  EXPECT_EQ(rr.InFlight(0), 10 * 8192);
  EXPECT_EQ(rr.InFlight(1), 10 * 196);
  EXPECT_LE(std::max(lb.InFlight(0), lb.InFlight(1)) - std::min(lb.InFlight(0), lb.InFlight(1)), 8192);
}

TEST(VisionLedger, DeadWorkersAndNoneLeft) {
  VisionWorkerLedger l(3);
  EXPECT_EQ(l.Assign(500), 0u);
  l.MarkDead(1);
  EXPECT_EQ(l.Assign(500), 2u);  // idle 1 is dead
  EXPECT_EQ(l.Assign(100), 0u);  // 500 vs 500: fewer... equal images, lower index
  l.MarkDead(0);
  l.MarkDead(2);
  EXPECT_FALSE(l.AnyAlive());
  EXPECT_EQ(l.Assign(1), std::nullopt);  // the caller re-routes to another machine
  EXPECT_EQ(l.TotalInFlight(), 1100);
  // A dead worker's images come off (before they are re-routed).
  l.Complete(0, 500);
  l.Complete(0, 100);
  EXPECT_EQ(l.InFlight(0), 0);
  l.MarkAlive(2);
  EXPECT_EQ(l.Assign(1), 2u);
  EXPECT_DEATH(l.AssignTo(1, 5), "alive");
}

TEST(VisionLedger, InFlightNeverNegative) {
  VisionWorkerLedger l(2);
  EXPECT_DEATH(l.Complete(0, 1), "w.images > 0");      // nothing assigned
  l.AssignTo(0, 300);
  EXPECT_DEATH(l.Complete(0, 301), "w.patches >= patches");  // more than in flight
  l.AssignTo(0, 200);
  l.Complete(0, 300);                    // 200 left on one image
  EXPECT_DEATH(l.Complete(0, 100), "w.patches == patches");  // the last image takes the rest
  l.Complete(0, 200);
  EXPECT_EQ(l.InFlight(0), 0);
  EXPECT_EQ(l.Images(0), 0u);
  EXPECT_DEATH(l.Complete(2, 0), "worker < workers_.size");  // no such worker
  EXPECT_DEATH(l.InFlight(2), "worker < workers_.size");
  EXPECT_DEATH(l.Assign(-1), "patches >= 0");
  EXPECT_DEATH(VisionWorkerLedger(0), "workers > 0");
}

TEST(VisionLedger, RoundRobinSkipsDeadAndKeepsItsPlace) {
  VisionWorkerLedger l(4, VisionWorkerPolicy::kRoundRobin);
  EXPECT_EQ(l.Assign(1), 0u);
  EXPECT_EQ(l.Assign(1), 1u);
  l.MarkDead(2);
  EXPECT_EQ(l.Assign(1), 3u);
  EXPECT_EQ(l.Assign(1), 0u);
  l.MarkDead(0);
  l.MarkDead(1);
  l.MarkDead(3);
  EXPECT_EQ(l.Assign(1), std::nullopt);
  l.MarkAlive(2);
  EXPECT_EQ(l.Assign(1), 2u);
  EXPECT_EQ(l.Assign(1), 2u);
}

// A brute-force model of one machine: the images on each worker as a list, every choice made by
// sorting all live workers by the policy's key.
struct Model {
  std::vector<std::vector<int64_t>> images;
  std::vector<bool> alive;
  uint32_t last_rr = UINT32_MAX;

  int64_t Sum(uint32_t w) const {
    int64_t s = 0;
    for (int64_t p : images[w]) s += p;
    return s;
  }
  std::optional<uint32_t> Choose(VisionWorkerPolicy policy) {
    std::vector<uint32_t> live;
    for (uint32_t i = 0; i < alive.size(); ++i)
      if (alive[i]) live.push_back(i);
    if (live.empty()) return std::nullopt;
    const auto n = static_cast<uint32_t>(alive.size());
    switch (policy) {
      case VisionWorkerPolicy::kFewestPatches:
        return *std::min_element(live.begin(), live.end(), [&](uint32_t a, uint32_t b) {
          return std::tuple(Sum(a), images[a].size(), a) < std::tuple(Sum(b), images[b].size(), b);
        });
      case VisionWorkerPolicy::kFewestImages:
        return *std::min_element(live.begin(), live.end(), [&](uint32_t a, uint32_t b) {
          return std::pair(images[a].size(), a) < std::pair(images[b].size(), b);
        });
      case VisionWorkerPolicy::kRoundRobin: {
        // The first live worker cyclically after the last one chosen.
        const uint32_t start = last_rr == UINT32_MAX ? 0 : (last_rr + 1) % n;
        for (uint32_t k = 0; k < n; ++k)
          if (alive[(start + k) % n]) return last_rr = (start + k) % n;
        return std::nullopt;
      }
    }
    return std::nullopt;
  }
};

TEST(VisionLedger, RandomSequencesMatchBruteForce) {
  const int64_t sizes[] = {196, 1024, 4096, 8192, 0, 1};
  for (auto policy : {VisionWorkerPolicy::kFewestPatches, VisionWorkerPolicy::kRoundRobin,
                      VisionWorkerPolicy::kFewestImages}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      std::mt19937_64 rng(seed);
      const uint32_t g = 1 + static_cast<uint32_t>(rng() % 8);
      VisionWorkerLedger l(g, policy);
      Model m{std::vector<std::vector<int64_t>>(g), std::vector<bool>(g, true)};
      for (int step = 0; step < 2000; ++step) {
        const uint64_t op = rng() % 100;
        if (op < 50) {  // an image arrives
          const int64_t p = sizes[rng() % std::size(sizes)];
          const auto want = m.Choose(policy);
          const auto got = l.Assign(p);
          ASSERT_EQ(got, want) << VisionWorkerPolicyName(policy) << " seed " << seed << " step " << step;
          if (got) m.images[*got].push_back(p);
        } else if (op < 92) {  // one finishes (any in-flight image, in any order)
          std::vector<uint32_t> busy;
          for (uint32_t i = 0; i < g; ++i)
            if (!m.images[i].empty()) busy.push_back(i);
          if (busy.empty()) continue;
          const uint32_t w = busy[rng() % busy.size()];
          const size_t k = rng() % m.images[w].size();
          const int64_t p = m.images[w][k];
          m.images[w].erase(m.images[w].begin() + static_cast<ptrdiff_t>(k));
          l.Complete(w, p);
        } else if (op < 96) {
          const uint32_t w = static_cast<uint32_t>(rng() % g);
          m.alive[w] = false;
          l.MarkDead(w);
        } else {
          const uint32_t w = static_cast<uint32_t>(rng() % g);
          m.alive[w] = true;
          l.MarkAlive(w);
        }
        int64_t total = 0;
        for (uint32_t i = 0; i < g; ++i) {
          ASSERT_EQ(l.InFlight(i), m.Sum(i));
          ASSERT_EQ(l.Images(i), m.images[i].size());
          ASSERT_EQ(l.alive(i), m.alive[i]);
          ASSERT_GE(l.InFlight(i), 0);
          total += m.Sum(i);
        }
        ASSERT_EQ(l.TotalInFlight(), total);
        // The ledger's choice is the snapshot rule's: Assign and PickVisionWorker agree.
        if (policy == VisionWorkerPolicy::kFewestPatches) {
          ASSERT_EQ(PickVisionWorker(l.loads()), m.Choose(policy));
        }
      }
    }
  }
}

TEST(VisionMachinePick, MapsTheDrawInIndexOrder) {
  const std::vector<uint32_t> none;
  EXPECT_EQ(PickVisionMachine(4, none, 0), 0u);
  EXPECT_EQ(PickVisionMachine(4, none, UINT64_MAX), 3u);
  EXPECT_EQ(PickVisionMachine(4, none, uint64_t{1} << 63), 2u);        // half way
  EXPECT_EQ(PickVisionMachine(4, none, (uint64_t{1} << 62) - 1), 0u);  // just under a quarter
  EXPECT_EQ(PickVisionMachine(4, none, uint64_t{1} << 62), 1u);
  EXPECT_EQ(PickVisionMachine(0, none, 123), std::nullopt);
  // Dead machines are skipped: the draw ranges over the live ones only.
  const std::vector<bool> alive{false, true, false, true};
  EXPECT_EQ(PickVisionMachine(alive, none, 0), 1u);
  EXPECT_EQ(PickVisionMachine(alive, none, UINT64_MAX), 3u);
  EXPECT_EQ(PickVisionMachine(std::vector<bool>{false, false}, none, 7), std::nullopt);
}

// Chi-square over `n` draws: sum (observed - expected)^2 / expected.
double ChiSquare(const std::map<uint32_t, int>& counts, uint32_t cells, int n) {
  const double e = static_cast<double>(n) / cells;
  double x = 0;
  for (const auto& [cell, c] : counts) x += (c - e) * (c - e) / e;
  x += (cells - counts.size()) * e;  // cells never hit
  return x;
}

TEST(VisionMachinePick, UniformOverLiveMachines) {
  std::mt19937_64 rng(2024);
  const int n = 100000;
  {  // 10 machines, all alive: 9 degrees of freedom, 27.88 is the 0.1 % critical value.
    std::map<uint32_t, int> counts;
    for (int i = 0; i < n; ++i) ++counts[*PickVisionMachine(10, {}, rng())];
    EXPECT_EQ(counts.size(), 10u);
    EXPECT_LT(ChiSquare(counts, 10, n), 27.88);
  }
  {  // 8 machines, 2 dead, 1 already tried: uniform over the other 5 (4 dof, 18.47).
    std::vector<bool> alive(8, true);
    alive[2] = alive[5] = false;
    const std::vector<uint32_t> tried{6};
    std::map<uint32_t, int> counts;
    for (int i = 0; i < n; ++i) ++counts[*PickVisionMachine(alive, tried, rng())];
    EXPECT_EQ(counts.size(), 5u);
    for (uint32_t bad : {2u, 5u, 6u}) EXPECT_FALSE(counts.contains(bad));
    EXPECT_LT(ChiSquare(counts, 5, n), 18.47);
  }
}

TEST(VisionMachinePick, RerouteExcludesMachinesTried) {
  // An image whose machine keeps failing visits every live machine once, then gets nothing.
  std::vector<bool> alive(6, true);
  alive[4] = false;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> tried;
    while (auto m = PickVisionMachine(alive, tried, rng())) {
      EXPECT_TRUE(alive[*m]);
      EXPECT_EQ(std::count(tried.begin(), tried.end(), *m), 0);
      tried.push_back(*m);
    }
    std::sort(tried.begin(), tried.end());
    EXPECT_EQ(tried, (std::vector<uint32_t>{0, 1, 2, 3, 5}));
  }
  // Duplicates and ids out of range in the tried list are harmless.
  const std::vector<uint32_t> messy{1, 1, 99, 0};
  EXPECT_EQ(PickVisionMachine(3, messy, 0), 2u);
  EXPECT_EQ(PickVisionMachine(3, messy, UINT64_MAX), 2u);
}

TEST(VisionMachinePick, WholePathWithFailover) {
  // Two machines × 2 workers: machine 0's workers are all dead, so an image that lands there
  // finds no worker and is re-routed, excluding machine 0, to machine 1.
  std::vector<VisionWorkerLedger> machines(2, VisionWorkerLedger(2));
  machines[0].MarkDead(0);
  machines[0].MarkDead(1);
  const std::vector<bool> alive{true, true};
  std::vector<uint32_t> tried;
  std::optional<uint32_t> worker;
  uint32_t m = 0;
  for (uint64_t draw : {uint64_t{0}, UINT64_MAX}) {  // the first draw lands on machine 0
    m = *PickVisionMachine(alive, tried, draw);
    if ((worker = machines[m].Assign(4096))) break;
    tried.push_back(m);
  }
  EXPECT_EQ(tried, std::vector<uint32_t>{0});
  EXPECT_EQ(m, 1u);
  EXPECT_EQ(worker, 0u);
  EXPECT_EQ(machines[1].InFlight(0), 4096);
}

}  // namespace
}  // namespace ladle::lb
