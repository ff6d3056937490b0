// RoutedEngine: routing over the current snapshot, health and load polling, the PD hand-off
// waits, stats and shutdown.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "ladle/core/logging.h"
#include "ladle/lb/decode_lb.h"
#include "routed_engine_impl.h"

namespace ladle::cluster {

namespace {
bool Serves(EpRole have, Stage stage) {
  switch (stage) {
    case Stage::kPrefill: return have == EpRole::kPrefill;
    case Stage::kDecode:
    case Stage::kSingle: return have == EpRole::kDecode || have == EpRole::kBoth;
  }
  return false;
}
}  // namespace

bool RoutedEngineImpl::HasRole(EpRole want) const {
  for (const auto& e : eps_) {
    if (e->alive && e->known && e->role == want) return true;
  }
  return false;
}

std::pair<int, int> RoutedEngineImpl::Choose(Stage stage, const Routed& r, int avoid) const {
  struct Cand {
    int ep, rank;
    const RankView* v;
  };
  std::vector<Cand> all;
  // Every rank of every live, known engine whose role passes `fits`.
  auto collect = [&](auto fits) {
    for (size_t i = 0; i < eps_.size(); ++i) {
      const Endpoint& e = *eps_[i];
      if (!e.alive || !e.known || !fits(e.role)) continue;
      for (size_t k = 0; k < e.ranks.size(); ++k) all.push_back({static_cast<int>(i), static_cast<int>(k), &e.ranks[k]});
    }
  };
  collect([&](EpRole role) { return Serves(role, stage); });
  if (all.empty() && stage != Stage::kPrefill) {
    // No decode engine alive: a prefill engine is a whole engine too, and takes the request
    // rather than fail it (degraded, until a decode engine is back).
    collect([](EpRole role) { return role == EpRole::kPrefill; });
  }
  if (all.empty()) return {-1, -1};
  // A re-routed request avoids the engine it left when any other can take it.
  if (avoid >= 0 && std::any_of(all.begin(), all.end(), [&](const Cand& c) { return c.ep != avoid; })) {
    std::erase_if(all, [&](const Cand& c) { return c.ep == avoid; });
  }
  const int64_t tokens = static_cast<int64_t>(r.prompt.size() + r.generated[0].size());
  // A saturated rank (its KV could not hold this request) gets nothing while another can.
  auto saturated = [&](const Cand& c) { return c.v->kv_capacity > 0 && c.v->kv_tokens + tokens > c.v->kv_capacity; };
  if (std::any_of(all.begin(), all.end(), [&](const Cand& c) { return !saturated(c); })) std::erase_if(all, saturated);
  size_t pick = 0;
  if (o_.policy == "round-robin") {
    pick = static_cast<size_t>(const_cast<RoutedEngineImpl*>(this)->rr_++ % all.size());
  } else if (o_.policy == "least-requests") {
    for (size_t i = 1; i < all.size(); ++i) {
      if (all[i].v->requests < all[pick].v->requests) pick = i;
    }
  } else if (stage == Stage::kPrefill) {
    // Prefill Load Balancer, within the candidates: the lowest compute-quota load.
    for (size_t i = 1; i < all.size(); ++i) {
      const RankView &a = *all[i].v, &b = *all[pick].v;
      if (a.quota_ns < b.quota_ns || (a.quota_ns == b.quota_ns && a.requests < b.requests)) pick = i;
    }
  } else {
    // Decode Load Balancer (lb::PickDecodeRank, DualPath's intra-group rule judged over this
    // candidate set): ranks above high_factor × the candidates' mean KV tokens are high; among
    // the others the fewest requests; if all are high, the fewest tokens.
    std::vector<lb::DecodeRankLoad> loads;
    loads.reserve(all.size());
    for (const Cand& c : all) {
      loads.push_back({static_cast<uint32_t>(std::max(0, c.v->requests)), c.v->kv_tokens, false});
    }
    lb::DecodeLbConfig cfg;
    cfg.high_factor = o_.decode_high_factor;
    if (auto k = lb::PickDecodeRank(loads, tokens, cfg)) pick = *k;
  }
  return {all[pick].ep, all[pick].rank};
}

void RoutedEngineImpl::Charge(Routed& r, int ep, int rank, Stage stage) {
  Uncharge(r);
  Endpoint& e = *eps_[static_cast<size_t>(ep)];
  if (rank < 0 || static_cast<size_t>(rank) >= e.ranks.size()) return;
  RankView& v = e.ranks[static_cast<size_t>(rank)];
  r.ep = ep;
  r.rank = rank;
  r.charged_tokens = static_cast<int64_t>(r.prompt.size() + r.generated[0].size());
  r.charged_quota = stage == Stage::kDecode ? 0.0 : e.cost.Cost(r.charged_tokens, 0);
  v.requests += 1;
  v.kv_tokens += r.charged_tokens;
  v.quota_ns += r.charged_quota;
  v.quota_ns_total += r.charged_quota;
}

void RoutedEngineImpl::Uncharge(Routed& r) {
  if (r.ep < 0) return;
  Endpoint& e = *eps_[static_cast<size_t>(r.ep)];
  if (r.rank >= 0 && static_cast<size_t>(r.rank) < e.ranks.size()) {
    RankView& v = e.ranks[static_cast<size_t>(r.rank)];
    v.requests -= 1;
    v.kv_tokens -= r.charged_tokens;
    v.quota_ns -= r.charged_quota;
    if (v.requests <= 0) {
      // Idle: drop the float drift of the running sums, keep what the engine last reported.
      v.requests = 0;
      v.kv_tokens = 0;
      v.quota_ns = 0;
    }
  }
  r.ep = r.rank = -1;
  r.charged_tokens = 0;
  r.charged_quota = 0;
}

void RoutedEngineImpl::PollLoop() {
  std::unique_lock lock(mu_);
  while (!shutdown_) {
    for (size_t i = 0; i < eps_.size(); ++i) {
      if (eps_[i]->polling || eps_[i]->retired) continue;
      eps_[i]->polling = true;
      lock.unlock();
      PollOne(static_cast<int>(i));
      lock.lock();
    }
    lock.unlock();
    PrefillRoundTick();
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(o_.poll_ms), [&] { return shutdown_; });
  }
}

