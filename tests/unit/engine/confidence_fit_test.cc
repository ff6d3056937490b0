// The DSpark confidence head's fit (confidence_fit.h): the logistic solver recovers known
// weights; the head reads the backbone state when, and only when, validation says it predicts
// acceptance; a position with one label everywhere stays finite.
#include "confidence_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace ladle::engine {
namespace {

double Sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

TEST(ConfidenceFit, LogisticRecoversKnownWeights) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unif;
  const int d = 3;  // two columns and the intercept
  const double truth[d] = {1.5, -0.7, -0.4};
  std::vector<double> x;
  std::vector<int> y;
  for (int i = 0; i < 20000; ++i) {
    const double a = normal(rng), b = normal(rng);
    x.insert(x.end(), {a, b, 1.0});
    y.push_back(unif(rng) < Sigmoid(truth[0] * a + truth[1] * b + truth[2]) ? 1 : 0);
  }
  const std::vector<double> l2 = {0, 0, 0}, prior = {0, 0, 1};
  LogisticProblem p{d, x, y, l2, prior};
  const std::vector<double> theta = FitLogistic(p, 2, 0.0);
  for (int j = 0; j < d; ++j) EXPECT_NEAR(theta[static_cast<size_t>(j)], truth[j], 0.06) << j;
  EXPECT_LT(LogisticLoss(theta, p), LogisticLoss(std::vector<double>{0, 0, 0}, p));
}

// Rows whose acceptance depends on one coordinate of the backbone state and not on the draft
// features (or on nothing).
struct Synthetic {
  std::vector<float> f, g;
  ConfRows rows;
};
Synthetic MakeRows(int n, int H, bool state_predicts, uint64_t seed) {
  Synthetic s;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> unif;
  s.f.resize(static_cast<size_t>(n) * kDraftFeatures);
  s.g.resize(static_cast<size_t>(n) * H);
  for (float& v : s.f) v = normal(rng);
  for (float& v : s.g) v = normal(rng);
  for (int i = 0; i < n; ++i) {
    const double a = state_predicts ? 2.5 * s.g[static_cast<size_t>(i) * H + 5] - 1.0 : -1.0;
    s.rows.f.push_back(s.f.data() + static_cast<size_t>(i) * kDraftFeatures);
    s.rows.g.push_back(s.g.data() + static_cast<size_t>(i) * H);
    s.rows.y.push_back(unif(rng) < Sigmoid(a) ? 1 : 0);
    s.rows.seq.push_back(i / 50);  // 50 rows per "sequence": folds split by sequence
  }
  return s;
}

TEST(ConfidenceFit, TheHeadReadsTheBackboneStateWhenItPredicts) {
  const int H = 32;
  Synthetic s = MakeRows(4000, H, /*state_predicts=*/true, 5);
  std::vector<float> w(kDraftFeatures), q(H);
  float b = 0;
  ConfidenceChoice ch;
  FitConfidenceHead(s.rows, H, w.data(), q.data(), &b, &ch);
  EXPECT_GT(ch.lambda, 0.0);
  EXPECT_LT(ch.loss_chosen, ch.loss_features - 0.1);  // nats per row on the held-out fold
  // Raw-column weights as the drafter applies them: the signal's coordinate dominates.
  for (int j = 0; j < H; ++j) {
    if (j != 5) EXPECT_LT(std::abs(q[static_cast<size_t>(j)]), 0.3f) << j;
  }
  EXPECT_GT(q[5], 1.5f);
  // Applied to the rows, the head orders accepted above rejected ones.
  double acc_mean = 0, rej_mean = 0;
  int acc_n = 0;
  for (size_t i = 0; i < s.rows.y.size(); ++i) {
    double a = b;
    for (int j = 0; j < kDraftFeatures; ++j) a += w[static_cast<size_t>(j)] * s.rows.f[i][j];
    for (int j = 0; j < H; ++j) a += q[static_cast<size_t>(j)] * s.rows.g[i][j];
    (s.rows.y[i] ? acc_mean : rej_mean) += a;
    acc_n += s.rows.y[i];
  }
  EXPECT_GT(acc_mean / acc_n, rej_mean / (static_cast<double>(s.rows.y.size()) - acc_n) + 1.0);
}

TEST(ConfidenceFit, WithoutSignalTheStateBuysNothing) {
  const int H = 32;
  Synthetic s = MakeRows(4000, H, /*state_predicts=*/false, 6);
  std::vector<float> w(kDraftFeatures), q(H);
  float b = 0;
  ConfidenceChoice ch;
  FitConfidenceHead(s.rows, H, w.data(), q.data(), &b, &ch);
  EXPECT_LE(ch.loss_chosen, ch.loss_features);
  EXPECT_LT(ch.loss_features - ch.loss_chosen, 0.002);  // whatever it chose buys nothing
  for (float v : q) EXPECT_LT(std::abs(v), 0.1f);
  EXPECT_NEAR(Sigmoid(b), 1.0 / (1.0 + std::exp(1.0)), 0.03);  // the base rate, σ(−1)
}

TEST(ConfidenceFit, OneLabelEverywhereStaysFinite) {
  const int H = 8;
  for (int label : {0, 1}) {
    Synthetic s = MakeRows(300, H, false, 7);
    for (int& y : s.rows.y) y = label;
    std::vector<float> w(kDraftFeatures), q(H);
    float b = 0;
    ConfidenceChoice ch;
    FitConfidenceHead(s.rows, H, w.data(), q.data(), &b, &ch);
    EXPECT_TRUE(std::isfinite(b));
    for (float v : w) EXPECT_TRUE(std::isfinite(v));
    for (float v : q) EXPECT_TRUE(std::isfinite(v));
    EXPECT_EQ(label == 1, b > 0) << "the pseudo-counts keep the rate inside (0, 1)";
  }
  ConfRows empty;
  std::vector<float> w(kDraftFeatures, 9.0f), q(H, 9.0f);
  float b = 9;
  ConfidenceChoice ch;
  FitConfidenceHead(empty, H, w.data(), q.data(), &b, &ch);
  EXPECT_EQ(b, 0.0f);
  for (float v : q) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace ladle::engine
