// Layer 1 of the Prefill Load Balancer: prefill engines are split into buckets by total input
// length (the recipe's < 16K / 16-64K / 64-256K / >= 256K), and each round the engines per
// bucket are re-split by the buckets' shares of the previous round's compute-quota demand.
// Keeping similar lengths together keeps a DP group's ranks evenly fed (a 200K prompt next to
// 2K prompts leaves the other ranks of its group waiting at every step's sync) and keeps short
// prompts from queueing behind long ones.
//
//   BucketPlan plan(Buckets::Recipe(), engines);
//   uint32_t b = plan.buckets().Of(input_tokens);
//   plan.Resplit(demand_per_bucket);   // at the end of a round
//   uint32_t bucket = plan.bucket_of(engine);
//
// The arithmetic is two pure functions, tested by hand-computed cases: ApportionEngines (how
// many engines each bucket gets) and ReassignEngines (which engines move: as few as possible).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::lb {

inline constexpr uint32_t kNoBucket = std::numeric_limits<uint32_t>::max();

// Bucket bounds: bucket i holds inputs in [upper[i-1], upper[i]), the last one everything from
// upper.back() up. So n bounds make n + 1 buckets.
class Buckets {
 public:
  // Strictly increasing positive bounds, else kInvalidArgument. No bounds = one bucket.
  static Result<Buckets> Create(std::vector<int64_t> upper);
  // 16K, 64K, 256K tokens (K = 1024): four buckets.
  static Buckets Recipe();

  uint32_t size() const { return static_cast<uint32_t>(upper_.size() + 1); }
  uint32_t Of(int64_t input_tokens) const;
  std::span<const int64_t> upper() const { return upper_; }

 private:
  std::vector<int64_t> upper_;
};

// Splits `engines` among buckets in proportion to `demand` by largest remainder (Hamilton):
// bucket i first gets floor(engines·d_i/D); the engines left go one each to the largest
// fractional parts (ties: larger demand, then lower index). Then, when engines ≥ the number of
// buckets with demand, each bucket with demand but no engine takes one from the bucket most
// over its exact share (count − engines·d_i/D largest among those with ≥ 2; ties: larger count,
// then higher index), zero-engine buckets served in order of demand (ties: lower index).
// Buckets without demand get none. Zero or negative total demand gives all zeros; negative
// entries count as 0.
std::vector<uint32_t> ApportionEngines(std::span<const double> demand, uint32_t engines);

// Moves engines so that bucket b holds counts[b] of the `available` ones, changing as few
// assignments as possible: a bucket over its count keeps its lowest-index engines and releases
// the rest; released and unassigned available engines fill the buckets under their count, in
// bucket order, lowest engine index first. Unavailable engines come back as kNoBucket.
// `current[e]` is engine e's bucket or kNoBucket; sum(counts) must equal the number of
// available engines (CHECKed).
std::vector<uint32_t> ReassignEngines(std::span<const uint32_t> current, std::span<const uint32_t> counts,
                                      const std::vector<bool>& available);

class BucketPlan {
 public:
  // All engines available; the first round's split comes from `initial_demand` (one weight per
  // bucket; empty = everything in bucket 0, the others served by stealing until the first
  // round's demand is known).
  BucketPlan(Buckets buckets, uint32_t engines, std::span<const double> initial_demand = {});

  const Buckets& buckets() const { return buckets_; }
  uint32_t engines() const { return static_cast<uint32_t>(bucket_of_.size()); }
  uint32_t bucket_of(uint32_t engine) const { return bucket_of_[engine]; }
  std::span<const uint32_t> engine_buckets() const { return bucket_of_; }
  // Available engines in each bucket.
  std::vector<uint32_t> Counts() const;
  bool available(uint32_t engine) const { return available_[engine]; }

  // A new split from one round's per-bucket demand (size buckets().size(), CHECKed). Zero
  // total demand keeps the current split (an idle round says nothing about the next); the
  // demand is remembered for SetAvailable. Returns how many engines changed bucket.
  uint32_t Resplit(std::span<const double> demand);
  // An engine leaving or rejoining re-splits the available engines by the last demand, so
  // the others move only as far as the new count requires.
  uint32_t SetAvailable(uint32_t engine, bool available);

 private:
  uint32_t Apply(std::span<const double> demand);

  Buckets buckets_;
  std::vector<uint32_t> bucket_of_;
  std::vector<bool> available_;
  std::vector<double> last_demand_;
};

}  // namespace ladle::lb
