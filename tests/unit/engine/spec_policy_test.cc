// Speculative decoding's verification policies: the SPS table (lookup, files), its profiler on
// the reference model, Algorithm 1 (PlanVerify) against an independently written brute force,
// the asynchronous top-k form, and the fixed and DSpark policies.
#include "ladle/engine/spec_policy.h"

#include <gtest/gtest.h>

#include "engine_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ladle/engine/model.h"

namespace ladle::engine {
namespace {

using Conf = std::vector<std::vector<float>>;

// A file under the test temp dir, unique per process and test, removed with the object.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& tag)
      : path(::testing::TempDir() + "/ladle-sps-" + tag + "-" + std::to_string(::getpid()) + ".txt") {}
  ~TempFile() { std::remove(path.c_str()); }
  void Write(const std::string& text) const { std::ofstream(path, std::ios::trunc) << text; }
};

// ---------------------------------------------------------------------------------------------
// The brute-force reference, written without the implementation's helpers: π by plain products,
// the candidate list ordered by an O(n²) selection sort with the header's tie rule, then the
// greedy loop with the early break.

struct RefCand {
  double pi;
  int k, i;
};

std::vector<RefCand> RefSorted(const Conf& conf) {
  std::vector<RefCand> pool;
  for (size_t i = 0; i < conf.size(); ++i) {
    for (size_t k = 0; k < conf[i].size(); ++k) {
      double p = 1.0;
      for (size_t j = 0; j <= k; ++j) p *= std::min(1.0, std::max(0.0, static_cast<double>(conf[i][j])));
      pool.push_back({p, static_cast<int>(k), static_cast<int>(i)});
    }
  }
  std::vector<RefCand> out;
  while (!pool.empty()) {
    size_t best = 0;
    for (size_t j = 1; j < pool.size(); ++j) {
      const RefCand& a = pool[j];
      const RefCand& b = pool[best];
      const bool better = a.pi > b.pi || (a.pi == b.pi && (a.k < b.k || (a.k == b.k && a.i < b.i)));
      if (better) best = j;
    }
    out.push_back(pool[best]);
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(best));
  }
  return out;
}

VerifyPlan RefPlan(const Conf& conf, const SpsTable& sps, int64_t max_tokens) {
  VerifyPlan p;
  p.lengths.assign(conf.size(), 0);
  if (conf.empty()) return p;
  p.tokens = static_cast<int64_t>(conf.size());
  p.expected = static_cast<double>(conf.size());
  p.theta = p.expected * sps.At(p.tokens);
  for (const RefCand& c : RefSorted(conf)) {
    if (max_tokens > 0 && p.tokens >= max_tokens) break;
    const double tau = p.expected + c.pi;
    const double theta = tau * sps.At(p.tokens + 1);
    if (theta <= p.theta) break;
    p.lengths[static_cast<size_t>(c.i)]++;
    p.tokens++;
    p.expected = tau;
    p.theta = theta;
  }
  return p;
}

// Θ of verifying the first `count` candidates of the sorted list (no break rule).
double PrefixTheta(const Conf& conf, const SpsTable& sps, size_t count) {
  const auto sorted = RefSorted(conf);
  double tau = static_cast<double>(conf.size());
  for (size_t j = 0; j < count; ++j) tau += sorted[j].pi;
  return tau * sps.At(static_cast<int64_t>(conf.size() + count));
}

Conf RandomConf(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> n_dist(1, 6), g_dist(1, 6);
  std::uniform_real_distribution<float> c_dist(0.01f, 0.99f);
  std::bernoulli_distribution coarse(0.3);
  const float grid[] = {0.25f, 0.5f, 0.75f};  // exact ties exercise the (k, i) rule
  Conf conf(static_cast<size_t>(n_dist(rng)));
  for (auto& c : conf) {
    c.resize(static_cast<size_t>(g_dist(rng)));
    for (auto& x : c) x = coarse(rng) ? grid[rng() % 3] : c_dist(rng);
  }
  return conf;
}

