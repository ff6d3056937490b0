// DeepSeek's EPLB (hierarchical and global policies), the padding rule and moe_lb.
// Written from the algorithm's description in deepseek-ai/EPLB; the three steps and their tie
// rules are documented in docs/eplb.md.
#include "ladle/eplb/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "layer_eplb.h"

namespace ladle::eplb {

Result<ExpertLoads> ExpertLoads::FromRows(const std::vector<std::vector<double>>& rows) {
  if (rows.empty() || rows[0].empty()) return InvalidArgument("loads: need at least one layer and one expert");
  ExpertLoads out(static_cast<uint32_t>(rows.size()), static_cast<uint32_t>(rows[0].size()));
  for (uint32_t l = 0; l < rows.size(); ++l) {
    if (rows[l].size() != rows[0].size()) {
      return InvalidArgument(fmt::format("loads: layer {} has {} experts, layer 0 has {}", l, rows[l].size(), rows[0].size()));
    }
    for (uint32_t e = 0; e < rows[l].size(); ++e) {
      const double v = rows[l][e];
      if (!std::isfinite(v) || v < 0) return InvalidArgument(fmt::format("loads: layer {} expert {} is {}", l, e, v));
      out.At(l, e) = v;
    }
  }
  return out;
}

uint32_t PhysicalExpertCount(uint32_t num_logical, uint32_t redundant_per_rank, uint32_t ep_size) {
  const uint64_t total = uint64_t{num_logical} + uint64_t{redundant_per_rank} * ep_size;
  return static_cast<uint32_t>((total + ep_size - 1) / ep_size * ep_size);
}

Result<PlacementPolicy> ParsePlacementPolicy(std::string_view name) {
  if (name == "eplb") return PlacementPolicy::kEplb;
  if (name == "layer-budget") return PlacementPolicy::kLayerBudget;
  return InvalidArgument(fmt::format("unknown placement policy '{}' (eplb, layer-budget)", name));
}

std::string_view PlacementPolicyName(PlacementPolicy policy) {
  return policy == PlacementPolicy::kEplb ? "eplb" : "layer-budget";
}

namespace internal {
namespace {

// Packs items onto `packs` packs of exactly n / packs items each, balancing pack weights:
// heaviest item first (stable, so equal weights keep index order) onto the lightest pack that
// still has room (lowest pack index on ties). One item per pack is the identity, as in the
// reference, which does not sort in that case.
void BalancedPack(std::span<const double> weights, uint32_t packs, std::vector<uint32_t>* pack,
                  std::vector<uint32_t>* rank_in_pack) {
  const size_t n = weights.size();
  const size_t per_pack = n / packs;
  pack->assign(n, 0);
  rank_in_pack->assign(n, 0);
  if (per_pack == 1) {
    std::iota(pack->begin(), pack->end(), 0u);
    return;
  }
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return weights[a] > weights[b]; });
  std::vector<double> pack_weight(packs, 0.0);
  std::vector<uint32_t> pack_items(packs, 0);
  for (uint32_t item : order) {
    uint32_t best = packs;
    for (uint32_t p = 0; p < packs; ++p) {
      if (pack_items[p] < per_pack && (best == packs || pack_weight[p] < pack_weight[best])) best = p;
    }
    (*pack)[item] = best;
    (*rank_in_pack)[item] = pack_items[best]++;
    pack_weight[best] += weights[item];
  }
}

// Replicates n experts into num_phy slots so the largest load per replica is minimal: slots
// 0..n-1 are the experts themselves, each further slot copies the expert with the highest
// load / replicas (lowest index on ties).
void Replicate(std::span<const double> weights, uint32_t num_phy, std::vector<uint32_t>* phy2log,
               std::vector<uint32_t>* replica_rank, std::vector<uint32_t>* count) {
  const uint32_t n = static_cast<uint32_t>(weights.size());
  phy2log->resize(num_phy);
  replica_rank->assign(num_phy, 0);
  count->assign(n, 1);
  std::iota(phy2log->begin(), phy2log->begin() + n, 0u);
  for (uint32_t slot = n; slot < num_phy; ++slot) {
    uint32_t best = 0;
    double best_load = weights[0] / (*count)[0];
    for (uint32_t e = 1; e < n; ++e) {
      const double load = weights[e] / (*count)[e];
      if (load > best_load) best = e, best_load = load;
    }
    (*phy2log)[slot] = best;
    (*replica_rank)[slot] = (*count)[best]++;
  }
}

}  // namespace

Status CheckShape(uint32_t experts, const PlacementConfig& cfg) {
  if (experts == 0 || cfg.num_ranks == 0 || cfg.num_groups == 0 || cfg.num_nodes == 0) {
    return InvalidArgument("eplb: experts, groups, nodes and ranks must be > 0");
  }
  if (experts % cfg.num_groups != 0) {
    return InvalidArgument(fmt::format("eplb: {} groups do not divide {} experts", cfg.num_groups, experts));
  }
  if (cfg.num_ranks % cfg.num_nodes != 0) {
    return InvalidArgument(fmt::format("eplb: {} nodes do not divide {} GPUs", cfg.num_nodes, cfg.num_ranks));
  }
  if (cfg.num_physical < experts) {
    return InvalidArgument(fmt::format("eplb: {} physical slots for {} experts", cfg.num_physical, experts));
  }
  if (cfg.num_physical % cfg.num_ranks != 0) {
    return InvalidArgument(fmt::format("eplb: {} physical slots are not a multiple of {} GPUs (pad: {})",
                                       cfg.num_physical, cfg.num_ranks,
                                       PhysicalExpertCount(cfg.num_physical, 0, cfg.num_ranks)));
  }
  return Status::Ok();
}

