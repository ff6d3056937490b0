// The Prefill Load Balancer and its naive alternatives: see include/ladle/lb/prefill_lb.h.
#include "ladle/lb/prefill_lb.h"

#include <fmt/format.h>

#include <algorithm>

#include "ladle/core/logging.h"

namespace ladle::lb {

uint32_t PickRank(std::span<const RankLoad> ranks) {
  LADLE_CHECK(!ranks.empty());
  uint32_t best = 0;
  for (uint32_t i = 1; i < ranks.size(); ++i) {
    const RankLoad &r = ranks[i], &b = ranks[best];
    if (r.load < b.load || (r.load == b.load && r.requests < b.requests)) best = i;
  }
  return best;
}

double PrefillRouter::EngineLoad(uint32_t engine) const {
  const Topology& t = topology();
  double sum = 0;
  for (uint32_t r = 0; r < t.ranks_of(engine); ++r) sum += ledger().rank(t.Flat(engine, r)).load;
  return sum;
}

uint32_t PrefillRouter::EngineRequests(uint32_t engine) const {
  const Topology& t = topology();
  uint32_t sum = 0;
  for (uint32_t r = 0; r < t.ranks_of(engine); ++r) sum += ledger().rank(t.Flat(engine, r)).requests;
  return sum;
}

// ---------------------------------------------------------------------------------------------
// PrefillBalancer

PrefillBalancer::PrefillBalancer(PrefillLbConfig config, Topology topology)
    : config_(std::move(config)),
      topology_(std::move(topology)),
      plan_(config_.buckets, topology_.engines(), config_.initial_demand),
      ledger_(topology_.ranks()),
      queues_(config_.buckets.size()),
      demand_(config_.buckets.size(), 0.0) {}

void PrefillBalancer::Submit(const PrefillRequest& req) {
  const uint32_t b = config_.buckets.Of(req.input_tokens);
  demand_[b] += Quota(req);
  queues_[b].push_back({req, round_});
}

bool PrefillBalancer::Orphan(uint32_t bucket) const {
  for (uint32_t e = 0; e < plan_.engines(); ++e) {
    if (plan_.available(e) && plan_.bucket_of(e) == bucket) return false;
  }
  return true;
}

void PrefillBalancer::TakeFrom(uint32_t b, uint32_t engine, double* remaining, bool empty_ranks_only,
                               std::vector<PrefillDispatch>* out) {
  std::deque<Queued>& q = queues_[b];
  const uint32_t first = topology_.first_flat(engine), n = topology_.ranks_of(engine);
  while (!q.empty()) {
    const PrefillRequest& req = q.front().req;
    const double quota = Quota(req);
    const std::span<const RankLoad> ranks = ledger_.ranks().subspan(first, n);
    const uint32_t rank = PickRank(ranks);
    // Strict FIFO: the head that does not fit stops the pull (skipping it would starve long
    // prompts behind a stream of short ones), except that a rank with nothing counted always
    // takes it: the ranks of a DP group meet at every step, so an empty rank idles the whole
    // step's length, and a request larger than any quota must still run somewhere.
    if (ranks[rank].requests > 0 && (empty_ranks_only || quota > *remaining)) break;
    ledger_.Assign(req.id, first + rank, quota);
    out->push_back({req.id, {engine, rank}, quota});
    dispatched_.emplace(req.id, req);
    *remaining -= quota;
    q.pop_front();
  }
}

std::vector<PrefillDispatch> PrefillBalancer::Pull(uint32_t engine, double remaining_quota) {
  LADLE_CHECK(engine < topology_.engines());
  std::vector<PrefillDispatch> out;
  if (!plan_.available(engine)) return out;
  const uint32_t own = plan_.bucket_of(engine);
  if (own != kNoBucket) TakeFrom(own, engine, &remaining_quota, false, &out);
  if (config_.steal == Steal::kNone || (own != kNoBucket && !queues_[own].empty())) return out;
  // The own queue is drained: serve other buckets nearest in length first (lower on ties), so
  // a stolen request is as close as possible to what this engine's group already runs.
  std::vector<uint32_t> order;
  for (uint32_t b = 0; b < queues_.size(); ++b) {
    if (b != own) order.push_back(b);
  }
  const auto dist = [own](uint32_t b) { return own == kNoBucket ? 0u : (b > own ? b - own : own - b); };
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) { return dist(x) < dist(y); });
  for (const uint32_t b : order) {
    if (queues_[b].empty() || (config_.steal == Steal::kOrphans && !Orphan(b))) continue;
    TakeFrom(b, engine, &remaining_quota, config_.steal == Steal::kIdleRanks, &out);
    if (!queues_[b].empty()) break;  // stopped by the quota
  }
  return out;
}

bool PrefillBalancer::Release(RequestId id) {
  dispatched_.erase(id);
  return ledger_.Release(id);
}

bool PrefillBalancer::Requeue(RequestId id) {
  const auto it = dispatched_.find(id);
  if (it == dispatched_.end()) return false;
  const PrefillRequest req = it->second;
  dispatched_.erase(it);
  ledger_.Release(id);
  // Head of the queue: it already waited its turn. Not new demand for this round; if it is
  // still waiting when the round ends, it is backlog.
  queues_[config_.buckets.Of(req.input_tokens)].push_front({req, round_ - 1});
  return true;
}

bool PrefillBalancer::Cancel(RequestId id) {
  if (Release(id)) return true;
  for (auto& q : queues_) {
    const auto it = std::find_if(q.begin(), q.end(), [id](const Queued& r) { return r.req.id == id; });
    if (it != q.end()) {
      q.erase(it);
      return true;
    }
  }
  return false;
}

