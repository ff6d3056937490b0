// The balancers' own view of load: what each DP rank has been given and not yet given back.
//
// Routers in other stacks drift when load is counted at the first token (a burst lands on one
// idle-looking rank before any report shows it) or when one path (a retry, a re-route) forgets
// to count. Here every path goes through LoadLedger: Assign at the moment of dispatch, Release
// at finish, cancel or re-route, Adjust for growth (decode tokens) or progress (prefill chunks).
// Release is idempotent, so a finish racing a cancel cannot subtract twice.
//
// A fleet is a list of DP groups (prefill engines, decode instances), each with some ranks;
// ranks are addressed by (engine, rank) or by a flat index, engine e's rank r being
// Topology::Flat(e, r). Engine indices are stable for the fleet's life: an engine that leaves is
// marked unavailable by its balancer, never renumbered.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace ladle::lb {

using RequestId = uint64_t;

struct RankTarget {
  uint32_t engine = 0, rank = 0;
  friend bool operator==(const RankTarget&, const RankTarget&) = default;
};

class Topology {
 public:
  // One entry per engine: its DP rank count (each > 0; CHECKed).
  explicit Topology(std::vector<uint32_t> ranks_per_engine);
  // `engines` engines of `ranks` ranks each.
  static Topology Uniform(uint32_t engines, uint32_t ranks);

  uint32_t engines() const { return static_cast<uint32_t>(ranks_.size()); }
  uint32_t ranks() const { return offset_.back(); }
  uint32_t ranks_of(uint32_t engine) const { return ranks_[engine]; }
  uint32_t Flat(uint32_t engine, uint32_t rank) const { return offset_[engine] + rank; }
  uint32_t Flat(RankTarget t) const { return Flat(t.engine, t.rank); }
  uint32_t first_flat(uint32_t engine) const { return offset_[engine]; }
  RankTarget TargetOf(uint32_t flat) const;

 private:
  std::vector<uint32_t> ranks_;
  std::vector<uint32_t> offset_;  // engines + 1 prefix sums
};

// One rank's counted load: the requests on it and the sum of their loads (compute-quota ns on
// the prefill side, KV tokens on the decode side).
struct RankLoad {
  uint32_t requests = 0;
  double load = 0;
};

class LoadLedger {
 public:
  explicit LoadLedger(uint32_t ranks = 0) : ranks_(ranks) {}

  // Counts `id` on rank `flat` with `load`. Counting an id twice is a caller bug (CHECKed):
  // a re-route is Release then Assign.
  void Assign(RequestId id, uint32_t flat, double load);
  // Undoes Assign. False when `id` is not counted (already released, never dispatched).
  bool Release(RequestId id);
  // Adds `delta` to a counted request's load. False when `id` is not counted.
  bool Adjust(RequestId id, double delta);
  // Replaces a counted request's load (a report of its remaining work). False when unknown.
  bool Set(RequestId id, double load);

  bool Contains(RequestId id) const { return entries_.contains(id); }
  std::optional<uint32_t> RankOf(RequestId id) const;
  std::optional<double> LoadOf(RequestId id) const;
  const RankLoad& rank(uint32_t flat) const { return ranks_[flat]; }
  std::span<const RankLoad> ranks() const { return ranks_; }
  // The requests counted on flat ranks [first, first + count), in id order (for re-routing
  // an engine's work when it dies; a scan, so not for the hot path).
  std::vector<RequestId> RequestsOn(uint32_t first, uint32_t count) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint32_t flat;
    double load;
  };
  std::unordered_map<RequestId, Entry> entries_;
  std::vector<RankLoad> ranks_;
};

}  // namespace ladle::lb
