// EP ranks, dispatch/combine, statistics and live re-arrangement: see expert_parallel.h.
#include "expert_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <numeric>

#include "ladle/core/logging.h"

namespace ladle::engine::model {

struct ExpertParallel::Buffer {
  int32_t expert = -1;  // the logical expert these weights are
  Floats w;             // gate [F×H], up [F×H], down [H×F]
};

struct ExpertParallel::State {
  eplb::Placement placement;
  std::vector<std::vector<std::shared_ptr<const Buffer>>> slots;  // [layer][physical slot]
};

struct ExpertParallel::Completion {
  std::mutex mu;
  std::condition_variable cv;
  size_t left = 0;
  bool failed = false;
};

struct ExpertParallel::Job {
  const Buffer* buf = nullptr;
  const float* in = nullptr;
  int rows = 0;
  float* out = nullptr;
  Completion* done = nullptr;
};

struct ExpertParallel::Rank {
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  bool stop = false;
  Floats g, u;                       // FFN scratch, the rank's own
  std::atomic<uint64_t> busy_ns{0};  // this step's expert time
};

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Rebuilds log2phy and logcnt from phy2log (replicas in slot order).
void RebuildIndex(eplb::LayerPlacement& lp, uint32_t experts) {
  lp.log2phy.assign(experts, {});
  lp.logcnt.assign(experts, 0);
  for (size_t s = 0; s < lp.phy2log.size(); ++s) {
    const int32_t e = lp.phy2log[s];
    lp.log2phy[static_cast<size_t>(e)].push_back(static_cast<int32_t>(s));
    ++lp.logcnt[static_cast<size_t>(e)];
  }
}

// Reorders each rank's new slots so that an expert the rank already holds keeps its slot:
// which slot of a rank holds which of its experts changes no load, only what must be copied.
void KeepSlotsInPlace(const eplb::LayerPlacement& old, eplb::LayerPlacement& next, uint32_t ranks, uint32_t experts) {
  if (old.phy2log.size() != next.phy2log.size()) return;  // the layer's slot count changed
  const size_t per = next.phy2log.size() / ranks;
  for (uint32_t r = 0; r < ranks; ++r) {
    std::vector<int32_t> want(next.phy2log.begin() + r * per, next.phy2log.begin() + (r + 1) * per);
    std::vector<int32_t> placed(per, -1);
    for (size_t p = 0; p < per; ++p) {
      auto it = std::find(want.begin(), want.end(), old.phy2log[r * per + p]);
      if (it != want.end()) {
        placed[p] = *it;
        want.erase(it);
      }
    }
    size_t k = 0;
    for (size_t p = 0; p < per; ++p) {
      if (placed[p] < 0) placed[p] = want[k++];
      next.phy2log[r * per + p] = placed[p];
    }
  }
  RebuildIndex(next, experts);
}

}  // namespace

ExpertParallel::ExpertParallel(const ModelConfig& c, std::vector<const MoeWeights*> layers,
                               const ExpertParallelConfig& ep)
    : config_(c), layers_(std::move(layers)), ep_(ep) {}

