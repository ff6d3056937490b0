// A small discrete-event simulation of a PD-disaggregated fleet, to compare the lb policies
// on a real trace. Pure code: time is the simulation's own (seconds, double), the only input
// is the trace, and the same inputs give the same numbers.
//
// What it models, and why it is enough to tell the balancers apart:
//   - Prefill engines of R DP ranks. A step runs chunks on every rank under a per-rank time
//     budget (the engine's TimeBudgetChunk: the cost solved for the largest q that fits; the
//     first chunk of a step takes at least min_chunk), and lasts as long as its slowest rank:
//     DP ranks meet at every step's expert-parallel exchange, so an under-fed rank idles.
//   - Cached prefixes from one global store (any engine hits any prefix): the leading
//     hash_ids already prefilled, capped by the recipe's hit rule (L - 134, down to 128).
//   - Decode instances of R DP ranks: a step costs, per rank, base + per_request · batch +
//     per_kv_token · KV, and the instance waits for its slowest rank, for the same reason.
//     Each step adds one token to every running request (its KV grows by one).
//   - Routers from lb: the prefill router gets every arrival (Submit), engines Pull at each
//     step start (and when idle at an arrival) with their remaining quota; the decode router
//     picks a rank at prefill completion, or the request waits until a rank frees.
// Not modelled: the KV hand-off's bandwidth (a fixed latency), preemption, speculative decoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/lb/decode_lb.h"
#include "ladle/lb/prefill_lb.h"
#include "ladle/lb/quota_cost.h"

namespace ladle::lb::sim {

struct TraceRequest {
  double arrival_s = 0;  // trace time, before scaling
  int64_t input = 0, output = 0;
  std::vector<uint64_t> hash_ids;  // 512-token blocks, each id naming its whole prefix
};

// Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids). max_requests 0 = all.
Result<std::vector<TraceRequest>> LoadMooncakeTrace(const std::string& path, size_t max_requests);
// A cost model file in engine::CostModel's format ("ladle-cost-model 1", then "a 1.5e5" ...);
// only the prefill coefficients are read.
Result<QuotaCost> LoadQuotaCost(const std::string& path);

// DeepSeek-V3-shaped costs for one DP rank at ~800 TFLOP/s effective (FP8, H200 class), in ns:
//   a = 90 µs per token: 2 × 37B activated parameters = 74 GFLOP a token;
//   b = 6 ns per (new token × cached token): MLA prefill attends with 128 heads over 192 + 128
//       dims in 61 layers, 5 MFLOP a pair; d = b / 2: within a chunk attention is causal (half
//       the pairs), which also makes a chunked prefill cost the same as a whole one;
//   e = 5 ms fixed per step (launches, the EP all-to-all's latency); f = 0.
QuotaCost DefaultQuotaCost();

struct DecodeCost {
  // Per rank and step: weights and the all-to-all (base), per-sequence MoE and sampling work,
  // and reading the KV (35 KB a token for V3's FP8 MLA cache at ~3 TB/s is ~12 ns).
  double base_ns = 15e6, per_request_ns = 0.1e6, per_kv_token_ns = 12;
  double Rank(uint32_t batch, int64_t kv) const {
    return batch == 0 ? 0.0 : base_ns + per_request_ns * batch + per_kv_token_ns * static_cast<double>(kv);
  }
};

struct SimConfig {
  uint32_t prefill_engines = 4, prefill_dp = 2;
  uint32_t decode_engines = 4, decode_dp = 2;
  double time_scale = 0.8;   // arrival = trace timestamp × time_scale
  QuotaCost cost = DefaultQuotaCost();
  double step_budget_ns = 0.5e9;  // prefill per-rank step budget
  int64_t min_chunk = 512;
  double pull_ahead = 2.0;        // each rank keeps pull_ahead × budget of quota counted
  double round_s = 60;            // bucket re-split round and the quota-imbalance window
  Steal steal = Steal::kIdleRanks;
  bool backlog_in_demand = true;
  std::string prefill_policy = "lb", decode_policy = "lb";
  DecodeLbConfig decode_lb = {.high_factor = 1.05, .judge_with_incoming = true,
                              .max_requests = 256, .max_kv_tokens = 2'000'000};
  DecodeCost decode_cost;
  double handoff_s = 0.02;        // prefill done -> decode may start
  double sample_s = 1;            // KV imbalance sampling period
  int64_t block_tokens = 512;     // the trace's hash block
};

struct SimResult {
  std::string prefill_policy, decode_policy;
  size_t requests = 0;
  double makespan_s = 0;
  double cache_hit = 0;            // cached / input tokens
  double prefill_util = 0;         // rank busy time (with work) / (ranks × makespan)
  double quota_max_mean = 0;       // per round: max/mean executed quota over prefill ranks
  double dp_step_max_mean = 0;     // per prefill step: max/mean rank cost in the group (time-weighted)
  double kv_max_mean = 0;          // sampled: max/mean KV tokens over decode ranks
  double decode_step_max_mean = 0; // per decode step: max/mean rank cost in the instance
  // Seconds. TTFT: arrival to prefill done (the first token). TPOT: (done - decode arrival) /
  // (output - 1), so it holds the wait for a decode slot but not the fixed hand-off.
  double ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0;
  double output_tok_s = 0, req_s = 0;
};

Result<SimResult> Simulate(const std::vector<TraceRequest>& trace, const SimConfig& config);

}  // namespace ladle::lb::sim
