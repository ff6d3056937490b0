// Which replica of a logical expert a routed token goes to. A replica is an exact copy, so the
// choice changes only which rank does the work, never the output. Two policies, chosen at run
// time by name:
//   round-robin   the t-th token (unit) routed to an expert in a step takes replica t mod replicas:
//                 stateless across steps, an even split within +-1 token.
//   least-loaded  the replica whose rank has received the fewest tokens so far in this layer
//                 and step (lowest slot on ties): adapts to the batch at hand, at the cost of
//                 a per-rank counter.
//
//   auto policy = MakeReplicaPolicy("least-loaded");
//   policy->BeginLayer(placement.layers[l], placement.num_ranks);  // per layer, per step
//   int32_t slot = policy->Choose(expert);                         // per routed token
//   int32_t slot = policy->ChooseUnit(expert, tokens);             // per unit that stays whole
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/eplb/placement.h"

namespace ladle::eplb {

class ReplicaPolicy {
 public:
  virtual ~ReplicaPolicy() = default;
  virtual std::string_view name() const = 0;
  // Starts dispatching one layer of one step under `layer` (kept by reference until the next
  // BeginLayer); resets per-step state.
  virtual void BeginLayer(const LayerPlacement& layer, uint32_t num_ranks) = 0;
  // The physical slot for the next token routed to logical expert `expert`.
  int32_t Choose(uint32_t expert) { return ChooseUnit(expert, 1); }
  // The same for a dispatch unit of `tokens` tokens that must stay together (the engine sends
  // one sequence's rows for an expert as one unit: splitting them would change the expert
  // GEMM's row batch, and with it the bits). Round-robin counts units; least-loaded counts
  // the unit's tokens against the chosen rank.
  virtual int32_t ChooseUnit(uint32_t expert, uint32_t tokens) = 0;
};

// "round-robin" or "least-loaded"; kInvalidArgument otherwise.
Result<std::unique_ptr<ReplicaPolicy>> MakeReplicaPolicy(std::string_view name);

// Dispatches whole counts (tokens per logical expert, one layer of one step) through `policy`
// token by token, interleaved across experts (one token of each expert with tokens left, in
// index order, per round: a batch's tokens name many experts each), and returns tokens per
// rank: what the ranks really receive, as opposed to the even split RankLoads assumes.
std::vector<uint64_t> DispatchCounts(ReplicaPolicy& policy, const LayerPlacement& layer, uint32_t num_ranks,
                                     std::span<const uint64_t> counts);

}  // namespace ladle::eplb