Result<std::unique_ptr<ExpertParallel>> ExpertParallel::Create(const ModelConfig& c,
                                                               std::vector<const MoeWeights*> layers,
                                                               const ExpertParallelConfig& ep) {
  if (ep.ranks < 1) return InvalidArgument("expert parallel: ranks must be >= 1");
  if (ep.redundant_per_rank < 0) return InvalidArgument("expert parallel: redundant experts must be >= 0");
  if (ep.num_nodes < 1 || ep.ranks % ep.num_nodes != 0) {
    return InvalidArgument(fmt::format("expert parallel: {} nodes do not divide {} ranks", ep.num_nodes, ep.ranks));
  }
  if (ep.num_groups < 1 || c.experts % ep.num_groups != 0) {
    return InvalidArgument(fmt::format("expert parallel: {} groups do not divide {} experts", ep.num_groups, c.experts));
  }
  if (ep.window_steps == 0) return InvalidArgument("expert parallel: the load window must be >= 1 step");
  if (ep.router_skew < 0) return InvalidArgument("expert parallel: router skew must be >= 0");
  if (layers.empty()) return InvalidArgument("expert parallel: the model has no MoE layers");
  LADLE_ASSIGN_OR_RETURN(eplb::PlacementPolicy pp, eplb::ParsePlacementPolicy(ep.placement_policy));

  std::unique_ptr<ExpertParallel> x(new ExpertParallel(c, std::move(layers), ep));
  const uint32_t L = static_cast<uint32_t>(x->layers_.size()), E = static_cast<uint32_t>(c.experts);
  const uint32_t R = static_cast<uint32_t>(ep.ranks);
  x->placement_policy_ = pp;
  for (uint32_t l = 0; l < L; ++l) {  // also rejects an unknown policy name before any allocation
    LADLE_ASSIGN_OR_RETURN(auto p, eplb::MakeReplicaPolicy(ep.replica_policy));
    x->policies_.push_back(std::move(p));
  }
  x->placement_cfg_ = {eplb::PhysicalExpertCount(E, static_cast<uint32_t>(ep.redundant_per_rank), R),
                       static_cast<uint32_t>(ep.num_groups), static_cast<uint32_t>(ep.num_nodes), R};
  x->slots_per_rank_ = x->placement_cfg_.num_physical / R;
  x->expert_floats_ = 3 * static_cast<size_t>(c.hidden) * static_cast<size_t>(c.expert_hidden);

  // The window: buckets of window/100 steps when that divides both N and M (bounded memory,
  // exact at every re-arrangement step), else exact per step.
  eplb::RearrangeSchedule sched{ep.window_steps, ep.interval_steps == 0 ? UINT64_MAX : ep.interval_steps};
  uint64_t bucket = ep.window_steps % 100 == 0 ? ep.window_steps / 100 : 1;
  if (sched.interval_steps % bucket != 0) bucket = 1;
  LADLE_ASSIGN_OR_RETURN(auto window, eplb::ExpertLoadWindow::Create(L, E, sched, bucket));
  x->window_.emplace(std::move(window));

  // The first placement: EPLB on uniform loads (no statistics yet).
  eplb::ExpertLoads uniform(L, E);
  for (uint32_t l = 0; l < L; ++l) std::fill(uniform.Row(l).begin(), uniform.Row(l).end(), 1.0);
  LADLE_ASSIGN_OR_RETURN(eplb::Placement first, eplb::RebalanceExperts(uniform, x->placement_cfg_));
  auto st = std::make_shared<State>();
  st->slots.resize(L);
  for (uint32_t l = 0; l < L; ++l) {
    for (int32_t e : first.layers[l].phy2log) {
      auto b = std::make_shared<Buffer>();
      b->expert = e;
      b->w.resize(x->expert_floats_);
      const FfnWeights& w = x->layers_[l]->experts[static_cast<size_t>(e)];
      const size_t part = x->expert_floats_ / 3;
      std::memcpy(b->w.data(), w.gate, part * sizeof(float));
      std::memcpy(b->w.data() + part, w.up, part * sizeof(float));
      std::memcpy(b->w.data() + 2 * part, w.down, part * sizeof(float));
      st->slots[l].push_back(std::move(b));
    }
  }
  st->placement = std::move(first);
  x->state_ = std::move(st);

  x->policy_mu_ = std::make_unique<std::mutex[]>(L);
  x->step_expert_tokens_ = std::make_unique<std::atomic<uint64_t>[]>(size_t{L} * E);
  x->step_rank_tokens_ = std::make_unique<std::atomic<uint64_t>[]>(size_t{L} * R);
  x->recent_expert_.assign(kRecentSteps * L * E, 0);
  x->recent_rank_.assign(kRecentSteps * L * R, 0);
  x->recent_busy_ns_.assign(kRecentSteps * R, 0);
  x->bias_.resize(L);
  if (ep.router_skew > 0) {
    eplb::SkewConfig sc;
    sc.layers = L;
    sc.experts = E;
    sc.top_k = static_cast<uint32_t>(c.experts_top_k);
    sc.zipf_s = ep.router_skew;
    sc.half_life_steps = std::max<uint64_t>(1, ep.router_skew_half_life);
    sc.drift_every_steps = std::max<uint64_t>(1, sc.half_life_steps / 100);
    sc.seed = ep.router_skew_seed;
    LADLE_ASSIGN_OR_RETURN(auto gen, eplb::SkewedLoadGenerator::Create(sc));
    x->skew_.emplace(std::move(gen));
  }
  for (uint32_t r = 0; r < R; ++r) x->ranks_.push_back(std::make_unique<Rank>());
  for (auto& r : x->ranks_) {
    Rank* rp = r.get();
    rp->thread = std::thread([raw = x.get(), rp] { raw->RankLoop(*rp); });
  }
  x->mover_ = std::thread([raw = x.get()] { raw->MoverLoop(); });
  return x;
}

