#include "confidence_fit.h"

#include <algorithm>
#include <cmath>

namespace ladle::engine {
namespace {

double Sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

double Dot(const double* a, const double* b, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += a[j] * b[j];
  return s;
}

}  // namespace

Status CholeskySolve(std::vector<double>& a, int n, std::vector<double>& b, int m) {
  for (int j = 0; j < n; ++j) {
    double d = a[static_cast<size_t>(j) * n + j];
    for (int k = 0; k < j; ++k) d -= a[static_cast<size_t>(j) * n + k] * a[static_cast<size_t>(j) * n + k];
    if (!(d > 0.0)) return Internal("dspark fit: the ridge system is not positive definite");
    const double l = std::sqrt(d);
    a[static_cast<size_t>(j) * n + j] = l;
    for (int i = j + 1; i < n; ++i) {
      double s = a[static_cast<size_t>(i) * n + j];
      for (int k = 0; k < j; ++k) s -= a[static_cast<size_t>(i) * n + k] * a[static_cast<size_t>(j) * n + k];
      a[static_cast<size_t>(i) * n + j] = s / l;
    }
  }
  for (int c = 0; c < m; ++c) {  // L·y = b, then Lᵀ·x = y
    for (int i = 0; i < n; ++i) {
      double s = b[static_cast<size_t>(i) * m + c];
      for (int k = 0; k < i; ++k) s -= a[static_cast<size_t>(i) * n + k] * b[static_cast<size_t>(k) * m + c];
      b[static_cast<size_t>(i) * m + c] = s / a[static_cast<size_t>(i) * n + i];
    }
    for (int i = n - 1; i >= 0; --i) {
      double s = b[static_cast<size_t>(i) * m + c];
      for (int k = i + 1; k < n; ++k) s -= a[static_cast<size_t>(k) * n + i] * b[static_cast<size_t>(k) * m + c];
      b[static_cast<size_t>(i) * m + c] = s / a[static_cast<size_t>(i) * n + i];
    }
  }
  return Status::Ok();
}

std::vector<double> FitLogistic(const LogisticProblem& p, int intercept, double init) {
  const int d = p.d;
  const size_t n = p.y.size();
  std::vector<double> theta(static_cast<size_t>(d), 0.0);
  theta[static_cast<size_t>(intercept)] = init;
  std::vector<double> g(static_cast<size_t>(d)), h(static_cast<size_t>(d) * d);
  for (int it = 0; it < 100; ++it) {
    std::fill(g.begin(), g.end(), 0.0);
    std::fill(h.begin(), h.end(), 0.0);
    auto add = [&](const double* x, double label, double weight) {
      const double q = Sigmoid(Dot(theta.data(), x, d)), s = weight * q * (1 - q);
      for (int j = 0; j < d; ++j) {
        g[static_cast<size_t>(j)] += weight * (q - label) * x[j];
        if (s == 0.0 || x[j] == 0.0) continue;
        double* row = h.data() + static_cast<size_t>(j) * d;
        const double sj = s * x[j];
        for (int k = 0; k <= j; ++k) row[k] += sj * x[k];  // lower triangle; mirrored below
      }
    };
    add(p.prior.data(), 1.0, 0.5);
    add(p.prior.data(), 0.0, 0.5);
    for (size_t i = 0; i < n; ++i) add(p.x.data() + i * static_cast<size_t>(d), p.y[i], 1.0);
    for (int j = 0; j < d; ++j) {
      for (int k = 0; k < j; ++k) h[static_cast<size_t>(k) * d + j] = h[static_cast<size_t>(j) * d + k];
      g[static_cast<size_t>(j)] += p.l2[static_cast<size_t>(j)] * theta[static_cast<size_t>(j)];
      h[static_cast<size_t>(j) * d + j] += p.l2[static_cast<size_t>(j)] + 1e-9 * static_cast<double>(n + 1);
    }
    if (!CholeskySolve(h, d, g, 1).ok()) break;
    double step = 0;
    for (double v : g) step = std::max(step, std::abs(v));
    const double scale = step > 2.0 ? 2.0 / step : 1.0;
    for (int j = 0; j < d; ++j) theta[static_cast<size_t>(j)] -= scale * g[static_cast<size_t>(j)];
    if (step < 1e-7) break;
  }
  return theta;
}

double LogisticLoss(std::span<const double> theta, const LogisticProblem& p) {
  const size_t n = p.y.size();
  if (n == 0) return 0.0;
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    const double q = std::clamp(Sigmoid(Dot(theta.data(), p.x.data() + i * static_cast<size_t>(p.d), p.d)), 1e-12,
                                1.0 - 1e-12);
    s -= p.y[i] ? std::log(q) : std::log1p(-q);
  }
  return s / static_cast<double>(n);
}