// One health/load round trip: GetInfo until the engine is known (a worker without Ladle's
// service answers UNIMPLEMENTED and is asked GetServerInfo instead), then GetQuota (or
// GetLoads). No answer within dead_after_ms since the last one: the engine is dead.
void RoutedEngineImpl::PollOne(int ep) {
  struct State {
    explicit State(RoutedEngineImpl* eng) : eng(eng) { eng->RpcBegin(); }
    ~State() { eng->RpcEnd(); }
    RoutedEngineImpl* eng;
    grpc::ClientContext ctx;
    lrpc::GetInfoRequest info_req;
    lrpc::GetInfoResponse info;
    lrpc::GetQuotaRequest quota_req;
    lrpc::GetQuotaResponse quota;
    pb::GetServerInfoRequest si_req;
    pb::GetServerInfoResponse si;
    pb::GetLoadsRequest loads_req;
    pb::GetLoadsResponse loads;
  };
  auto st = std::make_shared<State>(this);
  st->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.rpc_deadline_ms));
  Endpoint* e;
  bool known, ladle;
  {
    std::lock_guard lock(mu_);
    e = eps_[static_cast<size_t>(ep)].get();
    known = e->known;
    ladle = e->ladle_engine;
    st->quota_req.set_swa_since(e->swa_cursor);
  }
  auto failed = [this, ep, e](const grpc::Status& s) {
    bool dead = false;
    {
      std::lock_guard lock(mu_);
      e->polling = false;
      dead = e->alive && SteadyMs() - e->last_ok_ms > o_.dead_after_ms;
    }
    if (dead) MarkDead(ep, "no load report: " + s.error_message());
  };
  auto ok = [this, e] {
    std::lock_guard lock(mu_);
    e->polling = false;
    e->last_ok_ms = SteadyMs();
    if (e->retired) return;  // a poll sent before it left: it stays out
    if (!e->alive) {
      e->alive = true;
      LADLE_LOG_INFO("cluster.engine_alive address={} name={} role={} dp={}", e->address, e->name,
                     e->role == EpRole::kPrefill ? "prefill" : e->role == EpRole::kDecode ? "decode" : "both", e->dp);
    }
    cv_.notify_all();
  };
  if (!known) {
    e->ladle->async()->GetInfo(&st->ctx, &st->info_req, &st->info, [this, st, e, failed, ep](grpc::Status s) {
      if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        // Not a Ladle engine: an SMG-protocol worker (vLLM). Its role from kv_role.
        auto st2 = std::make_shared<State>(this);
        st2->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.rpc_deadline_ms));
        e->vllm->async()->GetServerInfo(&st2->ctx, &st2->si_req, &st2->si, [this, st2, e, failed](grpc::Status s2) {
          if (!s2.ok()) return failed(s2);
          std::lock_guard lock(mu_);
          e->known = true;
          e->ladle_engine = false;
          e->name = e->address;
          e->role = st2->si.kv_role() == "kv_producer"   ? EpRole::kPrefill
                    : st2->si.kv_role() == "kv_consumer" ? EpRole::kDecode
                                                         : EpRole::kBoth;
          e->dp = std::max(1, st2->si.data_parallel_size());
          e->ranks.resize(static_cast<size_t>(e->dp));
          e->polling = false;
        });
        return;
      }
      if (!s.ok()) return failed(s);
      std::lock_guard lock(mu_);
      const lrpc::GetInfoResponse& i = st->info;
      e->known = true;
      e->ladle_engine = true;
      e->name = i.name();
      e->role = i.role() == "prefill" ? EpRole::kPrefill : i.role() == "decode" ? EpRole::kDecode : EpRole::kBoth;
      e->dp = std::max(1, i.dp());
      e->ranks.resize(static_cast<size_t>(e->dp));
      e->block_size = i.block_size();
      e->swa_window = i.swa_window();
      e->swa_rollback = i.swa_rollback();
      e->key_extras.clear();
      for (int k = 0; k < i.key_extra_tags_size() && k < i.key_extra_values_size(); ++k) {
        e->key_extras.push_back({static_cast<kvcache::ExtraTag>(i.key_extra_tags(k)), i.key_extra_values(k)});
      }
      e->cost.a = i.cost_a();
      e->cost.b = i.cost_b();
      e->cost.d = i.cost_d();
      e->cost.e = i.cost_e();
      e->cost.f = i.cost_f();
      e->polling = false;  // the next round asks for its load
    });
    return;
  }
  if (ladle) {
    e->ladle->async()->GetQuota(&st->ctx, &st->quota_req, &st->quota, [this, st, e, ep, failed, ok](grpc::Status s) {
      if (!s.ok()) return failed(s);
      {
        std::lock_guard lock(mu_);
        for (const lrpc::RankQuota& q : st->quota.ranks()) {
          if (q.dp_rank() < 0 || static_cast<size_t>(q.dp_rank()) >= e->ranks.size()) continue;
          RankView& v = e->ranks[static_cast<size_t>(q.dp_rank())];
          v.reported_running = q.running();
          v.reported_waiting = q.waiting();
          v.kv_capacity = q.kv_capacity_tokens();
          engine::Stats& r = v.reported;
          r.running = static_cast<size_t>(std::max(0, q.running()));
          r.queue_depth = static_cast<size_t>(std::max(0, q.waiting()));
          r.kv_blocks_used = static_cast<size_t>(std::max<int64_t>(0, q.kv_blocks_used()));
          r.kv_blocks_total = static_cast<size_t>(std::max<int64_t>(0, q.kv_blocks_total()));
          r.prefix_hit_tokens = q.prefix_hit_tokens();
          r.prefix_hit_tokens_store = q.prefix_hit_tokens_store();
          r.swa_hits = q.swa_hits();
          r.swa_misses = q.swa_misses();
          r.replayed_tokens = q.replayed_tokens();
          r.handoff_exports = q.handoff_exports();
          r.handoff_imports = q.handoff_imports();
          r.handoff_fallbacks = q.handoff_fallbacks();
          r.spec_draft_tokens = q.spec_draft_tokens();
          r.spec_accepted_tokens = q.spec_accepted_tokens();
          r.spec_verify_tokens = q.spec_verify_tokens();
          r.spec_verify_lengths.assign(q.spec_verify_lengths().begin(), q.spec_verify_lengths().end());
        }
        const int64_t now = SteadyMs();
        for (const lrpc::SwaRecord& rec : st->quota.swa()) {
          kvcache::BlockKey k;
          k.hi = rec.key_hi();
          k.lo = rec.key_lo();
          dir_->Record(k, e->address, now + rec.ttl_ms());  // kept where this entrypoint owns k
        }
        e->swa_cursor = st->quota.swa_next();
      }
      if (st->quota.draining()) return failed(grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining"));
      ok();
    });
  } else {
    e->vllm->async()->GetLoads(&st->ctx, &st->loads_req, &st->loads, [this, st, e, failed, ok](grpc::Status s) {
      if (!s.ok()) return failed(s);
      {
        std::lock_guard lock(mu_);
        for (const pb::SchedulerLoad& l : st->loads.loads()) {
          if (l.dp_rank() < 0 || static_cast<size_t>(l.dp_rank()) >= e->ranks.size()) continue;
          RankView& v = e->ranks[static_cast<size_t>(l.dp_rank())];
          v.reported_running = l.num_running_reqs();
          v.reported_waiting = l.num_waiting_reqs();
          v.kv_capacity = l.max_total_num_tokens();
        }
      }
      ok();
    });
  }
}

