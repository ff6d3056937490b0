#include "ladle/engine/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "ladle/engine/model.h"

namespace ladle::engine {
namespace {

// Least squares over the columns in `use` of feature rows `x` (unused coefficients are 0),
// by Gaussian elimination with partial pivoting on the normal equations.
constexpr int kMaxCols = 5;
bool SolveLeastSquares(const std::vector<std::array<double, kMaxCols>>& x, const std::vector<double>& y,
                       const std::array<bool, kMaxCols>& use, std::array<double, kMaxCols>* out) {
  std::array<int, kMaxCols> cols{};
  int n = 0;
  for (int i = 0; i < kMaxCols; ++i)
    if (use[i]) cols[n++] = i;
  double m[kMaxCols][kMaxCols + 1] = {};
  for (size_t r = 0; r < x.size(); ++r) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) m[i][j] += x[r][cols[i]] * x[r][cols[j]];
      m[i][n] += x[r][cols[i]] * y[r];
    }
  }
  for (int i = 0; i < n; ++i) {
    int piv = i;
    for (int r = i + 1; r < n; ++r)
      if (std::fabs(m[r][i]) > std::fabs(m[piv][i])) piv = r;
    if (std::fabs(m[piv][i]) < 1e-12) return false;
    for (int k = 0; k <= n; ++k) std::swap(m[i][k], m[piv][k]);
    for (int r = 0; r < n; ++r) {
      if (r == i) continue;
      const double f = m[r][i] / m[i][i];
      for (int k = i; k <= n; ++k) m[r][k] -= f * m[i][k];
    }
  }
  out->fill(0.0);
  for (int i = 0; i < n; ++i) (*out)[cols[i]] = m[i][n] / m[i][i];
  return true;
}

// Fits with every column in `use` allowed, then pins the most negative coefficient to 0 and
// refits until none is negative (a tiny active-set NNLS). A column the data cannot determine
// (e.g. c·q when every sample has c = 0) is dropped the same way.
bool FitNonNegative(const std::vector<std::array<double, kMaxCols>>& x, const std::vector<double>& y,
                    std::array<bool, kMaxCols> use, std::array<double, kMaxCols>* out) {
  for (int round = 0; round <= kMaxCols; ++round) {
    if (!SolveLeastSquares(x, y, use, out)) {
      int drop = -1;
      for (int i = 0; i < kMaxCols - 1; ++i)  // never the intercept (last column)
        if (use[i]) drop = i;
      if (drop < 0) return false;
      use[drop] = false;
      continue;
    }
    int worst = -1;
    for (int i = 0; i < kMaxCols; ++i)
      if (use[i] && (*out)[i] < 0 && (worst < 0 || (*out)[i] < (*out)[worst])) worst = i;
    if (worst < 0) return true;
    use[worst] = false;
  }
  return false;
}

}  // namespace

int64_t CostModel::MaxTokens(double budget_ns, int64_t c) const {
  budget_ns -= f * static_cast<double>(c);  // paid by any chunk, however small
  if (budget_ns <= 0) return 0;
  const double lin = a + b * static_cast<double>(c);
  double q;
  if (d > 1e-15) {
    // d·q² + lin·q − budget = 0, positive root.
    q = (-lin + std::sqrt(lin * lin + 4.0 * d * budget_ns)) / (2.0 * d);
  } else if (lin > 1e-15) {
    q = budget_ns / lin;
  } else {
    return INT64_MAX / 4;  // free tokens: the caller's caps decide
  }
  auto r = static_cast<int64_t>(std::min(q, 1e15));
  // Floating error at the boundary: step back until it really fits.
  while (r > 0 && TokenCost(r, c) > budget_ns + f * static_cast<double>(c)) --r;
  return r;
}

Result<CostModel> CostModel::Fit(std::span<const CostSample> samples) {
  std::vector<std::array<double, kMaxCols>> px, dx;
  std::vector<double> py, dy;
  for (const auto& s : samples) {
    const double q = static_cast<double>(s.q), c = static_cast<double>(s.c);
    if (s.decode) {
      dx.push_back({c, 0, 0, 0, 1});
      dy.push_back(s.ns);
    } else {
      px.push_back({q, q * c, q * q, c, 1});
      py.push_back(s.ns);
    }
  }
  if (px.size() < 4) return InvalidArgument("cost model fit needs at least 4 prefill samples");
  std::array<double, kMaxCols> x{};
  if (!FitNonNegative(px, py, {true, true, true, true, true}, &x))
    return InvalidArgument("cost model fit: samples do not determine the coefficients");
  CostModel m;
  m.a = x[0];
  m.b = x[1];
  m.d = x[2];
  m.f = x[3];
  m.e = x[4];
  // Sanity check against what was measured: with non-negative coefficients every predicted
  // cost is ≥ e, so an intercept above the cheapest measured forward is a fitting artefact
  // (a few noisy large-q timings tilt the plane) and would over-charge every step.
  double cheapest = py.front();
  for (double ns : py) cheapest = std::min(cheapest, ns);
  m.e = std::min(m.e, cheapest);
  if (m.a <= 0 && m.d <= 0 && m.b <= 0) return InvalidArgument("cost model fit: no per-token cost measured");
  if (dx.size() >= 2) {
    std::array<double, kMaxCols> y{};
    if (FitNonNegative(dx, dy, {true, false, false, false, true}, &y)) {
      m.h = y[0];
      m.g = std::max(0.0, y[4] - m.e);  // the step's fixed cost is already in e
      m.has_decode = true;
    }
  }
  return m;
}

