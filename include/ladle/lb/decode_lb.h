// The Decode Load Balancer (the recipe's, after DualPath's intra-group rule): routes each
// request to one DP rank among every rank of every decode instance, balancing both the request
// count (which sets a rank's batch) and the total KV tokens (which set its attention cost).
//
// The rule, over the candidate set (the unsaturated ranks of available instances):
//   a rank is "high" when its KV tokens exceed high_factor × the candidates' mean;
//   among the ranks that are not high, take the one with the fewest requests;
//   if every candidate is high, take the one with the fewest tokens;
//   ties: fewer tokens (resp. requests), then lower flat index.
// With judge_with_incoming (the default) a rank is judged by the tokens it would hold after
// taking this request (its KV + the prompt) against the candidates' mean after it. That is
// how the request's length enters, and it gives the recipe's heuristic: a short prompt leaves
// every rank near the mean, so the fewest-requests rank wins even when it holds much KV (few
// long requests); a long prompt pushes every rank over the threshold except those far below
// the mean, so it lands on low KV. Without it the rule judges current tokens only, as DualPath
// states it, and the request's length plays no part.
//
// Imbalance is judged per candidate set, never fleet-wide: the mean is over the ranks that
// could take this request, so saturated or absent ranks do not shift the threshold.
// A saturated rank (at max_requests, or whose KV would pass max_kv_tokens with this prompt,
// or flagged by its engine's report) never gets a request while an unsaturated one exists;
// when none exists Route answers nothing and the caller queues the request.
//
//   DecodeBalancer lb(DecodePolicy::kDualPath, config, Topology::Uniform(instances, dp));
//   if (auto t = lb.Route(id, prompt_tokens)) Send(id, *t);   // counted now: +1, +prompt
//   lb.Grow(id, 1);                                          // each generated token
//   lb.Release(id);                                          // finished, cancelled, moved
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/lb/load_ledger.h"

namespace ladle::lb {

struct DecodeLbConfig {
  double high_factor = 1.05;      // "high" = tokens above this × the candidates' mean
  bool judge_with_incoming = true;
  uint32_t max_requests = 0;      // per rank; 0 = no cap
  int64_t max_kv_tokens = 0;      // per rank; 0 = no cap
};

// One rank as a snapshot of load reports (or of a balancer's ledger).
struct DecodeRankLoad {
  uint32_t requests = 0;
  int64_t kv_tokens = 0;
  bool saturated = false;  // the engine says it is full (KV pool, batch slots)
};

// Saturated by flag or by the config's caps for a request of `prompt_tokens`.
bool Saturated(const DecodeRankLoad& r, int64_t prompt_tokens, const DecodeLbConfig& config);

// The DualPath rule over a snapshot: the index into `ranks` to take a request of
// `prompt_tokens`, or nothing when every rank is saturated (or there are none).
std::optional<uint32_t> PickDecodeRank(std::span<const DecodeRankLoad> ranks, int64_t prompt_tokens,
                                       const DecodeLbConfig& config);

enum class DecodePolicy {
  kDualPath,       // the rule above
  kRoundRobin,     // the next unsaturated rank in flat order
  kLeastRequests,  // fewest requests, ties lower flat index
};
// "lb" (or "dualpath"), "round-robin", "least-requests"; kInvalidArgument otherwise.
Result<DecodePolicy> ParseDecodePolicy(std::string_view name);
std::string_view DecodePolicyName(DecodePolicy p);

// A decode router with its own dispatch-counted view. All three policies skip saturated ranks
// and unavailable instances, so the benchmarks compare balancing, not admission.
class DecodeBalancer {
 public:
  DecodeBalancer(DecodePolicy policy, DecodeLbConfig config, Topology topology);

  DecodePolicy policy() const { return policy_; }
  std::string_view name() const { return DecodePolicyName(policy_); }

  // Chooses and counts a rank (+1 request, +prompt_tokens) for `id`, whose KV on arrival holds
  // `prompt_tokens`. Nothing when every candidate is saturated; `id` must not be counted
  // (CHECKed: a re-route Releases first).
  std::optional<RankTarget> Route(RequestId id, int64_t prompt_tokens);
  // `tokens` more KV for a routed request (its generated tokens). False when not counted.
  bool Grow(RequestId id, int64_t tokens);
  // The request left its rank. False when not counted (idempotent).
  bool Release(RequestId id);
  // From a load report: the rank's engine says it is (or no longer is) full.
  void SetSaturated(RankTarget rank, bool saturated);
  // An instance left or rejoined; its counted requests stay until Released.
  void SetAvailable(uint32_t engine, bool available);
  bool available(uint32_t engine) const { return available_[engine]; }

  const Topology& topology() const { return topology_; }
  const LoadLedger& ledger() const { return ledger_; }
  // Every rank as the policy sees it (unavailable instances' ranks flagged saturated).
  std::vector<DecodeRankLoad> Snapshot() const;

 private:
  DecodePolicy policy_;
  DecodeLbConfig config_;
  Topology topology_;
  LoadLedger ledger_;
  std::vector<bool> available_;
  std::vector<bool> flagged_;  // per flat rank, from SetSaturated
  uint32_t next_ = 0;          // round-robin cursor (flat)
  std::vector<DecodeRankLoad> scratch_;
};

}  // namespace ladle::lb
