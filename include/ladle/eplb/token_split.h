// Per-batch token split across existing replicas (after DeepSeek's LPLB): for one layer of one
// step, given the tokens routed to each logical expert and a placement, how many of each
// expert's tokens each of its replicas takes so that the slowest rank gets as few as possible.
// Where EPLB's even split is fixed when the placement is made, this reacts to the batch at hand
// (per-step noise, and drift since the last re-arrangement) without moving any weights.
//
//   TokenSplit s = SplitTokensMinMax(placement.layers[l], num_ranks, counts);
//   double lb = MoeLb(s.rank_tokens);   // never above the even split's
//
// Exact and integral: a binary search on the bound B with a max-flow feasibility check
// (source -> expert, capacity its tokens; expert -> each rank holding a replica of it;
// rank -> sink, capacity B), which is the LP's optimum since the flow polytope is integral.
// A pure function, like the rest of ladle_eplb.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ladle/eplb/placement.h"

namespace ladle::eplb {

struct TokenSplit {
  std::vector<uint64_t> slot_tokens;  // [physical slot] tokens the replica in that slot takes
  std::vector<double> rank_tokens;    // [rank] their sum per rank
  uint64_t max_rank_tokens = 0;       // the slowest rank's, minimised
};

// `counts`: tokens per logical expert (layer.log2phy.size() entries). Experts with no replica
// are not allowed (ValidatePlacement).
TokenSplit SplitTokensMinMax(const LayerPlacement& layer, uint32_t num_ranks, std::span<const uint64_t> counts);

}  // namespace ladle::eplb
