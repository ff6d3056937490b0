// The fleet simulation behind lb_trace_bench: see fleet_sim.h.
#include "fleet_sim.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <fstream>
#include <queue>
#include <unordered_set>

namespace ladle::lb::sim {

Result<std::vector<TraceRequest>> LoadMooncakeTrace(const std::string& path, size_t max_requests) {
  std::ifstream in(path);
  if (!in) return IoError(fmt::format("cannot read trace {}", path));
  std::vector<TraceRequest> out;
  simdjson::dom::parser parser;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    simdjson::dom::element doc;
    if (parser.parse(line).get(doc)) return ParseError(fmt::format("{}:{}: not JSON", path, n));
    TraceRequest r;
    int64_t ts = 0;
    simdjson::dom::array ids;
    if (doc["timestamp"].get(ts) || doc["input_length"].get(r.input) || doc["output_length"].get(r.output) ||
        doc["hash_ids"].get(ids)) {
      return ParseError(fmt::format("{}:{}: want timestamp, input_length, output_length, hash_ids", path, n));
    }
    r.arrival_s = static_cast<double>(ts) / 1000.0;
    for (simdjson::dom::element id : ids) {
      uint64_t v = 0;
      if (id.get(v)) return ParseError(fmt::format("{}:{}: hash id is not an integer", path, n));
      r.hash_ids.push_back(v);
    }
    out.push_back(std::move(r));
    if (max_requests > 0 && out.size() >= max_requests) break;
  }
  if (out.empty()) return ParseError(fmt::format("{}: no requests", path));
  return out;
}

Result<QuotaCost> LoadQuotaCost(const std::string& path) {
  std::ifstream f(path);
  if (!f) return IoError(fmt::format("cannot read cost model {}", path));
  std::string magic, key;
  int version = 0;
  f >> magic >> version;
  if (magic != "ladle-cost-model" || version != 1) return ParseError(fmt::format("{}: not a ladle cost model", path));
  QuotaCost c{.a = 0};
  double v = 0;
  int seen = 0;
  while (f >> key >> v) {
    if (!std::isfinite(v) || v < 0) return ParseError(fmt::format("{}: bad value for {}", path, key));
    if (key == "a") c.a = v, seen |= 1;
    else if (key == "b") c.b = v, seen |= 2;
    else if (key == "d") c.d = v, seen |= 4;
    else if (key == "e") c.e = v, seen |= 8;
    else if (key == "f") c.f = v;
  }
  if (seen != 15) return ParseError(fmt::format("{}: missing coefficients", path));
  return c;
}

QuotaCost DefaultQuotaCost() { return QuotaCost{.a = 90e3, .b = 6, .d = 3, .e = 5e6, .f = 0}; }

