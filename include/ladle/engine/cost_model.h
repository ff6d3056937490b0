// The prefill cost model of the recipe's Prefill Load Balancer, per-GPU layer:
//   cost(q, c) = a·q + b·q·c + d·q² + e   (ns; q uncached tokens, c cached prefix)
// Fitted by least squares over profiled forward passes, saved to and loaded from a small text
// file, and solved for the largest q that fits a remaining step budget.
//
// Two terms beyond the recipe's form, both measured on the reference model: f·c, because a
// prefill replays the decoder over the prompt's last 128 tokens against the whole global KV
// (Decoder SWA Bounded Replay), which costs in proportion to c even for q = 1; and a separate
// decode cost g + h·c per decoding sequence, because a decode step does not replay and is far
// cheaper than a one-token prefill. Either is 0 (or absent) where a model does not show it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::engine {

class Model;
class KvStorage;

struct CostSample {
  int64_t q = 0, c = 0;
  double ns = 0;
  bool decode = false;  // a decode step (q = 1) rather than a prefill chunk
};

struct CostModel {
  double a = 0, b = 0, d = 0, e = 0;  // the recipe's quadratic
  double f = 0;                       // prefill cost per cached token (decoder replay)
  double g = 0, h = 0;                // decode: g + h·c per sequence
  bool has_decode = false;            // g, h fitted; else a decode costs TokenCost(1, c)

  // Whole cost of one sequence's prefill of q tokens over c cached ones, e included.
  double Cost(int64_t q, int64_t c) const { return a * q + b * q * c + d * q * q + f * c + e; }
  // What a prefill chunk adds to a step (e is paid once per step).
  double TokenCost(int64_t q, int64_t c) const { return Cost(q, c) - e; }
  // What one decoding sequence with context c adds to a step.
  double DecodeCost(int64_t c) const { return has_decode ? g + h * c : TokenCost(1, c); }
  // Largest q ≥ 0 with TokenCost(q, c) ≤ budget_ns (the quadratic's positive root, floored).
  int64_t MaxTokens(double budget_ns, int64_t c) const;

  // Least squares over the samples (prefill and decode samples separately); coefficients that
  // come out negative are pinned to 0 and the rest refitted, so cost never decreases in q or
  // c. e is capped at the cheapest measured prefill (no cost can be below it). Needs ≥ 4
  // distinct prefill samples.
  static Result<CostModel> Fit(std::span<const CostSample> samples);
  Status Save(const std::string& path) const;
  static Result<CostModel> Load(const std::string& path);
};

// Times prefills of q tokens after c cached ones on `model` (a few forward passes, scratch
// blocks and slot 0 of `kv`; call before serving). `max_q` bounds the probe sizes.
Result<std::vector<CostSample>> ProfileModel(Model& model, KvStorage& kv, int64_t max_q, int repeats);

}  // namespace ladle::engine
