// Expert-parallel placement (the recipe's Expert-Parallel Load Balancer, docs/eplb.md): which
// logical experts of each MoE layer get redundant replicas and which EP rank holds each
// physical expert slot, plus the measure the recipe reports, moe_lb = slowest rank / mean.
//
//   ExpertLoads w(layers, experts);                        // tokens per expert over a window
//   PlacementConfig cfg{.num_physical = PhysicalExpertCount(256, 4, 4), .num_groups = 8,
//                       .num_nodes = 1, .num_ranks = 4};
//   auto p = PlanPlacement(w, cfg, PlacementPolicy::kEplb);  // DeepSeek EPLB
//   MoeLbSummary s = MeasureMoeLb(*p, w);                    // per layer, max and mean
//
// Everything here is a pure function of its arguments (no I/O, no clock, no globals), so the
// engine and the fleet simulator compute the same placement from the same statistics.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::eplb {

// Per-layer, per-logical-expert load (routed tokens, or any additive cost), row-major.
class ExpertLoads {
 public:
  ExpertLoads() = default;
  ExpertLoads(uint32_t layers, uint32_t experts) : layers_(layers), experts_(experts), data_(size_t{layers} * experts) {}
  // Rows must all have the same non-zero length and hold finite values >= 0.
  static Result<ExpertLoads> FromRows(const std::vector<std::vector<double>>& rows);

  uint32_t layers() const { return layers_; }
  uint32_t experts() const { return experts_; }
  std::span<double> Row(uint32_t layer) { return {data_.data() + size_t{layer} * experts_, experts_}; }
  std::span<const double> Row(uint32_t layer) const { return {data_.data() + size_t{layer} * experts_, experts_}; }
  double& At(uint32_t layer, uint32_t expert) { return data_[size_t{layer} * experts_ + expert]; }
  double At(uint32_t layer, uint32_t expert) const { return data_[size_t{layer} * experts_ + expert]; }

 private:
  uint32_t layers_ = 0, experts_ = 0;
  std::vector<double> data_;
};

// The recipe's padding rule: `redundant_per_rank` replica slots on each of `ep_size` ranks on
// top of the logical experts, rounded up so the total is a multiple of ep_size (every rank
// holds the same number of slots). 256 experts, 1 redundant, EP64 -> 320 (5 per rank); the
// recipe's "7 per GPU at EP64" is 384 experts (448 / 64). ep_size must be > 0.
uint32_t PhysicalExpertCount(uint32_t num_logical, uint32_t redundant_per_rank, uint32_t ep_size);

struct PlacementConfig {
  uint32_t num_physical = 0;  // physical expert slots per layer; a multiple of num_ranks, >= experts
  uint32_t num_groups = 1;    // expert groups (group-limited routing); must divide the experts
  uint32_t num_nodes = 1;     // nodes (fast intra-node links); must divide num_ranks
  uint32_t num_ranks = 1;     // EP ranks (GPUs)
};

// One layer's placement. Physical slot s lives on rank s / (phy2log.size() / num_ranks).
struct LayerPlacement {
  std::vector<int32_t> phy2log;               // [slots] logical expert in each physical slot
  std::vector<std::vector<int32_t>> log2phy;  // [experts] its slots, by replica rank (0 = first)
  std::vector<int32_t> logcnt;                // [experts] replicas of each logical expert

  uint32_t slots_per_rank(uint32_t num_ranks) const { return static_cast<uint32_t>(phy2log.size()) / num_ranks; }
};

struct Placement {
  uint32_t num_ranks = 0;
  std::vector<LayerPlacement> layers;
};

enum class PlacementPolicy : uint8_t {
  kEplb,         // DeepSeek EPLB: the same slot count in every layer
  kLayerBudget,  // CRAFT-style: the same total slots, spent on the layers that gain most
};
// "eplb" / "layer-budget".
Result<PlacementPolicy> ParsePlacementPolicy(std::string_view name);
std::string_view PlacementPolicyName(PlacementPolicy policy);

