// Per-expert load statistics over a sliding window of steps, and the re-arrangement schedule
// (the recipe: prefill counts the last 100 steps and re-arranges every 1,000; decode the last
// 1,000 and every 10,000).
//
//   ExpertLoadWindow w(layers, experts, RearrangeSchedule::Prefill());
//   w.Add(step, layer, counts);              // routed tokens per expert in this step and layer
//   if (w.schedule().IsRearrangeStep(step)) plan = PlanPlacement(w.Snapshot(step), ...);
//
// Steps are explicit numbers the caller owns (the engine's step counter, a simulator's
// clock), so the class holds no clock and the same calls give the same window anywhere.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/eplb/placement.h"

namespace ladle::eplb {

struct RearrangeSchedule {
  uint64_t window_steps = 100;        // N: statistics cover the last N steps
  uint64_t interval_steps = 1000;     // M: a new placement every M steps

  static RearrangeSchedule Prefill() { return {100, 1000}; }
  static RearrangeSchedule Decode() { return {1000, 10000}; }

  // Re-arrangements happen at steps M, 2M, 3M, ... (step 0 has no statistics yet).
  bool IsRearrangeStep(uint64_t step) const { return step > 0 && step % interval_steps == 0; }
  // The first re-arrangement step strictly after `step`.
  uint64_t NextRearrangeStep(uint64_t step) const { return (step / interval_steps + 1) * interval_steps; }
  // The window a snapshot at `step` covers: steps [first, step], first = max(0, step - N + 1).
  uint64_t WindowFirst(uint64_t step) const { return step + 1 >= window_steps ? step + 1 - window_steps : 0; }
};

class ExpertLoadWindow {
 public:
  // Counts are kept per bucket of `bucket_steps` consecutive steps, bucket j holding steps
  // ((j-1) B, j B], in a ring of N / B buckets: B = 1 is an exact per-step window, and a larger
  // B bounds memory (N / B x layers x experts counters) while staying exact at every step that
  // is a multiple of B, which includes every re-arrangement step when B divides M.
  // kInvalidArgument unless N, M > 0 and B divides N.
  static Result<ExpertLoadWindow> Create(uint32_t layers, uint32_t experts, RearrangeSchedule schedule,
                                         uint64_t bucket_steps = 1);
  // The recipe's two phases with 100 buckets each: prefill exact per step (N = 100), decode in
  // buckets of 10 steps (N = 1,000), 12.5 MB for 61 layers x 256 experts either way.
  static Result<ExpertLoadWindow> ForPrefill(uint32_t layers, uint32_t experts);
  static Result<ExpertLoadWindow> ForDecode(uint32_t layers, uint32_t experts);

  const RearrangeSchedule& schedule() const { return schedule_; }
  uint32_t layers() const { return layers_; }
  uint32_t experts() const { return experts_; }
  uint64_t bucket_steps() const { return bucket_steps_; }

  // Adds one layer's per-expert counts for `step` (calls for the same step accumulate). Steps
  // never go back: a step older than the newest one seen is kFailedPrecondition; a wrong layer
  // or count size is kInvalidArgument. Steps never added count as zero load.
  Status Add(uint64_t step, uint32_t layer, std::span<const uint64_t> counts);

  // The totals over the window ending at `step`, steps (step - N, step] (rounded out to whole
  // buckets when step is not a multiple of B). kFailedPrecondition when `step` is older than
  // the newest step added (that window's oldest buckets may be overwritten).
  Result<ExpertLoads> Snapshot(uint64_t step) const;

 private:
  ExpertLoadWindow(uint32_t layers, uint32_t experts, RearrangeSchedule schedule, uint64_t bucket_steps);
  uint64_t BucketOf(uint64_t step) const { return (step + bucket_steps_ - 1) / bucket_steps_; }

  uint32_t layers_, experts_;
  RearrangeSchedule schedule_;
  uint64_t bucket_steps_, num_buckets_;
  std::vector<uint64_t> bucket_id_;  // which bucket each ring slot holds
  std::vector<uint8_t> slot_used_;
  std::vector<uint64_t> counts_;  // [slot][layer][expert]
  uint64_t newest_ = 0;
};

}  // namespace ladle::eplb
