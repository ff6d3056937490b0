// eplb_bench: moe_lb (slowest EP rank's tokens / mean) on a skewed, drifting per-expert load,
// for the recipe's three configurations, each with no EPLB, DeepSeek EPLB, EPLB with the
// per-batch min-max token split across replicas (LPLB-style) and the per-layer replica budget,
// next to the recipe's measured figures.
//   EP2  prefill  4 redundant per rank, 100-step window, re-arranged every 1,000 steps
//   EP4  prefill  the same
//   EP64 decode   1 redundant per rank, 1,000-step window, re-arranged every 10,000 steps
// The honest measure: a placement is planned from the window before a re-arrangement step t
// (ExpertLoadWindow fed with every step of (t - N, t]) and scored on steps of the NEXT
// interval (t, t + M], where the hot set has moved on. Each scored step's moe_lb is computed
// per layer; the table gives its mean over layers (the slowest-rank MoE time over the mean,
// since every layer routes the same tokens) and the worst layer, averaged over scored steps.
//   eplb_bench [--quick] [--only ep2,ep4,ep64] [--zipf-s 0.5] [--seed 1] ...
// Recorded loads instead of the generator (docs/eplb.md, "Load traces"):
//   eplb_bench --loads FILE [--schedule-divisor D]   replay a load trace (include/ladle/eplb/
//                                                    load_trace.h): every step of the file goes
//                                                    through the window, the same steps are scored
//   eplb_bench --write-loads FILE --only ep64        write the generator's loads of one case as
//                                                    a trace (steps 1 .. (R + 2) M - 1) and exit
// --schedule-divisor divides every case's window and interval (and so the generator's drift,
// which is set in intervals); with --loads its default scales the schedule by the smallest
// power of 10 that fits the trace's length.
// See docs/eplb.md for the load model and the figures.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ladle/eplb/load_trace.h"
#include "ladle/eplb/load_window.h"
#include "ladle/eplb/placement.h"
#include "ladle/eplb/skewed_load.h"
#include "ladle/eplb/token_split.h"