ExpertParallel::~ExpertParallel() {
  {
    std::lock_guard lk(mover_mu_);
    stop_ = true;
  }
  mover_cv_.notify_all();
  if (mover_.joinable()) mover_.join();
  for (auto& r : ranks_) {
    {
      std::lock_guard lk(r->mu);
      r->stop = true;
    }
    r->cv.notify_all();
    if (r->thread.joinable()) r->thread.join();
  }
}

void ExpertParallel::RankLoop(Rank& r) {
  const int H = config_.hidden, F = config_.expert_hidden;
  const size_t part = expert_floats_ / 3;
  for (;;) {
    Job job;
    {
      std::unique_lock lk(r.mu);
      // An idle worker waits for work or stop; every job it takes completes below.
      r.cv.wait(lk, [&] { return r.stop || !r.queue.empty(); });
      if (r.queue.empty()) return;  // stop with nothing queued (no step is running)
      job = r.queue.front();
      r.queue.pop_front();
    }
    const int64_t t0 = NowNs();
    bool ok = true;
    try {
      const float* w = job.buf->w.data();
      SwiGluFfn(w, w + part, w + 2 * part, H, F, job.in, job.rows, job.out, r.g, r.u);
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("ep.rank_failed what={}", e.what());
      ok = false;
    } catch (...) {
      LADLE_LOG_ERROR("ep.rank_failed what=unknown");
      ok = false;
    }
    r.busy_ns.fetch_add(static_cast<uint64_t>(NowNs() - t0), std::memory_order_relaxed);
    std::lock_guard lk(job.done->mu);
    if (!ok) job.done->failed = true;
    if (--job.done->left == 0) job.done->cv.notify_all();
  }
}

void ExpertParallel::BeginStep() {
  const uint32_t L = static_cast<uint32_t>(layers_.size()), E = static_cast<uint32_t>(config_.experts);
  const uint32_t R = static_cast<uint32_t>(ep_.ranks);
  {
    std::lock_guard lk(mover_mu_);
    if (ready_) {
      // The step boundary: no job of the previous step is in flight, none of this one yet.
      state_ = std::move(ready_);
      ready_.reset();
      busy_ = false;
      std::lock_guard lk2(mu_);
      ++rearrangements_;
      bytes_moved_ += ready_moved_;
      bytes_local_ += ready_local_;
      last_ms_ = ready_ms_;
      last_step_ = step_;
      LADLE_LOG_INFO("ep.rearranged step={} moved_bytes={} local_bytes={} ms={:.2f}", step_, ready_moved_,
                     ready_local_, ready_ms_);
    }
  }
  mover_cv_.notify_all();
  for (uint32_t l = 0; l < L; ++l) policies_[l]->BeginLayer(state_->placement.layers[l], R);
  for (size_t i = 0; i < size_t{L} * E; ++i) step_expert_tokens_[i].store(0, std::memory_order_relaxed);
  for (size_t i = 0; i < size_t{L} * R; ++i) step_rank_tokens_[i].store(0, std::memory_order_relaxed);
  for (auto& r : ranks_) r->busy_ns.store(0, std::memory_order_relaxed);
  step_failed_.store(false);
  ++step_;
  if (skew_) {
    for (uint32_t l = 0; l < L; ++l) bias_[l] = skew_->RouterBias(step_, l);
  }
}

