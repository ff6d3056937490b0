// Min-max token split across replicas: see include/ladle/eplb/token_split.h.
#include "ladle/eplb/token_split.h"

#include <algorithm>
#include <limits>

#include "ladle/core/logging.h"

namespace ladle::eplb {
namespace {

// Dinic's max-flow on a small graph (experts + ranks + 2 nodes).
class MaxFlow {
 public:
  explicit MaxFlow(size_t nodes) : head_(nodes, -1), level_(nodes), it_(nodes) {}
  int Add(size_t from, size_t to, uint64_t cap) {
    edges_.push_back({to, cap, head_[from]});
    head_[from] = static_cast<int>(edges_.size()) - 1;
    edges_.push_back({from, 0, head_[to]});
    head_[to] = static_cast<int>(edges_.size()) - 1;
    return static_cast<int>(edges_.size()) - 2;
  }
  void SetCap(int e, uint64_t cap) { edges_[static_cast<size_t>(e)].cap = cap; }
  uint64_t Flow(int e) const { return edges_[static_cast<size_t>(e) ^ 1].cap; }  // the reverse edge's residual
  void Reset(const std::vector<uint64_t>& caps) {
    for (size_t i = 0; i < edges_.size(); i += 2) {
      edges_[i].cap = caps[i / 2];
      edges_[i + 1].cap = 0;
    }
  }
  std::vector<uint64_t> Caps() const {
    std::vector<uint64_t> c(edges_.size() / 2);
    for (size_t i = 0; i < edges_.size(); i += 2) c[i / 2] = edges_[i].cap;
    return c;
  }
  uint64_t Run(size_t s, size_t t) {
    uint64_t total = 0;
    while (Bfs(s, t)) {
      for (size_t i = 0; i < it_.size(); ++i) it_[i] = head_[i];
      while (uint64_t f = Dfs(s, t, std::numeric_limits<uint64_t>::max())) total += f;
    }
    return total;
  }

 private:
  struct Edge {
    size_t to;
    uint64_t cap;
    int next;
  };
  bool Bfs(size_t s, size_t t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::vector<size_t> q{s};
    level_[s] = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      for (int e = head_[q[i]]; e >= 0; e = edges_[static_cast<size_t>(e)].next) {
        const Edge& ed = edges_[static_cast<size_t>(e)];
        if (ed.cap > 0 && level_[ed.to] < 0) {
          level_[ed.to] = level_[q[i]] + 1;
          q.push_back(ed.to);
        }
      }
    }
    return level_[t] >= 0;
  }
  uint64_t Dfs(size_t v, size_t t, uint64_t f) {
    if (v == t) return f;
    for (int& e = it_[v]; e >= 0; e = edges_[static_cast<size_t>(e)].next) {
      Edge& ed = edges_[static_cast<size_t>(e)];
      if (ed.cap == 0 || level_[ed.to] != level_[v] + 1) continue;
      if (uint64_t got = Dfs(ed.to, t, std::min(f, ed.cap))) {
        ed.cap -= got;
        edges_[static_cast<size_t>(e) ^ 1].cap += got;
        return got;
      }
    }
    return 0;
  }
  std::vector<Edge> edges_;
  std::vector<int> head_, level_, it_;
};

}  // namespace

TokenSplit SplitTokensMinMax(const LayerPlacement& layer, uint32_t num_ranks, std::span<const uint64_t> counts) {
  const size_t E = layer.log2phy.size(), R = num_ranks;
  LADLE_CHECK(counts.size() == E && R > 0 && layer.phy2log.size() % R == 0);
  const size_t per = layer.phy2log.size() / R;
  // Nodes: source 0, experts 1..E, ranks E+1..E+R, sink E+R+1.
  const size_t src = 0, sink = E + R + 1;
  MaxFlow g(E + R + 2);
  uint64_t total = 0, hi = 0;
  std::vector<double> even(R, 0.0);
  struct Link {
    size_t expert, rank;
    int edge;
  };
  std::vector<Link> links;
  for (size_t e = 0; e < E; ++e) {
    if (counts[e] == 0) continue;
    total += counts[e];
    g.Add(src, 1 + e, counts[e]);
    std::vector<size_t> ranks;
    for (int32_t s : layer.log2phy[e]) ranks.push_back(static_cast<size_t>(s) / per);
    LADLE_CHECK(!ranks.empty());
    for (size_t r : ranks) even[r] += static_cast<double>(counts[e]) / static_cast<double>(ranks.size());
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    for (size_t r : ranks) links.push_back({e, r, g.Add(1 + e, 1 + E + r, total + counts[e] + 1)});
  }
  std::vector<int> rank_edge(R);
  for (size_t r = 0; r < R; ++r) rank_edge[r] = g.Add(1 + E + r, sink, 0);
  // Bounds: nobody gets less than the mean; the even split (rounded up) is feasible.
  for (double v : even) hi = std::max<uint64_t>(hi, static_cast<uint64_t>(v) + 1);
  uint64_t lo = (total + R - 1) / R;
  hi = std::max(hi, lo);
  std::vector<uint64_t> caps = g.Caps();
  auto feasible = [&](uint64_t bound) {
    g.Reset(caps);
    for (int e : rank_edge) g.SetCap(e, bound);
    return g.Run(src, sink) == total;
  };
  while (lo < hi) {  // the smallest feasible bound
    const uint64_t mid = lo + (hi - lo) / 2;
    if (feasible(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const bool ok = feasible(lo);
  LADLE_CHECK(ok);  // hi was feasible, and the search only lowers it to feasible bounds
  TokenSplit out;
  out.slot_tokens.assign(layer.phy2log.size(), 0);
  out.rank_tokens.assign(R, 0.0);
  for (const Link& l : links) {
    uint64_t f = g.Flow(l.edge);
    out.rank_tokens[l.rank] += static_cast<double>(f);
    // The expert's replicas on this rank share its flow (which of them runs it is the rank's
    // business: same weights, same rank).
    std::vector<int32_t> here;
    for (int32_t s : layer.log2phy[l.expert]) {
      if (static_cast<size_t>(s) / per == l.rank) here.push_back(s);
    }
    for (size_t i = 0; i < here.size(); ++i) {
      const uint64_t share = f / here.size() + (i < f % here.size() ? 1 : 0);
      out.slot_tokens[static_cast<size_t>(here[i])] += share;
    }
  }
  for (double v : out.rank_tokens) out.max_rank_tokens = std::max(out.max_rank_tokens, static_cast<uint64_t>(v));
  return out;
}

}  // namespace ladle::eplb