void RoutedEngineImpl::MarkDead(int ep, const std::string& why) {
  std::vector<std::shared_ptr<StreamCall>> calls;
  {
    std::lock_guard lock(mu_);
    Endpoint& e = *eps_[static_cast<size_t>(ep)];
    if (e.alive) LADLE_LOG_WARN("cluster.engine_dead address={} reason=\"{}\"", e.address, why);
    e.alive = false;
    for (auto& [id, r] : reqs_) {
      if (r->call && r->call->ep() == ep) calls.push_back(r->call);
    }
  }
  // Their OnDone re-routes them.
  for (auto& c : calls) {
    c->engine_dead = true;
    c->ctx.TryCancel();
  }
}

void RoutedEngineImpl::HandoffLoop() {
  std::unique_lock lock(mu_);
  while (!shutdown_) {
    if (handoffs_waiting_.empty()) {
      cv_.wait(lock, [&] { return shutdown_ || !handoffs_waiting_.empty(); });
      continue;
    }
    std::deque<Handoff> batch;
    batch.swap(handoffs_waiting_);
    lock.unlock();
    std::deque<Handoff> again;
    for (Handoff& h : batch) {
      auto hit = o_.store->MatchSync(h.keys);
      const bool ready = hit.ok() && *hit >= h.keys.size();
      const bool late = SteadyMs() >= h.deadline_ms;
      bool done;
      {
        std::lock_guard l2(mu_);
        done = h.r->done || h.r->cancelled;
        if (late && !ready) handoff_timeouts_++;
      }
      if (ready || late || done) {
        Dispatch(h.r, Stage::kDecode, -1);
      } else {
        again.push_back(std::move(h));
      }
    }
    lock.lock();
    for (auto& h : again) handoffs_waiting_.push_back(std::move(h));
    if (!handoffs_waiting_.empty()) cv_.wait_for(lock, std::chrono::milliseconds(2), [&] { return shutdown_; });
  }
}

