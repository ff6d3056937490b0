// A skewed, drifting per-expert load, so the balancer has work: a random-weight model routes
// almost uniformly and real ones do not. The reference model uses RouterBias as a router
// bias (ExpertParallelConfig::router_skew); the bench and tests sample per-step counts from it.
//
// Model (docs/eplb.md): each layer's experts carry latent scores z_e, and the r-th highest
// score gets a Zipf share proportional to 1 / (r + 1)^s (s varies by layer, zipf_s_spread). The scores drift as an AR(1) process
// sampled every `drift_every_steps` (z <- rho z + sqrt(1 - rho^2) eps, rho set by
// `half_life_steps`: the scores' correlation halves every half_life_steps), so the hot set
// shifts gradually and any expert can heat up. Per step, each share gets an optional
// log-normal factor (`step_jitter`: batch composition, e.g. a prefill step holding a few long
// prompts) and counts are Poisson around tokens x top_k x share, capped at `tokens` (each token
// takes an expert at most once; shares are capped at 1 / top_k for the same reason).
//
// Everything is a function of (config, step, layer): Sample(step) gives the same counts
// whether or not other steps were sampled before. The class caches the scores of the latest
// drift epoch, so it is not thread-safe; going back in time recomputes from epoch 0.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/eplb/placement.h"

namespace ladle::eplb {

struct SkewConfig {
  uint32_t layers = 61;             // DeepSeek V3: 61 layers (58 MoE; the bench uses 61 like the brief)
  uint32_t experts = 256;           // routed experts per layer
  uint32_t top_k = 8;               // experts per token
  double zipf_s = 0.5;              // the default skew: the hottest of 256 experts takes 8.4x the mean
  // Layers are not equally skewed in real models (CRAFT's premise); layer l's exponent is
  // zipf_s x (1 + spread x u_l), u_l uniform in [-1, 1] from the seed. 0: every layer alike.
  double zipf_s_spread = 0.5;
  uint64_t half_life_steps = 10000; // latent-score correlation halves every this many steps
  uint64_t drift_every_steps = 100; // scores move in epochs of this many steps
  double step_jitter = 0.0;         // sigma of the per-step log-normal factor on each share
  uint64_t seed = 1;
};

class SkewedLoadGenerator {
 public:
  // kInvalidArgument for zero layers/experts/top_k, top_k > experts, zipf_s < 0, zero
  // half-life or epoch length, negative jitter.
  static Result<SkewedLoadGenerator> Create(const SkewConfig& cfg);
  const SkewConfig& config() const { return cfg_; }

  // The expected share of routed (token, expert) pairs each expert of `layer` gets at `step`:
  // sums to 1, each <= 1 / top_k.
  std::vector<double> Shares(uint64_t step, uint32_t layer);
  // A router-logit bias that tilts routing toward Shares: log(share) minus its mean over the
  // layer's experts (zero-mean, so it moves no logit scale).
  std::vector<float> RouterBias(uint64_t step, uint32_t layer);
  // Per-expert counts of `tokens` tokens routed at `step`, one row per layer.
  ExpertLoads Sample(uint64_t step, uint64_t tokens);
  // The same for one layer into `out` (experts entries).
  void SampleLayer(uint64_t step, uint32_t layer, uint64_t tokens, std::span<uint64_t> out);

 private:
  explicit SkewedLoadGenerator(const SkewConfig& cfg);
  void AdvanceTo(uint64_t epoch);
  void RefreshShares();                                   // shares_ from scores_
  std::span<const double> SharesAt(uint32_t layer) const;  // the cached epoch's shares

  SkewConfig cfg_;
  double rho_ = 1.0;
  std::vector<double> zipf_;    // [layer][rank] Zipf share of the r-th hottest expert (sums to 1)
  std::vector<double> scores_;  // [layer][expert] latent scores at epoch_
  std::vector<double> shares_;  // [layer][expert] their Zipf shares, capped
  uint64_t epoch_ = 0;
};

// Caps shares at `cap` (each <= cap, sum kept at 1) by water-filling: capped entries are fixed
// at cap and the rest rescaled until none exceeds it. Requires cap * size >= 1.
void CapShares(std::span<double> shares, double cap);

}  // namespace ladle::eplb
