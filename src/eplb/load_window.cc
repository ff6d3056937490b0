// The sliding window of per-expert counts: a ring of buckets tagged with the bucket number they
// hold, so a slot left over from an older lap is recognised and skipped without a sweep.
#include "ladle/eplb/load_window.h"

#include <fmt/format.h>

#include <algorithm>

namespace ladle::eplb {

ExpertLoadWindow::ExpertLoadWindow(uint32_t layers, uint32_t experts, RearrangeSchedule schedule, uint64_t bucket_steps)
    : layers_(layers),
      experts_(experts),
      schedule_(schedule),
      bucket_steps_(bucket_steps),
      num_buckets_(schedule.window_steps / bucket_steps),
      bucket_id_(num_buckets_, 0),
      slot_used_(num_buckets_, 0),
      counts_(num_buckets_ * layers * experts, 0) {}

Result<ExpertLoadWindow> ExpertLoadWindow::Create(uint32_t layers, uint32_t experts, RearrangeSchedule schedule,
                                                  uint64_t bucket_steps) {
  if (layers == 0 || experts == 0) return InvalidArgument("load window: need layers and experts");
  if (schedule.window_steps == 0 || schedule.interval_steps == 0) {
    return InvalidArgument("load window: window and interval must be > 0 steps");
  }
  if (bucket_steps == 0 || schedule.window_steps % bucket_steps != 0) {
    return InvalidArgument(fmt::format("load window: bucket of {} steps does not divide the {}-step window",
                                       bucket_steps, schedule.window_steps));
  }
  return ExpertLoadWindow(layers, experts, schedule, bucket_steps);
}

Result<ExpertLoadWindow> ExpertLoadWindow::ForPrefill(uint32_t layers, uint32_t experts) {
  return Create(layers, experts, RearrangeSchedule::Prefill(), 1);
}

Result<ExpertLoadWindow> ExpertLoadWindow::ForDecode(uint32_t layers, uint32_t experts) {
  return Create(layers, experts, RearrangeSchedule::Decode(), 10);
}

Status ExpertLoadWindow::Add(uint64_t step, uint32_t layer, std::span<const uint64_t> counts) {
  if (layer >= layers_) return InvalidArgument(fmt::format("load window: layer {} of {}", layer, layers_));
  if (counts.size() != experts_) {
    return InvalidArgument(fmt::format("load window: {} counts for {} experts", counts.size(), experts_));
  }
  if (step < newest_) {
    return Status(StatusCode::kFailedPrecondition, fmt::format("load window: step {} after step {}", step, newest_));
  }
  newest_ = step;
  const uint64_t bucket = BucketOf(step);
  const size_t slot = static_cast<size_t>(bucket % num_buckets_);
  uint64_t* base = counts_.data() + slot * layers_ * experts_;
  if (!slot_used_[slot] || bucket_id_[slot] != bucket) {
    std::fill(base, base + size_t{layers_} * experts_, 0);
    bucket_id_[slot] = bucket;
    slot_used_[slot] = 1;
  }
  uint64_t* row = base + size_t{layer} * experts_;
  for (uint32_t e = 0; e < experts_; ++e) row[e] += counts[e];
  return Status::Ok();
}

Result<ExpertLoads> ExpertLoadWindow::Snapshot(uint64_t step) const {
  if (step < newest_) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("load window: snapshot at step {} after step {} was added", step, newest_));
  }
  const uint64_t last = BucketOf(step);
  ExpertLoads out(layers_, experts_);
  for (size_t slot = 0; slot < num_buckets_; ++slot) {
    // Bucket b is in the window when last - num_buckets < b <= last.
    if (!slot_used_[slot] || bucket_id_[slot] > last || bucket_id_[slot] + num_buckets_ <= last) continue;
    const uint64_t* base = counts_.data() + slot * layers_ * experts_;
    for (uint32_t l = 0; l < layers_; ++l) {
      auto row = out.Row(l);
      for (uint32_t e = 0; e < experts_; ++e) row[e] += static_cast<double>(base[size_t{l} * experts_ + e]);
    }
  }
  return out;
}

}  // namespace ladle::eplb