engine::Stats RoutedEngineImpl::GetStats() const {
  std::lock_guard lock(mu_);
  engine::Stats s;
  // The engines' counters as last reported (live engines only: a dead one's KV is gone), and
  // this entrypoint's own requests.
  for (const auto& e : eps_) {
    if (!e->alive) continue;
    for (const RankView& v : e->ranks) {
      const engine::Stats& r = v.reported;
      s.kv_blocks_used += r.kv_blocks_used;
      s.kv_blocks_total += r.kv_blocks_total;
      s.prefix_hit_tokens += r.prefix_hit_tokens;
      s.prefix_hit_tokens_store += r.prefix_hit_tokens_store;
      s.swa_hits += r.swa_hits;
      s.swa_misses += r.swa_misses;
      s.replayed_tokens += r.replayed_tokens;
      s.handoff_exports += r.handoff_exports;
      s.handoff_imports += r.handoff_imports;
      s.handoff_fallbacks += r.handoff_fallbacks;
      s.spec_draft_tokens += r.spec_draft_tokens;
      s.spec_accepted_tokens += r.spec_accepted_tokens;
      s.spec_verify_tokens += r.spec_verify_tokens;
      if (r.spec_verify_lengths.size() > s.spec_verify_lengths.size()) s.spec_verify_lengths.resize(r.spec_verify_lengths.size());
      for (size_t l = 0; l < r.spec_verify_lengths.size(); ++l) s.spec_verify_lengths[l] += r.spec_verify_lengths[l];
      // Each rank's load as this entrypoint counts it (at dispatch) and as it last reported.
      engine::RankLoad rl;
      rl.engine = e->name.empty() ? e->address : e->name;
      rl.role = e->role == EpRole::kPrefill ? "prefill" : e->role == EpRole::kDecode ? "decode" : "both";
      rl.rank = static_cast<int>(&v - e->ranks.data());
      rl.requests = v.requests;
      rl.kv_tokens = v.kv_tokens;
      rl.quota_seconds = v.quota_ns * 1e-9;
      rl.quota_seconds_total = v.quota_ns_total * 1e-9;
      rl.running = v.reported_running;
      rl.waiting = v.reported_waiting;
      s.rank_loads.push_back(std::move(rl));
    }
  }
  s.running = reqs_.size();
  s.queue_depth = handoffs_waiting_.size() + prefill_queued_.size();
  s.generated_tokens = generated_;
  if (handoffs_ > 0) {
    s.handoff_latency_buckets.assign(handoff_buckets_.begin(), handoff_buckets_.end());
    s.handoff_latency_seconds_total = handoff_seconds_;
  }
  return s;
}