// Decreasing SPS over uneven token steps, with random drops (so often non-concave), sometimes
// ending early so the planner extrapolates.
SpsTable RandomSps(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> gap(1, 3);
  std::uniform_real_distribution<double> drop(0.5, 1.0);
  std::bernoulli_distribution flat(0.3), short_table(0.3);
  const int64_t last = short_table(rng) ? 8 : 48;
  SpsTable t;
  double s = 1000.0;
  for (int64_t b = 1; b <= last; b += gap(rng)) {
    t.tokens.push_back(b);
    t.sps.push_back(s);
    s *= flat(rng) ? 1.0 : drop(rng);
  }
  return t;
}

// ---------------------------------------------------------------------------------------------

TEST(SpsTableTest, AtInterpolatesAndClampsBelow) {
  SpsTable t{{2, 4, 8}, {100.0, 80.0, 40.0}};
  ASSERT_TRUE(t.Validate().ok());
  EXPECT_DOUBLE_EQ(t.At(0), 100.0);
  EXPECT_DOUBLE_EQ(t.At(1), 100.0);
  EXPECT_DOUBLE_EQ(t.At(2), 100.0);
  EXPECT_DOUBLE_EQ(t.At(3), 90.0);
  EXPECT_DOUBLE_EQ(t.At(4), 80.0);
  EXPECT_DOUBLE_EQ(t.At(6), 60.0);
  EXPECT_DOUBLE_EQ(t.At(8), 40.0);
}

TEST(SpsTableTest, ExtrapolatesTimePerStepLinearly) {
  SpsTable t{{1, 2}, {100.0, 50.0}};  // 10 ms, 20 ms: +10 ms per token
  EXPECT_DOUBLE_EQ(t.At(3), 1.0 / 0.03);
  EXPECT_DOUBLE_EQ(t.At(4), 25.0);
  EXPECT_DOUBLE_EQ(t.At(12), 1.0 / 0.12);
}

TEST(SpsTableTest, ExtrapolationNeverRises) {
  // A last segment that got faster extrapolates flat, and a single point stays flat.
  SpsTable up{{1, 4, 8}, {100.0, 40.0, 60.0}};
  ASSERT_TRUE(up.Validate().ok());
  SpsTable one{{4}, {70.0}};
  SpsTable down{{1, 16, 64}, {500.0, 300.0, 120.0}};
  for (const SpsTable* t : {&up, &one, &down}) {
    double prev = t->At(t->tokens.back());
    for (int64_t b = t->tokens.back() + 1; b < 5000; b += 7) {
      const double s = t->At(b);
      EXPECT_GT(s, 0.0);
      EXPECT_LE(s, prev) << "b=" << b;
      prev = s;
    }
  }
  EXPECT_DOUBLE_EQ(up.At(1000), 60.0);
  EXPECT_DOUBLE_EQ(one.At(1000), 70.0);
  EXPECT_LT(down.At(1000), 120.0);
}

TEST(SpsTableTest, ValidateRejectsBadTables) {
  EXPECT_TRUE((SpsTable{{1, 2}, {2.0, 1.0}}).Validate().ok());
  EXPECT_FALSE((SpsTable{}).Validate().ok());
  EXPECT_FALSE((SpsTable{{1, 2}, {2.0}}).Validate().ok());
  EXPECT_FALSE((SpsTable{{0, 2}, {2.0, 1.0}}).Validate().ok());
  EXPECT_FALSE((SpsTable{{2, 2}, {2.0, 1.0}}).Validate().ok());
  EXPECT_FALSE((SpsTable{{3, 2}, {2.0, 1.0}}).Validate().ok());
  EXPECT_FALSE((SpsTable{{1, 2}, {2.0, 0.0}}).Validate().ok());
  EXPECT_FALSE((SpsTable{{1, 2}, {-2.0, 1.0}}).Validate().ok());
  EXPECT_FALSE((SpsTable{{1, 2}, {INFINITY, 1.0}}).Validate().ok());
  EXPECT_FALSE((SpsTable{{1, 2}, {NAN, 1.0}}).Validate().ok());
  EXPECT_EQ((SpsTable{}).Validate().code(), StatusCode::kInvalidArgument);
}

TEST(SpsTableTest, SaveLoadRoundTrip) {
  TempFile f("roundtrip");
  SpsTable t{{1, 3, 7, 300}, {1234.5678901234567, 1000.0 / 3.0, 77.0, 0.125}};
  ASSERT_TRUE(t.Save(f.path).ok());
  std::ifstream in(f.path);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "ladle-sps/v1");
  auto back = SpsTable::Load(f.path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tokens, t.tokens);
  EXPECT_EQ(back->sps, t.sps);  // %.17g: bit-exact
}

