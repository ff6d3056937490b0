// Shortest completion per state and pruning of what cannot complete (automaton.h,
// FinishAutomaton): the last pass of BuildAutomaton (automaton.cc) over the merged tables.
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "automaton.h"

namespace ladle::grammar {

// A monotone priority queue (radix heap): every key pushed is at least the last one popped,
// which holds for Dijkstra over superior functions. Bucket i holds keys whose highest bit
// differing from the last popped key is bit i - 1, so a pop rescans one bucket only when the
// exact-key bucket is empty: O(log C) amortised, and sequential memory instead of a binary
// heap's scattered sifting (the shortest-completion pass was a tenth of compile time).
namespace {

class RadixHeap {
 public:
  using Item = std::pair<uint32_t, int32_t>;
  void Push(uint32_t key, int32_t v) {
    buckets_[Bucket(key)].push_back({key, v});
    ++size_;
  }
  bool Empty() const { return size_ == 0; }
  Item Pop() {
    if (buckets_[0].empty()) {
      size_t i = 1;
      while (buckets_[i].empty()) ++i;
      uint32_t least = UINT32_MAX;
      for (const Item& e : buckets_[i]) least = std::min(least, e.first);
      last_ = least;
      for (const Item& e : buckets_[i]) buckets_[Bucket(e.first)].push_back(e);
      buckets_[i].clear();
    }
    const Item e = buckets_[0].back();
    buckets_[0].pop_back();
    --size_;
    return e;
  }