std::span<const float> ExpertParallel::RouterBias(int layer) const {
  return bias_[static_cast<size_t>(layer)];
}

void ExpertParallel::RunExperts(int layer, const float* h, int K, const std::vector<std::vector<int>>& rows_of,
                                float* expert_out) {
  const int H = config_.hidden;
  const uint32_t E = static_cast<uint32_t>(config_.experts), R = static_cast<uint32_t>(ep_.ranks);
  const State& st = *state_;
  const eplb::LayerPlacement& lp = st.placement.layers[static_cast<size_t>(layer)];
  const uint32_t per = lp.slots_per_rank(R);
  struct Unit {
    int expert;
    int32_t slot;
  };
  std::vector<Unit> units;
  {
    std::lock_guard lk(policy_mu_[static_cast<size_t>(layer)]);
    for (uint32_t e = 0; e < E; ++e) {
      const size_t m = rows_of[e].size();
      if (m == 0) continue;
      units.push_back({static_cast<int>(e), policies_[static_cast<size_t>(layer)]->ChooseUnit(e, static_cast<uint32_t>(m))});
    }
  }
  if (units.empty()) return;
  Completion done;
  done.left = units.size();
  std::vector<Floats> ins(units.size()), outs(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    const std::vector<int>& rows = rows_of[static_cast<size_t>(units[i].expert)];
    const int m = static_cast<int>(rows.size());
    ins[i].resize(static_cast<size_t>(m) * H);
    outs[i].resize(static_cast<size_t>(m) * H);
    for (int j = 0; j < m; ++j) {  // dispatch: the unit's rows, in token order
      std::memcpy(ins[i].data() + static_cast<size_t>(j) * H, h + static_cast<size_t>(rows[static_cast<size_t>(j)] / K) * H,
                  sizeof(float) * H);
    }
    const Buffer* buf = st.slots[static_cast<size_t>(layer)][static_cast<size_t>(units[i].slot)].get();
    LADLE_CHECK(buf != nullptr && buf->expert == units[i].expert);
    const uint32_t rank = static_cast<uint32_t>(units[i].slot) / per;
    step_expert_tokens_[static_cast<size_t>(layer) * E + static_cast<uint32_t>(units[i].expert)].fetch_add(
        static_cast<uint64_t>(m), std::memory_order_relaxed);
    step_rank_tokens_[static_cast<size_t>(layer) * R + rank].fetch_add(static_cast<uint64_t>(m),
                                                                      std::memory_order_relaxed);
    Rank& r = *ranks_[rank];
    {
      std::lock_guard lk(r.mu);
      r.queue.push_back({buf, ins[i].data(), m, outs[i].data(), &done});
    }
    r.cv.notify_one();
  }
  {
    // No deadline: every queued job completes (RankLoop catches what the FFN throws), and
    // returning earlier would leave the ranks writing into these buffers.
    std::unique_lock lk(done.mu);
    done.cv.wait(lk, [&] { return done.left == 0; });
  }
  if (done.failed) {
    step_failed_.store(true);
    return;
  }
  for (size_t i = 0; i < units.size(); ++i) {  // combine
    const std::vector<int>& rows = rows_of[static_cast<size_t>(units[i].expert)];
    for (size_t j = 0; j < rows.size(); ++j) {
      std::memcpy(expert_out + static_cast<size_t>(rows[j]) * H, outs[i].data() + j * H, sizeof(float) * H);
    }
  }
}

