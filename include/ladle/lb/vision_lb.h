// The Vision Encoder Load Balancer (the recipe's "Vision Encoder Load Balancer"): images are
// routed per machine. The prefill side picks a vision-encoder machine (one encoder worker per
// GPU) AT RANDOM, and on that machine the image goes to the worker currently handling the
// FEWEST IMAGE PATCHES, patches being (width / patch) × (height / patch).
//
// Two levels, both pure (no clock, no I/O, no threads; randomness comes in as a number):
//   PickVisionMachine: a uniform pick among the live machines not yet tried for this image,
//     from one uniform uint64 the caller draws from a generator it owns and seeds;
//   VisionWorkerLedger: one machine's counted patches per worker (counted at dispatch, like
//     LoadLedger), which answers Assign with the fewest-patches worker. The caller locks.
// The naive alternative the benchmark compares (bench/lb/vision_lb_bench.cc) is the same ledger
// under VisionWorkerPolicy::kRoundRobin; the machine pick is random for every policy.
//
//   std::mt19937_64 rng(seed);                                   // the caller's
//   std::vector<uint32_t> tried;
//   auto m = PickVisionMachine(machine_alive, tried, rng());     // nothing: no machine left
//   auto w = ledgers[*m].Assign(patches);                        // nothing: every worker dead
//   ... encode on (*m, *w) ...
//   ledgers[*m].Complete(*w, patches);                           // done, failed or moved
//   // the machine failed: Complete, tried.push_back(*m), pick again.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::lb {

// The patch count of a width × height image at patch size `patch`:
// ceil(width / patch) × ceil(height / patch), in 64 bits. The ceiling, because a preprocessor
// that does not resize to a multiple of the patch pads the edge patches, and the encoder pays
// for them; the floor would count a 20 × 20 image at patch 14 as 1 patch and a 10 × 10 one as 0.
// On the exact grid the preprocessor produces (the normal input) the two agree.
// width, height >= 0 and patch > 0 (CHECKed); an empty image is 0 patches.
int64_t ImagePatches(int width, int height, int patch);

// The recipe's machine pick: uniformly among machines i < alive.size() with alive[i] set and i
// not in `tried` (the machines that already failed this image, for a re-route), using
// `random`, a uniform 64-bit draw from the caller's generator, as ((random × n) >> 64) over the
// n eligible machines in index order: one draw, no rejection loop, bias at most n / 2^64.
// Nothing when no machine is eligible. `tried` may hold duplicates or out-of-range ids.
std::optional<uint32_t> PickVisionMachine(const std::vector<bool>& alive, std::span<const uint32_t> tried,
                                          uint64_t random);
// The same over machines [0, machines), all alive.
std::optional<uint32_t> PickVisionMachine(uint32_t machines, std::span<const uint32_t> tried, uint64_t random);

// One worker (one encoder GPU) as a snapshot: the patches of the images sent to it and not yet
// done (queued or encoding), and how many images those are.
struct VisionWorkerLoad {
  int64_t patches = 0;
  uint32_t images = 0;
  bool alive = true;
};

// The recipe's worker pick over a snapshot: the live worker with the fewest patches in flight;
// ties go to fewer images (each image carries a fixed cost beyond its patches: preprocessing,
// launch, the projector), then to the lower index. Deterministic, so the simulator and the
// tests replay exactly; round-robin among ties would need state and only matters when several
// workers are equally loaded, typically all idle, where any choice starts at once. Nothing when
// no worker is alive (or there are none).
std::optional<uint32_t> PickVisionWorker(std::span<const VisionWorkerLoad> workers);

enum class VisionWorkerPolicy {
  kFewestPatches,  // the recipe's rule, PickVisionWorker
  kRoundRobin,     // the next live worker after the last one chosen (the naive alternative)
  kFewestImages,   // join-the-shortest-queue by image count, ties lower index (patch-blind)
};
// "lb" (or "fewest-patches"), "round-robin", "fewest-images"; kInvalidArgument otherwise.
Result<VisionWorkerPolicy> ParseVisionWorkerPolicy(std::string_view name);
std::string_view VisionWorkerPolicyName(VisionWorkerPolicy p);

// One vision-encoder machine's counted load: what each worker has been given and not yet
// given back, counted at the moment Assign chooses it (before the worker reports anything),
// so a burst does not pile onto one worker that still looks idle. Complete undoes one image:
// call it when the encode finishes, fails, or is cancelled or moved elsewhere. Counts are per
// worker, not per image id: completing more than was assigned is a caller bug (CHECKed: in-flight
// patches and images never go negative). Not thread-safe; the caller locks.
class VisionWorkerLedger {
 public:
  // workers > 0 (CHECKed), all alive.
  explicit VisionWorkerLedger(uint32_t workers, VisionWorkerPolicy policy = VisionWorkerPolicy::kFewestPatches);

  VisionWorkerPolicy policy() const { return policy_; }
  uint32_t workers() const { return static_cast<uint32_t>(workers_.size()); }

  // Chooses a live worker for an image of `patches` (>= 0, CHECKed) under the policy and counts
  // it there. Nothing when every worker is dead: the caller re-routes to another machine.
  std::optional<uint32_t> Assign(int64_t patches);
  // Counts an image on `worker` chosen elsewhere (a replay, a pinned retry); it must be alive.
  void AssignTo(uint32_t worker, int64_t patches);
  // An image of `patches` left `worker` (done, failed, cancelled, re-routed). The worker must
  // hold at least one image and at least `patches`, and its last image must take exactly what
  // is left (CHECKed: the counts a caller completes are the counts it assigned). Allowed on a
  // dead worker: that is how its images come off before they are re-routed.
  void Complete(uint32_t worker, int64_t patches);

  // A worker died (or is draining): it gets no new images. Its counted images stay counted
  // until the caller Completes them. MarkAlive brings it back.
  void MarkDead(uint32_t worker);
  void MarkAlive(uint32_t worker);

  int64_t InFlight(uint32_t worker) const { return Worker(worker).patches; }
  uint32_t Images(uint32_t worker) const { return Worker(worker).images; }
  bool alive(uint32_t worker) const { return Worker(worker).alive; }
  // Whether any worker can take an image.
  bool AnyAlive() const;
  // Patches in flight over every worker.
  int64_t TotalInFlight() const { return total_patches_; }
  std::span<const VisionWorkerLoad> loads() const { return workers_; }

 private:
  const VisionWorkerLoad& Worker(uint32_t worker) const;

  VisionWorkerPolicy policy_;
  std::vector<VisionWorkerLoad> workers_;
  int64_t total_patches_ = 0;
  uint32_t next_ = 0;  // round-robin cursor: the first worker to try next
};

}  // namespace ladle::lb
