// The per-layer replica budget (after CRAFT, "cost-aware replica allocation"): plain EPLB gives
// every layer the same redundant slots, but layers differ in how much a replica buys. Here the
// same total is spent greedily where the slowest rank's load drops most.
#include <fmt/format.h>

#include <algorithm>

#include "layer_eplb.h"
#include "ladle/eplb/placement.h"

namespace ladle::eplb {

Result<Placement> RebalanceWithLayerBudget(const ExpertLoads& loads, const PlacementConfig& cfg,
                                           const LayerBudgetOptions& opts, const ExpertLoads* previous) {
  if (Status s = internal::CheckShape(loads.experts(), cfg); !s.ok()) return s;
  if (previous != nullptr && (previous->layers() != loads.layers() || previous->experts() != loads.experts())) {
    return InvalidArgument(fmt::format("layer budget: previous window is {}x{}, loads {}x{}", previous->layers(),
                                       previous->experts(), loads.layers(), loads.experts()));
  }
  LADLE_ASSIGN_OR_RETURN(Placement uniform, RebalanceExperts(loads, cfg));
  const uint32_t layers = loads.layers();
  const uint32_t ranks = cfg.num_ranks;
  const uint32_t base = PhysicalExpertCount(loads.experts(), 0, ranks);  // one slot per expert, padded
  const uint32_t per_layer = (cfg.num_physical - base) / ranks;         // the uniform policy's increments
  const uint64_t budget = uint64_t{per_layer} * layers;
  // The uniform split must stay feasible, so the bounds bend toward it.
  const uint32_t lo = std::min(opts.min_redundant_per_rank, per_layer);
  const uint32_t hi = std::max(opts.max_redundant_per_rank, per_layer);
  const uint32_t lookahead = std::max(opts.lookahead, 1u);

  // cost[l][k]: the slowest rank's load of layer l under EPLB with base + k * ranks slots,
  // computed on demand (the greedy touches few k per layer). With a previous window, the
  // placement is planned from it and scored on `loads`: what k buys a layer one interval of
  // drift later, which is what the next interval will see (planned and scored on the same
  // window, EPLB is near 1.0 everywhere and the gains are noise).
  const ExpertLoads& plan_from = previous != nullptr ? *previous : loads;
  std::vector<std::vector<double>> cost(layers);
  auto cost_at = [&](uint32_t l, uint32_t k) {
    auto& c = cost[l];
    while (c.size() <= k) {
      PlacementConfig sized = cfg;
      sized.num_physical = base + static_cast<uint32_t>(c.size()) * ranks;
      c.push_back(internal::SlowestRank(internal::RebalanceLayer(plan_from.Row(l), sized), ranks, loads.Row(l)));
    }
    return c[k];
  };

  std::vector<uint32_t> k(layers, lo);
  uint64_t left = budget - uint64_t{lo} * layers;
  while (left > 0) {
    // The layer (and step d) with the largest gain per increment; lowest layer, smallest d on ties.
    double best_gain = 0;
    uint32_t best_layer = layers, best_d = 0;
    for (uint32_t l = 0; l < layers; ++l) {
      const uint32_t room = static_cast<uint32_t>(std::min<uint64_t>({left, uint64_t{hi} - k[l], lookahead}));
      const double now = room > 0 ? cost_at(l, k[l]) : 0;
      for (uint32_t d = 1; d <= room; ++d) {
        const double gain = (now - cost_at(l, k[l] + d)) / d;
        if (gain > best_gain) best_gain = gain, best_layer = l, best_d = d;
      }
    }
    if (best_layer == layers) break;  // nothing gains any more
    k[best_layer] += best_d;
    left -= best_d;
  }
  // Slots that buy nothing on these loads still hedge against drift: spread them over the
  // layers with the fewest, so no budget is lost.
  while (left > 0) {
    uint32_t target = layers;
    for (uint32_t l = 0; l < layers; ++l) {
      if (k[l] < hi && (target == layers || k[l] < k[target])) target = l;
    }
    if (target == layers) break;
    ++k[target];
    --left;
  }

  Placement out;
  out.num_ranks = ranks;
  out.layers.reserve(layers);
  for (uint32_t l = 0; l < layers; ++l) {
    PlacementConfig sized = cfg;
    sized.num_physical = base + k[l] * ranks;
    out.layers.push_back(internal::RebalanceLayer(loads.Row(l), sized));
  }
  // Greedy on a non-concave gain curve can end behind the uniform split; never return worse
  // under the objective it optimised.
  double chosen = 0, flat = 0;
  for (uint32_t l = 0; l < layers; ++l) chosen += cost_at(l, k[l]), flat += cost_at(l, per_layer);
  if (chosen >= flat) return uniform;
  return out;
}

}  // namespace ladle::eplb
