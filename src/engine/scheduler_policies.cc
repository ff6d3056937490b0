#include "ladle/engine/scheduler_policies.h"

#include <algorithm>

#include "ladle/core/logging.h"

namespace ladle::engine {

bool FifoAdmission::Admit(const AdmissionView& v) const {
  if (v.running >= v.max_running || v.free_slots <= 0) return false;
  // Keep headroom only when someone is running to use it; an idle engine admits whatever
  // fits outright, so a big prompt cannot wait forever behind an empty batch.
  const int reserve = v.running > 0 ? v.reserve_blocks : 0;
  return v.available_blocks - reserve >= v.blocks_needed;
}

TimeBudgetChunk::TimeBudgetChunk(CostModel model, double step_budget_ns, int64_t min_chunk, int64_t max_chunk)
    : model_(model), budget_ns_(step_budget_ns), min_chunk_(min_chunk), max_chunk_(max_chunk) {
  // The fitted constant e is an intercept, extrapolated from timings on a shared machine; one
  // run fitted e above the whole budget, which left no room for any prefill beyond the forced
  // min_chunk and throttled admission to one prompt at a time. So e is charged at most half the
  // budget: the other half always remains for decodes and prefill chunks.
  fixed_ns_ = std::min(model_.e, budget_ns_ / 2);
  if (fixed_ns_ < model_.e) {
    LADLE_LOG_WARN("engine.cost_model fixed step cost e={:.0f} ns exceeds half the step budget {:.0f} ns; "
                   "charging {:.0f} ns (raise step_budget_ns or re-profile)",
                   model_.e, budget_ns_, fixed_ns_);
  }
}

StepBudget TimeBudgetChunk::Begin(std::span<const int64_t> decode_contexts) const {
  StepBudget b;
  b.ns_left = budget_ns_ - fixed_ns_;  // the fixed per-step cost is paid once
  for (int64_t c : decode_contexts) b.ns_left -= model_.DecodeCost(c);
  // Decodes may eat the whole budget; the first prefill still gets min_chunk so waiting
  // prompts are never starved by a long decode batch.
  b.batch_empty = true;
  b.tokens_left = INT64_MAX;
  return b;
}

int64_t TimeBudgetChunk::Take(int64_t remaining, int64_t cached, StepBudget* budget) const {
  int64_t q = std::min({remaining, max_chunk_, model_.MaxTokens(budget->ns_left, cached)});
  if (q <= 0 && budget->batch_empty) q = std::min(remaining, min_chunk_);
  if (q <= 0) return 0;
  budget->ns_left -= model_.TokenCost(q, cached);
  budget->batch_empty = false;
  return q;
}

StepBudget FixedChunk::Begin(std::span<const int64_t> decode_contexts) const {
  StepBudget b;
  b.tokens_left = INT64_MAX;  // per sequence, not per step: chunk boundaries never depend on batch mates
  b.batch_empty = decode_contexts.empty();
  return b;
}

int64_t FixedChunk::Take(int64_t remaining, int64_t cached, StepBudget* budget) const {
  const int64_t q = std::min(remaining, chunk_);
  if (q > 0) budget->batch_empty = false;
  return std::max<int64_t>(q, 0);
}

size_t NewestFirstPreemption::PickVictim(std::span<const VictimView> running) const {
  size_t best = 0;
  for (size_t i = 1; i < running.size(); ++i) {
    const auto& r = running[i];
    const auto& b = running[best];
    if (r.arrival > b.arrival || (r.arrival == b.arrival && r.index > b.index)) best = i;
  }
  return best;
}

size_t LargestFirstPreemption::PickVictim(std::span<const VictimView> running) const {
  size_t best = 0;
  for (size_t i = 1; i < running.size(); ++i) {
    // Ties go to the newest, as in NewestFirstPreemption.
    const auto& r = running[i];
    const auto& b = running[best];
    if (r.blocks > b.blocks || (r.blocks == b.blocks && r.arrival > b.arrival)) best = i;
  }
  return best;
}

Result<std::unique_ptr<AdmissionPolicy>> MakeAdmissionPolicy(const std::string& name) {
  if (name == "fifo") return std::unique_ptr<AdmissionPolicy>(new FifoAdmission());
  return InvalidArgument("unknown admission policy: " + name);
}

Result<std::unique_ptr<PreemptionPolicy>> MakePreemptionPolicy(const std::string& name) {
  if (name == "newest") return std::unique_ptr<PreemptionPolicy>(new NewestFirstPreemption());
  if (name == "largest") return std::unique_ptr<PreemptionPolicy>(new LargestFirstPreemption());
  return InvalidArgument("unknown preemption policy: " + name);
}

}  // namespace ladle::engine