TEST(SpsTableTest, SaveRejectsInvalidTable) {
  TempFile f("invalid");
  EXPECT_EQ((SpsTable{{2, 1}, {1.0, 1.0}}).Save(f.path).code(), StatusCode::kInvalidArgument);
}

TEST(SpsTableTest, LoadAcceptsBlankLines) {
  TempFile f("blank");
  f.Write("ladle-sps/v1\n1 100\n\n  4\t50.5  \n\n");
  auto t = SpsTable::Load(f.path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->tokens, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(t->sps, (std::vector<double>{100.0, 50.5}));
}

TEST(SpsTableTest, LoadRejectsMalformedFiles) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty file"},
      {"ladle-sps/v2\n1 100\n", "wrong version"},
      {"ladle-cost-model 1\na 1\n", "another format"},
      {"1 100\n2 50\n", "no header"},
      {"ladle-sps/v1\n", "no points"},
      {"ladle-sps/v1\n1\n", "missing rate"},
      {"ladle-sps/v1\n1 100 7\n", "extra field"},
      {"ladle-sps/v1\n1 fast\n", "rate not a number"},
      {"ladle-sps/v1\n1.5 100\n", "fractional tokens"},
      {"ladle-sps/v1\nx 100\n", "tokens not a number"},
      {"ladle-sps/v1\n1 100x\n", "trailing junk"},
      {"ladle-sps/v1\n4 100\n2 50\n", "tokens decreasing"},
      {"ladle-sps/v1\n2 100\n2 50\n", "tokens repeated"},
      {"ladle-sps/v1\n0 100\n", "zero tokens"},
      {"ladle-sps/v1\n1 -3\n", "negative rate"},
      {"ladle-sps/v1\n1 0\n", "zero rate"},
      {"ladle-sps/v1\n1 inf\n", "infinite rate"},
  };
  TempFile f("malformed");
  for (const auto& [text, what] : cases) {
    f.Write(text);
    auto t = SpsTable::Load(f.path);
    ASSERT_FALSE(t.ok()) << what;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << what << ": " << t.status().ToString();
    EXPECT_NE(t.status().message().find(f.path), std::string::npos) << what << ": " << t.status().ToString();
  }
  // The line number of a bad point is in the message.
  f.Write("ladle-sps/v1\n1 100\n2 oops\n");
  auto t = SpsTable::Load(f.path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(":3:"), std::string::npos) << t.status().ToString();
}

TEST(SpsTableTest, LoadMissingFileIsIoError) {
  auto t = SpsTable::Load(::testing::TempDir() + "/ladle-sps-does-not-exist-" + std::to_string(::getpid()));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kIoError);
}

// ---------------------------------------------------------------------------------------------

TEST(PlanVerifyTest, AcceptanceProductsAreCumulativeAndClamped) {
  const std::vector<float> c = {0.5f, 0.5f, 1.5f, -0.2f, 0.9f};
  const auto pi = AcceptanceProducts(c);
  ASSERT_EQ(pi.size(), 5u);
  EXPECT_DOUBLE_EQ(pi[0], 0.5);
  EXPECT_DOUBLE_EQ(pi[1], 0.25);
  EXPECT_DOUBLE_EQ(pi[2], 0.25);  // 1.5 clamps to 1
  EXPECT_DOUBLE_EQ(pi[3], 0.0);   // -0.2 clamps to 0
  EXPECT_DOUBLE_EQ(pi[4], 0.0);
  EXPECT_TRUE(AcceptanceProducts({}).empty());
}

TEST(PlanVerifyTest, EmptyInputGivesEmptyPlan) {
  const SpsTable sps{{1}, {100.0}};
  const VerifyPlan p = PlanVerify({}, sps);
  EXPECT_TRUE(p.lengths.empty());
  EXPECT_EQ(p.tokens, 0);
  EXPECT_EQ(p.expected, 0.0);
  EXPECT_EQ(p.theta, 0.0);
}