ClusterStats RoutedEngineImpl::GetClusterStats() const {
  std::lock_guard lock(mu_);
  ClusterStats s;
  for (const auto& e : eps_) {
    ClusterStats::Engine x;
    x.address = e->address;
    x.name = e->name;
    x.role = e->role == EpRole::kPrefill ? "prefill" : e->role == EpRole::kDecode ? "decode" : "both";
    x.alive = e->alive;
    x.retired = e->retired;
    x.dp = e->dp;
    x.dispatched = e->dispatched;
    for (const RankView& v : e->ranks) x.in_flight += v.requests;
    s.engines.push_back(std::move(x));
  }
  s.reroutes = reroutes_;
  s.handoffs = handoffs_;
  s.handoff_store_waits_timed_out = handoff_timeouts_;
  const SwaDirectoryStats ds = dir_->GetStats();
  s.swa_directory_entries = ds.entries;
  s.directory_members = ds.members;
  s.directory_remote_lookups = ds.remote_lookups;
  s.directory_remote_failures = ds.remote_failures;
  s.directory_remote_found = ds.remote_keys_found;
  s.handoff_ms.assign(handoff_ms_.begin(), handoff_ms_.end());
  return s;
}

void RoutedEngineImpl::Shutdown() {
  std::vector<std::shared_ptr<StreamCall>> calls;
  {
    std::lock_guard lock(mu_);
    if (shutdown_ && !poller_.joinable()) return;
    shutdown_ = true;
    for (auto& [id, r] : reqs_) {
      r->cancelled = true;
      if (r->call) calls.push_back(r->call);
    }
    cv_.notify_all();
  }
  for (auto& c : calls) c->ctx.TryCancel();
  if (poller_.joinable()) poller_.join();
  if (handoff_thread_.joinable()) handoff_thread_.join();
  // Streams end on gRPC's threads; wait (bounded) until every request has finished, so no sink
  // runs after Shutdown returns.
  const int64_t until = SteadyMs() + 5000;
  std::vector<std::shared_ptr<Routed>> left;
  while (SteadyMs() < until) {
    {
      std::lock_guard lock(mu_);
      if (reqs_.empty()) break;
      left.clear();
      for (auto& [id, r] : reqs_) {
        if (!r->call) left.push_back(r);
      }
    }
    for (auto& r : left) FailRequest(r, engine::FinishKind::kCancelled, "");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Polls end at their deadline, streams at their cancel: wait for their last callbacks.
  std::unique_lock lock(rpc_mu_);
  if (!rpc_cv_.wait_for(lock, std::chrono::milliseconds(o_.rpc_deadline_ms + 5000), [&] { return rpcs_in_flight_ == 0; })) {
    LADLE_LOG_ERROR("cluster.shutdown rpcs_in_flight={} (not finished in time)", rpcs_in_flight_);
  }
}

void RoutedEngineImpl::RpcBegin() {
  std::lock_guard lock(rpc_mu_);
  ++rpcs_in_flight_;
}

void RoutedEngineImpl::RpcEnd() {
  std::lock_guard lock(rpc_mu_);
  LADLE_CHECK(rpcs_in_flight_ > 0);
  if (--rpcs_in_flight_ == 0) rpc_cv_.notify_all();
}

}  // namespace ladle::cluster
