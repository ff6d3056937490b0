// The Prefill Load Balancer's entrypoint layers (the recipe's "Prefill Load Balancer"):
//   1. bucketing by input length, re-split per round by compute-quota demand (bucket_plan.h);
//   2. across DP groups, engines PULL from their bucket's FIFO queue by remaining quota; no
//      prefix-affinity routing, since every engine hits every prefix through the store;
//   3. within a DP group, each request goes to the rank with the lowest compute-quota load.
// (Layer 4, the per-GPU time-budget chunking, is the engine's TimeBudgetChunk.)
// And the naive alternatives the benchmarks compare it with: round-robin and least-requests
// over every rank of every engine.
//
// All of them are PrefillRouters: pure state machines with no clock, I/O or threads; the
// caller says when a request arrives, when an engine asks for work, when a round ends and when
// a request leaves its rank.
//
//   auto router = MakePrefillRouter("lb", config, Topology::Uniform(engines, dp));
//   router->Submit({.id = id, .input_tokens = L, .cached_tokens = hit});   // arrival
//   for (const PrefillDispatch& d : router->Pull(engine, free_quota_ns))   // engine asks
//     Send(d.id, d.target);
//   router->Release(id);          // prefill done or cancelled
//   router->Requeue(id);          // its engine died or the send failed: back to the queue head
//   router->EndRound();           // every round (the caller's clock)
//
// Load is counted at dispatch: the moment Pull (or a naive router's Submit) picks a rank, its
// quota is on that rank in ledger(), before the engine reports anything, and it comes off only
// through Release / Requeue / Cancel. Retry and re-route therefore go through the same
// Assign/Release pair as the first try (load_ledger.h).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/lb/bucket_plan.h"
#include "ladle/lb/load_ledger.h"
#include "ladle/lb/quota_cost.h"

namespace ladle::lb {

struct PrefillRequest {
  RequestId id = 0;
  int64_t input_tokens = 0;   // total prompt length: the bucket key
  int64_t cached_tokens = 0;  // prefix hit from the store match (known before routing): c
};

struct PrefillDispatch {
  RequestId id = 0;
  RankTarget target;
  double quota = 0;  // its compute-quota, as counted on target
};

// Which other buckets an engine may serve when its own queue has nothing for it. The recipe
// states strict bucketing; with few engines per bucket that idles engines while another
// bucket's queue grows (docs/lb.md has the figures), so the default lets an otherwise idle
// rank take work from the nearest bucket.
enum class Steal {
  kNone,       // strict bucketing: a bucket without engines waits for the next round
  kOrphans,    // buckets with no available engine (fewer engines than buckets, a dead engine)
  kIdleRanks,  // any bucket, nearest length first, but only into ranks with nothing counted:
               // no rank idles while work waits, and lengths mix no more than that needs
  kAny,        // any bucket, nearest length first, up to the quota (weakest separation)
};

struct PrefillLbConfig {
  Buckets buckets = Buckets::Recipe();
  QuotaCost cost;
  Steal steal = Steal::kIdleRanks;
  std::vector<double> initial_demand;  // see BucketPlan; empty = bucket 0 until round one ends
  // A round's demand per bucket is the quota submitted in it; with this, plus the quota of
  // what was already queued before the round and is still queued at its end (the backlog,
  // each request counted once). Arrivals alone lag a backlog: a bucket that fell behind (its
  // engines were a rounding short, a burst came) would stay behind, since nothing in the next
  // split says its queue is long.
  bool backlog_in_demand = true;
};

// Layer 3: the rank of one DP group to take the next request: lowest load (quota), ties fewest
// requests, then lowest index; an empty rank has load 0, so it is picked first. `ranks` is
// non-empty (CHECKed).
uint32_t PickRank(std::span<const RankLoad> ranks);

class PrefillRouter {
 public:
  virtual ~PrefillRouter() = default;
  virtual std::string_view name() const = 0;