LayerPlacement RebalanceLayer(std::span<const double> loads, const PlacementConfig& cfg_in) {
  PlacementConfig cfg = cfg_in;
  if (cfg.num_groups % cfg.num_nodes != 0) cfg.num_groups = cfg.num_nodes = 1;  // the global policy
  const uint32_t experts = static_cast<uint32_t>(loads.size());
  const uint32_t group_size = experts / cfg.num_groups;
  const uint32_t groups_per_node = cfg.num_groups / cfg.num_nodes;
  const uint32_t log_per_node = experts / cfg.num_nodes;
  const uint32_t phy_per_node = cfg.num_physical / cfg.num_nodes;
  const uint32_t ranks_per_node = cfg.num_ranks / cfg.num_nodes;
  const uint32_t phy_per_rank = cfg.num_physical / cfg.num_ranks;

  // Step 1: groups onto nodes. "mlog" numbers logical experts node by node in packing order.
  std::vector<double> group_load(cfg.num_groups, 0.0);
  for (uint32_t e = 0; e < experts; ++e) group_load[e / group_size] += loads[e];
  std::vector<uint32_t> group_pack, group_rank;
  BalancedPack(group_load, cfg.num_nodes, &group_pack, &group_rank);
  std::vector<uint32_t> log2mlog(experts), mlog2log(experts);
  for (uint32_t e = 0; e < experts; ++e) {
    const uint32_t g = e / group_size;
    log2mlog[e] = (group_pack[g] * groups_per_node + group_rank[g]) * group_size + e % group_size;
    mlog2log[log2mlog[e]] = e;
  }

  LayerPlacement out;
  out.phy2log.resize(cfg.num_physical);
  out.logcnt.resize(experts);
  out.log2phy.resize(experts);
  std::vector<uint32_t> phy_rank(cfg.num_physical);
  std::vector<double> node_load(log_per_node), phy_load(phy_per_node);
  std::vector<uint32_t> phy2mlog, replica_rank, mlog_count, pack, rank_in_pack, slot2phy(phy_per_node);
  for (uint32_t node = 0; node < cfg.num_nodes; ++node) {
    // Step 2: replicas within the node.
    for (uint32_t i = 0; i < log_per_node; ++i) node_load[i] = loads[mlog2log[node * log_per_node + i]];
    Replicate(node_load, phy_per_node, &phy2mlog, &replica_rank, &mlog_count);
    // Step 3: the node's replicas onto its ranks.
    for (uint32_t i = 0; i < phy_per_node; ++i) phy_load[i] = node_load[phy2mlog[i]] / mlog_count[phy2mlog[i]];
    BalancedPack(phy_load, ranks_per_node, &pack, &rank_in_pack);
    for (uint32_t i = 0; i < phy_per_node; ++i) slot2phy[pack[i] * phy_per_rank + rank_in_pack[i]] = i;
    for (uint32_t s = 0; s < phy_per_node; ++s) {
      const uint32_t phy = slot2phy[s];
      const uint32_t logical = mlog2log[node * log_per_node + phy2mlog[phy]];
      out.phy2log[node * phy_per_node + s] = static_cast<int32_t>(logical);
      phy_rank[node * phy_per_node + s] = replica_rank[phy];
    }
    for (uint32_t i = 0; i < log_per_node; ++i) {
      out.logcnt[mlog2log[node * log_per_node + i]] = static_cast<int32_t>(mlog_count[i]);
    }
  }
  for (uint32_t e = 0; e < experts; ++e) out.log2phy[e].assign(out.logcnt[e], -1);
  for (uint32_t s = 0; s < cfg.num_physical; ++s) out.log2phy[out.phy2log[s]][phy_rank[s]] = static_cast<int32_t>(s);
  return out;
}

double SlowestRank(const LayerPlacement& layer, uint32_t num_ranks, std::span<const double> loads) {
  std::vector<double> ranks(num_ranks, 0.0);
  RankLoads(layer, num_ranks, loads, ranks);
  return *std::max_element(ranks.begin(), ranks.end());
}

}  // namespace internal

Result<Placement> RebalanceExperts(const ExpertLoads& loads, const PlacementConfig& cfg) {
  if (Status s = internal::CheckShape(loads.experts(), cfg); !s.ok()) return s;
  Placement out;
  out.num_ranks = cfg.num_ranks;
  out.layers.reserve(loads.layers());
  for (uint32_t l = 0; l < loads.layers(); ++l) out.layers.push_back(internal::RebalanceLayer(loads.Row(l), cfg));
  return out;
}

