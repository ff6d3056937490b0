// The MaskBench results of maskbench_bench.cc: per-subset counters and timing samples, the
// text table (with llguidance's published figures and our ratios to them), JSON and an SVG
// plot. Header-only because bench/grammar builds one binary per *_bench.cc.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "ladle/json/json.h"

namespace ladle::bench {

struct SubsetStats {
  std::string name;
  size_t schemas = 0, unreadable = 0, compiled = 0, compile_errors = 0, approximated = 0, passing = 0;
  size_t valid = 0, valid_accepted = 0, invalid = 0, invalid_rejected = 0;
  size_t valid_not_compiled = 0, invalid_not_compiled = 0, instances_timed_out = 0;
  size_t mask_accept_disagreements = 0;
  size_t tokens = 0;  // mask computations (one per instance token plus the final EOS check)
  // Wall-clock and this thread's CPU time (CLOCK_THREAD_CPUTIME_ID) of the same calls: on a
  // shared machine the CPU time is what an idle core would have shown.
  std::vector<double> compile_us, compile_cpu_us;
  std::vector<uint32_t> mask_ns, mask_cpu_ns;

  void Merge(const SubsetStats& o) {
    schemas += o.schemas, unreadable += o.unreadable, compiled += o.compiled;
    compile_errors += o.compile_errors, approximated += o.approximated, passing += o.passing;
    valid += o.valid, valid_accepted += o.valid_accepted, invalid += o.invalid;
    invalid_rejected += o.invalid_rejected, valid_not_compiled += o.valid_not_compiled;
    invalid_not_compiled += o.invalid_not_compiled, instances_timed_out += o.instances_timed_out;
    mask_accept_disagreements += o.mask_accept_disagreements, tokens += o.tokens;
    compile_us.insert(compile_us.end(), o.compile_us.begin(), o.compile_us.end());
    compile_cpu_us.insert(compile_cpu_us.end(), o.compile_cpu_us.begin(), o.compile_cpu_us.end());
    mask_ns.insert(mask_ns.end(), o.mask_ns.begin(), o.mask_ns.end());
    mask_cpu_ns.insert(mask_cpu_ns.end(), o.mask_cpu_ns.begin(), o.mask_cpu_ns.end());
  }
};

// Nearest-rank percentile of a sorted sample; NaN when empty.
template <typename T>
double Percentile(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return std::nan("");
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]);
}

struct Timing {  // percentiles of one clock
  double compile_p50_ms = 0, compile_p99_ms = 0, compile_max_ms = 0, compile_mean_ms = 0;
  double mask_p50_us = 0, mask_p99_us = 0, mask_p999_us = 0, mask_max_us = 0, mask_mean_us = 0;
};

struct Summary {  // the figures of one row
  double compiled_share = 0, valid_share = 0, invalid_share = 0, passing_share = 0;
  Timing wall, cpu;
};

inline double Share(size_t a, size_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : std::nan(""); }

inline Timing TimingOf(std::vector<double>& compile_us, std::vector<uint32_t>& mask_ns) {
  std::sort(compile_us.begin(), compile_us.end());
  std::sort(mask_ns.begin(), mask_ns.end());
  Timing r;
  r.compile_p50_ms = Percentile(compile_us, 50) / 1e3;
  r.compile_p99_ms = Percentile(compile_us, 99) / 1e3;
  r.compile_max_ms = compile_us.empty() ? std::nan("") : compile_us.back() / 1e3;
  double sum = 0;
  for (double v : compile_us) sum += v;
  r.compile_mean_ms = compile_us.empty() ? std::nan("") : sum / static_cast<double>(compile_us.size()) / 1e3;
  r.mask_p50_us = Percentile(mask_ns, 50) / 1e3;
  r.mask_p99_us = Percentile(mask_ns, 99) / 1e3;
  r.mask_p999_us = Percentile(mask_ns, 99.9) / 1e3;
  r.mask_max_us = mask_ns.empty() ? std::nan("") : mask_ns.back() / 1e3;
  double msum = 0;
  for (uint32_t v : mask_ns) msum += v;
  r.mask_mean_us = mask_ns.empty() ? std::nan("") : msum / static_cast<double>(mask_ns.size()) / 1e3;
  return r;
}

inline Summary Summarise(SubsetStats& s) {
  Summary r;
  r.compiled_share = Share(s.compiled, s.schemas);
  r.valid_share = Share(s.valid_accepted, s.valid);
  r.invalid_share = Share(s.invalid_rejected, s.invalid);
  r.passing_share = Share(s.passing, s.schemas);
  r.wall = TimingOf(s.compile_us, s.mask_ns);
  r.cpu = TimingOf(s.compile_cpu_us, s.mask_cpu_ns);
  return r;
}