  // A request arrives at the entrypoint. Ids are unique among requests not yet released.
  virtual void Submit(const PrefillRequest& req) = 0;
  // Engine `engine` asks for work with `remaining_quota` ns free. The balancer hands out its
  // bucket's queue head-first while each request's quota fits what is left, and regardless of
  // the quota while one of the engine's ranks has nothing counted (an idle engine always gets
  // work, so a request larger than any quota still runs, and no DP rank sits out a step while
  // work waits); each comes back with the rank it was counted on. `remaining_quota` is best
  // the sum of the engine's per-rank headroom with a rank over its capacity counting 0: a
  // negative total would keep a rank busy with one long prompt from letting its neighbours be
  // fed (the requests go to the least-loaded rank, so they land where the headroom is). Naive routers already chose
  // at Submit: they hand over everything routed to the engine and ignore the quota. An
  // unavailable engine gets nothing.
  virtual std::vector<PrefillDispatch> Pull(uint32_t engine, double remaining_quota) = 0;
  // The request left its rank (prefill done, cancelled after dispatch). False when not
  // dispatched (a second Release is harmless).
  virtual bool Release(RequestId id) = 0;
  // Re-route: a dispatched request comes off its rank and goes back to the head of its queue
  // (or, for naive routers, is routed again at once). False when not dispatched.
  virtual bool Requeue(RequestId id) = 0;
  // Drops a request wherever it is, queued or dispatched. False when unknown.
  virtual bool Cancel(RequestId id) = 0;
  // A dispatched request has `remaining_quota` ns of its prefill left (its engine ran some
  // chunks): its rank's counted load shrinks to match. False when not dispatched.
  bool Progress(RequestId id, double remaining_quota) { return mutable_ledger().Set(id, remaining_quota); }
  // The caller's round ended: the balancer re-splits its buckets; naive routers ignore it.
  virtual void EndRound() {}
  // An engine left (dies, drains) or rejoined. Its counted requests stay counted until the
  // caller Requeues them (ledger().RequestsOn lists them).
  virtual void SetAvailable(uint32_t engine, bool available) = 0;

  virtual const Topology& topology() const = 0;
  virtual const LoadLedger& ledger() const = 0;
  // Requests submitted and not yet dispatched.
  virtual size_t queued() const = 0;
  // Sum of the counted quota on an engine's ranks.
  double EngineLoad(uint32_t engine) const;
  uint32_t EngineRequests(uint32_t engine) const;

 protected:
  virtual LoadLedger& mutable_ledger() = 0;
};

// "lb" (PrefillBalancer), "round-robin", "least-requests"; kInvalidArgument otherwise.
Result<std::unique_ptr<PrefillRouter>> MakePrefillRouter(std::string_view name, const PrefillLbConfig& config,
                                                         Topology topology);

// The recipe's balancer (layers 1-3).
class PrefillBalancer final : public PrefillRouter {
 public:
  PrefillBalancer(PrefillLbConfig config, Topology topology);

  std::string_view name() const override { return "lb"; }
  void Submit(const PrefillRequest& req) override;
  std::vector<PrefillDispatch> Pull(uint32_t engine, double remaining_quota) override;
  bool Release(RequestId id) override;
  bool Requeue(RequestId id) override;
  bool Cancel(RequestId id) override;
  // Re-splits by the quota submitted since the last EndRound, plus the older backlog when
  // backlog_in_demand (a round with no demand keeps the split).
  void EndRound() override;
  void SetAvailable(uint32_t engine, bool available) override;
  const Topology& topology() const override { return topology_; }
  const LoadLedger& ledger() const override { return ledger_; }
  size_t queued() const override;

  const BucketPlan& plan() const { return plan_; }
  double Quota(const PrefillRequest& req) const {
    return config_.cost.RequestCost(req.input_tokens, req.cached_tokens);
  }
  // Per bucket: requests waiting, and the quota submitted so far this round.
  size_t queued(uint32_t bucket) const { return queues_[bucket].size(); }
  std::span<const double> round_demand() const { return demand_; }

 private:
  LoadLedger& mutable_ledger() override { return ledger_; }
  // Takes from bucket b's queue head while it fits; returns whether it took anything.
  void TakeFrom(uint32_t b, uint32_t engine, double* remaining, bool empty_ranks_only,
                std::vector<PrefillDispatch>* out);
  bool Orphan(uint32_t bucket) const;

  PrefillLbConfig config_;
  Topology topology_;
  BucketPlan plan_;
  LoadLedger ledger_;
  struct Queued {
    PrefillRequest req;
    int64_t round;  // the round it was submitted in (for backlog_in_demand)
  };
  std::vector<std::deque<Queued>> queues_;
  int64_t round_ = 0;
  std::vector<double> demand_;
  std::unordered_map<RequestId, PrefillRequest> dispatched_;  // for Requeue
};

}  // namespace ladle::lb
