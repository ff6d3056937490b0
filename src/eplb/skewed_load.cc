// The skewed, drifting load generator: see include/ladle/eplb/skewed_load.h.
#include "ladle/eplb/skewed_load.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace ladle::eplb {
namespace {

// SplitMix64: a counter-based seed mixer, so every (seed, stream, step, layer) gets its own
// independent generator without sequential state.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A small UniformRandomBitGenerator (xoshiro256**): seeding mt19937_64 per (step, layer) would
// cost more than the draws.
class Rng {
 public:
  using result_type = uint64_t;
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) w = seed = Mix(seed);
  }
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return UINT64_MAX; }
  uint64_t operator()() {
    const uint64_t out = Rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t, s_[3] = Rotl(s_[3], 45);
    return out;
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

enum Stream : uint64_t { kInitial = 1, kDrift = 2, kSample = 3 };

uint64_t StreamSeed(uint64_t seed, Stream stream, uint64_t a, uint64_t b) {
  return Mix(Mix(Mix(seed ^ (stream << 56)) ^ a) ^ (b * 0x9e3779b97f4a7c15ull));
}

}  // namespace

void CapShares(std::span<double> shares, double cap) {
  // Each pass fixes every entry over the cap; at most size() passes, usually one or two.
  std::vector<uint8_t> fixed(shares.size(), 0);
  for (;;) {
    double fixed_sum = 0, free_sum = 0;
    for (size_t i = 0; i < shares.size(); ++i) (fixed[i] ? fixed_sum : free_sum) += shares[i];
    if (free_sum <= 0) return;
    const double scale = (1.0 - fixed_sum) / free_sum;
    bool changed = false;
    for (size_t i = 0; i < shares.size(); ++i) {
      if (fixed[i]) continue;
      shares[i] *= scale;
      if (shares[i] > cap) shares[i] = cap, fixed[i] = 1, changed = true;
    }
    if (!changed) return;
  }
}

SkewedLoadGenerator::SkewedLoadGenerator(const SkewConfig& cfg) : cfg_(cfg) {
  rho_ = std::pow(0.5, static_cast<double>(cfg.drift_every_steps) / static_cast<double>(cfg.half_life_steps));
  zipf_.resize(size_t{cfg.layers} * cfg.experts);
  scores_.resize(size_t{cfg.layers} * cfg.experts);
  for (uint32_t l = 0; l < cfg.layers; ++l) {
    Rng rng(StreamSeed(cfg.seed, kInitial, l, 0));
    const double u = std::uniform_real_distribution<double>(-1.0, 1.0)(rng);
    const double s = std::max(0.0, cfg.zipf_s * (1.0 + cfg.zipf_s_spread * u));
    double* zipf = zipf_.data() + size_t{l} * cfg.experts;
    double total = 0;
    for (uint32_t r = 0; r < cfg.experts; ++r) total += (zipf[r] = 1.0 / std::pow(r + 1.0, s));
    for (uint32_t r = 0; r < cfg.experts; ++r) zipf[r] /= total;
    std::normal_distribution<double> normal;
    for (uint32_t e = 0; e < cfg.experts; ++e) scores_[size_t{l} * cfg.experts + e] = normal(rng);
  }
  RefreshShares();
}

Result<SkewedLoadGenerator> SkewedLoadGenerator::Create(const SkewConfig& cfg) {
  if (cfg.layers == 0 || cfg.experts == 0 || cfg.top_k == 0 || cfg.top_k > cfg.experts) {
    return InvalidArgument(fmt::format("skew: {} layers, {} experts, top-{}", cfg.layers, cfg.experts, cfg.top_k));
  }
  if (!(cfg.zipf_s >= 0) || !(cfg.step_jitter >= 0) || !(cfg.zipf_s_spread >= 0) || cfg.half_life_steps == 0 || cfg.drift_every_steps == 0) {
    return InvalidArgument("skew: zipf_s and step_jitter must be >= 0, half-life and epoch > 0 steps");
  }
  return SkewedLoadGenerator(cfg);
}

