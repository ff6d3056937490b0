// The Decode Load Balancer (DualPath's intra-group rule) and its naive alternatives: see
// include/ladle/lb/decode_lb.h.
#include "ladle/lb/decode_lb.h"

#include <fmt/format.h>

#include "ladle/core/logging.h"

namespace ladle::lb {

bool Saturated(const DecodeRankLoad& r, int64_t prompt_tokens, const DecodeLbConfig& config) {
  if (r.saturated) return true;
  if (config.max_requests > 0 && r.requests >= config.max_requests) return true;
  return config.max_kv_tokens > 0 && r.kv_tokens + prompt_tokens > config.max_kv_tokens;
}

std::optional<uint32_t> PickDecodeRank(std::span<const DecodeRankLoad> ranks, int64_t prompt_tokens,
                                       const DecodeLbConfig& config) {
  // The candidate set's mean, over unsaturated ranks only: a full rank's tokens must not make
  // the others look light (or heavy).
  double sum = 0;
  uint32_t n = 0;
  for (const DecodeRankLoad& r : ranks) {
    if (Saturated(r, prompt_tokens, config)) continue;
    sum += static_cast<double>(r.kv_tokens);
    ++n;
  }
  if (n == 0) return std::nullopt;
  const double incoming = config.judge_with_incoming ? static_cast<double>(prompt_tokens) : 0.0;
  const double threshold = config.high_factor * (sum + incoming) / n;

  std::optional<uint32_t> low, any;  // best non-high (fewest requests), best overall (fewest tokens)
  for (uint32_t i = 0; i < ranks.size(); ++i) {
    const DecodeRankLoad& r = ranks[i];
    if (Saturated(r, prompt_tokens, config)) continue;
    if (!any || r.kv_tokens < ranks[*any].kv_tokens ||
        (r.kv_tokens == ranks[*any].kv_tokens && r.requests < ranks[*any].requests)) {
      any = i;
    }
    if (static_cast<double>(r.kv_tokens) + incoming > threshold) continue;  // high
    if (!low || r.requests < ranks[*low].requests ||
        (r.requests == ranks[*low].requests && r.kv_tokens < ranks[*low].kv_tokens)) {
      low = i;
    }
  }
  return low ? low : any;
}

Result<DecodePolicy> ParseDecodePolicy(std::string_view name) {
  if (name == "lb" || name == "dualpath") return DecodePolicy::kDualPath;
  if (name == "round-robin") return DecodePolicy::kRoundRobin;
  if (name == "least-requests") return DecodePolicy::kLeastRequests;
  return InvalidArgument(fmt::format("unknown decode policy '{}' (lb, round-robin, least-requests)", name));
}

std::string_view DecodePolicyName(DecodePolicy p) {
  switch (p) {
    case DecodePolicy::kDualPath: return "lb";
    case DecodePolicy::kRoundRobin: return "round-robin";
    case DecodePolicy::kLeastRequests: return "least-requests";
  }
  return "?";
}

DecodeBalancer::DecodeBalancer(DecodePolicy policy, DecodeLbConfig config, Topology topology)
    : policy_(policy),
      config_(config),
      topology_(std::move(topology)),
      ledger_(topology_.ranks()),
      available_(topology_.engines(), true),
      flagged_(topology_.ranks(), false) {}

std::vector<DecodeRankLoad> DecodeBalancer::Snapshot() const {
  std::vector<DecodeRankLoad> out(topology_.ranks());
  for (uint32_t flat = 0; flat < out.size(); ++flat) {
    const RankLoad& r = ledger_.rank(flat);
    out[flat] = {r.requests, static_cast<int64_t>(r.load),
                 flagged_[flat] || !available_[topology_.TargetOf(flat).engine]};
  }
  return out;
}

std::optional<RankTarget> DecodeBalancer::Route(RequestId id, int64_t prompt_tokens) {
  LADLE_CHECK(!ledger_.Contains(id));
  const uint32_t n = topology_.ranks();
  // Built in place (no allocation per request once warm): the hot path at 64 engines.
  scratch_.resize(n);
  for (uint32_t e = 0, flat = 0; e < topology_.engines(); ++e) {
    for (uint32_t r = 0; r < topology_.ranks_of(e); ++r, ++flat) {
      const RankLoad& l = ledger_.rank(flat);
      scratch_[flat] = {l.requests, static_cast<int64_t>(l.load), flagged_[flat] || !available_[e]};
    }
  }
  std::optional<uint32_t> pick;
  switch (policy_) {
    case DecodePolicy::kDualPath:
      pick = PickDecodeRank(scratch_, prompt_tokens, config_);
      break;
    case DecodePolicy::kRoundRobin:
      for (uint32_t k = 0; k < n; ++k) {
        const uint32_t flat = (next_ + k) % n;
        if (!Saturated(scratch_[flat], prompt_tokens, config_)) {
          pick = flat;
          next_ = (flat + 1) % n;
          break;
        }
      }
      break;
    case DecodePolicy::kLeastRequests:
      for (uint32_t flat = 0; flat < n; ++flat) {
        if (Saturated(scratch_[flat], prompt_tokens, config_)) continue;
        if (!pick || scratch_[flat].requests < scratch_[*pick].requests) pick = flat;
      }
      break;
  }
  if (!pick) return std::nullopt;
  ledger_.Assign(id, *pick, static_cast<double>(prompt_tokens));
  return topology_.TargetOf(*pick);
}

bool DecodeBalancer::Grow(RequestId id, int64_t tokens) { return ledger_.Adjust(id, static_cast<double>(tokens)); }

bool DecodeBalancer::Release(RequestId id) { return ledger_.Release(id); }

void DecodeBalancer::SetSaturated(RankTarget rank, bool saturated) { flagged_[topology_.Flat(rank)] = saturated; }

void DecodeBalancer::SetAvailable(uint32_t engine, bool available) {
  LADLE_CHECK(engine < available_.size());
  available_[engine] = available;
}

}  // namespace ladle::lb