Result<Placement> PlanPlacement(const ExpertLoads& loads, const PlacementConfig& cfg, PlacementPolicy policy) {
  if (policy == PlacementPolicy::kLayerBudget) return RebalanceWithLayerBudget(loads, cfg);
  return RebalanceExperts(loads, cfg);
}

Status ValidatePlacement(const Placement& p, uint32_t num_experts) {
  if (p.num_ranks == 0) return InvalidArgument("placement: no ranks");
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerPlacement& layer = p.layers[l];
    auto bad = [l](std::string what) { return InvalidArgument(fmt::format("placement layer {}: {}", l, what)); };
    if (layer.phy2log.empty() || layer.phy2log.size() % p.num_ranks != 0) {
      return bad(fmt::format("{} slots over {} ranks", layer.phy2log.size(), p.num_ranks));
    }
    if (layer.logcnt.size() != num_experts || layer.log2phy.size() != num_experts) return bad("expert count");
    std::vector<int32_t> seen(num_experts, 0);
    for (int32_t e : layer.phy2log) {
      if (e < 0 || static_cast<uint32_t>(e) >= num_experts) return bad(fmt::format("slot names expert {}", e));
      ++seen[e];
    }
    for (uint32_t e = 0; e < num_experts; ++e) {
      if (seen[e] < 1) return bad(fmt::format("expert {} has no replica", e));
      if (seen[e] != layer.logcnt[e]) return bad(fmt::format("expert {}: logcnt {} but {} slots", e, layer.logcnt[e], seen[e]));
      if (layer.log2phy[e].size() != static_cast<size_t>(seen[e])) return bad(fmt::format("expert {}: log2phy size", e));
      for (int32_t s : layer.log2phy[e]) {
        if (s < 0 || static_cast<size_t>(s) >= layer.phy2log.size() || layer.phy2log[s] != static_cast<int32_t>(e)) {
          return bad(fmt::format("expert {}: log2phy names slot {}", e, s));
        }
      }
      std::vector<int32_t> sorted = layer.log2phy[e];
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return bad(fmt::format("expert {}: slot twice", e));
    }
  }
  return Status::Ok();
}

void RankLoads(const LayerPlacement& layer, uint32_t num_ranks, std::span<const double> expert_loads,
               std::span<double> out) {
  std::fill(out.begin(), out.end(), 0.0);
  const uint32_t per_rank = layer.slots_per_rank(num_ranks);
  for (size_t s = 0; s < layer.phy2log.size(); ++s) {
    const int32_t e = layer.phy2log[s];
    out[s / per_rank] += expert_loads[e] / layer.logcnt[e];
  }
}

double MoeLb(std::span<const double> rank_loads) {
  if (rank_loads.empty()) return 1.0;
  double sum = 0, max = 0;
  for (double v : rank_loads) sum += v, max = std::max(max, v);
  return sum > 0 ? max / (sum / static_cast<double>(rank_loads.size())) : 1.0;
}

namespace {

MoeLbSummary Summarize(std::vector<double> per_layer) {
  MoeLbSummary s;
  if (per_layer.empty()) return s;
  s.max = *std::max_element(per_layer.begin(), per_layer.end());
  s.mean = std::accumulate(per_layer.begin(), per_layer.end(), 0.0) / static_cast<double>(per_layer.size());
  s.per_layer = std::move(per_layer);
  return s;
}

}  // namespace

MoeLbSummary MeasureMoeLb(const Placement& p, const ExpertLoads& loads) {
  std::vector<double> per_layer, ranks(p.num_ranks);
  const size_t layers = std::min<size_t>(p.layers.size(), loads.layers());
  for (size_t l = 0; l < layers; ++l) {
    RankLoads(p.layers[l], p.num_ranks, loads.Row(static_cast<uint32_t>(l)), ranks);
    per_layer.push_back(MoeLb(ranks));
  }
  return Summarize(std::move(per_layer));
}

MoeLbSummary MeasureMoeLbWithoutEplb(const ExpertLoads& loads, uint32_t num_ranks) {
  std::vector<double> per_layer, ranks(num_ranks);
  const uint64_t experts = loads.experts();
  for (uint32_t l = 0; l < loads.layers(); ++l) {
    std::fill(ranks.begin(), ranks.end(), 0.0);
    // Rank r holds experts [ceil(r E / R), ceil((r+1) E / R)): e is on the largest r with
    // r E <= e R, i.e. floor(e R / E).
    for (uint32_t e = 0; e < experts; ++e) ranks[e * num_ranks / experts] += loads.At(l, e);
    per_layer.push_back(MoeLb(ranks));
  }
  return Summarize(std::move(per_layer));
}

double SlowestRankTotal(const Placement& p, const ExpertLoads& loads) {
  double total = 0;
  const size_t layers = std::min<size_t>(p.layers.size(), loads.layers());
  for (size_t l = 0; l < layers; ++l) total += internal::SlowestRank(p.layers[l], p.num_ranks, loads.Row(static_cast<uint32_t>(l)));
  return total;
}

}  // namespace ladle::eplb
