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
// See docs/eplb.md for the load model and the figures.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

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
  uint32_t slots_per_rank;
  Score none, eplb, split, budget, eplb_in_window;
  double plan_ms_eplb = 0, plan_ms_budget = 0, split_ms = 0;  // split: per scored step, all layers
};

Result<Row> RunCase(const Case& c, const Opts& o) {
  const int rearrangements = o.rearrangements > 0 ? o.rearrangements : (o.quick ? 1 : 3);
  const int eval_steps = o.eval_steps > 0 ? o.eval_steps : (o.quick ? 10 : 50);
  SkewConfig skew{.layers = o.layers, .experts = o.experts, .top_k = o.top_k, .zipf_s = o.zipf_s,
                  .zipf_s_spread = o.zipf_spread,
                  .half_life_steps = static_cast<uint64_t>(o.half_life_intervals * c.schedule.interval_steps),
                  .drift_every_steps = c.schedule.interval_steps / 100, .step_jitter = c.jitter, .seed = o.seed};
  LADLE_ASSIGN_OR_RETURN(SkewedLoadGenerator gen, SkewedLoadGenerator::Create(skew));
  const PlacementConfig cfg{.num_physical = PhysicalExpertCount(o.experts, c.redundant, c.ranks),
                            .num_groups = o.groups, .num_nodes = 1, .num_ranks = c.ranks};
  const uint64_t tokens = uint64_t{c.tokens_per_rank} * c.ranks;
  Row row{.c = c, .slots_per_rank = cfg.num_physical / c.ranks, .none = {}, .eplb = {}, .split = {}, .budget = {},
          .eplb_in_window = {}};
  Score none, eplb, split, budget, in_window;
  int scored = 0;
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
  LADLE_ASSIGN_OR_RETURN(ExpertLoads previous, window_at(c.schedule.interval_steps));
  for (int i = 1; i <= rearrangements; ++i) {
    const uint64_t t = c.schedule.interval_steps * static_cast<uint64_t>(i + 1);
    LADLE_ASSIGN_OR_RETURN(ExpertLoads stats, window_at(t));
    const auto p0 = std::chrono::steady_clock::now();
    LADLE_ASSIGN_OR_RETURN(Placement plain, RebalanceExperts(stats, cfg));
    const auto p1 = std::chrono::steady_clock::now();
    LADLE_ASSIGN_OR_RETURN(Placement layered, RebalanceWithLayerBudget(stats, cfg, {}, &previous));
    const auto p2 = std::chrono::steady_clock::now();
    row.plan_ms_eplb += Ms(p1 - p0) / rearrangements;
    row.plan_ms_budget += Ms(p2 - p1) / rearrangements;
    in_window.Add(MeasureMoeLb(plain, stats));
    // Scored steps spread evenly over the next interval, the last one just before t + M.
    for (int k = 1; k <= eval_steps; ++k) {
      const uint64_t step = t + c.schedule.interval_steps * k / eval_steps - (k == eval_steps ? 1 : 0);
      const ExpertLoads loads = gen.Sample(step, tokens);
      none.Add(MeasureMoeLbWithoutEplb(loads, c.ranks));
      eplb.Add(MeasureMoeLb(plain, loads));
      const auto s0 = std::chrono::steady_clock::now();
      split.Add(MeasureWithSplit(plain, loads));
      row.split_ms += Ms(std::chrono::steady_clock::now() - s0);
      budget.Add(MeasureMoeLb(layered, loads));
      ++scored;
    }
    previous = std::move(stats);
  }
  row.none = none.Over(scored);
  row.eplb = eplb.Over(scored);
  row.split = split.Over(scored);
  row.split_ms /= scored;
  row.budget = budget.Over(scored);
  row.eplb_in_window = in_window.Over(rearrangements);
  return row;
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
  CLI11_PARSE(app, argc, argv);

  const std::vector<Case> cases{
      {"EP2", "prefill", 2, 4, o.prefill_tokens_per_rank, RearrangeSchedule::Prefill(), 1, o.prefill_jitter, 1.0320},
      {"EP4", "prefill", 4, 4, o.prefill_tokens_per_rank, RearrangeSchedule::Prefill(), 1, o.prefill_jitter, 1.0618},
      {"EP64", "decode", 64, 1, o.decode_tokens_per_rank, RearrangeSchedule::Decode(), 10, o.decode_jitter, 1.090},
  };
  fmt::print("eplb_bench: {} layers x {} experts, top-{}, Zipf s={} (spread {}), hot-set half-life {} intervals, seed {}\n",
             o.layers, o.experts, o.top_k, o.zipf_s, o.zipf_spread, o.half_life_intervals, o.seed);
  fmt::print("moe_lb on the next interval's steps: mean over layers (worst layer)\n\n");
  fmt::print("{:<5} {:<7} {:>5} {:>12} {:>7} {:>17} {:>17} {:>17} {:>17} {:>8} {:>10} {:>11} {:>8}\n", "conf", "phase",
             "slots", "window/every", "tokens", "no EPLB", "EPLB", "EPLB+split", "layer-budget", "target", "EPLB@win",
             "plan ms", "split ms");
  const auto start = std::chrono::steady_clock::now();
  for (const Case& c : cases) {
    std::string key = c.name;
    for (auto& ch : key) ch = static_cast<char>(std::tolower(ch));
    if (("," + o.only + ",").find("," + key + ",") == std::string::npos) continue;
    auto row = RunCase(c, o);
    if (!row.ok()) {
      fmt::print(stderr, "eplb_bench: {}: {}\n", c.name, row.status().ToString());
      return 1;
    }
    auto cell = [](const Score& s) { return fmt::format("{:.4f} ({:.4f})", s.mean, s.max); };
    fmt::print("{:<5} {:<7} {:>5} {:>12} {:>7} {:>17} {:>17} {:>17} {:>17} {:>8.4f} {:>10.4f} {:>5.1f}/{:<5.1f} {:>8.2f}\n",
               c.name, c.phase, row->slots_per_rank,
               fmt::format("{}/{}", c.schedule.window_steps, c.schedule.interval_steps),
               uint64_t{c.tokens_per_rank} * c.ranks, cell(row->none), cell(row->eplb), cell(row->split),
               cell(row->budget), c.target, row->eplb_in_window.mean, row->plan_ms_eplb, row->plan_ms_budget,
               row->split_ms);
  }
  fmt::print("\nslots: expert slots per rank (padded); tokens: per step, all ranks; target: the recipe's "
             "measured moe_lb;\nEPLB+split: EPLB's placement, each step's tokens split across replicas by the min-max "
             "flow (LPLB-style);\nEPLB@win: EPLB scored on the window it was planned from; plan ms: EPLB / "
             "layer-budget planning time;\nsplit ms: the split of one step, all layers.\ntotal {:.1f} s\n",
             Ms(std::chrono::steady_clock::now() - start) / 1000);
  return 0;
}

}  // namespace
}  // namespace ladle::eplb

int main(int argc, char** argv) { return ladle::eplb::Main(argc, argv); }