TEST(PlanVerifyTest, MatchesBruteForceOnRandomInstances) {
  std::mt19937_64 rng(20251130);
  int with_drafts = 0, capped = 0, partial = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const Conf conf = RandomConf(rng);
    const SpsTable sps = RandomSps(rng);
    ASSERT_TRUE(sps.Validate().ok());
    const int64_t max_tokens = (rng() % 4 == 0) ? static_cast<int64_t>(1 + rng() % 24) : 0;
    const VerifyPlan got = PlanVerify(conf, sps, max_tokens);
    const VerifyPlan want = RefPlan(conf, sps, max_tokens);
    ASSERT_EQ(got.lengths, want.lengths) << "trial " << trial;
    ASSERT_EQ(got.tokens, want.tokens) << "trial " << trial;
    EXPECT_NEAR(got.expected, want.expected, 1e-9) << "trial " << trial;
    EXPECT_NEAR(got.theta, want.theta, 1e-9 * want.theta) << "trial " << trial;

    // The plan is self-consistent: B, τ, Θ follow from the lengths, and lengths stay within the
    // drafts and the cap.
    const int64_t n = static_cast<int64_t>(conf.size());
    int64_t b = n;
    double tau = static_cast<double>(n);
    int64_t total_drafts = 0;
    for (size_t i = 0; i < conf.size(); ++i) {
      ASSERT_GE(got.lengths[i], 0);
      ASSERT_LE(got.lengths[i], static_cast<int>(conf[i].size()));
      const auto pi = AcceptanceProducts(conf[i]);
      for (int k = 0; k < got.lengths[i]; ++k) tau += pi[static_cast<size_t>(k)];
      b += got.lengths[i];
      total_drafts += static_cast<int64_t>(conf[i].size());
    }
    EXPECT_EQ(got.tokens, b);
    EXPECT_NEAR(got.expected, tau, 1e-9);
    EXPECT_NEAR(got.theta, tau * sps.At(b), 1e-9 * got.theta);
    if (max_tokens > 0) {
      EXPECT_LE(got.tokens, std::max(n, max_tokens));
    }
    // The asynchronous form, given PlanVerify's own B and the same confidences, picks the same.
    EXPECT_EQ(TopKLengths(conf, got.tokens), got.lengths) << "trial " << trial;

    if (got.tokens > n) ++with_drafts;
    if (max_tokens > 0 && got.tokens == max_tokens && got.tokens < n + total_drafts) ++capped;
    if (got.tokens > n && got.tokens < n + total_drafts) ++partial;
  }
  // The instances cover the interesting regimes, not just "take nothing" or "take everything".
  EXPECT_GT(with_drafts, 300);
  EXPECT_GT(capped, 30);
  EXPECT_GT(partial, 300);
}

TEST(PlanVerifyTest, BreaksAtFirstNonImprovingCandidate) {
  // Request 0's first draft (π = 0.95) pays for itself; its second (π = 0.855) alone does not,
  // because SPS drops from 90 to 65 at B = 4. SPS is then flat, so adding request 1's draft
  // (π = 0.5) as well would beat the plan's Θ: Algorithm 1 does not look past the break.
  const Conf conf = {{0.95f, 0.9f}, {0.5f}};
  const SpsTable sps{{2, 3, 4, 5, 6}, {100.0, 90.0, 65.0, 65.0, 65.0}};
  const VerifyPlan p = PlanVerify(conf, sps);
  EXPECT_EQ(p.lengths, (std::vector<int>{1, 0}));
  EXPECT_EQ(p.tokens, 3);
  EXPECT_NEAR(p.expected, 2.95, 1e-6);
  EXPECT_NEAR(p.theta, 2.95 * 90.0, 1e-4);
  // The rejected candidate indeed does not raise Θ ...
  EXPECT_LE(PrefixTheta(conf, sps, 2), p.theta);
  // ... while the next two together would have: the greedy plan is not the best prefix.
  EXPECT_GT(PrefixTheta(conf, sps, 3), p.theta);
  EXPECT_EQ(RefPlan(conf, sps, 0).lengths, p.lengths);
}

TEST(PlanVerifyTest, BreaksEvenWhenNothingIsTaken) {
  // One request: its first draft halves the step rate (Θ 100 → 95), but three drafts at the
  // same rate would give Θ ≈ 172.
  const Conf conf = {{0.9f, 0.9f, 0.9f}};
  const SpsTable sps{{1, 2}, {100.0, 50.0}};
  const SpsTable flat_after{{1, 2, 3, 4}, {100.0, 50.0, 50.0, 50.0}};
  const VerifyPlan p = PlanVerify(conf, flat_after);
  EXPECT_EQ(p.lengths, (std::vector<int>{0}));
  EXPECT_EQ(p.tokens, 1);
  EXPECT_DOUBLE_EQ(p.theta, 100.0);
  EXPECT_GT(PrefixTheta(conf, flat_after, 3), 170.0);
  EXPECT_EQ(PlanVerify(conf, sps).tokens, 1);
}

