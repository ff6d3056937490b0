// RoutedEngine: the Prefill Load Balancer's entrypoint layers (lb::PrefillRouter, pure) wired
// to live engines. A prefill request is queued in its length bucket; an engine pulls while its
// ranks have compute-quota headroom (and an idle rank always takes the head), which is asked
// after every arrival, every prefill that finishes and every load report. Within the engine,
// the router picks the rank with the lowest quota. Load is counted at dispatch by the router's
// ledger and leaves it on every exit: hand-off, failure, re-route, cancel.
#include <fmt/format.h>

#include "ladle/core/logging.h"
#include "routed_engine_impl.h"

namespace ladle::cluster {

bool RoutedEngineImpl::PrefillRouterReady() {
  std::vector<int> eps;
  std::vector<uint32_t> ranks;
  for (size_t i = 0; i < eps_.size(); ++i) {
    const Endpoint& e = *eps_[i];
    if (e.known && e.role == EpRole::kPrefill) {
      eps.push_back(static_cast<int>(i));
      ranks.push_back(static_cast<uint32_t>(std::max(1, e.dp)));
    }
  }
  if (eps.empty()) return prefill_router_ != nullptr;
  // (Re)built when the set of prefill engines changed and nothing is in it; otherwise a new
  // engine waits until the router drains (its topology is fixed).
  const bool idle = !prefill_router_ || (prefill_router_->queued() == 0 && prefill_router_->ledger().size() == 0);
  if (eps != prefill_eps_ && idle) {
    lb::PrefillLbConfig cfg;
    // The first engine's fitted cost(q, c); all prefill engines run one model.
    const engine::CostModel& c = eps_[static_cast<size_t>(eps[0])]->cost;
    if (c.a > 0 || c.d > 0) cfg.cost = lb::QuotaCost{c.a, c.b, c.d, c.e, c.f};
    const std::string name = o_.policy == "balanced" ? "lb" : o_.policy;
    auto r = lb::MakePrefillRouter(name, cfg, lb::Topology(ranks));
    if (!r.ok()) {
      LADLE_LOG_ERROR("cluster.prefill_router error=\"{}\"", r.status().ToString());
      return prefill_router_ != nullptr;
    }
    prefill_router_ = std::move(r).value();
    prefill_eps_ = std::move(eps);
  }
  for (size_t k = 0; k < prefill_eps_.size(); ++k) {
    prefill_router_->SetAvailable(static_cast<uint32_t>(k), eps_[static_cast<size_t>(prefill_eps_[k])]->alive);
  }
  return true;
}

void RoutedEngineImpl::EnqueuePrefill(const std::shared_ptr<Routed>& r, int64_t cached_tokens) {
  lb::PrefillRequest q;
  q.id = r->id;
  q.input_tokens = static_cast<int64_t>(r->prompt.size());
  q.cached_tokens = cached_tokens;
  prefill_router_->Submit(q);
  r->in_prefill_router = true;
  prefill_queued_[r->id] = r;
}

void RoutedEngineImpl::LeavePrefill(Routed& r) {
  if (!r.in_prefill_router) return;
  r.in_prefill_router = false;
  prefill_queued_.erase(r.id);
  if (prefill_router_) prefill_router_->Cancel(r.id);
}

std::vector<std::shared_ptr<StreamCall>> RoutedEngineImpl::PullLocked() {
  std::vector<std::shared_ptr<StreamCall>> calls;
  if (!prefill_router_ || prefill_queued_.empty()) return calls;
  const lb::Topology& t = prefill_router_->topology();
  // Remaining quota of engine k: each rank's headroom, a rank over its capacity counting 0.
  auto headroom = [&](size_t k) {
    double free_quota = 0;
    for (uint32_t rank = 0; rank < t.ranks_of(static_cast<uint32_t>(k)); ++rank) {
      const double load = prefill_router_->ledger().rank(t.Flat(static_cast<uint32_t>(k), rank)).load;
      free_quota += std::max(0.0, o_.prefill_rank_quota_ns - load);
    }
    return free_quota;
  };
  // Engines pull in the order of their remaining quota, in slices: the one with the most pulls
  // until it is level with the next (or a twentieth of its headroom, at least its head), so a
  // pump that finds work for several engines spreads it as engines pulling at their own pace
  // would, rather than the first engine asked taking everything its headroom allows.
  std::vector<bool> done(prefill_eps_.size(), false);
  for (int round = 0; round < 100000 && !prefill_queued_.empty(); ++round) {
    int best = -1;
    double h1 = -1, h2 = 0;
    for (size_t k = 0; k < prefill_eps_.size(); ++k) {
      if (done[k] || !eps_[static_cast<size_t>(prefill_eps_[k])]->alive) continue;
      const double h = headroom(k);
      if (h > h1) {
        h2 = std::max(h2, h1);
        h1 = h;
        best = static_cast<int>(k);
      } else {
        h2 = std::max(h2, h);
      }
    }
    if (best < 0) break;
    const size_t k = static_cast<size_t>(best);
    const int ep = prefill_eps_[k];
    Endpoint& e = *eps_[static_cast<size_t>(ep)];
    auto pulled = prefill_router_->Pull(static_cast<uint32_t>(k), std::max(h1 - h2, 0.05 * h1));
    // The head costs more than the slice: the whole headroom, as before slices.
    if (pulled.empty()) pulled = prefill_router_->Pull(static_cast<uint32_t>(k), h1);
    if (pulled.empty()) done[k] = true;  // nothing more for it in this pump
    for (const lb::PrefillDispatch& d : pulled) {
      auto it = prefill_queued_.find(d.id);
      if (it == prefill_queued_.end()) continue;
      std::shared_ptr<Routed> r = it->second;
      prefill_queued_.erase(it);
      if (r->done || r->cancelled) {
        r->in_prefill_router = false;
        prefill_router_->Cancel(d.id);
        continue;
      }
      calls.push_back(PrepareCall(*r, Stage::kPrefill, ep, static_cast<int>(d.target.rank)));
      // The rank's view counts what the router counted (its cost(q, c), the hit included).
      if (r->ep == ep && r->rank >= 0 && static_cast<size_t>(r->rank) < e.ranks.size()) {
        RankView& v = e.ranks[static_cast<size_t>(r->rank)];
        v.quota_ns += d.quota - r->charged_quota;
        v.quota_ns_total += d.quota - r->charged_quota;
        r->charged_quota = d.quota;
      }
    }
  }
  return calls;
}

void RoutedEngineImpl::PumpPrefill() {
  std::vector<std::shared_ptr<StreamCall>> calls;
  {
    std::lock_guard lock(mu_);
    calls = PullLocked();
  }
  for (auto& c : calls) c->Begin();
}

void RoutedEngineImpl::PrefillRoundTick() {
  std::vector<std::shared_ptr<Routed>> orphans;
  {
    std::lock_guard lock(mu_);
    if (!HasRole(EpRole::kPrefill) && !prefill_queued_.empty()) {
      // Every prefill engine is gone: what waits for one is prefilled by a decode engine.
      for (auto& [id, r] : prefill_queued_) orphans.push_back(r);
      for (auto& r : orphans) LeavePrefill(*r);
    }
    const int64_t now = SteadyMs();
    PrefillRouterReady();
    if (prefill_router_ && now - last_round_ms_ >= o_.prefill_round_ms) {
      prefill_router_->EndRound();
      last_round_ms_ = now;
    }
  }
  for (auto& r : orphans) Dispatch(r, Stage::kSingle, -1);
  PumpPrefill();
}

}  // namespace ladle::cluster