// DeepSeek's EPLB. Hierarchical when num_groups % num_nodes == 0: groups are packed onto nodes
// (each node gets the same number of groups, node loads balanced), experts are replicated
// within each node (each new replica goes to the expert with the highest load per replica),
// and each node's replicas are packed onto its ranks (same count per rank, loads balanced).
// Otherwise the global policy: the same with one group and one node. Ties break toward the
// lower index, which reproduces the published example exactly. kInvalidArgument when the
// shape does not fit (see PlacementConfig).
Result<Placement> RebalanceExperts(const ExpertLoads& loads, const PlacementConfig& cfg);

// Options of the per-layer replica budget (PlacementPolicy::kLayerBudget).
struct LayerBudgetOptions {
  // Bounds on each layer's redundant slots per rank (the uniform policy gives every layer
  // (num_physical - padded experts) / num_ranks). A floor keeps some headroom against drift in
  // layers that look balanced in the window; the cap bounds one layer's weight buffer.
  uint32_t min_redundant_per_rank = 0;
  uint32_t max_redundant_per_rank = UINT32_MAX;
  // How many increments ahead the greedy looks when a layer's next increment gains nothing
  // (packing granularity makes the gain curve non-concave).
  uint32_t lookahead = 4;
};

// The per-layer replica budget (after CRAFT): the total slot count of plain EPLB
// (layers x num_physical) is kept, but each layer gets padded(experts) + k_l * num_ranks slots,
// every rank still holding the same number of slots across layers. Increments of one slot per
// rank go, greedily, to the layer whose slowest rank loses the most load per increment.
// The gain is measured one of two ways:
//   previous == nullptr  EPLB planned from `loads` and scored on `loads` (in-window);
//   previous != nullptr  EPLB planned from `previous` (the window of the last re-arrangement)
//                        and scored on `loads` (this window): what each k buys a layer after
//                        one interval of drift, i.e. what the next interval will see. The
//                        final placement is still planned from `loads`.
// Never worse than uniform EPLB under that objective: when the greedy ends worse (the gain
// curve is not concave), the uniform placement is returned.
Result<Placement> RebalanceWithLayerBudget(const ExpertLoads& loads, const PlacementConfig& cfg,
                                           const LayerBudgetOptions& opts = {},
                                           const ExpertLoads* previous = nullptr);

// Dispatches on the policy (default options).
Result<Placement> PlanPlacement(const ExpertLoads& loads, const PlacementConfig& cfg, PlacementPolicy policy);

// kInvalidArgument unless: every layer has num_experts logical experts each with >= 1 replica,
// its slot count is a multiple of num_ranks, logcnt matches phy2log, and log2phy lists exactly
// the slots phy2log gives each expert.
Status ValidatePlacement(const Placement& p, uint32_t num_experts);

// --- moe_lb ---------------------------------------------------------------------------------

// Each rank's load in one layer: an expert's load is split evenly over its replicas (what
// round-robin dispatch converges to), summed per rank. `out` has num_ranks entries.
void RankLoads(const LayerPlacement& layer, uint32_t num_ranks, std::span<const double> expert_loads,
               std::span<double> out);
// max(rank load) / mean(rank load); 1.0 for a layer with no load.
double MoeLb(std::span<const double> rank_loads);

struct MoeLbSummary {
  std::vector<double> per_layer;
  double max = 1.0;   // the worst layer
  double mean = 1.0;  // mean over layers; with equal per-layer totals (top-k routing gives every
                      // layer the same token count) this is the slowest-rank MoE time over the mean
};
// moe_lb of every layer of `p` under `loads` (same layer and expert counts; not checked beyond
// an abort-free size match: extra layers are ignored).
MoeLbSummary MeasureMoeLb(const Placement& p, const ExpertLoads& loads);
// moe_lb without EPLB: no replicas, logical expert e on rank floor(e * ranks / experts)
// (contiguous blocks, as a plain EP split lays them out; ranks may differ by one expert when
// they do not divide the experts).
MoeLbSummary MeasureMoeLbWithoutEplb(const ExpertLoads& loads, uint32_t num_ranks);
// Sum over layers of the slowest rank's load: the MoE time a placement implies, in load units.
double SlowestRankTotal(const Placement& p, const ExpertLoads& loads);

}  // namespace ladle::eplb