TEST(PlanVerifyTest, TakesEveryUsefulDraftWhenStepsAreFree) {
  // Constant SPS: every candidate with π > 0 raises Θ; a zero-probability one stops the loop.
  const SpsTable flat{{1}, {100.0}};
  const Conf conf = {{0.9f, 0.8f, 0.7f}, {0.6f}, {0.99f, 0.0f, 0.9f}};
  const VerifyPlan p = PlanVerify(conf, flat);
  EXPECT_EQ(p.lengths, (std::vector<int>{3, 1, 1}));
  EXPECT_EQ(p.tokens, 8);
  const double tau = 3 + (0.9 + 0.9 * 0.8 + 0.9 * 0.8 * 0.7) + 0.6 + 0.99;
  EXPECT_NEAR(p.expected, tau, 1e-6);
  EXPECT_NEAR(p.theta, tau * 100.0, 1e-4);
}

TEST(PlanVerifyTest, RespectsMaxTokens) {
  const SpsTable flat{{1}, {100.0}};
  const Conf conf = {{0.9f, 0.8f, 0.7f}, {0.95f, 0.5f}};
  EXPECT_EQ(PlanVerify(conf, flat, 0).tokens, 7);
  const VerifyPlan p = PlanVerify(conf, flat, 4);
  EXPECT_EQ(p.tokens, 4);
  EXPECT_EQ(p.lengths, (std::vector<int>{1, 1}));  // π 0.95 (req 1), 0.9 (req 0)
  for (int64_t cap = 1; cap <= 8; ++cap) EXPECT_EQ(PlanVerify(conf, flat, cap).tokens, std::clamp<int64_t>(cap, 2, 7));
  // A cap below N still verifies every request's own token, and nothing more.
  const VerifyPlan below = PlanVerify(conf, flat, 1);
  EXPECT_EQ(below.lengths, (std::vector<int>{0, 0}));
  EXPECT_DOUBLE_EQ(below.expected, 2.0);
}

