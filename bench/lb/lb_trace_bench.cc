// lb_trace_bench: each balancer against its naive alternatives on the Mooncake conversation
// trace, in one process, through the fleet simulation of fleet_sim.h. Five runs on the same
// trace and fleet: the prefill balancer, round-robin and least-requests (decode on its
// balancer), then the decode balancer's alternatives (prefill on its balancer). Prints the
// table and the LB/naive ratios, and with --svg writes them as a chart.
//
//   lb_trace_bench [--trace PATH] [--time-scale 0.8] [--svg out.svg] [--check]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fleet_sim.h"

namespace {

using ladle::lb::sim::SimResult;

struct Metric {
  const char* title;
  double SimResult::*field;
  bool prefill;  // compares the prefill runs (else the decode runs)
};

const Metric kMetrics[] = {
    {"prefill quota max/mean (per round)", &SimResult::quota_max_mean, true},
    {"prefill DP step max/mean", &SimResult::dp_step_max_mean, true},
    {"TTFT p50 (s)", &SimResult::ttft_p50, true},
    {"TTFT p99 (s)", &SimResult::ttft_p99, true},
    {"decode KV max/mean (sampled 1 s)", &SimResult::kv_max_mean, false},
    {"decode DP step max/mean", &SimResult::decode_step_max_mean, false},
    {"TPOT p50 (ms)", &SimResult::tpot_p50, false},
    {"TPOT p99 (ms)", &SimResult::tpot_p99, false},
};

double Shown(const Metric& m, const SimResult& r) {
  const double v = r.*m.field;
  return m.field == &SimResult::tpot_p50 || m.field == &SimResult::tpot_p99 ? v * 1e3 : v;
}

// Grouped bars, one panel per metric: the balancer and its two naive alternatives.
std::string Svg(const std::vector<SimResult>& runs, const std::string& subtitle) {
  const int panel_w = 300, panel_h = 220, cols = 4, top = 90;
  const int width = panel_w * cols, height = top + 2 * panel_h + 20;
  const char* colors[] = {"#1f77b4", "#d62728", "#ff7f0e"};
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"22\" font-size=\"16\">lb_trace_bench: balancer (blue) vs round-robin (red) vs "
      "least-requests (orange), lower is better</text>\n",
      width, height);
  // The set-up, one clause a line, so it fits the width.
  int y = 40;
  for (size_t from = 0; from < subtitle.size(); y += 14) {
    size_t to = subtitle.find("; ", from);
    if (to == std::string::npos) to = subtitle.size();
    s += fmt::format("<text x=\"10\" y=\"{}\" fill=\"#555\" font-size=\"11\">{}</text>\n", y,
                     subtitle.substr(from, to - from));
    from = to == subtitle.size() ? to : to + 2;
  }
  for (size_t k = 0; k < std::size(kMetrics); ++k) {
    const Metric& m = kMetrics[k];
    const int x0 = static_cast<int>(k % cols) * panel_w, y0 = top + static_cast<int>(k / cols) * panel_h;
    // Runs 0, 1, 2: prefill lb / rr / lr; runs 0, 3, 4: decode lb / rr / lr.
    const SimResult* rs[3] = {&runs[0], &runs[m.prefill ? 1 : 3], &runs[m.prefill ? 2 : 4]};
    double mx = 0;
    for (const SimResult* r : rs) mx = std::max(mx, Shown(m, *r));
    if (mx <= 0) mx = 1;
    const int base = y0 + panel_h - 40, bar_h = panel_h - 90, bw = 60;
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n", x0 + 15, y0 + 20, m.title);
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n", x0 + 20, base,
                     x0 + panel_w - 20, base);
    const char* labels[] = {"lb", "round-robin", "least-req"};
    for (int j = 0; j < 3; ++j) {
      const double v = Shown(m, *rs[j]);
      const int h = static_cast<int>(bar_h * v / mx), x = x0 + 35 + j * (bw + 25);
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", x, base - h, bw, h,
                       colors[j]);
      s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{:.3g}</text>\n", x + bw / 2, base - h - 4, v);
      s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x + bw / 2, base + 16, labels[j]);
    }
  }
  return s + "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  namespace sim = ladle::lb::sim;
  CLI::App app{"Prefill and decode balancers vs round-robin and least-requests on the Mooncake trace"};
  std::string trace_path, cost_path, svg_path, steal = "idle";
  size_t max_requests = 0;
  bool check = false;
  sim::SimConfig cfg;
  double budget_ms = cfg.step_budget_ns / 1e6;
  app.add_option("--trace", trace_path, "Mooncake JSONL (default $LADLE_SHARED_DIR/traces/mooncake_fast25/...)");
  app.add_option("--max-requests", max_requests, "use the first N requests (0: all)");
  app.add_option("--time-scale", cfg.time_scale, "arrival = trace timestamp x this")->capture_default_str();
  app.add_option("--prefill-engines", cfg.prefill_engines)->capture_default_str();
  app.add_option("--prefill-dp", cfg.prefill_dp)->capture_default_str();
  app.add_option("--decode-engines", cfg.decode_engines)->capture_default_str();
  app.add_option("--decode-dp", cfg.decode_dp)->capture_default_str();
  app.add_option("--round-s", cfg.round_s, "bucket re-split round (simulated s)")->capture_default_str();
  app.add_option("--step-budget-ms", budget_ms, "prefill per-rank step budget")->capture_default_str();
  app.add_option("--pull-ahead", cfg.pull_ahead, "quota an engine keeps counted, in steps")->capture_default_str();
  app.add_option("--steal", steal, "none | orphans | idle | any")->capture_default_str();
  app.add_option("--high-factor", cfg.decode_lb.high_factor)->capture_default_str();
  double dbase_ms = cfg.decode_cost.base_ns / 1e6, dreq_ms = cfg.decode_cost.per_request_ns / 1e6;
  app.add_option("--decode-base-ms", dbase_ms, "decode rank step: fixed part")->capture_default_str();
  app.add_option("--decode-request-ms", dreq_ms, "decode rank step: per running request")->capture_default_str();
  app.add_option("--decode-kv-ns", cfg.decode_cost.per_kv_token_ns, "decode rank step: per KV token")
      ->capture_default_str();
  bool arrivals_only = false;
  app.add_flag("--arrivals-only", arrivals_only, "re-split buckets by arrivals alone (not the backlog)");
  app.add_option("--cost-model", cost_path, "a ladle-cost-model file (ladle serve's fitted prefill cost)");
  app.add_option("--svg", svg_path, "write the chart here");
  app.add_flag("--check", check, "exit 1 unless each balancer beats round-robin on max/mean");
  CLI11_PARSE(app, argc, argv);
  cfg.step_budget_ns = budget_ms * 1e6;
  cfg.decode_cost.base_ns = dbase_ms * 1e6;
  cfg.decode_cost.per_request_ns = dreq_ms * 1e6;
  cfg.backlog_in_demand = !arrivals_only;
  if (steal == "none") cfg.steal = ladle::lb::Steal::kNone;
  else if (steal == "orphans") cfg.steal = ladle::lb::Steal::kOrphans;
  else if (steal == "idle") cfg.steal = ladle::lb::Steal::kIdleRanks;
  else if (steal == "any") cfg.steal = ladle::lb::Steal::kAny;
  else return fmt::print(stderr, "--steal: none, orphans, idle or any\n"), 2;

  if (trace_path.empty()) {
    const char* env = std::getenv("LADLE_SHARED_DIR");
    trace_path = std::string(env && *env ? env : LADLE_BENCH_SHARED_DIR) +
                 "/traces/mooncake_fast25/conversation_trace.jsonl";
  }
  auto trace = sim::LoadMooncakeTrace(trace_path, max_requests);
  if (!trace.ok()) {
    fmt::print(stderr, "{}\n", trace.status().ToString());
    // The CI smoke run skips (ctest SKIP_RETURN_CODE) where the shared trace is not mounted.
    return check && trace.status().code() == ladle::StatusCode::kIoError ? 77 : 1;
  }
  if (!cost_path.empty()) {
    auto c = sim::LoadQuotaCost(cost_path);
    if (!c.ok()) return fmt::print(stderr, "{}\n", c.status().ToString()), 1;
    cfg.cost = *c;
  }

  const std::pair<const char*, const char*> plan[] = {{"lb", "lb"},
                                                      {"round-robin", "lb"},
                                                      {"least-requests", "lb"},
                                                      {"lb", "round-robin"},
                                                      {"lb", "least-requests"}};
  std::vector<SimResult> runs;
  for (const auto& [p, d] : plan) {
    sim::SimConfig c = cfg;
    c.prefill_policy = p;
    c.decode_policy = d;
    auto r = sim::Simulate(*trace, c);
    if (!r.ok()) return fmt::print(stderr, "{}\n", r.status().ToString()), 1;
    runs.push_back(*r);
  }

  const SimResult& base = runs[0];
  const std::string setup = fmt::format(
      "{} requests, time x{}, prefill {}x{} ranks, decode {}x{} ranks, cost a={:g} b={:g} d={:g} e={:g} f={:g} ns, "
      "budget {:g} ms, round {:g} s, steal {}; decode step {:g} ms + {:g} ms/req + {:g} ns/KV token; cache hit {:.1f}%, prefill util {:.0f}%, makespan {:.0f} s",
      base.requests, cfg.time_scale, cfg.prefill_engines, cfg.prefill_dp, cfg.decode_engines, cfg.decode_dp, cfg.cost.a,
      cfg.cost.b, cfg.cost.d, cfg.cost.e, cfg.cost.f, budget_ms, cfg.round_s, steal, dbase_ms, dreq_ms,
      cfg.decode_cost.per_kv_token_ns, 100 * base.cache_hit,
      100 * base.prefill_util, base.makespan_s);
  fmt::print("{}\n\n", setup);
  fmt::print("{:<15} {:<15} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9}\n", "prefill", "decode",
             "quota m/m", "DPstep m/m", "KV m/m", "Dstep m/m", "TTFT50", "TTFT99", "TPOT50", "TPOT99", "out tok/s");
  for (const SimResult& r : runs) {
    fmt::print("{:<15} {:<15} {:>9.3f} {:>10.3f} {:>9.3f} {:>9.3f} {:>7.2f}s {:>7.2f}s {:>6.1f}ms {:>6.1f}ms {:>9.0f}\n",
               r.prefill_policy, r.decode_policy, r.quota_max_mean, r.dp_step_max_mean, r.kv_max_mean,
               r.decode_step_max_mean, r.ttft_p50, r.ttft_p99, r.tpot_p50 * 1e3, r.tpot_p99 * 1e3, r.output_tok_s);
  }
  fmt::print("\nratios LB / naive (below 1: the balancer is better)\n");
  for (const Metric& m : kMetrics) {
    const SimResult &rr = runs[m.prefill ? 1 : 3], &lr = runs[m.prefill ? 2 : 4];
    const double b = Shown(m, base);
    fmt::print("  {:<36} vs round-robin {:>6.3f}   vs least-requests {:>6.3f}\n", m.title, b / Shown(m, rr),
               b / Shown(m, lr));
  }
  fmt::print("  {:<36} vs round-robin {:>6.3f}   vs least-requests {:>6.3f}  (prefill runs)\n", "throughput (out tok/s)",
             base.output_tok_s / runs[1].output_tok_s, base.output_tok_s / runs[2].output_tok_s);
  fmt::print("  {:<36} vs round-robin {:>6.3f}   vs least-requests {:>6.3f}  (decode runs)\n", "throughput (out tok/s)",
             base.output_tok_s / runs[3].output_tok_s, base.output_tok_s / runs[4].output_tok_s);

  if (!svg_path.empty()) {
    std::ofstream f(svg_path, std::ios::trunc);
    f << Svg(runs, setup);
    if (!f.good()) return fmt::print(stderr, "cannot write {}\n", svg_path), 1;
    fmt::print("\nwrote {}\n", svg_path);
  }
  if (check) {
    const bool ok = base.quota_max_mean < runs[1].quota_max_mean && base.kv_max_mean < runs[3].kv_max_mean;
    fmt::print("check: prefill quota max/mean {:.3f} < {:.3f}, decode KV max/mean {:.3f} < {:.3f}: {}\n",
               base.quota_max_mean, runs[1].quota_max_mean, base.kv_max_mean, runs[3].kv_max_mean, ok ? "ok" : "FAIL");
    if (!ok) return 1;
  }
  return 0;
}