// A small ridge on the features, and half a pseudo-positive and half a pseudo-negative at the
// mean, keep the fit finite when a position saw no accepted (or no rejected) draft, which a
// flat target's later positions routinely do.
void FitConfidenceHead(const ConfRows& r, int H, float* w, float* q, float* b, ConfidenceChoice* choice) {
  const size_t n = r.y.size();
  std::fill(w, w + kDraftFeatures, 0.0f);
  std::fill(q, q + H, 0.0f);
  *b = 0;
  if (n == 0) return;
  auto fit_rows = [&](const std::vector<size_t>& rows, double lambda, const std::vector<size_t>* test,
                      std::vector<double>* theta_out, std::vector<double>* mu_out, std::vector<double>* sd_out) {
    const bool hid = lambda > 0;
    const int d = kDraftFeatures + (hid ? H : 0) + 1;
    auto col = [&](size_t i, int j) -> double {
      return j < kDraftFeatures ? r.f[i][j] : r.g[i][j - kDraftFeatures];
    };
    std::vector<double> mu(static_cast<size_t>(d - 1), 0.0), sd(static_cast<size_t>(d - 1), 0.0);
    const double m = static_cast<double>(rows.size());
    for (size_t i : rows)
      for (int j = 0; j < d - 1; ++j) mu[static_cast<size_t>(j)] += col(i, j) / m;
    for (size_t i : rows)
      for (int j = 0; j < d - 1; ++j) {
        const double e = col(i, j) - mu[static_cast<size_t>(j)];
        sd[static_cast<size_t>(j)] += e * e / m;
      }
    for (double& v : sd) v = std::sqrt(v);
    // A column that does not vary carries nothing: it stays at weight 0.
    auto build = [&](const std::vector<size_t>& rs, std::vector<double>* x, std::vector<int>* y) {
      x->assign(rs.size() * static_cast<size_t>(d), 0.0);
      y->clear();
      for (size_t k = 0; k < rs.size(); ++k) {
        double* xr = x->data() + k * static_cast<size_t>(d);
        for (int j = 0; j < d - 1; ++j)
          xr[j] = sd[static_cast<size_t>(j)] > 1e-6 ? (col(rs[k], j) - mu[static_cast<size_t>(j)]) / sd[static_cast<size_t>(j)] : 0.0;
        xr[d - 1] = 1.0;
        y->push_back(r.y[rs[k]]);
      }
    };
    std::vector<double> x, l2(static_cast<size_t>(d), 0.0), prior(static_cast<size_t>(d), 0.0);
    std::vector<int> y;
    build(rows, &x, &y);
    for (int j = 0; j < d - 1; ++j) l2[static_cast<size_t>(j)] = (j < kDraftFeatures ? 1e-3 : lambda) * m;
    prior[static_cast<size_t>(d - 1)] = 1.0;
    double pos = 0;
    for (int v : y) pos += v;
    LogisticProblem p{d, x, y, l2, prior};
    std::vector<double> theta = FitLogistic(p, d - 1, std::log((pos + 0.5) / (m - pos + 0.5)));
    double loss = 0;
    if (test) {
      build(*test, &x, &y);
      LogisticProblem t{d, x, y, l2, prior};
      loss = LogisticLoss(theta, t) * static_cast<double>(test->size());
    }
    if (theta_out) *theta_out = theta, *mu_out = mu, *sd_out = sd;
    return loss;
  };
  std::vector<size_t> all(n), fold[2];
  for (size_t i = 0; i < n; ++i) all[i] = i, fold[r.seq[i] % 2].push_back(i);
  const double lambdas[] = {0.0, 10.0, 1.0, 0.1, 0.01};  // 0: features only
  double best_lambda = 0.0;
  if (!fold[0].empty() && !fold[1].empty()) {
    double best = 0;
    for (double lambda : lambdas) {
      const double loss = (fit_rows(fold[0], lambda, &fold[1], nullptr, nullptr, nullptr) +
                           fit_rows(fold[1], lambda, &fold[0], nullptr, nullptr, nullptr)) /
                          static_cast<double>(n);
      if (lambda == 0.0) choice->loss_features = loss;
      if (lambda == 0.0 || loss < best) best = loss, best_lambda = lambda;
    }
    choice->loss_chosen = best;
  }
  choice->lambda = best_lambda;
  std::vector<double> theta, mu, sd;
  fit_rows(all, best_lambda, nullptr, &theta, &mu, &sd);
  // Back to raw columns: θ·x = Σ θ_j (c_j − μ_j)/σ_j + θ_b.
  const int d = static_cast<int>(theta.size());
  double bias = theta[static_cast<size_t>(d - 1)];
  for (int j = 0; j < d - 1; ++j) {
    if (sd[static_cast<size_t>(j)] <= 1e-6) continue;
    const double wj = theta[static_cast<size_t>(j)] / sd[static_cast<size_t>(j)];
    if (j < kDraftFeatures) w[j] = static_cast<float>(wj);
    else q[j - kDraftFeatures] = static_cast<float>(wj);
    bias -= theta[static_cast<size_t>(j)] * mu[static_cast<size_t>(j)] / sd[static_cast<size_t>(j)];
  }
  *b = static_cast<float>(bias);
}


}  // namespace ladle::engine
