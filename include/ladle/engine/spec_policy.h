// Speculative decoding's verification policies (docs/engine.md, "Speculative decoding"; the
// recipe's "DSpark speculative decoding"). Pure classes: confidences and a profiled throughput
// table in, verify lengths out; no I/O (but Save/Load), no clock, so the fleet simulator can run
// the same code.
//
// Terms. A decoding request i brings up to γ draft tokens with confidences c[i][0..γ), each the
// drafter's estimate that the draft token is accepted given every earlier one was. Verifying
// L_i drafts costs L_i + 1 tokens in the step (the request's last sampled token plus the drafts)
// and yields 1 + Σ_{k<L_i} π[i][k] tokens in expectation, π[i][k] = c[i][0]·…·c[i][k] (the
// cumulative acceptance product). B = Σ (L_i + 1) is the step's token count, τ = Σ (1 + Σ π) its
// expected output, and SPS(B) the engine's steps per second at B tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::engine {

class Model;
class KvStorage;

// SPS(B): the engine's forward steps per second at B tokens per step, profiled at start-up on
// decode-shaped batches (verify spans of up to γ + 1 tokens over as many sequences as needed),
// saved and loaded like the cost model. Between profiled points it interpolates linearly; past
// the last point it extrapolates the time per step linearly from the last two points (so SPS
// keeps falling, never rises).
struct SpsTable {
  std::vector<int64_t> tokens;  // strictly increasing, tokens[0] >= 1
  std::vector<double> sps;      // steps per second at tokens[i]; > 0

  double At(int64_t b) const;
  Status Validate() const;
  // Text: one "tokens sps" pair per line after a "ladle-sps/v1" header.
  Status Save(const std::string& path) const;
  static Result<SpsTable> Load(const std::string& path);
};

// Times forward passes of B decode-shaped tokens on `model` (slots [0, max_seqs) and scratch
// blocks of `kv`; call before serving). B runs over a grid up to `max_tokens`; each point keeps
// the median of `repeats` timings. Spans are at most `span` tokens (γ + 1).
Result<SpsTable> ProfileSps(Model& model, KvStorage& kv, int64_t max_tokens, int span, int repeats);

// Cumulative acceptance products π[k] = c[0]·…·c[k] of one request (clamped to [0, 1]).
std::vector<double> AcceptanceProducts(std::span<const float> confidences);

// The paper's Algorithm 1 (DSpark, "variable-length verification"), exactly:
//   - every request starts with L_i = 0 (one token: B = N, τ = N);
//   - all candidates (i, k) are sorted by π[i][k], descending (ties: lower k, then lower i, so a
//     request's candidates stay in prefix order);
//   - candidates are added in that order while τ'·SPS(B + 1) > τ·SPS(B), with τ' = τ + π[i][k];
//     the loop BREAKS at the first candidate that does not raise Θ = τ·SPS(B), even if a later
//     one would;
//   - B never exceeds `max_tokens` (0: no cap).
// SPS(B) is the rate of the engine's whole step, drafting included: with `draft_cost` (seconds
// the drafter spends per drafted position; each token past a request's own needed one) the
// table's rate counts as 1/(1/SPS(B) + (B − N)·draft_cost). 0: a free drafter, the table as is.
struct VerifyPlan {
  std::vector<int> lengths;  // L_i per request: drafts to verify
  int64_t tokens = 0;        // B
  double expected = 0;       // τ
  double theta = 0;          // τ·SPS(B)
};
VerifyPlan PlanVerify(std::span<const std::vector<float>> confidences, const SpsTable& sps, int64_t max_tokens = 0,
                      double draft_cost = 0.0);
// The step rate Algorithm 1 uses: SPS(B) with the drafting of B − N positions (above).
double StepRate(const SpsTable& sps, int64_t b, int64_t n, double draft_cost);

// The asynchronous form (§5.2): the step's total B is fixed beforehand (`capacity`, from older
// confidences); per-request lengths are then the top (capacity − N) candidates by π of the
// current confidences (the same order as PlanVerify), capped by each request's draft count. A
// capacity below N still gives every request its one token.
std::vector<int> TopKLengths(std::span<const std::vector<float>> confidences, int64_t capacity);

// What the engine asks of a verification policy, once per step.
class SpecPolicy {
 public:
  virtual ~SpecPolicy() = default;
  virtual std::string name() const = 0;
  // Drafts each decoding request should bring (γ).
  virtual int draft_tokens() const = 0;
  // The step's token capacity B from the confidences the scheduler has (possibly stale).
  virtual int64_t Capacity(std::span<const std::vector<float>> confidences) const = 0;
  // Per-request verify lengths from current confidences under `capacity`.
  virtual std::vector<int> Lengths(std::span<const std::vector<float>> confidences, int64_t capacity) const = 0;
  // The most drafts any one of `requests` decoding requests could be given when no acceptance
  // product exceeds `max_pi`: the engine skips the drafter when it is 0 (its cost would buy
  // nothing).
  virtual int UsefulDrafts(int64_t requests, double max_pi) const { return draft_tokens(); }
  // The drafter's measured cost, seconds per drafted position (state in: the engine measures,
  // the policy decides). Ignored by policies that do not weigh throughput.
  virtual void SetDraftCost(double seconds_per_position) {}
};

// For Algorithm 1 over `sps` with `requests` requests whose acceptance products are at most
// `max_pi` (≤ 1): an upper bound on the candidates it can take, at most `limit`. Candidate j
// (B = N + j → B + 1) needs π > τ·(SPS(B)/SPS(B + 1) − 1) with τ ≥ N, so none past the first j
// where N·(SPS(B)/SPS(B + 1) − 1) ≥ max_pi (or where B + 1 passes max_tokens) is ever taken.
int DsparkCandidateBound(const SpsTable& sps, int64_t requests, int64_t max_tokens, int limit, double max_pi = 1.0,
                         double draft_cost = 0.0);

// "fixed:N": every request verifies min(N, its drafts); confidences are ignored.
std::unique_ptr<SpecPolicy> MakeFixedSpecPolicy(int n);
// "dspark": Capacity = PlanVerify(...).tokens; Lengths = TopKLengths (which equals PlanVerify's
// lengths when the confidences are the same ones).
std::unique_ptr<SpecPolicy> MakeDsparkSpecPolicy(int draft_tokens, SpsTable sps, int64_t max_tokens = 0);

}  // namespace ladle::engine