Status ExpertParallel::EndStep() {
  const uint32_t L = static_cast<uint32_t>(layers_.size()), E = static_cast<uint32_t>(config_.experts);
  const uint32_t R = static_cast<uint32_t>(ep_.ranks);
  std::optional<eplb::ExpertLoads> snapshot, previous;
  {
    std::lock_guard lk(mu_);
    const size_t at = static_cast<size_t>((step_ - 1) % kRecentSteps);
    std::vector<uint64_t> counts(E);
    for (uint32_t l = 0; l < L; ++l) {
      for (uint32_t e = 0; e < E; ++e) {
        counts[e] = step_expert_tokens_[size_t{l} * E + e].load(std::memory_order_relaxed);
        recent_expert_[(at * L + l) * E + e] = counts[e];
      }
      for (uint32_t r = 0; r < R; ++r) {
        recent_rank_[(at * L + l) * R + r] = step_rank_tokens_[size_t{l} * R + r].load(std::memory_order_relaxed);
      }
      Status s = window_->Add(step_, l, counts);
      LADLE_CHECK(s.ok());  // steps only go forward, sizes are the window's
    }
    for (uint32_t r = 0; r < R; ++r) recent_busy_ns_[at * R + r] = ranks_[r]->busy_ns.load(std::memory_order_relaxed);
    ++recorded_steps_;
    if (ep_.interval_steps > 0 && step_ % ep_.interval_steps == 0) {
      auto snap = window_->Snapshot(step_);
      LADLE_CHECK(snap.ok());  // the newest step
      snapshot = std::move(snap).value();
      previous = previous_window_;
      previous_window_ = snapshot;
    }
  }
  if (snapshot) {
    std::lock_guard lk(mover_mu_);
    if (busy_) {
      LADLE_LOG_DEBUG("ep.rearrange_skipped step={} (the previous placement is still being copied)", step_);
    } else {
      busy_ = true;
      request_ = std::move(snapshot);
      request_previous_ = std::move(previous);
      mover_cv_.notify_all();
    }
  }
  if (step_failed_.load()) return Internal("an expert-parallel rank failed a job of this step");
  return Status::Ok();
}

void ExpertParallel::MoverLoop() {
  for (;;) {
    eplb::ExpertLoads loads;
    std::optional<eplb::ExpertLoads> previous;
    {
      std::unique_lock lk(mover_mu_);
      mover_cv_.wait(lk, [&] { return stop_ || request_.has_value(); });
      if (stop_) return;
      loads = std::move(*request_);
      previous = std::move(request_previous_);
      request_.reset();
      request_previous_.reset();
    }
    const int64_t t0 = NowNs();
    uint64_t moved = 0, local = 0;
    Result<std::shared_ptr<State>> next = Internal("not planned");
    try {
      next = BuildNext(loads, previous ? &*previous : nullptr, &moved, &local);
    } catch (const std::exception& e) {
      next = Internal(std::string("re-arrangement: ") + e.what());
    }
    const double ms = static_cast<double>(NowNs() - t0) / 1e6;
    std::lock_guard lk(mover_mu_);
    if (next.ok()) {
      ready_ = std::move(next).value();
      ready_moved_ = moved;
      ready_local_ = local;
      ready_ms_ = ms;
    } else {
      LADLE_LOG_ERROR("ep.rearrange_failed why={}", next.status().message());
      busy_ = false;
    }
    mover_cv_.notify_all();
  }
}