namespace ladle::eplb {
namespace {

struct Opts {
  bool quick = false;
  std::string only = "ep2,ep4,ep64";
  uint32_t layers = 61, experts = 256, top_k = 8, groups = 8;
  double zipf_s = SkewConfig{}.zipf_s, zipf_spread = SkewConfig{}.zipf_s_spread;
  double prefill_jitter = 0.25, decode_jitter = 0.0;
  double half_life_intervals = 10;  // the hot set's half-life, in re-arrangement intervals
  uint32_t prefill_tokens_per_rank = 16384, decode_tokens_per_rank = 128;
  int rearrangements = 0;  // 0: 1 quick, 3 full
  int eval_steps = 0;      // scored steps per interval; 0: 10 quick, 50 full
  uint64_t seed = 1;
  std::string loads;        // replay this load trace instead of the generator
  std::string write_loads;  // write the generator's loads of one case as a trace and exit
  uint64_t schedule_divisor = 0;  // window and interval / D; 0: 1, or with --loads the fit
  int Rearrangements() const { return rearrangements > 0 ? rearrangements : (quick ? 1 : 3); }
  int EvalSteps() const { return eval_steps > 0 ? eval_steps : (quick ? 10 : 50); }
};

struct Case {
  std::string name, phase;
  uint32_t ranks, redundant, tokens_per_rank;
  RearrangeSchedule schedule;
  uint64_t bucket;
  double jitter;
  double target;
};

struct Score {
  double mean = 0, max = 0;
  void Add(const MoeLbSummary& s) { mean += s.mean, max += s.max; }
  Score Over(double n) const { return {mean / n, max / n}; }
};

// moe_lb of a step when each layer's tokens are split across the replicas by the per-batch
// min-max split instead of evenly.
MoeLbSummary MeasureWithSplit(const Placement& p, const ExpertLoads& loads) {
  MoeLbSummary s;
  s.max = 0;
  double sum = 0;
  std::vector<uint64_t> counts(loads.experts());
  for (uint32_t l = 0; l < loads.layers(); ++l) {
    for (uint32_t e = 0; e < loads.experts(); ++e) counts[e] = static_cast<uint64_t>(loads.At(l, e));
    const double lb = MoeLb(SplitTokensMinMax(p.layers[l], p.num_ranks, counts).rank_tokens);
    s.per_layer.push_back(lb);
    s.max = std::max(s.max, lb);
    sum += lb;
  }
  s.mean = sum / loads.layers();
  return s;
}

double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Row {
  Case c;
  uint32_t slots_per_rank = 0;
  Score none, eplb, split, budget, eplb_in_window;
  double plan_ms_eplb = 0, plan_ms_budget = 0, split_ms = 0;  // split: per scored step, all layers
  double tokens = 0;     // per scored step, all ranks
  uint64_t missing = 0;  // scored steps absent from a trace (skipped)
};

// The window's bucket: window / 100 steps when that divides the interval too (bounded memory,
// exact at every re-arrangement step), else exact per step; the engine's rule, which gives
// the recipe's 1 (prefill) and 10 (decode).
uint64_t BucketFor(const RearrangeSchedule& s) {
  const uint64_t b = s.window_steps % 100 == 0 ? s.window_steps / 100 : 1;
  return s.interval_steps % b == 0 ? b : 1;
}

// The case with its window and interval divided by `d`.
Result<Case> Scaled(Case c, uint64_t d) {
  if (d == 0 || c.schedule.window_steps % d != 0 || c.schedule.interval_steps % d != 0) {
    return InvalidArgument(fmt::format("{}: schedule divisor {} does not divide window {} and interval {}", c.name, d,
                                       c.schedule.window_steps, c.schedule.interval_steps));
  }
  c.schedule = {c.schedule.window_steps / d, c.schedule.interval_steps / d};
  c.bucket = BucketFor(c.schedule);
  return c;
}

// The steps scored after a re-arrangement at t: `n` spread evenly over (t, t + M], the last
// one just before t + M.
std::vector<uint64_t> ScoredSteps(uint64_t t, uint64_t interval, int n) {
  std::vector<uint64_t> out;
  for (int k = 1; k <= n; ++k) out.push_back(t + interval * k / n - (k == n ? 1 : 0));
  return out;
}

// What RunCase and RunTraceCase share: planning at a re-arrangement and scoring a step.
class Scorer {
 public:
  Scorer(const Case& c, const PlacementConfig& cfg, int rearrangements)
      : c_(c), cfg_(cfg), rearrangements_(rearrangements) {
    row_.c = c;
    row_.slots_per_rank = cfg.num_physical / c.ranks;
  }
  // The window of a re-arrangement step. The first only seeds the layer budget's previous
  // window; the later ones plan the placements the next interval is scored on.
  Status Rearrange(ExpertLoads stats) {
    if (!previous_) {
      previous_ = std::move(stats);
      return Status::Ok();
    }
    const auto p0 = std::chrono::steady_clock::now();
    LADLE_ASSIGN_OR_RETURN(Placement plain, RebalanceExperts(stats, cfg_));
    const auto p1 = std::chrono::steady_clock::now();
    LADLE_ASSIGN_OR_RETURN(Placement layered, RebalanceWithLayerBudget(stats, cfg_, {}, &*previous_));
    const auto p2 = std::chrono::steady_clock::now();
    row_.plan_ms_eplb += Ms(p1 - p0) / rearrangements_;
    row_.plan_ms_budget += Ms(p2 - p1) / rearrangements_;
    in_window_.Add(MeasureMoeLb(plain, stats));
    plain_ = std::move(plain);
    layered_ = std::move(layered);
    previous_ = std::move(stats);
    ++planned_;
    return Status::Ok();
  }
  bool planned() const { return plain_.has_value(); }
  void ScoreStep(const ExpertLoads& loads, double tokens) {
    none_.Add(MeasureMoeLbWithoutEplb(loads, c_.ranks));
    eplb_.Add(MeasureMoeLb(*plain_, loads));
    const auto s0 = std::chrono::steady_clock::now();
    split_.Add(MeasureWithSplit(*plain_, loads));
    row_.split_ms += Ms(std::chrono::steady_clock::now() - s0);
    budget_.Add(MeasureMoeLb(*layered_, loads));
    row_.tokens += tokens;
    ++scored_;
  }
  int scored() const { return scored_; }
  Result<Row> Finish() {
    if (scored_ == 0) return InvalidArgument(fmt::format("{}: no step was scored", c_.name));
    row_.none = none_.Over(scored_);
    row_.eplb = eplb_.Over(scored_);
    row_.split = split_.Over(scored_);
    row_.split_ms /= scored_;
    row_.tokens /= scored_;
    row_.budget = budget_.Over(scored_);
    row_.eplb_in_window = in_window_.Over(planned_);
    return row_;
  }
  Row& row() { return row_; }