TEST(PlanVerifyTest, RequestsWithoutDrafts) {
  const SpsTable flat{{1}, {100.0}};
  const Conf conf = {{}, {0.5f}, {}};
  const VerifyPlan p = PlanVerify(conf, flat);
  EXPECT_EQ(p.lengths, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(p.tokens, 4);
  EXPECT_DOUBLE_EQ(p.expected, 3.5);
}

// ---------------------------------------------------------------------------------------------

TEST(TopKLengthsTest, CapacityBelowOrAtRequestCount) {
  const Conf conf = {{0.9f, 0.9f}, {0.8f}, {0.7f, 0.6f}};
  for (int64_t cap : {-5, 0, 1, 2, 3}) EXPECT_EQ(TopKLengths(conf, cap), (std::vector<int>{0, 0, 0})) << cap;
  EXPECT_TRUE(TopKLengths({}, 10).empty());
}

TEST(TopKLengthsTest, CapacityAboveAllCandidates) {
  const Conf conf = {{0.9f, 0.9f}, {0.8f}, {}, {0.1f, 0.1f, 0.1f}};
  const std::vector<int> all = {2, 1, 0, 3};
  EXPECT_EQ(TopKLengths(conf, 4 + 6), all);
  EXPECT_EQ(TopKLengths(conf, 1000), all);
}

TEST(TopKLengthsTest, CapsPerRequest) {
  // Request 0 has the best single draft but only one; the rest go to request 1.
  const Conf conf = {{0.99f}, {0.9f, 0.9f, 0.9f, 0.9f}};
  EXPECT_EQ(TopKLengths(conf, 2 + 1), (std::vector<int>{1, 0}));
  EXPECT_EQ(TopKLengths(conf, 2 + 3), (std::vector<int>{1, 2}));
  EXPECT_EQ(TopKLengths(conf, 2 + 5), (std::vector<int>{1, 4}));
}

TEST(TopKLengthsTest, TiesGoToLowerDraftThenLowerRequest) {
  // Every π is 0.5: order (k0, i0), (k0, i1), (k0, i2), (k1, i0).
  const Conf conf = {{0.5f, 1.0f}, {0.5f}, {0.5f}};
  EXPECT_EQ(TopKLengths(conf, 3 + 1), (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(TopKLengths(conf, 3 + 2), (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(TopKLengths(conf, 3 + 3), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(TopKLengths(conf, 3 + 4), (std::vector<int>{2, 1, 1}));
}

TEST(TopKLengthsTest, PicksThePrefixOfTheSortedCandidates) {
  // Against the reference order: the chosen candidates are exactly the first (capacity − N),
  // and each request's chosen ones are its first L_i drafts.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 1000; ++trial) {
    const Conf conf = RandomConf(rng);
    const auto sorted = RefSorted(conf);
    const int64_t n = static_cast<int64_t>(conf.size());
    const int64_t cap = static_cast<int64_t>(rng() % (sorted.size() + n + 3));
    const std::vector<int> got = TopKLengths(conf, cap);
    std::vector<std::vector<int>> chosen(conf.size());
    const int64_t take = std::clamp<int64_t>(cap - n, 0, static_cast<int64_t>(sorted.size()));
    for (int64_t j = 0; j < take; ++j) chosen[static_cast<size_t>(sorted[j].i)].push_back(sorted[j].k);
    int64_t sum = 0;
    for (size_t i = 0; i < conf.size(); ++i) {
      ASSERT_EQ(got[i], static_cast<int>(chosen[i].size())) << "trial " << trial << " request " << i;
      std::sort(chosen[i].begin(), chosen[i].end());
      for (size_t k = 0; k < chosen[i].size(); ++k) ASSERT_EQ(chosen[i][k], static_cast<int>(k)) << "trial " << trial;
      sum += got[i];
    }
    EXPECT_EQ(sum, take);
  }
}

TEST(TopKLengthsTest, ScalesToHundredsOfRequests) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> c(0.0f, 1.0f);
  Conf conf(400, std::vector<float>(5));
  for (auto& r : conf)
    for (auto& x : r) x = c(rng);
  const std::vector<int> l = TopKLengths(conf, 400 + 1000);
  int64_t sum = 0;
  for (int x : l) sum += x;
  EXPECT_EQ(sum, 1000);
  const SpsTable flat{{1}, {100.0}};
  EXPECT_EQ(TopKLengths(conf, PlanVerify(conf, flat).tokens), PlanVerify(conf, flat).lengths);
}

// ---------------------------------------------------------------------------------------------

TEST(SpecPolicyTest, FixedCapacityAndLengths) {
  auto p = MakeFixedSpecPolicy(2);
  EXPECT_EQ(p->name(), "fixed:2");
  EXPECT_EQ(p->draft_tokens(), 2);
  const Conf conf = {{0.1f, 0.1f, 0.1f, 0.1f, 0.1f}, {0.9f}, {}};
  EXPECT_EQ(p->Capacity(conf), (2 + 1) + (1 + 1) + (0 + 1));
  EXPECT_EQ(p->Lengths(conf, p->Capacity(conf)), (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(p->Capacity({}), 0);
  auto zero = MakeFixedSpecPolicy(0);
  EXPECT_EQ(zero->Capacity(conf), 3);
  EXPECT_EQ(zero->Lengths(conf, 3), (std::vector<int>{0, 0, 0}));
}

TEST(SpecPolicyTest, DsparkFollowsPlanVerifyAndTopK) {
  const SpsTable sps{{1, 2, 4, 8, 16}, {200.0, 195.0, 180.0, 120.0, 70.0}};
  auto p = MakeDsparkSpecPolicy(5, sps);
  EXPECT_EQ(p->name(), "dspark");
  EXPECT_EQ(p->draft_tokens(), 5);
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const Conf conf = RandomConf(rng);
    const VerifyPlan plan = PlanVerify(conf, sps);
    const int64_t cap = p->Capacity(conf);
    EXPECT_EQ(cap, plan.tokens);
    EXPECT_EQ(p->Lengths(conf, cap), plan.lengths);
    // Asynchronous: capacity from older confidences, lengths from newer ones, within it.
    const Conf newer = RandomConf(rng);
    const auto l = p->Lengths(newer, cap);
    EXPECT_EQ(l, TopKLengths(newer, cap));
    int64_t b = 0;
    for (size_t i = 0; i < newer.size(); ++i) b += l[i] + 1;
    EXPECT_LE(b, std::max<int64_t>(cap, static_cast<int64_t>(newer.size())));
  }
}

TEST(SpecPolicyTest, DsparkCapsCapacity) {
  const SpsTable flat{{1}, {100.0}};
  const Conf conf = {{0.9f, 0.9f, 0.9f}, {0.9f, 0.9f, 0.9f}};
  EXPECT_EQ(MakeDsparkSpecPolicy(3, flat)->Capacity(conf), 8);
  auto capped = MakeDsparkSpecPolicy(3, flat, 5);
  EXPECT_EQ(capped->Capacity(conf), 5);
  EXPECT_EQ(capped->Lengths(conf, 5), (std::vector<int>{2, 1}));
}

// ---------------------------------------------------------------------------------------------

ModelConfig SmallModel() { return testing::TinyModelConfig(2000); }

void ExpectWellFormed(const SpsTable& t) {
  ASSERT_TRUE(t.Validate().ok()) << t.Validate().ToString();
  EXPECT_EQ(t.tokens.front(), 1);
  for (size_t i = 1; i < t.tokens.size(); ++i) {
    EXPECT_GT(t.tokens[i], t.tokens[i - 1]);
    EXPECT_LE(t.sps[i], t.sps[i - 1]) << "at " << t.tokens[i];
  }
  EXPECT_GT(t.At(1), 0.0);
}

TEST(ProfileSpsTest, ProfilesTheReferenceModel) {
  auto m = Model::Create(SmallModel(), "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto kv = (*m)->NewKvStorage(200, 8);
  ASSERT_NE(kv, nullptr);
  auto t = ProfileSps(**m, *kv, 32, 4, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ExpectWellFormed(*t);
  EXPECT_EQ(t->tokens.back(), 32);
  // The doubling grid and its 1.5x points.
  for (int64_t b : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32})
    EXPECT_NE(std::find(t->tokens.begin(), t->tokens.end(), b), t->tokens.end()) << b;
  // The table survives a file.
  TempFile f("profiled");
  ASSERT_TRUE(t->Save(f.path).ok());
  auto back = SpsTable::Load(f.path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->sps, t->sps);
}

TEST(ProfileSpsTest, CapsTheGridToSlotsAndBlocks) {
  auto m = Model::Create(SmallModel(), "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // Two slots: at most two spans of 4 tokens.
  auto few_slots = (*m)->NewKvStorage(200, 2);
  auto t = ProfileSps(**m, *few_slots, 64, 4, 1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ExpectWellFormed(*t);
  EXPECT_EQ(t->tokens.back(), 8);
  // A pool too small for the usual context: the context shrinks, one sequence still fits.
  auto few_blocks = (*m)->NewKvStorage(3, 8);
  auto u = ProfileSps(**m, *few_blocks, 64, 4, 1);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  ExpectWellFormed(*u);
  EXPECT_EQ(u->tokens.back(), 4);
  // Nothing fits a span longer than the whole pool: an error, not a crash.
  EXPECT_FALSE(ProfileSps(**m, *few_blocks, 64, 100, 1).ok());
}

TEST(ProfileSpsTest, RejectsBadArguments) {
  auto m = Model::Create(SmallModel(), "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto kv = (*m)->NewKvStorage(64, 4);
  EXPECT_EQ(ProfileSps(**m, *kv, 0, 4, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ProfileSps(**m, *kv, 16, 0, 1).status().code(), StatusCode::kInvalidArgument);
  // repeats < 1 means one timing (after the warm-up).
  auto t = ProfileSps(**m, *kv, 4, 2, 0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ExpectWellFormed(*t);
}

}  // namespace
}  // namespace ladle::engine

namespace ladle::engine {
namespace {

// The bound the engine uses to skip drafting: Algorithm 1 never takes more candidates than it,
// whatever the confidences (random instances, including all-ones confidences).
TEST(SpecPolicyTest, CandidateBoundHoldsForEveryConfidence) {
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int it = 0; it < 2000; ++it) {
    SpsTable t;
    double sps = 1000;
    for (int64_t b = 1; b <= 64; b += 1 + static_cast<int64_t>(rng() % 4)) {
      t.tokens.push_back(b);
      t.sps.push_back(sps);
      sps *= 0.55 + 0.45 * u(rng);  // flat to steep
    }
    const int n = 1 + static_cast<int>(rng() % 6), gamma = 1 + static_cast<int>(rng() % 5);
    std::vector<std::vector<float>> conf(static_cast<size_t>(n));
    const bool ones = it % 4 == 0;
    for (auto& c : conf)
      for (int k = 0; k < gamma; ++k) c.push_back(ones ? 1.0f : static_cast<float>(u(rng)));
    const int64_t cap = it % 3 == 0 ? 0 : n + static_cast<int64_t>(rng() % 20);
    const VerifyPlan plan = PlanVerify(conf, t, cap);
    const int bound = DsparkCandidateBound(t, n, cap, 1 << 20);
    EXPECT_LE(plan.tokens - n, bound) << "instance " << it;
    auto policy = MakeDsparkSpecPolicy(gamma, t, cap);
    for (int l : plan.lengths) EXPECT_LE(l, policy->UsefulDrafts(n, 1.0)) << "instance " << it;
    // With the largest product as the bound's π: still an upper bound.
    double top = 0;
    for (const auto& c : conf)
      if (!c.empty()) top = std::max(top, static_cast<double>(c[0]));
    EXPECT_LE(plan.tokens - n, DsparkCandidateBound(t, n, cap, 1 << 20, top)) << "instance " << it;
    if (ones && bound == 0) EXPECT_EQ(plan.tokens, n) << "instance " << it;
  }
}

}  // namespace
}  // namespace ladle::engine

namespace ladle::engine {
namespace {

// The drafter's cost in the step rate: 0 leaves Algorithm 1 as it was; a cost prices every
// extra token's draft, so B never grows with it, a prohibitive cost verifies nothing, and the
// candidate bound still holds with it (the engine skips drafting on it).
TEST(PlanVerifyTest, TheDrafterCostIsPartOfTheStepRate) {
  std::mt19937_64 rng(4242);
  for (int trial = 0; trial < 500; ++trial) {
    const Conf conf = RandomConf(rng);
    const SpsTable sps = RandomSps(rng);
    const int64_t n = static_cast<int64_t>(conf.size());
    const VerifyPlan free = PlanVerify(conf, sps, 0);
    EXPECT_EQ(PlanVerify(conf, sps, 0, 0.0).lengths, free.lengths);
    int64_t last = free.tokens;
    for (double cost : {1e-6, 1e-4, 1e-3, 1e-2, 1.0}) {
      const VerifyPlan p = PlanVerify(conf, sps, 0, cost);
      EXPECT_LE(p.tokens, last) << "trial " << trial << " cost " << cost;
      last = p.tokens;
      EXPECT_NEAR(p.theta, p.expected * StepRate(sps, p.tokens, n, cost), 1e-9 * std::max(1.0, p.theta));
      EXPECT_LE(p.tokens - n, DsparkCandidateBound(sps, n, 0, 1 << 20, 1.0, cost)) << "trial " << trial;
    }
    // A drafted position that costs a thousand of the slowest steps never pays.
    EXPECT_EQ(PlanVerify(conf, sps, 0, 1000.0 / sps.At(4096)).tokens, n);
  }
  SpsTable t;
  t.tokens = {1, 8};
  t.sps = {1000, 800};
  EXPECT_DOUBLE_EQ(StepRate(t, 3, 3, 0.5), t.At(3));  // no extra token, no draft priced
  EXPECT_DOUBLE_EQ(StepRate(t, 5, 3, 0.001), 1.0 / (1.0 / t.At(5) + 2 * 0.001));
  auto policy = MakeDsparkSpecPolicy(5, t, 0);
  const int before = policy->UsefulDrafts(1, 0.9);
  policy->SetDraftCost(0.01);  // 10 ms a position against 1 ms steps
  EXPECT_GT(before, 0);
  EXPECT_EQ(policy->UsefulDrafts(1, 0.9), 0);
  EXPECT_EQ(policy->Capacity(std::vector<std::vector<float>>{{0.9f, 0.9f}}), 1);
}

}  // namespace
}  // namespace ladle::engine