 private:
  size_t Bucket(uint32_t key) const { return key == last_ ? 0 : 32 - static_cast<size_t>(__builtin_clz(key ^ last_)); }
  std::array<std::vector<Item>, 33> buckets_;
  uint32_t last_ = 0;
  size_t size_ = 0;
};

}  // namespace

void FinishAutomaton(Automaton& a) {
  const size_t n = a.num_states();
  const size_t num_units = a.class_map.size();
  // The bytes of each class, per unit.
  std::vector<std::vector<ByteSet>> class_bytes(num_units);
  for (size_t u = 0; u < num_units; ++u) {
    class_bytes[u].resize(a.num_classes[u]);
    for (int b = 0; b < 256; ++b) class_bytes[u][a.class_map[u][b]].Set(static_cast<uint8_t>(b));
  }
  // Shortest completion is a grammar problem (Knuth 1977): each state's value is the minimum
  // over its edges of 1 + dist(target) (bytes, specials) or dist(callee) + dist(ret) (calls).
  // Those functions are superior (never below any argument), so a Dijkstra-style pass that
  // finalises states in increasing order is exact in one sweep. Byte and special edges are
  // nearly all of them and have one argument: they are kept as a predecessor list (CSR, one
  // entry per distinct source and target) and relaxed directly; only calls need the
  // two-argument bookkeeping. The tables are read twice (count, fill), out_bytes is taken on
  // the first read, and only units with a state that cannot complete are read again to prune.
  std::vector<uint32_t> pred_begin(n + 1, 0);
  std::vector<uint32_t> stamp(n, UINT32_MAX);
  a.out_bytes.assign(n, ByteSet{});
  auto for_targets = [&](size_t i, auto&& f) {
    const int32_t u = a.unit_of[i];
    const uint16_t nc = a.num_classes[u];
    const int32_t* row = &a.next[a.trans_off[i]];
    for (uint16_t c = 0; c < nc; ++c) {
      if (row[c] >= 0) f(row[c], c);
    }
    for (uint32_t k = a.special_begin[i]; k < a.special_begin[i + 1]; ++k) f(a.specials[k].next, UINT16_MAX);
  };
  for (size_t i = 0; i < n; ++i) {
    const std::vector<ByteSet>& cb = class_bytes[a.unit_of[i]];
    ByteSet& ob = a.out_bytes[i];
    for_targets(i, [&](int32_t t, uint16_t c) {
      if (c != UINT16_MAX) {
        for (int w = 0; w < 4; ++w) ob.bits[w] |= cb[c].bits[w];
      }
      if (stamp[t] == i) return;
      stamp[t] = static_cast<uint32_t>(i);
      ++pred_begin[t + 1];
    });
  }
  for (size_t i = 0; i < n; ++i) pred_begin[i + 1] += pred_begin[i];
  std::vector<int32_t> preds(pred_begin[n]);
  {
    std::vector<uint32_t> fill(pred_begin.begin(), pred_begin.end() - 1);
    std::fill(stamp.begin(), stamp.end(), UINT32_MAX);
    for (size_t i = 0; i < n; ++i) {
      for_targets(i, [&](int32_t t, uint16_t) {
        if (stamp[t] == i) return;
        stamp[t] = static_cast<uint32_t>(i);
        preds[fill[t]++] = static_cast<int32_t>(i);
      });
    }
  }
  // Calls: (owner, callee, ret), ready once both arguments are final.
  struct CallEdge {
    int32_t owner, x, y;
    uint8_t pending;
  };
  std::vector<CallEdge> call_edges;
  call_edges.reserve(a.calls.size());
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t k = a.call_begin[i]; k < a.call_begin[i + 1]; ++k) {
      const auto& c = a.calls[k];
      call_edges.push_back({static_cast<int32_t>(i), c.callee, c.ret, static_cast<uint8_t>(c.ret != c.callee ? 2 : 1)});
    }
  }
  std::vector<uint32_t> dep_begin(n + 1, 0), deps;
  for (const CallEdge& e : call_edges) {
    ++dep_begin[e.x + 1];
    if (e.y != e.x) ++dep_begin[e.y + 1];
  }
  for (size_t i = 0; i < n; ++i) dep_begin[i + 1] += dep_begin[i];
  deps.resize(dep_begin[n]);
  {
    std::vector<uint32_t> fill(dep_begin.begin(), dep_begin.end() - 1);
    for (uint32_t ei = 0; ei < call_edges.size(); ++ei) {
      deps[fill[call_edges[ei].x]++] = ei;
      if (call_edges[ei].y != call_edges[ei].x) deps[fill[call_edges[ei].y]++] = ei;
    }
  }
  a.dist.assign(n, kInfDist);
  RadixHeap pq;
  std::vector<uint8_t> done(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (a.accepting[i]) {
      a.dist[i] = 0;
      pq.Push(0, static_cast<int32_t>(i));
    }
  }
  auto improve = [&](int32_t g, uint64_t v) {
    if (v < a.dist[g]) {
      a.dist[g] = static_cast<uint32_t>(std::min<uint64_t>(v, kInfDist - 1));
      pq.Push(a.dist[g], g);
    }
  };
  while (!pq.Empty()) {
    auto [d, g] = pq.Pop();
    if (done[g] || d != a.dist[g]) continue;
    done[g] = 1;
    for (uint32_t k = pred_begin[g]; k < pred_begin[g + 1]; ++k) improve(preds[k], uint64_t{d} + 1);
    for (uint32_t k = dep_begin[g]; k < dep_begin[g + 1]; ++k) {
      CallEdge& e = call_edges[deps[k]];
      if (--e.pending > 0) continue;
      improve(e.owner, uint64_t{a.dist[e.x]} + a.dist[e.y]);
    }
  }
  // Prune everything that cannot complete. Byte transitions stay inside their unit, so only
  // units with such a state have any to remove.
  std::vector<uint8_t> unit_dead(num_units, 0);
  for (size_t i = 0; i < n; ++i) {
    if (a.dist[i] == kInfDist) unit_dead[a.unit_of[i]] = 1;
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t u = a.unit_of[i];
    if (!unit_dead[u]) continue;
    const uint16_t nc = a.num_classes[u];
    int32_t* row = &a.next[a.trans_off[i]];
    ByteSet ob;
    for (uint16_t c = 0; c < nc; ++c) {
      if (row[c] >= 0 && a.dist[row[c]] == kInfDist) row[c] = -1;
      if (row[c] >= 0) {
        for (int w = 0; w < 4; ++w) ob.bits[w] |= class_bytes[u][c].bits[w];
      }
    }
    a.out_bytes[i] = ob;
  }
  std::vector<Automaton::Call> calls;
  std::vector<Automaton::Special> specials;
  std::vector<uint32_t> cb, sb;
  cb.reserve(n + 1);
  sb.reserve(n + 1);
  calls.reserve(a.calls.size());
  specials.reserve(a.specials.size());
  for (size_t i = 0; i < n; ++i) {
    cb.push_back(static_cast<uint32_t>(calls.size()));
    for (uint32_t k = a.call_begin[i]; k < a.call_begin[i + 1]; ++k) {
      const auto& c = a.calls[k];
      if (a.dist[c.callee] != kInfDist && a.dist[c.ret] != kInfDist) calls.push_back(c);
    }
    sb.push_back(static_cast<uint32_t>(specials.size()));
    for (uint32_t k = a.special_begin[i]; k < a.special_begin[i + 1]; ++k) {
      if (a.dist[a.specials[k].next] != kInfDist) specials.push_back(a.specials[k]);
    }
  }
  cb.push_back(static_cast<uint32_t>(calls.size()));
  sb.push_back(static_cast<uint32_t>(specials.size()));
  a.calls = std::move(calls);
  a.specials = std::move(specials);
  a.call_begin = std::move(cb);
  a.special_begin = std::move(sb);
  if (a.start >= 0 && a.dist[a.start] == kInfDist) a.start = -1;
}

}  // namespace ladle::grammar
