// The Vision Encoder Load Balancer (random machine, fewest-patches worker) and its naive
// alternatives: see include/ladle/lb/vision_lb.h.
#include "ladle/lb/vision_lb.h"

#include <fmt/format.h>

#include <algorithm>

#include "ladle/core/logging.h"

namespace ladle::lb {

int64_t ImagePatches(int width, int height, int patch) {
  LADLE_CHECK(width >= 0 && height >= 0 && patch > 0);
  const int64_t p = patch;
  return ((int64_t{width} + p - 1) / p) * ((int64_t{height} + p - 1) / p);
}

namespace {

bool Tried(std::span<const uint32_t> tried, uint32_t machine) {
  return std::find(tried.begin(), tried.end(), machine) != tried.end();
}

// The k-th eligible machine, k = floor(random × n / 2^64) over the n eligible ones.
template <typename Alive>
std::optional<uint32_t> PickAmong(uint32_t machines, Alive alive, std::span<const uint32_t> tried, uint64_t random) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < machines; ++i) n += alive(i) && !Tried(tried, i);
  if (n == 0) return std::nullopt;
  auto k = static_cast<uint32_t>((static_cast<unsigned __int128>(random) * n) >> 64);
  for (uint32_t i = 0; i < machines; ++i) {
    if (!alive(i) || Tried(tried, i)) continue;
    if (k-- == 0) return i;
  }
  LADLE_CHECK(false);  // k < n by construction
  return std::nullopt;
}

}  // namespace

std::optional<uint32_t> PickVisionMachine(const std::vector<bool>& alive, std::span<const uint32_t> tried,
                                          uint64_t random) {
  return PickAmong(static_cast<uint32_t>(alive.size()), [&](uint32_t i) { return alive[i]; }, tried, random);
}

std::optional<uint32_t> PickVisionMachine(uint32_t machines, std::span<const uint32_t> tried, uint64_t random) {
  return PickAmong(machines, [](uint32_t) { return true; }, tried, random);
}

std::optional<uint32_t> PickVisionWorker(std::span<const VisionWorkerLoad> workers) {
  std::optional<uint32_t> best;
  for (uint32_t i = 0; i < workers.size(); ++i) {
    const VisionWorkerLoad& w = workers[i];
    if (!w.alive) continue;
    if (!best || w.patches < workers[*best].patches ||
        (w.patches == workers[*best].patches && w.images < workers[*best].images)) {
      best = i;
    }
  }
  return best;
}

Result<VisionWorkerPolicy> ParseVisionWorkerPolicy(std::string_view name) {
  if (name == "lb" || name == "fewest-patches") return VisionWorkerPolicy::kFewestPatches;
  if (name == "round-robin") return VisionWorkerPolicy::kRoundRobin;
  if (name == "fewest-images") return VisionWorkerPolicy::kFewestImages;
  return InvalidArgument(
      fmt::format("unknown vision worker policy '{}' (lb, fewest-patches, round-robin, fewest-images)", name));
}

std::string_view VisionWorkerPolicyName(VisionWorkerPolicy p) {
  switch (p) {
    case VisionWorkerPolicy::kFewestPatches: return "fewest-patches";
    case VisionWorkerPolicy::kRoundRobin: return "round-robin";
    case VisionWorkerPolicy::kFewestImages: return "fewest-images";
  }
  return "?";
}

VisionWorkerLedger::VisionWorkerLedger(uint32_t workers, VisionWorkerPolicy policy)
    : policy_(policy), workers_(workers) {
  LADLE_CHECK(workers > 0);
}

const VisionWorkerLoad& VisionWorkerLedger::Worker(uint32_t worker) const {
  LADLE_CHECK(worker < workers_.size());
  return workers_[worker];
}

bool VisionWorkerLedger::AnyAlive() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const VisionWorkerLoad& w) { return w.alive; });
}

std::optional<uint32_t> VisionWorkerLedger::Assign(int64_t patches) {
  LADLE_CHECK(patches >= 0);
  std::optional<uint32_t> pick;
  switch (policy_) {
    case VisionWorkerPolicy::kFewestPatches:
      pick = PickVisionWorker(workers_);
      break;
    case VisionWorkerPolicy::kRoundRobin:
      for (uint32_t k = 0; k < workers_.size(); ++k) {
        const uint32_t i = (next_ + k) % workers();
        if (workers_[i].alive) {
          pick = i;
          next_ = (i + 1) % workers();
          break;
        }
      }
      break;
    case VisionWorkerPolicy::kFewestImages:
      for (uint32_t i = 0; i < workers_.size(); ++i) {
        if (workers_[i].alive && (!pick || workers_[i].images < workers_[*pick].images)) pick = i;
      }
      break;
  }
  if (pick) AssignTo(*pick, patches);
  return pick;
}

void VisionWorkerLedger::AssignTo(uint32_t worker, int64_t patches) {
  LADLE_CHECK(worker < workers_.size() && workers_[worker].alive && patches >= 0);
  VisionWorkerLoad& w = workers_[worker];
  w.patches += patches;
  w.images += 1;
  total_patches_ += patches;
}

void VisionWorkerLedger::Complete(uint32_t worker, int64_t patches) {
  LADLE_CHECK(worker < workers_.size() && patches >= 0);
  VisionWorkerLoad& w = workers_[worker];
  // In flight never goes negative: completing what was never assigned is a caller bug.
  LADLE_CHECK(w.images > 0 && w.patches >= patches);
  // The last image out takes every patch with it (a caller that completes with the same
  // counts it assigned leaves exactly 0).
  LADLE_CHECK(w.images > 1 || w.patches == patches);
  w.patches -= patches;
  w.images -= 1;
  total_patches_ -= patches;
  LADLE_CHECK(total_patches_ >= 0);
}

void VisionWorkerLedger::MarkDead(uint32_t worker) {
  LADLE_CHECK(worker < workers_.size());
  workers_[worker].alive = false;
}

void VisionWorkerLedger::MarkAlive(uint32_t worker) {
  LADLE_CHECK(worker < workers_.size());
  workers_[worker].alive = true;
}

}  // namespace ladle::lb