 private:
  Case c_;
  PlacementConfig cfg_;
  int rearrangements_;
  Row row_;
  Score none_, eplb_, split_, budget_, in_window_;
  int scored_ = 0, planned_ = 0;
  std::optional<ExpertLoads> previous_;
  std::optional<Placement> plain_, layered_;
};

SkewConfig SkewFor(const Case& c, const Opts& o) {
  return {.layers = o.layers, .experts = o.experts, .top_k = o.top_k, .zipf_s = o.zipf_s,
          .zipf_s_spread = o.zipf_spread,
          .half_life_steps = static_cast<uint64_t>(o.half_life_intervals * c.schedule.interval_steps),
          .drift_every_steps = std::max<uint64_t>(1, c.schedule.interval_steps / 100), .step_jitter = c.jitter,
          .seed = o.seed};
}

Result<Row> RunCase(const Case& c, const Opts& o) {
  const int rearrangements = o.Rearrangements();
  const int eval_steps = o.EvalSteps();
  LADLE_ASSIGN_OR_RETURN(SkewedLoadGenerator gen, SkewedLoadGenerator::Create(SkewFor(c, o)));
  const PlacementConfig cfg{.num_physical = PhysicalExpertCount(o.experts, c.redundant, c.ranks),
                            .num_groups = o.groups, .num_nodes = 1, .num_ranks = c.ranks};
  const uint64_t tokens = uint64_t{c.tokens_per_rank} * c.ranks;
  Scorer scorer(c, cfg, rearrangements);
  std::vector<uint64_t> counts(o.experts);
  // The window a re-arrangement at step t plans from: every step of (t - N, t] fed through
  // ExpertLoadWindow, as the engine would.
  auto window_at = [&](uint64_t t) -> Result<ExpertLoads> {
    LADLE_ASSIGN_OR_RETURN(ExpertLoadWindow window, ExpertLoadWindow::Create(o.layers, o.experts, c.schedule, c.bucket));
    for (uint64_t step = c.schedule.WindowFirst(t); step <= t; ++step) {
      for (uint32_t l = 0; l < o.layers; ++l) {
        gen.SampleLayer(step, l, tokens, counts);
        if (Status s = window.Add(step, l, counts); !s.ok()) return s;
      }
    }
    return window.Snapshot(t);
  };
  // The first re-arrangement (step M) only seeds the layer budget's previous window; scored
  // intervals follow re-arrangements at 2M, 3M, ...
  for (int i = 0; i <= rearrangements; ++i) {
    const uint64_t t = c.schedule.interval_steps * static_cast<uint64_t>(i + 1);
    LADLE_ASSIGN_OR_RETURN(ExpertLoads stats, window_at(t));
    LADLE_RETURN_IF_ERROR(scorer.Rearrange(std::move(stats)));
    if (i == 0) continue;
    for (uint64_t step : ScoredSteps(t, c.schedule.interval_steps, eval_steps)) {
      scorer.ScoreStep(gen.Sample(step, tokens), static_cast<double>(tokens));
    }
  }
  return scorer.Finish();
}

// The same measure on a recorded trace, in one pass over the file: every step goes into the
// window (steps the file lacks count as zero load, as in the engine), a re-arrangement at t
// plans from Snapshot(t) before any later step is read, and the same steps are scored (a
// scored step the file lacks is skipped and counted in Row::missing).
Result<Row> RunTraceCase(const Case& c, const Opts& o, const LoadTraceHeader& h) {
  std::ifstream f(o.loads);
  if (!f) return NotFound("cannot open " + o.loads);
  LADLE_ASSIGN_OR_RETURN(LoadTraceReader reader, LoadTraceReader::Open(&f));
  const uint32_t L = h.layers, E = h.experts;
  const int rearrangements = o.Rearrangements();
  const int eval_steps = o.EvalSteps();
  const uint64_t M = c.schedule.interval_steps;
  const uint64_t last_needed = M * static_cast<uint64_t>(rearrangements + 2) - 1;
  const PlacementConfig cfg{.num_physical = PhysicalExpertCount(E, c.redundant, c.ranks),
                            .num_groups = E % o.groups == 0 ? o.groups : 1, .num_nodes = 1, .num_ranks = c.ranks};
  LADLE_ASSIGN_OR_RETURN(ExpertLoadWindow window, ExpertLoadWindow::Create(L, E, c.schedule, c.bucket));
  Scorer scorer(c, cfg, rearrangements);
  uint64_t next_t = M;
  int done = 0;  // re-arrangements made, the seed included
  std::vector<uint64_t> scored;
  size_t next_scored = 0;
  auto rearrange_before = [&](uint64_t step) -> Status {
    while (done <= rearrangements && next_t < step) {
      LADLE_ASSIGN_OR_RETURN(ExpertLoads stats, window.Snapshot(next_t));
      LADLE_RETURN_IF_ERROR(scorer.Rearrange(std::move(stats)));
      if (done > 0) {
        // Scored steps of the previous interval that never came were missing from the file.
        scorer.row().missing += scored.size() - next_scored;
        scored = ScoredSteps(next_t, M, eval_steps);
        next_scored = 0;
      }
      ++done;
      next_t += M;
    }
    return Status::Ok();
  };
  LoadTraceStep st;
  ExpertLoads loads(L, E);
  uint64_t last_seen = 0;
  for (;;) {
    bool end = false;
    LADLE_RETURN_IF_ERROR(reader.Next(&st, &end).WithContext(o.loads));
    if (end) break;
    LADLE_RETURN_IF_ERROR(rearrange_before(st.step));
    if (st.step > last_needed) break;
    for (uint32_t l = 0; l < L; ++l) LADLE_RETURN_IF_ERROR(window.Add(st.step, l, st.Layer(l, E)));
    last_seen = st.step;
    while (next_scored < scored.size() && scored[next_scored] < st.step) {
      ++scorer.row().missing;
      ++next_scored;
    }
    if (next_scored < scored.size() && scored[next_scored] == st.step) {
      uint64_t routed = 0;
      for (uint32_t l = 0; l < L; ++l) {
        for (uint32_t e = 0; e < E; ++e) loads.At(l, e) = static_cast<double>(st.counts[size_t{l} * E + e]);
      }
      for (uint64_t v : st.Layer(0, E)) routed += v;
      scorer.ScoreStep(loads, static_cast<double>(routed) / std::max<uint32_t>(1, h.top_k));
      ++next_scored;
    }
  }
  if (last_seen < last_needed) {
    return InvalidArgument(fmt::format(
        "{}: {} ends at step {}, but window {} / interval {} with {} scored re-arrangements needs steps up to {} "
        "(a larger --schedule-divisor or fewer --rearrangements)",
        c.name, o.loads, last_seen, c.schedule.window_steps, M, rearrangements, last_needed));
  }
  scorer.row().missing += scored.size() - next_scored;
  return scorer.Finish();
}

// The trace's header and its last step (read from the file's last line).
struct TraceInfo {
  LoadTraceHeader header;
  uint64_t last_step = 0;
};

Result<TraceInfo> ProbeTrace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open " + path);
  TraceInfo info;
  {
    auto r = LoadTraceReader::Open(&f);
    if (!r.ok()) return r.status().WithContext(path);
    info.header = r->header();
    LoadTraceStep first;
    bool end = false;
    LADLE_RETURN_IF_ERROR(r->Next(&first, &end).WithContext(path));
    if (end) return ParseError(path + ": a header and no step lines");
  }
  // The last non-empty line: read backwards from the end in blocks.
  f.clear();
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  std::string tail;
  std::streamoff pos = size;
  const std::streamoff block = 1 << 20;
  for (;;) {
    const std::streamoff from = std::max<std::streamoff>(0, pos - block);
    std::string chunk(static_cast<size_t>(pos - from), '\0');
    f.seekg(from);
    f.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (!f) return IoError("cannot read " + path);
    tail = chunk + tail;
    pos = from;
    const size_t last = tail.find_last_not_of(" \t\r\n");
    if (last == std::string::npos) {
      if (pos == 0) return ParseError(path + ": no step lines");
      continue;
    }
    const size_t nl = tail.rfind('\n', last);
    if (nl == std::string::npos && pos > 0) continue;  // the line starts before this block
    const std::string line = tail.substr(nl == std::string::npos ? 0 : nl + 1, last + 1 - (nl == std::string::npos ? 0 : nl + 1));
    LoadTraceStep st;
    if (Status s = ParseLoadTraceStep(line, info.header, &st); !s.ok()) {
      return s.WithContext(path + ": the last line");
    }
    info.last_step = st.step;
    return info;
  }
}

// The smallest power of 10 dividing the case's window and interval so that the trace covers
// the seed re-arrangement and the scored intervals.
Result<uint64_t> FitDivisor(const Case& c, uint64_t last_step, int rearrangements) {
  for (uint64_t d = 1; d <= c.schedule.window_steps; d *= 10) {
    if (c.schedule.window_steps % d != 0 || c.schedule.interval_steps % d != 0) break;
    if ((c.schedule.interval_steps / d) * static_cast<uint64_t>(rearrangements + 2) - 1 <= last_step) return d;
  }
  return InvalidArgument(fmt::format("{}: the trace (last step {}) is too short for window {} / interval {} at any "
                                     "power-of-10 scale",
                                     c.name, last_step, c.schedule.window_steps, c.schedule.interval_steps));
}

// --write-loads: the generator's loads of `c`, steps 1 .. (R + 2) M - 1, as a trace.
Status WriteGeneratorTrace(const Case& c, const Opts& o) {
  LADLE_ASSIGN_OR_RETURN(SkewedLoadGenerator gen, SkewedLoadGenerator::Create(SkewFor(c, o)));
  std::ofstream f(o.write_loads, std::ios::binary);
  if (!f) return IoError("cannot create " + o.write_loads);
  const SkewConfig& k = gen.config();
  const uint64_t tokens = uint64_t{c.tokens_per_rank} * c.ranks;
  const uint64_t last = c.schedule.interval_steps * static_cast<uint64_t>(o.Rearrangements() + 2) - 1;
  LoadTraceHeader h{.layers = k.layers, .experts = k.experts, .top_k = k.top_k,
                    .source = fmt::format("eplb_bench --write-loads: SkewedLoadGenerator for {} {}: {} tokens/step, "
                                          "zipf_s {} (spread {}), half-life {} steps, epochs {}, jitter {}, seed {}",
                                          c.name, c.phase, tokens, k.zipf_s, k.zipf_s_spread, k.half_life_steps,
                                          k.drift_every_steps, k.step_jitter, k.seed)};
  LADLE_ASSIGN_OR_RETURN(LoadTraceWriter w, LoadTraceWriter::Create(&f, h));
  std::vector<uint64_t> counts(size_t{k.layers} * k.experts);
  for (uint64_t step = 1; step <= last; ++step) {
    for (uint32_t l = 0; l < k.layers; ++l) {
      gen.SampleLayer(step, l, tokens, std::span<uint64_t>(counts).subspan(size_t{l} * k.experts, k.experts));
    }
    LADLE_RETURN_IF_ERROR(w.Append(step, counts));
  }
  f.flush();
  if (!f) return IoError("cannot write " + o.write_loads);
  fmt::print("eplb_bench: wrote {} steps of {} {} ({} layers x {} experts, {} tokens/step) to {}\n", last, c.name,
             c.phase, k.layers, k.experts, tokens, o.write_loads);
  return Status::Ok();
}

int Main(int argc, char** argv) {
  Opts o;
  CLI::App app{"moe_lb: no EPLB vs EPLB vs EPLB + per-batch split vs the per-layer replica budget, on a skewed drifting load"};
  app.add_flag("--quick", o.quick, "one re-arrangement, 10 scored steps (CI)");
  app.add_option("--only", o.only, "comma-separated: ep2, ep4, ep64")->capture_default_str();
  app.add_option("--layers", o.layers, "MoE layers")->capture_default_str();
  app.add_option("--experts", o.experts, "routed experts per layer")->capture_default_str();
  app.add_option("--top-k", o.top_k, "experts per token")->capture_default_str();
  app.add_option("--groups", o.groups, "expert groups")->capture_default_str();
  app.add_option("--zipf-s", o.zipf_s, "Zipf exponent of expert popularity")->capture_default_str();
  app.add_option("--zipf-spread", o.zipf_spread, "per-layer spread of the exponent")->capture_default_str();
  app.add_option("--prefill-jitter", o.prefill_jitter, "per-step log-normal sigma, prefill")->capture_default_str();
  app.add_option("--decode-jitter", o.decode_jitter, "per-step log-normal sigma, decode")->capture_default_str();
  app.add_option("--half-life", o.half_life_intervals, "hot-set half-life in re-arrangement intervals")->capture_default_str();
  app.add_option("--prefill-tokens", o.prefill_tokens_per_rank, "tokens per rank per prefill step")->capture_default_str();
  app.add_option("--decode-tokens", o.decode_tokens_per_rank, "tokens per rank per decode step")->capture_default_str();
  app.add_option("--rearrangements", o.rearrangements, "intervals scored (0: 1 quick, 3 full)");
  app.add_option("--eval-steps", o.eval_steps, "scored steps per interval (0: 10 quick, 50 full)");
  app.add_option("--seed", o.seed, "load seed")->capture_default_str();
  app.add_option("--loads", o.loads, "replay this load trace (docs/eplb.md, \"Load traces\") instead of the generator");
  app.add_option("--write-loads", o.write_loads, "write the generator's loads of the one case --only names as a "
                                                 "trace and exit");
  app.add_option("--schedule-divisor", o.schedule_divisor,
                 "divide every window and interval by this (0: 1; with --loads the smallest power of 10 the trace fits)");
  CLI11_PARSE(app, argc, argv);
  if (!o.loads.empty() && !o.write_loads.empty()) {
    fmt::print(stderr, "eplb_bench: --loads and --write-loads exclude each other\n");
    return 2;
  }

  std::optional<TraceInfo> trace;
  if (!o.loads.empty()) {
    auto t = ProbeTrace(o.loads);
    if (!t.ok()) {
      fmt::print(stderr, "eplb_bench: {}\n", t.status().ToString());
      return 1;
    }
    trace = std::move(t).value();
  }
  const std::vector<Case> all{
      {"EP2", "prefill", 2, 4, o.prefill_tokens_per_rank, RearrangeSchedule::Prefill(), 1, o.prefill_jitter, 1.0320},
      {"EP4", "prefill", 4, 4, o.prefill_tokens_per_rank, RearrangeSchedule::Prefill(), 1, o.prefill_jitter, 1.0618},
      {"EP64", "decode", 64, 1, o.decode_tokens_per_rank, RearrangeSchedule::Decode(), 10, o.decode_jitter, 1.090},
  };
  std::vector<Case> cases;
  for (const Case& c : all) {
    std::string key = c.name;
    for (auto& ch : key) ch = static_cast<char>(std::tolower(ch));
    if (("," + o.only + ",").find("," + key + ",") == std::string::npos) continue;
    uint64_t d = o.schedule_divisor > 0 ? o.schedule_divisor : 1;
    if (trace && o.schedule_divisor == 0) {
      auto fit = FitDivisor(c, trace->last_step, o.Rearrangements());
      if (!fit.ok()) {
        fmt::print(stderr, "eplb_bench: {}\n", fit.status().ToString());
        return 1;
      }
      d = *fit;
    }
    auto scaled = Scaled(c, d);
    if (!scaled.ok()) {
      fmt::print(stderr, "eplb_bench: {}\n", scaled.status().ToString());
      return 1;
    }
    cases.push_back(*scaled);
  }
  if (!o.write_loads.empty()) {
    if (cases.size() != 1) {
      fmt::print(stderr, "eplb_bench: --write-loads writes one case: name it with --only\n");
      return 2;
    }
    if (Status s = WriteGeneratorTrace(cases[0], o); !s.ok()) {
      fmt::print(stderr, "eplb_bench: {}\n", s.ToString());
      return 1;
    }
    return 0;
  }

  if (trace) {
    const LoadTraceHeader& h = trace->header;
    fmt::print("eplb_bench: loads from {}: {} layers x {} experts, top-{}, steps up to {}\n", o.loads, h.layers,
               h.experts, h.top_k, trace->last_step);
    if (!h.source.empty()) fmt::print("source: {}\n", h.source);
  } else {
    fmt::print("eplb_bench: {} layers x {} experts, top-{}, Zipf s={} (spread {}), hot-set half-life {} intervals, seed {}\n",
               o.layers, o.experts, o.top_k, o.zipf_s, o.zipf_spread, o.half_life_intervals, o.seed);
  }
  fmt::print("moe_lb on the next interval's steps: mean over layers (worst layer)\n\n");
  fmt::print("{:<5} {:<7} {:>5} {:>12} {:>7} {:>17} {:>17} {:>17} {:>17} {:>8} {:>10} {:>11} {:>8}\n", "conf", "phase",
             "slots", "window/every", "tokens", "no EPLB", "EPLB", "EPLB+split", "layer-budget", "target", "EPLB@win",
             "plan ms", "split ms");
  const auto start = std::chrono::steady_clock::now();
  uint64_t missing = 0;
  for (const Case& c : cases) {
    auto row = trace ? RunTraceCase(c, o, trace->header) : RunCase(c, o);
    if (!row.ok()) {
      fmt::print(stderr, "eplb_bench: {}: {}\n", c.name, row.status().ToString());
      return 1;
    }
    missing += row->missing;
    auto cell = [](const Score& s) { return fmt::format("{:.4f} ({:.4f})", s.mean, s.max); };
    fmt::print("{:<5} {:<7} {:>5} {:>12} {:>7.0f} {:>17} {:>17} {:>17} {:>17} {:>8.4f} {:>10.4f} {:>5.1f}/{:<5.1f} {:>8.2f}\n",
               c.name, c.phase, row->slots_per_rank,
               fmt::format("{}/{}", c.schedule.window_steps, c.schedule.interval_steps), row->tokens,
               cell(row->none), cell(row->eplb), cell(row->split), cell(row->budget), c.target,
               row->eplb_in_window.mean, row->plan_ms_eplb, row->plan_ms_budget, row->split_ms);
  }
  fmt::print("\nslots: expert slots per rank (padded); tokens: per step, all ranks{}; target: the recipe's "
             "measured moe_lb;\nEPLB+split: EPLB's placement, each step's tokens split across replicas by the min-max "
             "flow (LPLB-style);\nEPLB@win: EPLB scored on the window it was planned from; plan ms: EPLB / "
             "layer-budget planning time;\nsplit ms: the split of one step, all layers.\n",
             trace ? " (mean over scored steps: a layer's count sum / top_k)" : "");
  if (missing > 0) fmt::print("{} scored steps were missing from the trace and skipped\n", missing);
  fmt::print("total {:.1f} s\n", Ms(std::chrono::steady_clock::now() - start) / 1000);
  return 0;
}

}  // namespace
}  // namespace ladle::eplb

int main(int argc, char** argv) { return ladle::eplb::Main(argc, argv); }
