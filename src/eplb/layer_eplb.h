// One layer of DeepSeek's EPLB, shared by the uniform policy (placement.cc) and the per-layer
// budget (layer_budget.cc), which evaluates it at many slot counts.
#pragma once

#include <cstdint>
#include <span>

#include "ladle/eplb/placement.h"

namespace ladle::eplb::internal {

// Checks the shape: experts % groups, ranks % nodes, num_physical % ranks, num_physical >=
// experts, everything > 0. (groups % nodes != 0 is not an error: RebalanceLayer then runs the
// global policy.)
Status CheckShape(uint32_t experts, const PlacementConfig& cfg);

// EPLB for one layer. Precondition: CheckShape passed for this num_physical.
LayerPlacement RebalanceLayer(std::span<const double> loads, const PlacementConfig& cfg);

// The slowest rank's load of `layer` under `loads` (even split over replicas).
double SlowestRank(const LayerPlacement& layer, uint32_t num_ranks, std::span<const double> loads);

}  // namespace ladle::eplb::internal