namespace {

// Largest q >= 0 with a·q + b·q·c + d·q² + f·c <= budget (the chunk solve, e charged apart).
int64_t MaxTokens(const QuotaCost& m, double budget, int64_t c) {
  const double cd = static_cast<double>(c), lin = m.a + m.b * cd, room = budget - m.f * cd;
  if (room <= 0) return 0;
  double q = m.d > 0 ? (-lin + std::sqrt(lin * lin + 4 * m.d * room)) / (2 * m.d) : (lin > 0 ? room / lin : 1e18);
  return static_cast<int64_t>(std::floor(std::min(q, 1e15)));
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

double MaxOverMean(const std::vector<double>& v) {
  double sum = 0, mx = 0;
  for (double x : v) sum += x, mx = std::max(mx, x);
  return sum > 0 ? mx / (sum / static_cast<double>(v.size())) : 0;
}

enum class Ev { kArrival, kPrefillStepEnd, kDecodeArrive, kDecodeStepEnd, kRound, kSample };

struct Event {
  double t;
  uint64_t seq;
  Ev kind;
  uint32_t index;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Req {
  double arrival = 0;
  int64_t input = 0, output = 0, cached = 0, computed = 0, generated = 0;
  double prefill_done = -1, decode_arrive = -1, done = -1;
};

struct Chunk {
  uint32_t req;
  int64_t take;
};

class Fleet {
 public:
  Fleet(const std::vector<TraceRequest>& trace, const SimConfig& cfg, std::unique_ptr<PrefillRouter> prefill,
        DecodePolicy decode_policy)
      : trace_(trace),
        cfg_(cfg),
        ptopo_(Topology::Uniform(cfg.prefill_engines, cfg.prefill_dp)),
        dtopo_(Topology::Uniform(cfg.decode_engines, cfg.decode_dp)),
        prefill_(std::move(prefill)),
        decode_(decode_policy, cfg.decode_lb, dtopo_),
        reqs_(trace.size()),
        pfifo_(ptopo_.ranks()),
        pchunks_(cfg.prefill_engines),
        pbusy_(cfg.prefill_engines, false),
        round_quota_(ptopo_.ranks(), 0.0),
        drunning_(dtopo_.ranks()),
        djoin_(dtopo_.ranks()),
        dkv_(dtopo_.ranks(), 0),
        dbusy_(cfg.decode_engines, false) {}

  SimResult Run() {
    const double t0 = trace_.front().arrival_s * cfg_.time_scale;
    for (uint32_t i = 0; i < trace_.size(); ++i) {
      reqs_[i].arrival = trace_[i].arrival_s * cfg_.time_scale;
      reqs_[i].input = trace_[i].input;
      reqs_[i].output = std::max<int64_t>(trace_[i].output, 1);
      Push(reqs_[i].arrival, Ev::kArrival, i);
    }
    left_ = trace_.size();
    Push(t0 + cfg_.round_s, Ev::kRound, 0);
    Push(t0 + cfg_.sample_s, Ev::kSample, 0);
    double now = t0;
    while (!events_.empty()) {
      const Event ev = events_.top();
      events_.pop();
      now = ev.t;
      switch (ev.kind) {
        case Ev::kArrival: Arrive(ev.index, now); break;
        case Ev::kPrefillStepEnd: PrefillStepEnd(ev.index, now); break;
        case Ev::kDecodeArrive: DecodeArrive(ev.index, now); break;
        case Ev::kDecodeStepEnd: DecodeStepEnd(ev.index, now); break;
        case Ev::kRound: Round(now); break;
        case Ev::kSample: Sample(now); break;
      }
    }
    return Finish(t0);
  }

 private:
  void Push(double t, Ev kind, uint32_t index) { events_.push({t, seq_++, kind, index}); }

  // ---- prefill ----
  void Arrive(uint32_t i, double now) {
    Req& r = reqs_[i];
    const TraceRequest& tr = trace_[i];
    size_t hit = 0;
    while (hit < tr.hash_ids.size() && store_.contains(tr.hash_ids[hit])) ++hit;
    // The recipe's hit rule: at most L - 134 (window + rollback), on 128-token boundaries.
    const int64_t cap = std::max<int64_t>(0, (r.input - 134) / 128 * 128);
    r.cached = std::min<int64_t>(static_cast<int64_t>(hit) * cfg_.block_tokens, cap);
    cached_tokens_ += r.cached;
    input_tokens_ += r.input;
    prefill_->Submit({i, r.input, r.cached});
    // Idle engines ask at once, starting from a rotating engine so no index is favoured.
    const uint32_t n = cfg_.prefill_engines;
    for (uint32_t k = 0; k < n; ++k) {
      const uint32_t e = (i + k) % n;
      if (!pbusy_[e]) PrefillStep(e, now);
    }
  }

  void PrefillStep(uint32_t e, double now) {
    // The engine's free quota: each rank's headroom under pull_ahead steps of budget, a rank
    // already over it counting 0 (not negative), so a rank busy with a long prompt does not
    // keep its neighbours from being fed.
    const double cap = cfg_.pull_ahead * cfg_.step_budget_ns;
    double free = 0;
    for (uint32_t r = 0; r < cfg_.prefill_dp; ++r) {
      free += std::max(0.0, cap - prefill_->ledger().rank(ptopo_.Flat(e, r)).load);
    }
    for (const PrefillDispatch& d : prefill_->Pull(e, free)) {
      pfifo_[ptopo_.Flat(d.target)].push_back(static_cast<uint32_t>(d.id));
    }
    const QuotaCost& m = cfg_.cost;
    std::vector<Chunk>& chunks = pchunks_[e];
    chunks.clear();
    std::vector<double> cost(cfg_.prefill_dp, 0.0);
    for (uint32_t r = 0; r < cfg_.prefill_dp; ++r) {
      const uint32_t flat = ptopo_.Flat(e, r);
      double left = cfg_.step_budget_ns - std::min(m.e, cfg_.step_budget_ns / 2);
      bool first = true;
      for (const uint32_t i : pfifo_[flat]) {
        Req& q = reqs_[i];
        const int64_t rem = q.input - q.cached - q.computed, c = q.cached + q.computed;
        int64_t take = left > 0 ? MaxTokens(m, left, c) : 0;
        if (first) take = std::max(take, std::min(cfg_.min_chunk, rem));
        take = std::min(take, rem);
        if (take <= 0) break;
        const double chunk = m.Cost(take, c) - m.e;
        left -= chunk;
        cost[r] += chunk;
        chunks.push_back({i, take});
        first = false;
        if (take < rem) break;  // FIFO: the rest waits for the next step
      }
      if (!first) cost[r] += m.e;
    }
    const double step = *std::max_element(cost.begin(), cost.end());
    if (chunks.empty()) {
      pbusy_[e] = false;
      return;
    }
    pbusy_[e] = true;
    double sum = 0;
    for (uint32_t r = 0; r < cfg_.prefill_dp; ++r) {
      round_quota_[ptopo_.Flat(e, r)] += cost[r];
      sum += cost[r];
    }
    busy_ns_ += sum;
    dp_ratio_sum_ += step * (step / (sum / cfg_.prefill_dp));
    dp_weight_ += step;
    Push(now + step * 1e-9, Ev::kPrefillStepEnd, e);
  }

  void PrefillStepEnd(uint32_t e, double now) {
    for (const Chunk& ch : pchunks_[e]) {
      Req& q = reqs_[ch.req];
      q.computed += ch.take;
      const int64_t rem = q.input - q.cached - q.computed;
      if (rem > 0) {
        prefill_->Progress(ch.req, cfg_.cost.Cost(rem, q.cached + q.computed));
        continue;
      }
      prefill_->Release(ch.req);
      q.prefill_done = now;
      for (uint64_t id : trace_[ch.req].hash_ids) store_.insert(id);  // written through the store
      if (q.output > 1) {
        Push(now + cfg_.handoff_s, Ev::kDecodeArrive, ch.req);
      } else {
        q.done = now;
        --left_;
      }
    }
    for (uint32_t r = 0; r < cfg_.prefill_dp; ++r) {
      auto& fifo = pfifo_[ptopo_.Flat(e, r)];
      while (!fifo.empty() && reqs_[fifo.front()].prefill_done >= 0) fifo.pop_front();
    }
    PrefillStep(e, now);
  }

  // ---- decode ----
  void DecodeArrive(uint32_t i, double now) {
    reqs_[i].decode_arrive = now;
    if (!dwait_.empty() || !TryRoute(i, now)) dwait_.push_back(i);
  }

  bool TryRoute(uint32_t i, double now) {
    const std::optional<RankTarget> t = decode_.Route(i, reqs_[i].input);
    if (!t) return false;
    djoin_[dtopo_.Flat(*t)].push_back(i);
    if (!dbusy_[t->engine]) DecodeStep(t->engine, now);
    return true;
  }

  void DecodeStep(uint32_t e, double now) {
    std::vector<double> cost(cfg_.decode_dp, 0.0);
    bool any = false;
    for (uint32_t r = 0; r < cfg_.decode_dp; ++r) {
      const uint32_t flat = dtopo_.Flat(e, r);
      for (uint32_t i : djoin_[flat]) {
        drunning_[flat].push_back(i);
        dkv_[flat] += reqs_[i].input;
      }
      djoin_[flat].clear();
      cost[r] = cfg_.decode_cost.Rank(static_cast<uint32_t>(drunning_[flat].size()), dkv_[flat]);
      any = any || !drunning_[flat].empty();
    }
    dbusy_[e] = any;
    if (!any) return;
    const double step = *std::max_element(cost.begin(), cost.end());
    double sum = 0;
    for (double c : cost) sum += c;
    dstep_ratio_sum_ += step * (step / (sum / cfg_.decode_dp));
    dstep_weight_ += step;
    Push(now + step * 1e-9, Ev::kDecodeStepEnd, e);
  }

  void DecodeStepEnd(uint32_t e, double now) {
    bool freed = false;
    for (uint32_t r = 0; r < cfg_.decode_dp; ++r) {
      const uint32_t flat = dtopo_.Flat(e, r);
      auto& run = drunning_[flat];
      for (size_t k = 0; k < run.size();) {
        Req& q = reqs_[run[k]];
        ++q.generated;
        ++dkv_[flat];
        decode_.Grow(run[k], 1);
        if (1 + q.generated < q.output) {
          ++k;
          continue;
        }
        q.done = now;
        --left_;
        decode_.Release(run[k]);
        dkv_[flat] -= q.input + q.generated;
        run[k] = run.back();
        run.pop_back();
        freed = true;
      }
    }
    dbusy_[e] = false;
    if (freed) {
      while (!dwait_.empty() && TryRoute(dwait_.front(), now)) dwait_.pop_front();
    }
    if (!dbusy_[e]) DecodeStep(e, now);
  }

  // ---- periodic ----
  void Round(double now) {
    prefill_->EndRound();
    if (MaxOverMean(round_quota_) > 0) {
      quota_ratio_sum_ += MaxOverMean(round_quota_);
      ++rounds_;
    }
    std::fill(round_quota_.begin(), round_quota_.end(), 0.0);
    if (left_ > 0) Push(now + cfg_.round_s, Ev::kRound, 0);
  }

  void Sample(double now) {
    std::vector<double> kv(dkv_.begin(), dkv_.end());
    if (const double r = MaxOverMean(kv); r > 0) {
      kv_ratio_sum_ += r;
      ++samples_;
    }
    if (left_ > 0) Push(now + cfg_.sample_s, Ev::kSample, 0);
  }

  SimResult Finish(double t0) {
    SimResult s;
    s.prefill_policy = prefill_->name();
    s.decode_policy = std::string(decode_.name());
    s.requests = reqs_.size();
    std::vector<double> ttft, tpot;
    double last = t0, out_tokens = 0;
    for (const Req& q : reqs_) {
      ttft.push_back(q.prefill_done - q.arrival);
      if (q.output > 1) tpot.push_back((q.done - q.decode_arrive) / static_cast<double>(q.output - 1));
      last = std::max(last, q.done);
      out_tokens += static_cast<double>(q.output);
    }
    s.makespan_s = last - t0;
    s.cache_hit = input_tokens_ > 0 ? static_cast<double>(cached_tokens_) / static_cast<double>(input_tokens_) : 0;
    s.prefill_util = busy_ns_ * 1e-9 / (ptopo_.ranks() * s.makespan_s);
    s.quota_max_mean = rounds_ ? quota_ratio_sum_ / rounds_ : 0;
    s.dp_step_max_mean = dp_weight_ > 0 ? dp_ratio_sum_ / dp_weight_ : 0;
    s.kv_max_mean = samples_ ? kv_ratio_sum_ / samples_ : 0;
    s.decode_step_max_mean = dstep_weight_ > 0 ? dstep_ratio_sum_ / dstep_weight_ : 0;
    s.ttft_p50 = Percentile(ttft, 0.5);
    s.ttft_p99 = Percentile(ttft, 0.99);
    s.tpot_p50 = Percentile(tpot, 0.5);
    s.tpot_p99 = Percentile(tpot, 0.99);
    s.output_tok_s = out_tokens / s.makespan_s;
    s.req_s = static_cast<double>(reqs_.size()) / s.makespan_s;
    return s;
  }

  const std::vector<TraceRequest>& trace_;
  const SimConfig& cfg_;
  Topology ptopo_, dtopo_;
  std::unique_ptr<PrefillRouter> prefill_;
  DecodeBalancer decode_;
  std::vector<Req> reqs_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t seq_ = 0;
  size_t left_ = 0;
  std::unordered_set<uint64_t> store_;
  // prefill
  std::vector<std::deque<uint32_t>> pfifo_;  // per flat rank
  std::vector<std::vector<Chunk>> pchunks_;  // per engine: the step in flight
  std::vector<bool> pbusy_;
  std::vector<double> round_quota_;
  double busy_ns_ = 0, dp_ratio_sum_ = 0, dp_weight_ = 0, quota_ratio_sum_ = 0;
  int64_t cached_tokens_ = 0, input_tokens_ = 0;
  size_t rounds_ = 0;
  // decode
  std::vector<std::vector<uint32_t>> drunning_, djoin_;
  std::vector<int64_t> dkv_;
  std::vector<bool> dbusy_;
  std::deque<uint32_t> dwait_;
  double kv_ratio_sum_ = 0, dstep_ratio_sum_ = 0, dstep_weight_ = 0;
  size_t samples_ = 0;
};

}  // namespace

Result<SimResult> Simulate(const std::vector<TraceRequest>& trace, const SimConfig& config) {
  if (trace.empty()) return InvalidArgument("empty trace");
  if (config.prefill_engines == 0 || config.prefill_dp == 0 || config.decode_engines == 0 || config.decode_dp == 0) {
    return InvalidArgument("the fleet needs at least one prefill and one decode rank");
  }
  PrefillLbConfig pc;
  pc.cost = config.cost;
  pc.steal = config.steal;
  pc.backlog_in_demand = config.backlog_in_demand;
  LADLE_ASSIGN_OR_RETURN(auto router, MakePrefillRouter(config.prefill_policy, pc,
                                                        Topology::Uniform(config.prefill_engines, config.prefill_dp)));
  LADLE_ASSIGN_OR_RETURN(const DecodePolicy dp, ParseDecodePolicy(config.decode_policy));
  Fleet fleet(trace, config, std::move(router), dp);
  return fleet.Run();
}

}  // namespace ladle::lb::sim