// llguidance's published single-core MaskBench figures (issue 4).
struct Reference {
  double mask_p50_us = 46, mask_p99_us = 533, mask_p999_us = 1700, compile_mean_ms = 1.85;
  size_t passing = 8909, schemas = 11306;
};

struct MaskBenchReport {
  std::vector<SubsetStats> subsets;
  std::vector<std::pair<std::string, size_t>> error_hist;
  std::vector<std::string> failures;
  double wall_s = 0;
  bool cpu_pinned = true, eager = false;
  bool cpu_clock = false;  // the table's times: thread CPU time (else wall clock)
  SubsetStats total;
  std::vector<Summary> rows;
  Summary total_row;
  Reference ref;

  void Finish() {
    total = SubsetStats{};
    total.name = "TOTAL";
    for (const auto& s : subsets) total.Merge(s);
    rows.clear();
    for (auto& s : subsets) rows.push_back(Summarise(s));
    total_row = Summarise(total);
    std::sort(error_hist.begin(), error_hist.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  }

  static std::string Pct(double v) { return std::isnan(v) ? "–" : fmt::format("{:.1f}%", 100 * v); }
  static std::string Num(double v, int prec) { return std::isnan(v) ? "–" : fmt::format("{:.{}f}", v, prec); }

  const Timing& Primary(const Summary& r) const { return cpu_clock ? r.cpu : r.wall; }

  std::string Table() const {
    std::string out;
    out += fmt::format("times: {} (wall and thread-CPU totals both below)\n",
                       cpu_clock ? "this thread's CPU time" : "wall clock");
    out += fmt::format("{:<24} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}\n", "subset",
                       "schemas", "compiled", "passing", "valid ok", "inval ok", "cmp p50", "cmp p99", "cmp max",
                       "mask p50", "mask p99", "p99.9", "tokens");
    out += fmt::format("{:<24} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}\n", "", "",
                       "", "", "", "", "ms", "ms", "ms", "µs", "µs", "µs", "");
    auto row = [&](const SubsetStats& s, const Summary& sum) {
      const Timing& r = Primary(sum);
      out += fmt::format("{:<24} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}\n", s.name,
                         s.schemas, Pct(sum.compiled_share), Pct(sum.passing_share), Pct(sum.valid_share),
                         Pct(sum.invalid_share), Num(r.compile_p50_ms, 2), Num(r.compile_p99_ms, 1),
                         Num(r.compile_max_ms, 0), Num(r.mask_p50_us, 1), Num(r.mask_p99_us, 0),
                         Num(r.mask_p999_us, 0), s.tokens);
    };
    for (size_t i = 0; i < subsets.size(); ++i) row(subsets[i], rows[i]);
    row(total, total_row);
    const auto& t = total;
    const Timing& r = Primary(total_row);
    out += fmt::format(
        "\ncounts: {} schemas, {} compiled, {} compile errors, {} with reported approximations, {} passing; "
        "valid {}/{} accepted, invalid {}/{} rejected (among compiled); not compiled: {} valid + {} invalid "
        "instances; {} instances skipped by the per-schema time limit; {} mask/AcceptToken disagreements; "
        "mask mean {} µs, max {} µs; compile mean {} ms; wall {:.0f} s{}{}\n",
        t.schemas, t.compiled, t.compile_errors, t.approximated, t.passing, t.valid_accepted, t.valid,
        t.invalid_rejected, t.invalid, t.valid_not_compiled, t.invalid_not_compiled, t.instances_timed_out,
        t.mask_accept_disagreements, Num(r.mask_mean_us, 1), Num(r.mask_max_us, 0), Num(r.compile_mean_ms, 2),
        wall_s, cpu_pinned ? ", one pinned core" : ", not pinned", eager ? ", eager mask cache" : "");
    // Ratio = llguidance / ours for times (above 1: we are faster), ours / theirs for shares.
    auto ratio = [](double theirs, double ours) {
      return std::isnan(ours) || ours <= 0 ? std::string("–") : fmt::format("{:.2f}x", theirs / ours);
    };
    const double ref_share = static_cast<double>(ref.passing) / static_cast<double>(ref.schemas);
    const Timing& w = total_row.wall;
    const Timing& c = total_row.cpu;
    out += "\nvs llguidance (published, single core; their set is 11,306 schemas incl. the held-out subsets):\n";
    out += fmt::format("{:<20} {:>11} {:>12} {:>9} {:>12} {:>9}\n", "metric", "llguidance", "ladle wall", "ratio",
                       "ladle cpu", "ratio");
    auto line = [&](const char* name, double theirs, double ours_w, double ours_c, int prec) {
      out += fmt::format("{:<20} {:>11} {:>12} {:>9} {:>12} {:>9}\n", name, Num(theirs, prec), Num(ours_w, prec + 1),
                         ratio(theirs, ours_w), Num(ours_c, prec + 1), ratio(theirs, ours_c));
    };
    line("mask p50 (µs)", ref.mask_p50_us, w.mask_p50_us, c.mask_p50_us, 0);
    line("mask p99 (µs)", ref.mask_p99_us, w.mask_p99_us, c.mask_p99_us, 0);
    line("mask p99.9 (µs)", ref.mask_p999_us, w.mask_p999_us, c.mask_p999_us, 0);
    line("compile mean (ms)", ref.compile_mean_ms, w.compile_mean_ms, c.compile_mean_ms, 2);
    out += fmt::format("{:<20} {:>11} {:>12} {:>9}\n", "schemas passing", fmt::format("{:.1f}%", 100 * ref_share),
                       Pct(total_row.passing_share),
                       std::isnan(total_row.passing_share) ? "–"
                                                           : fmt::format("{:.2f}x", total_row.passing_share / ref_share));
    out += "(ratio = llguidance / ladle for times, ladle / llguidance for the passing share: above 1 is ladle "
           "better)\n";
    if (!error_hist.empty()) {
      out += "\ncompile errors by kind (top 15):\n";
      for (size_t i = 0; i < error_hist.size() && i < 15; ++i)
        out += fmt::format("{:>7}  {}\n", error_hist[i].second, error_hist[i].first);
    }
    return out;
  }

  static json::Value Figures(const SubsetStats& s, const Summary& r) {
    auto num = [](double v) { return std::isnan(v) ? json::Value() : json::Value::Double(v); };
    auto cnt = [](size_t v) { return json::Value::Int(static_cast<int64_t>(v)); };
    json::Value o = json::Value::MakeObject();
    o.Set("subset", json::Value::String(s.name));
    o.Set("schemas", cnt(s.schemas));
    o.Set("compiled", cnt(s.compiled));
    o.Set("compile_errors", cnt(s.compile_errors));
    o.Set("approximated", cnt(s.approximated));
    o.Set("passing", cnt(s.passing));
    o.Set("valid", cnt(s.valid));
    o.Set("valid_accepted", cnt(s.valid_accepted));
    o.Set("invalid", cnt(s.invalid));
    o.Set("invalid_rejected", cnt(s.invalid_rejected));
    o.Set("valid_not_compiled", cnt(s.valid_not_compiled));
    o.Set("invalid_not_compiled", cnt(s.invalid_not_compiled));
    o.Set("instances_timed_out", cnt(s.instances_timed_out));
    o.Set("mask_accept_disagreements", cnt(s.mask_accept_disagreements));
    o.Set("tokens", cnt(s.tokens));
    o.Set("compiled_share", num(r.compiled_share));
    o.Set("passing_share", num(r.passing_share));
    o.Set("valid_accepted_share", num(r.valid_share));
    o.Set("invalid_rejected_share", num(r.invalid_share));
    for (auto [key, t] : {std::pair{"wall", &r.wall}, std::pair{"cpu", &r.cpu}}) {
      json::Value tm = json::Value::MakeObject();
      tm.Set("compile_p50_ms", num(t->compile_p50_ms));
      tm.Set("compile_p99_ms", num(t->compile_p99_ms));
      tm.Set("compile_max_ms", num(t->compile_max_ms));
      tm.Set("compile_mean_ms", num(t->compile_mean_ms));
      tm.Set("mask_p50_us", num(t->mask_p50_us));
      tm.Set("mask_p99_us", num(t->mask_p99_us));
      tm.Set("mask_p999_us", num(t->mask_p999_us));
      tm.Set("mask_max_us", num(t->mask_max_us));
      tm.Set("mask_mean_us", num(t->mask_mean_us));
      o.Set(key, std::move(tm));
    }
    return o;
  }

  bool WriteJson(const std::string& path) const {
    json::Value root = json::Value::MakeObject();
    json::Value arr = json::Value::MakeArray();
    for (size_t i = 0; i < subsets.size(); ++i) arr.as_array().push_back(Figures(subsets[i], rows[i]));
    root.Set("subsets", std::move(arr));
    root.Set("total", Figures(total, total_row));
    json::Value ref_o = json::Value::MakeObject();
    ref_o.Set("engine", json::Value::String("llguidance"));
    ref_o.Set("mask_p50_us", json::Value::Double(ref.mask_p50_us));
    ref_o.Set("mask_p99_us", json::Value::Double(ref.mask_p99_us));
    ref_o.Set("mask_p999_us", json::Value::Double(ref.mask_p999_us));
    ref_o.Set("compile_mean_ms", json::Value::Double(ref.compile_mean_ms));
    ref_o.Set("passing", json::Value::Int(static_cast<int64_t>(ref.passing)));
    ref_o.Set("schemas", json::Value::Int(static_cast<int64_t>(ref.schemas)));
    root.Set("reference", std::move(ref_o));
    json::Value errs = json::Value::MakeArray();
    for (const auto& [k, n] : error_hist) {
      json::Value e = json::Value::MakeObject();
      e.Set("error", json::Value::String(k));
      e.Set("count", json::Value::Int(static_cast<int64_t>(n)));
      errs.as_array().push_back(std::move(e));
    }
    root.Set("compile_errors", std::move(errs));
    json::Value fails = json::Value::MakeArray();
    for (const auto& f : failures) fails.as_array().push_back(json::Value::String(f));
    root.Set("wrong_verdicts", std::move(fails));
    root.Set("wall_s", json::Value::Double(wall_s));
    root.Set("cpu_pinned", json::Value::Bool(cpu_pinned));
    root.Set("eager_mask_cache", json::Value::Bool(eager));
    root.Set("table_clock", json::Value::String(cpu_clock ? "cpu" : "wall"));
    std::ofstream out(path);
    out << json::Dump(root, json::Style::kPython) << "\n";
    return static_cast<bool>(out);
  }

  // Grouped bars on a log axis: mask p50 / p99 / p99.9 per subset and the total, with
  // llguidance's three figures as dashed lines.
  bool WriteSvg(const std::string& path) const {
    std::vector<std::pair<std::string, const Timing*>> bars;
    for (size_t i = 0; i < subsets.size(); ++i)
      if (!subsets[i].mask_ns.empty()) bars.emplace_back(subsets[i].name, &Primary(rows[i]));
    bars.emplace_back("TOTAL", &Primary(total_row));
    const double lo = 1, hi = 1e5;  // µs, log axis
    const int left = 70, top = 40, plot_h = 300, group_w = 46, bottom = 120;
    const int width = left + static_cast<int>(bars.size()) * group_w + 240, height = top + plot_h + bottom;
    auto y = [&](double us) {
      us = std::clamp(us, lo, hi);
      return top + plot_h - (std::log10(us) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) * plot_h;
    };
    std::string s = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
        "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        "<text x=\"{}\" y=\"20\" font-size=\"14\">MaskBench: mask time per token (µs, log scale, {}), "
        "DeepSeek vocabulary, one core</text>\n",
        width, height, left, cpu_clock ? "thread CPU time" : "wall clock");
    for (double t = lo; t <= hi; t *= 10) {
      s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
                       left, width - 240, y(t), y(t), left - 5, y(t) + 4, t);
    }
    const char* colors[3] = {"#4e79a7", "#f28e2b", "#e15759"};
    const char* labels[3] = {"p50", "p99", "p99.9"};
    for (size_t i = 0; i < bars.size(); ++i) {
      const Timing& r = *bars[i].second;
      const double v[3] = {r.mask_p50_us, r.mask_p99_us, r.mask_p999_us};
      const int x0 = left + static_cast<int>(i) * group_w + 4;
      for (int k = 0; k < 3; ++k) {
        if (std::isnan(v[k])) continue;
        const double yt = y(v[k]);
        s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"12\" height=\"{:.1f}\" fill=\"{}\"><title>{} {} "
                         "{:.1f} µs</title></rect>\n",
                         x0 + k * 13, yt, top + plot_h - yt, colors[k], bars[i].first, labels[k], v[k]);
      }
      s += fmt::format("<text transform=\"translate({},{}) rotate(-55)\" text-anchor=\"end\">{}</text>\n",
                       x0 + 20, top + plot_h + 12, bars[i].first);
    }
    const double refs[3] = {ref.mask_p50_us, ref.mask_p99_us, ref.mask_p999_us};
    for (int k = 0; k < 3; ++k) {
      s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
                       "stroke-dasharray=\"5,3\"/>\n",
                       left, width - 240, y(refs[k]), y(refs[k]), colors[k]);
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" "
                       "y=\"{}\">{} (dashed: llguidance {:g} µs)</text>\n",
                       width - 235, top + 10 + 18 * k, colors[k], width - 218, top + 20 + 18 * k, labels[k],
                       refs[k]);
    }
    s += "</svg>\n";
    std::ofstream out(path);
    out << s;
    return static_cast<bool>(out);
  }
};

}  // namespace ladle::bench