Status CostModel::Save(const std::string& path) const {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return IoError(fmt::format("cannot write cost model {}", path));
  f << fmt::format("ladle-cost-model 1\na {:.17g}\nb {:.17g}\nd {:.17g}\ne {:.17g}\nf {:.17g}\n", a, b, d, e, this->f);
  if (has_decode) f << fmt::format("g {:.17g}\nh {:.17g}\n", g, h);
  return f.good() ? Status::Ok() : IoError(fmt::format("cannot write cost model {}", path));
}

Result<CostModel> CostModel::Load(const std::string& path) {
  std::ifstream f(path);
  if (!f) return IoError(fmt::format("cannot read cost model {}", path));
  std::string magic;
  int version = 0;
  f >> magic >> version;
  if (magic != "ladle-cost-model" || version != 1) return ParseError(fmt::format("{}: not a ladle cost model", path));
  CostModel m;
  int seen = 0;
  std::string key;
  double v;
  while (f >> key >> v) {
    if (!std::isfinite(v) || v < 0) return ParseError(fmt::format("{}: bad value for {}", path, key));
    if (key == "a") m.a = v, seen |= 1;
    else if (key == "b") m.b = v, seen |= 2;
    else if (key == "d") m.d = v, seen |= 4;
    else if (key == "e") m.e = v, seen |= 8;
    else if (key == "f") m.f = v;  // optional: 0 when absent
    else if (key == "g") m.g = v, seen |= 16;
    else if (key == "h") m.h = v, seen |= 32;
    else return ParseError(fmt::format("{}: unknown key {}", path, key));
  }
  if ((seen & 15) != 15) return ParseError(fmt::format("{}: missing coefficients", path));
  m.has_decode = (seen & 48) == 48;
  return m;
}

Result<std::vector<CostSample>> ProfileModel(Model& model, KvStorage& kv, int64_t max_q, int repeats) {
  const int bs = model.config().block_size;
  std::vector<int64_t> qs;
  for (int64_t q = 1; q <= max_q; q *= 4) qs.push_back(q);
  if (qs.back() != max_q) qs.push_back(max_q);
  std::vector<int64_t> cs = {0, max_q / 2, max_q};
  // A long cached prefix too, when the pool has room: the b·q·c term is what shrinks chunks
  // late in a long prompt, and it is poorly determined from short prefixes alone.
  if ((5 * max_q + bs - 1) / bs <= kv.num_blocks()) cs.push_back(4 * max_q);
  const int64_t need_tokens = cs.back() + max_q;
  const int64_t need_blocks = (need_tokens + bs - 1) / bs;
  if (need_blocks > kv.num_blocks() || kv.num_slots() < 1)
    return InvalidArgument("profiling needs more KV blocks than configured; lower profile_max_q");
  std::vector<int32_t> table(need_blocks);
  for (int32_t i = 0; i < need_blocks; ++i) table[i] = i;
  std::vector<TokenId> toks(need_tokens);
  // Arbitrary ordinary ids (timing does not depend on which), inside any vocabulary size.
  const int64_t span = std::max<int64_t>(1, std::min<int64_t>(20000, model.config().vocab_size - 3));
  for (int64_t i = 0; i < need_tokens; ++i) toks[i] = static_cast<TokenId>(3 + (i * 7919) % span);
  std::vector<float> logits;
  // Each point is timed `repeats` times after one warm-up and its median kept: on a shared
  // machine a descheduled thread inflates single timings, and least squares is not robust
  // to such outliers.
  auto time_one = [&](int64_t q, int64_t c, bool prefill, double* ns) -> Status {
    if (c > 0) {  // lay down the cached prefix (untimed)
      SeqStep pre{std::span<const TokenId>(toks.data(), c), 0, table, 0, true, false, false};
      LADLE_RETURN_IF_ERROR(model.Forward(std::span<const SeqStep>(&pre, 1), kv, &logits));
    }
    SeqStep st{std::span<const TokenId>(toks.data() + c, q), c, table, 0, prefill, false, true};
    auto t0 = std::chrono::steady_clock::now();
    LADLE_RETURN_IF_ERROR(model.Forward(std::span<const SeqStep>(&st, 1), kv, &logits));
    *ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    return Status::Ok();
  };
  auto median_of = [&](int64_t q, int64_t c, bool prefill, double* ns) -> Status {
    std::vector<double> t(static_cast<size_t>(std::max(1, repeats)) + 1);
    for (auto& v : t) LADLE_RETURN_IF_ERROR(time_one(q, c, prefill, &v));
    t.erase(t.begin());  // warm-up
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    *ns = t[t.size() / 2];
    return Status::Ok();
  };
  std::vector<CostSample> out;
  for (int64_t c : cs) {
    for (int64_t q : qs) {
      double ns;
      LADLE_RETURN_IF_ERROR(median_of(q, c, true, &ns));
      out.push_back({q, c, ns});
    }
    if (c > 0) {
      // A decode step (one token through every layer) is what most batches hold; a
      // one-token prefill replays the decoder over the prompt tail and costs more.
      double ns;
      LADLE_RETURN_IF_ERROR(median_of(1, c, false, &ns));
      out.push_back({1, c, ns, true});
    }
  }
  return out;
}

}  // namespace ladle::engine