void PrefillBalancer::EndRound() {
  if (config_.backlog_in_demand) {
    for (size_t b = 0; b < queues_.size(); ++b) {
      // Only what was already waiting when the round began: this round's arrivals are in
      // demand_ once already.
      for (const Queued& r : queues_[b]) demand_[b] += r.round < round_ ? Quota(r.req) : 0.0;
    }
  }
  plan_.Resplit(demand_);
  ++round_;
  std::fill(demand_.begin(), demand_.end(), 0.0);
}

void PrefillBalancer::SetAvailable(uint32_t engine, bool available) { plan_.SetAvailable(engine, available); }

size_t PrefillBalancer::queued() const {
  size_t n = 0;
  for (const auto& q : queues_) n += q.size();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Naive routers: push at Submit, over every rank of every available engine.

namespace {

class NaivePrefillRouter final : public PrefillRouter {
 public:
  enum class Kind { kRoundRobin, kLeastRequests };

  NaivePrefillRouter(Kind kind, const PrefillLbConfig& config, Topology topology)
      : kind_(kind),
        cost_(config.cost),
        topology_(std::move(topology)),
        ledger_(topology_.ranks()),
        available_(topology_.engines(), true),
        outbox_(topology_.engines()) {}

  std::string_view name() const override { return kind_ == Kind::kRoundRobin ? "round-robin" : "least-requests"; }

  void Submit(const PrefillRequest& req) override {
    pending_.push_back(req);
    Drain();
  }

  std::vector<PrefillDispatch> Pull(uint32_t engine, double /*remaining_quota*/) override {
    LADLE_CHECK(engine < topology_.engines());
    std::vector<PrefillDispatch> out;
    out.swap(outbox_[engine]);
    return out;
  }

  bool Release(RequestId id) override {
    requests_.erase(id);
    ForgetOutbox(id);
    return ledger_.Release(id);
  }

  bool Requeue(RequestId id) override {
    const auto it = requests_.find(id);
    if (it == requests_.end()) return false;
    const PrefillRequest req = it->second;
    Release(id);
    pending_.push_front(req);
    Drain();
    return true;
  }

  bool Cancel(RequestId id) override {
    if (Release(id)) return true;
    const auto it = std::find_if(pending_.begin(), pending_.end(), [id](const PrefillRequest& r) { return r.id == id; });
    if (it == pending_.end()) return false;
    pending_.erase(it);
    return true;
  }

  void SetAvailable(uint32_t engine, bool available) override {
    available_[engine] = available;
    Drain();
  }

  const Topology& topology() const override { return topology_; }
  const LoadLedger& ledger() const override { return ledger_; }
  size_t queued() const override { return pending_.size(); }

 private:
  LoadLedger& mutable_ledger() override { return ledger_; }
  // Routes pending requests while some engine is available (none only when all are down).
  void Drain() {
    while (!pending_.empty()) {
      const std::optional<uint32_t> flat = Choose();
      if (!flat) return;
      const PrefillRequest req = pending_.front();
      pending_.pop_front();
      const double quota = cost_.RequestCost(req.input_tokens, req.cached_tokens);
      ledger_.Assign(req.id, *flat, quota);
      requests_.emplace(req.id, req);
      const RankTarget t = topology_.TargetOf(*flat);
      outbox_[t.engine].push_back({req.id, t, quota});
    }
  }

  std::optional<uint32_t> Choose() {
    const uint32_t n = topology_.ranks();
    if (kind_ == Kind::kRoundRobin) {
      for (uint32_t k = 0; k < n; ++k) {
        const uint32_t flat = (next_ + k) % n;
        if (available_[topology_.TargetOf(flat).engine]) {
          next_ = (flat + 1) % n;
          return flat;
        }
      }
      return std::nullopt;
    }
    std::optional<uint32_t> best;
    for (uint32_t flat = 0; flat < n; ++flat) {
      if (!available_[topology_.TargetOf(flat).engine]) continue;
      if (!best || ledger_.rank(flat).requests < ledger_.rank(*best).requests) best = flat;
    }
    return best;
  }

  void ForgetOutbox(RequestId id) {
    for (auto& box : outbox_) {
      const auto it = std::find_if(box.begin(), box.end(), [id](const PrefillDispatch& d) { return d.id == id; });
      if (it != box.end()) {
        box.erase(it);
        return;
      }
    }
  }

  Kind kind_;
  QuotaCost cost_;
  Topology topology_;
  LoadLedger ledger_;
  std::vector<bool> available_;
  std::deque<PrefillRequest> pending_;                       // no engine available yet
  std::vector<std::vector<PrefillDispatch>> outbox_;         // routed, not yet pulled
  std::unordered_map<RequestId, PrefillRequest> requests_;  // dispatched, for Requeue
  uint32_t next_ = 0;
};

}  // namespace

Result<std::unique_ptr<PrefillRouter>> MakePrefillRouter(std::string_view name, const PrefillLbConfig& config,
                                                         Topology topology) {
  using Kind = NaivePrefillRouter::Kind;
  if (name == "lb") return std::unique_ptr<PrefillRouter>(std::make_unique<PrefillBalancer>(config, std::move(topology)));
  if (name == "round-robin") {
    return std::unique_ptr<PrefillRouter>(std::make_unique<NaivePrefillRouter>(Kind::kRoundRobin, config, std::move(topology)));
  }
  if (name == "least-requests") {
    return std::unique_ptr<PrefillRouter>(
        std::make_unique<NaivePrefillRouter>(Kind::kLeastRequests, config, std::move(topology)));
  }
  return InvalidArgument(fmt::format("unknown prefill router '{}' (lb, round-robin, least-requests)", name));
}

}  // namespace ladle::lb
