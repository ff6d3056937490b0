// Replica choice policies: see include/ladle/eplb/replica_policy.h.
#include "ladle/eplb/replica_policy.h"

#include <fmt/format.h>

#include <algorithm>

namespace ladle::eplb {
namespace {

class RoundRobin final : public ReplicaPolicy {
 public:
  std::string_view name() const override { return "round-robin"; }
  void BeginLayer(const LayerPlacement& layer, uint32_t /*num_ranks*/) override {
    layer_ = &layer;
    next_.assign(layer.log2phy.size(), 0);
  }
  int32_t ChooseUnit(uint32_t expert, uint32_t /*tokens*/) override {
    const auto& slots = layer_->log2phy[expert];
    return slots[next_[expert]++ % slots.size()];
  }

 private:
  const LayerPlacement* layer_ = nullptr;
  std::vector<uint32_t> next_;  // tokens routed to each expert so far in this layer and step
};

class LeastLoaded final : public ReplicaPolicy {
 public:
  std::string_view name() const override { return "least-loaded"; }
  void BeginLayer(const LayerPlacement& layer, uint32_t num_ranks) override {
    layer_ = &layer;
    per_rank_ = layer.slots_per_rank(num_ranks);
    rank_tokens_.assign(num_ranks, 0);
  }
  int32_t ChooseUnit(uint32_t expert, uint32_t tokens) override {
    const auto& slots = layer_->log2phy[expert];
    int32_t best = slots[0];
    for (size_t i = 1; i < slots.size(); ++i) {
      const int32_t s = slots[i];
      const uint64_t load = rank_tokens_[s / per_rank_], best_load = rank_tokens_[best / per_rank_];
      if (load < best_load || (load == best_load && s < best)) best = s;
    }
    rank_tokens_[best / per_rank_] += tokens;
    return best;
  }

 private:
  const LayerPlacement* layer_ = nullptr;
  uint32_t per_rank_ = 1;
  std::vector<uint64_t> rank_tokens_;  // tokens each rank received so far in this layer and step
};

}  // namespace

Result<std::unique_ptr<ReplicaPolicy>> MakeReplicaPolicy(std::string_view name) {
  if (name == "round-robin") return std::unique_ptr<ReplicaPolicy>(std::make_unique<RoundRobin>());
  if (name == "least-loaded") return std::unique_ptr<ReplicaPolicy>(std::make_unique<LeastLoaded>());
  return InvalidArgument(fmt::format("unknown replica policy '{}' (round-robin, least-loaded)", name));
}

std::vector<uint64_t> DispatchCounts(ReplicaPolicy& policy, const LayerPlacement& layer, uint32_t num_ranks,
                                     std::span<const uint64_t> counts) {
  std::vector<uint64_t> ranks(num_ranks, 0), left(counts.begin(), counts.end());
  const uint32_t per_rank = layer.slots_per_rank(num_ranks);
  policy.BeginLayer(layer, num_ranks);
  for (bool any = true; any;) {
    any = false;
    for (uint32_t e = 0; e < left.size(); ++e) {
      if (left[e] == 0) continue;
      --left[e];
      any = true;
      ++ranks[policy.Choose(e) / per_rank];
    }
  }
  return ranks;
}

}  // namespace ladle::eplb