Result<std::shared_ptr<ExpertParallel::State>> ExpertParallel::BuildNext(const eplb::ExpertLoads& loads,
                                                                         const eplb::ExpertLoads* previous,
                                                                         uint64_t* moved, uint64_t* local) {
  // The current state: BeginStep replaces state_ only with this function's result, and the
  // mover is the only producer, so state_ is stable while this runs.
  const std::shared_ptr<State> base = state_;
  const uint32_t L = static_cast<uint32_t>(layers_.size()), E = static_cast<uint32_t>(config_.experts);
  const uint32_t R = static_cast<uint32_t>(ep_.ranks);
  Result<eplb::Placement> planned =
      placement_policy_ == eplb::PlacementPolicy::kLayerBudget
          ? eplb::RebalanceWithLayerBudget(loads, placement_cfg_, {}, previous)
          : eplb::RebalanceExperts(loads, placement_cfg_);
  LADLE_RETURN_IF_ERROR(planned.status());
  eplb::Placement next = std::move(planned).value();
  auto st = std::make_shared<State>();
  st->slots.resize(L);
  const size_t bytes = expert_floats_ * sizeof(float);
  for (uint32_t l = 0; l < L; ++l) {
    const eplb::LayerPlacement& old = base->placement.layers[l];
    eplb::LayerPlacement& lp = next.layers[l];
    KeepSlotsInPlace(old, lp, R, E);
    const size_t old_per = old.phy2log.size() / R, per = lp.phy2log.size() / R;
    for (size_t s = 0; s < lp.phy2log.size(); ++s) {
      const int32_t e = lp.phy2log[s];
      if (s < old.phy2log.size() && old.phy2log[s] == e) {
        st->slots[l].push_back(base->slots[l][s]);  // unchanged: the same buffer
        continue;
      }
      // A fresh buffer of the target rank, copied from a holder of e: on the same rank if
      // one is there (a local copy), else from another rank (what an interconnect would move).
      const size_t rank = s / per;
      const std::vector<int32_t>& holders = old.log2phy[static_cast<size_t>(e)];
      LADLE_CHECK(!holders.empty());
      int32_t src = holders[0];
      for (int32_t h : holders) {
        if (static_cast<size_t>(h) / old_per == rank) {
          src = h;
          break;
        }
      }
      const bool same_rank = static_cast<size_t>(src) / old_per == rank;
      const Buffer& from = *base->slots[l][static_cast<size_t>(src)];
      LADLE_CHECK(from.expert == e);
      auto b = std::make_shared<Buffer>();
      b->expert = e;
      b->w.assign(from.w.begin(), from.w.end());
      (same_rank ? *local : *moved) += bytes;
      st->slots[l].push_back(std::move(b));
    }
  }
  LADLE_RETURN_IF_ERROR(eplb::ValidatePlacement(next, E));
  st->placement = std::move(next);
  return st;
}

void ExpertParallel::GetStats(ExpertParallelStats* out) const {
  const uint32_t L = static_cast<uint32_t>(layers_.size()), E = static_cast<uint32_t>(config_.experts);
  const uint32_t R = static_cast<uint32_t>(ep_.ranks);
  std::lock_guard lk(mu_);
  out->ranks = static_cast<int>(R);
  out->slots_per_rank = static_cast<int>(slots_per_rank_);
  out->steps = recorded_steps_;
  out->rearrangements = rearrangements_;
  out->bytes_moved = bytes_moved_;
  out->bytes_copied_local = bytes_local_;
  out->last_rearrange_ms = last_ms_;
  out->last_rearrange_step = last_step_;
  const uint64_t n = std::min<uint64_t>(recorded_steps_, kRecentSteps);
  out->recent_steps = n;
  out->moe_lb_per_layer.assign(L, 1.0);
  double sum = 0, worst = 1.0;
  std::vector<double> ranks(R), busy(R, 0.0);
  eplb::ExpertLoads experts(L, E);  // the same tokens, for the layout without EPLB
  for (uint32_t l = 0; l < L; ++l) {
    std::fill(ranks.begin(), ranks.end(), 0.0);
    for (uint64_t i = 0; i < n; ++i) {
      for (uint32_t r = 0; r < R; ++r) ranks[r] += static_cast<double>(recent_rank_[(i * L + l) * R + r]);
      for (uint32_t e = 0; e < E; ++e) experts.At(l, e) += static_cast<double>(recent_expert_[(i * L + l) * E + e]);
    }
    const double lb = eplb::MoeLb(ranks);
    out->moe_lb_per_layer[l] = lb;
    worst = std::max(worst, lb);
    sum += lb;
  }
  for (uint64_t i = 0; i < n; ++i) {
    for (uint32_t r = 0; r < R; ++r) busy[r] += static_cast<double>(recent_busy_ns_[i * R + r]);
  }
  out->moe_lb_max = worst;
  out->moe_lb_mean = sum / L;
  out->moe_lb_static = eplb::MeasureMoeLbWithoutEplb(experts, R).mean;
  out->moe_lb_wall = eplb::MoeLb(busy);
}

eplb::Placement ExpertParallel::CurrentPlacement() const { return state_->placement; }

bool ExpertParallel::WaitIdle(int64_t timeout_ms) const {
  std::unique_lock lk(mover_mu_);
  return mover_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !busy_ || ready_ != nullptr; });
}

}  // namespace ladle::engine::model