void SkewedLoadGenerator::AdvanceTo(uint64_t epoch) {
  if (epoch == epoch_) return;
  if (epoch < epoch_) *this = SkewedLoadGenerator(cfg_);  // the scores only run forward
  const double noise = std::sqrt(1.0 - rho_ * rho_);
  for (; epoch_ < epoch; ++epoch_) {
    for (uint32_t l = 0; l < cfg_.layers; ++l) {
      Rng rng(StreamSeed(cfg_.seed, kDrift, l, epoch_));
      std::normal_distribution<double> normal;
      double* z = scores_.data() + size_t{l} * cfg_.experts;
      for (uint32_t e = 0; e < cfg_.experts; ++e) z[e] = rho_ * z[e] + noise * normal(rng);
    }
  }
  RefreshShares();
}

void SkewedLoadGenerator::RefreshShares() {
  shares_.resize(scores_.size());
  std::vector<uint32_t> order(cfg_.experts);
  for (uint32_t l = 0; l < cfg_.layers; ++l) {
    const double* z = scores_.data() + size_t{l} * cfg_.experts;
    const double* zipf = zipf_.data() + size_t{l} * cfg_.experts;
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [z](uint32_t a, uint32_t b) { return z[a] > z[b]; });
    std::span<double> out(shares_.data() + size_t{l} * cfg_.experts, cfg_.experts);
    for (uint32_t r = 0; r < cfg_.experts; ++r) out[order[r]] = zipf[r];
    CapShares(out, 1.0 / cfg_.top_k);
  }
}

std::span<const double> SkewedLoadGenerator::SharesAt(uint32_t layer) const {
  return {shares_.data() + size_t{layer} * cfg_.experts, cfg_.experts};
}

std::vector<double> SkewedLoadGenerator::Shares(uint64_t step, uint32_t layer) {
  AdvanceTo(step / cfg_.drift_every_steps);
  auto shares = SharesAt(layer);
  return std::vector<double>(shares.begin(), shares.end());
}

std::vector<float> SkewedLoadGenerator::RouterBias(uint64_t step, uint32_t layer) {
  const std::vector<double> shares = Shares(step, layer);
  double mean = 0;
  for (double s : shares) mean += std::log(s);
  mean /= static_cast<double>(shares.size());
  std::vector<float> out(shares.size());
  for (size_t e = 0; e < shares.size(); ++e) out[e] = static_cast<float>(std::log(shares[e]) - mean);
  return out;
}

void SkewedLoadGenerator::SampleLayer(uint64_t step, uint32_t layer, uint64_t tokens, std::span<uint64_t> out) {
  AdvanceTo(step / cfg_.drift_every_steps);
  auto cached = SharesAt(layer);
  std::vector<double> shares(cached.begin(), cached.end());
  Rng rng(StreamSeed(cfg_.seed, kSample, step, layer));
  if (cfg_.step_jitter > 0) {
    // Mean-one log-normal factors, then back to a distribution under the cap.
    std::normal_distribution<double> normal(-0.5 * cfg_.step_jitter * cfg_.step_jitter, cfg_.step_jitter);
    double sum = 0;
    for (double& s : shares) sum += (s *= std::exp(normal(rng)));
    for (double& s : shares) s /= sum;
    CapShares(shares, 1.0 / cfg_.top_k);
  }
  const double pairs = static_cast<double>(tokens) * cfg_.top_k;
  for (uint32_t e = 0; e < cfg_.experts; ++e) {
    const double mean = pairs * shares[e];
    uint64_t n = 0;
    if (mean > 0) n = static_cast<uint64_t>(std::poisson_distribution<int64_t>(mean)(rng));
    out[e] = std::min(n, tokens);
  }
}

ExpertLoads SkewedLoadGenerator::Sample(uint64_t step, uint64_t tokens) {
  ExpertLoads loads(cfg_.layers, cfg_.experts);
  std::vector<uint64_t> counts(cfg_.experts);
  for (uint32_t l = 0; l < cfg_.layers; ++l) {
    SampleLayer(step, l, tokens, counts);
    for (uint32_t e = 0; e < cfg_.experts; ++e) loads.At(l, e) = static_cast<double>(counts[e]);
  }
  return loads;
}

}  // namespace ladle::eplb
