// vision_lb_bench: the Vision Encoder Load Balancer (random machine, fewest-patches worker)
// against round-robin over the workers (and, for reference, fewest-images: join the shortest
// queue by image count), on a mixed-size image stream. A discrete-event simulation in
// simulated time (no clock, no sleeping, no threads) of M machines × G encoder workers, each
// worker encoding its images one at a time in arrival order; the policies are the lb module's
// own classes (PickVisionMachine, VisionWorkerLedger), as the serving path calls them.
//
// Images arrive as a Poisson stream at a given offered load
//   load = arrival rate × E[service] / (M × G),
// each picks its size from the mix and its machine at random (the recipe's pick, the same for
// every policy); a worker's service time is overhead + per_patch × p + quad × p² for p patches.
// Every policy sees the same stream (same arrivals, sizes and machine draws), so the figures
// differ only by the worker rule.
//
// Per load and policy it prints (patches in flight = queued + encoding, per worker):
//   busy       measured worker utilisation (encode time over worker time)
//   mean/wkr   patches in flight per worker, time-averaged
//   max/wkr    the largest of a machine's G workers' patches in flight, time-averaged (and
//              averaged over the machines)
//   max/mean   max/wkr ÷ mean/wkr: the imbalance the worker rule controls, weighted by load
//              (1.0: perfect balance; G: everything on one worker)
//   inst m/m   the instantaneous max/mean over a machine's workers, time-averaged over the
//              time the machine has anything in flight: dominated, at low load, by moments
//              with one image on the machine (max/mean = G under any policy)
//   peak/wkr   the most patches in flight on any worker at any time
//   p50 .. p99.9, mean   encode latency: arrival at the machine to embedding done (queueing
//              included), in ms
// then the ratios fewest-patches / round-robin, and with --svg a chart of p99 (and p50) vs load.
//
//   vision_lb_bench [--loads 0.5,0.7,0.8,0.9,0.95] [--machines 4] [--workers 8]
//                   [--images 200000] [--quad-ns 0] [--svg out.svg] [--check]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "ladle/core/numbers.h"
#include "ladle/lb/vision_lb.h"

namespace {

using ladle::lb::VisionWorkerLedger;
using ladle::lb::VisionWorkerPolicy;

struct ImageKind {
  int width = 0, height = 0;
  double weight = 0;
  int64_t patches = 0;
};

struct Config {
  uint32_t machines = 4, workers = 8;
  size_t images = 200000;
  int patch = 16;
  double overhead_ms = 2, per_patch_us = 5, quad_ns = 0;
  double warmup = 0.05;  // fraction of the stream left out of every figure
  uint64_t seed = 1;

  double ServiceS(int64_t p) const {
    const double x = static_cast<double>(p);
    return overhead_ms * 1e-3 + per_patch_us * 1e-6 * x + quad_ns * 1e-9 * x * x;
  }
};

// "WxH:weight,WxH:weight,...".
bool ParseMix(const std::string& text, int patch, std::vector<ImageKind>* out) {
  out->clear();
  size_t from = 0;
  while (from <= text.size()) {
    size_t to = text.find(',', from);
    if (to == std::string::npos) to = text.size();
    const std::string_view item = std::string_view(text).substr(from, to - from);
    const size_t x = item.find('x'), colon = item.find(':');
    if (x == std::string_view::npos || colon == std::string_view::npos || colon < x) return false;
    const auto w = ladle::ParseI64(item.substr(0, x)), h = ladle::ParseI64(item.substr(x + 1, colon - x - 1));
    const auto wt = ladle::ParseDouble(item.substr(colon + 1));
    if (!w || !h || !wt || *w <= 0 || *h <= 0 || *w > 1 << 20 || *h > 1 << 20 || *wt <= 0) return false;
    ImageKind k{static_cast<int>(*w), static_cast<int>(*h), *wt, 0};
    k.patches = ladle::lb::ImagePatches(k.width, k.height, patch);
    out->push_back(k);
    from = to + 1;
  }
  return !out->empty();
}

// The stream, drawn once: unit-rate gaps (scaled per load), a kind and a machine draw each.
struct Arrival {
  double gap = 0;  // exponential, mean 1
  uint32_t kind = 0;
  uint64_t machine_draw = 0;
};

std::vector<Arrival> DrawStream(const Config& cfg, const std::vector<ImageKind>& mix) {
  std::mt19937_64 rng(cfg.seed);
  std::exponential_distribution<double> gap(1.0);
  std::vector<double> weights;
  for (const ImageKind& k : mix) weights.push_back(k.weight);
  std::discrete_distribution<uint32_t> kind(weights.begin(), weights.end());
  std::vector<Arrival> s(cfg.images);
  for (Arrival& a : s) {
    a.gap = gap(rng);
    a.kind = kind(rng);
    a.machine_draw = rng();
  }
  return s;
}

struct Result {
  double load = 0;
  VisionWorkerPolicy policy{};
  double mean_inflight = 0, max_inflight = 0, inst_max_mean = 0;
  int64_t peak_inflight = 0;
  double p50_ms = 0, p99_ms = 0, p999_ms = 0, mean_ms = 0;
  double busy = 0;  // measured worker utilisation over the measured span
};

double Quantile(std::vector<double>& v, double q) {
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return v[k];
}

class Simulation {
 public:
  Simulation(const Config& cfg, VisionWorkerPolicy policy)
      : cfg_(cfg),
        ledgers_(cfg.machines, VisionWorkerLedger(cfg.workers, policy)),
        free_at_(size_t{cfg.machines} * cfg.workers, 0.0),
        w_int_(free_at_.size(), 0.0),
        w_last_(free_at_.size(), 0.0),
        m_ratio_(cfg.machines, 0.0),
        m_last_(cfg.machines, 0.0),
        m_int_(cfg.machines, 0.0),
        m_busy_(cfg.machines, 0.0),
        m_max_(cfg.machines, 0.0),
        m_max_int_(cfg.machines, 0.0) {}

  Result Run(const std::vector<Arrival>& stream, const std::vector<ImageKind>& mix, double load) {
    double mean_s = 0, wsum = 0;
    for (const ImageKind& k : mix) {
      mean_s += k.weight * cfg_.ServiceS(k.patches);
      wsum += k.weight;
    }
    mean_s /= wsum;
    const double rate = load * cfg_.machines * cfg_.workers / mean_s;  // images per simulated s
    const size_t warm = static_cast<size_t>(cfg_.warmup * static_cast<double>(stream.size()));

    std::vector<double> latency;
    latency.reserve(stream.size() - warm);
    double t = 0, service_sum = 0;
    for (size_t i = 0; i < stream.size(); ++i) {
      const Arrival& a = stream[i];
      t += a.gap / rate;
      if (i == warm) t_warm_ = t;
      Drain(t);
      const int64_t p = mix[a.kind].patches;
      const uint32_t m = *ladle::lb::PickVisionMachine(cfg_.machines, {}, a.machine_draw);
      Account(m, t);
      const uint32_t w = *ledgers_[m].Assign(p);
      const size_t flat = size_t{m} * cfg_.workers + w;
      const double s = cfg_.ServiceS(p), done = std::max(t, free_at_[flat]) + s;
      free_at_[flat] = done;
      done_.push({done, m, w, p});
      Changed(m, w, t, /*delta=*/p);
      if (i >= warm) {
        latency.push_back(done - t);
        service_sum += s;
        peak_ = std::max(peak_, ledgers_[m].InFlight(w));
      }
    }
    const double t_end = t;
    // Close every open interval at the last arrival.
    for (uint32_t m = 0; m < cfg_.machines; ++m) {
      Account(m, t_end);
      for (uint32_t w = 0; w < cfg_.workers; ++w) Changed(m, w, t_end, 0);
    }

    Result r;
    r.load = load;
    r.policy = ledgers_[0].policy();
    double mm = 0;
    uint32_t busy_machines = 0;
    for (uint32_t m = 0; m < cfg_.machines; ++m) {
      if (m_busy_[m] <= 0) continue;
      mm += m_int_[m] / m_busy_[m];
      ++busy_machines;
    }
    r.inst_max_mean = busy_machines ? mm / busy_machines : 0;
    const double span = t_end - t_warm_, n = static_cast<double>(w_int_.size());
    double total = 0, max_total = 0;
    for (double x : w_int_) total += x;
    for (double x : m_max_int_) max_total += x;
    r.mean_inflight = span > 0 ? total / n / span : 0;
    r.max_inflight = span > 0 ? max_total / cfg_.machines / span : 0;
    r.peak_inflight = peak_;
    r.busy = span > 0 ? service_sum / n / span : 0;
    if (!latency.empty()) {
      double sum = 0;
      for (double x : latency) sum += x;
      r.mean_ms = 1e3 * sum / static_cast<double>(latency.size());
      r.p50_ms = 1e3 * Quantile(latency, 0.50);
      r.p99_ms = 1e3 * Quantile(latency, 0.99);
      r.p999_ms = 1e3 * Quantile(latency, 0.999);
    }
    return r;
  }

 private:
  struct Done {
    double t;
    uint32_t machine, worker;
    int64_t patches;
    bool operator>(const Done& o) const { return t > o.t; }
  };

  // The measured part of [from, to).
  double Span(double from, double to) const { return std::max(0.0, to - std::max(from, t_warm_)); }

  // Every encode finished by `t` leaves its worker first, in time order.
  void Drain(double t) {
    while (!done_.empty() && done_.top().t <= t) {
      const Done d = done_.top();
      done_.pop();
      Account(d.machine, d.t);
      ledgers_[d.machine].Complete(d.worker, d.patches);
      Changed(d.machine, d.worker, d.t, -d.patches);
    }
  }

  // Integrates machine m's max and max/mean up to t (before m changes).
  void Account(uint32_t m, double t) {
    const double dt = Span(m_last_[m], t);
    m_max_int_[m] += m_max_[m] * dt;
    if (m_ratio_[m] > 0) {
      m_int_[m] += m_ratio_[m] * dt;
      m_busy_[m] += dt;
    }
    m_last_[m] = t;
  }

  // Worker (m, w) now holds ledger's count, which changed by `delta` at t: closes its
  // in-flight interval and refreshes the machine's max and max/mean.
  void Changed(uint32_t m, uint32_t w, double t, int64_t delta) {
    const size_t flat = size_t{m} * cfg_.workers + w;
    const double before = static_cast<double>(ledgers_[m].InFlight(w) - delta);
    w_int_[flat] += before * Span(w_last_[flat], t);
    w_last_[flat] = t;
    if (delta == 0) return;
    const VisionWorkerLedger& l = ledgers_[m];
    int64_t mx = 0;
    for (const auto& x : l.loads()) mx = std::max(mx, x.patches);
    m_max_[m] = static_cast<double>(mx);
    m_ratio_[m] = l.TotalInFlight() > 0 ? m_max_[m] * l.workers() / static_cast<double>(l.TotalInFlight()) : 0;
  }

  const Config& cfg_;
  std::vector<VisionWorkerLedger> ledgers_;
  std::vector<double> free_at_;
  std::priority_queue<Done, std::vector<Done>, std::greater<>> done_;
  double t_warm_ = std::numeric_limits<double>::infinity();  // set at the first measured arrival
  std::vector<double> w_int_, w_last_;                   // per worker: patches × s, last change
  std::vector<double> m_ratio_, m_last_, m_int_, m_busy_;  // per machine: max/mean, its integral
  std::vector<double> m_max_, m_max_int_;                  // per machine: max patches, its integral
  int64_t peak_ = 0;
};

const char* kColors[] = {"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c"};

// p99 (solid) and p50 (dashed) latency vs load, log y, one colour per policy.
std::string Svg(const std::vector<Result>& rs, const std::vector<VisionWorkerPolicy>& policies,
                const std::vector<double>& loads, const std::string& subtitle) {
  const int width = 760, height = 500, left = 80, right = 190, top = 70, bottom = 60;
  const int pw = width - left - right, ph = height - top - bottom;
  double lo = 1e300, hi = 0;
  for (const Result& r : rs) {
    lo = std::min(lo, r.p50_ms);
    hi = std::max(hi, r.p99_ms);
  }
  const double ylo = std::pow(10, std::floor(std::log10(std::max(lo, 1e-3)))),
               yhi = std::pow(10, std::ceil(std::log10(std::max(hi, ylo * 10))));
  const double xlo = loads.front(), xhi = loads.back() > xlo ? loads.back() : xlo + 0.1;
  auto X = [&](double x) { return left + pw * (x - xlo) / (xhi - xlo); };
  auto Y = [&](double y) { return top + ph * (1 - (std::log10(y) - std::log10(ylo)) / (std::log10(yhi) - std::log10(ylo))); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"22\" font-size=\"16\">vision_lb_bench: encode latency vs offered load "
      "(p99 solid, p50 dashed; log scale, lower is better)</text>\n"
      "<text x=\"10\" y=\"42\" fill=\"#555\" font-size=\"11\">{}</text>\n",
      width, height, subtitle);
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", left, top,
                   pw, ph);
  for (double y = ylo; y <= yhi * 1.0001; y *= 10) {
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", left, Y(y),
                     left + pw, Y(y));
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g} ms</text>\n", left - 6, Y(y) + 4, y);
  }
  for (double x : loads) {
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", X(x), top + ph + 18, x);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">offered load (per worker)</text>\n",
                   left + pw / 2, top + ph + 42);
  for (size_t k = 0; k < policies.size(); ++k) {
    const char* color = kColors[k % std::size(kColors)];
    for (int which = 0; which < 2; ++which) {  // 0: p99, 1: p50
      std::string pts;
      for (const Result& r : rs) {
        if (r.policy != policies[k]) continue;
        pts += fmt::format("{:.1f},{:.1f} ", X(r.load), Y(which == 0 ? r.p99_ms : r.p50_ms));
      }
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", pts, color,
                       which == 0 ? "" : " stroke-dasharray=\"5,4\"");
    }
    for (const Result& r : rs) {
      if (r.policy != policies[k]) continue;
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(r.load), Y(r.p99_ms), color);
    }
    const int ly = top + 10 + static_cast<int>(k) * 20;
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     left + pw + 15, ly, left + pw + 45, ly, color);
    s += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", left + pw + 52, ly + 4,
                     ladle::lb::VisionWorkerPolicyName(policies[k]));
  }
  return s + "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Vision Encoder Load Balancer (fewest patches) vs round-robin on a mixed-size image stream"};
  Config cfg;
  std::vector<double> loads{0.5, 0.7, 0.8, 0.9, 0.95};
  std::vector<std::string> policy_names{"fewest-patches", "round-robin", "fewest-images"};
  std::string mix_text = "224x224:40,512x512:30,1024x1024:20,2048x1024:10", svg_path;
  bool check = false;
  app.add_option("--loads", loads, "offered loads per worker, each in (0, 1)")->delimiter(',')->capture_default_str();
  app.add_option("--machines", cfg.machines, "vision-encoder machines (M)")->capture_default_str();
  app.add_option("--workers", cfg.workers, "encoder workers per machine (G, one per GPU)")->capture_default_str();
  app.add_option("--images", cfg.images, "images per (load, policy) run")->capture_default_str();
  app.add_option("--mix", mix_text, "image sizes and weights, WxH:weight,...")->capture_default_str();
  app.add_option("--patch", cfg.patch, "patch size in pixels")->capture_default_str();
  app.add_option("--overhead-ms", cfg.overhead_ms, "service time: fixed part per image")->capture_default_str();
  app.add_option("--per-patch-us", cfg.per_patch_us, "service time: per patch")->capture_default_str();
  app.add_option("--quad-ns", cfg.quad_ns, "service time: per patch squared (attention)")->capture_default_str();
  app.add_option("--warmup", cfg.warmup, "fraction of the stream left out of the figures")->capture_default_str();
  app.add_option("--seed", cfg.seed, "the stream's seed (arrivals, sizes, machine draws)")->capture_default_str();
  app.add_option("--policies", policy_names, "worker policies: fewest-patches (lb), round-robin, fewest-images")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--svg", svg_path, "write a chart of p99 and p50 latency vs load here");
  app.add_flag("--check", check, "exit 1 unless fewest-patches beats round-robin on max/mean and p99 at every load");
  CLI11_PARSE(app, argc, argv);

  std::vector<ImageKind> mix;
  if (cfg.patch <= 0 || !ParseMix(mix_text, cfg.patch, &mix))
    return fmt::print(stderr, "--mix: WxH:weight,... with positive sizes and weights; --patch > 0\n"), 2;
  if (cfg.machines == 0 || cfg.workers == 0 || cfg.images < 100 || cfg.warmup < 0 || cfg.warmup >= 0.9)
    return fmt::print(stderr, "need --machines, --workers > 0, --images >= 100, 0 <= --warmup < 0.9\n"), 2;
  std::sort(loads.begin(), loads.end());
  for (double l : loads)
    if (!(l > 0 && l < 1)) return fmt::print(stderr, "--loads: each in (0, 1)\n"), 2;
  std::vector<VisionWorkerPolicy> policies;
  for (const std::string& n : policy_names) {
    auto p = ladle::lb::ParseVisionWorkerPolicy(n);
    if (!p.ok()) return fmt::print(stderr, "{}\n", p.status().ToString()), 2;
    policies.push_back(*p);
  }
  auto has = [&](VisionWorkerPolicy p) { return std::find(policies.begin(), policies.end(), p) != policies.end(); };
  if (check && !(has(VisionWorkerPolicy::kFewestPatches) && has(VisionWorkerPolicy::kRoundRobin)))
    return fmt::print(stderr, "--check needs fewest-patches and round-robin in --policies\n"), 2;

  double wsum = 0, mean_p = 0, mean_s = 0;
  for (const ImageKind& k : mix) wsum += k.weight;
  std::string mix_desc;
  for (const ImageKind& k : mix) {
    mean_p += k.weight / wsum * static_cast<double>(k.patches);
    mean_s += k.weight / wsum * cfg.ServiceS(k.patches);
    mix_desc += fmt::format("{}{}x{} ({} patches, {:.1f} ms) {:.0f}%", mix_desc.empty() ? "" : ", ", k.width,
                            k.height, k.patches, 1e3 * cfg.ServiceS(k.patches), 100 * k.weight / wsum);
  }
  const std::string setup = fmt::format(
      "{} machines x {} workers, {} images per run (first {:.0f}% warm-up), patch {}, service {:g} ms + {:g} us/patch"
      " + {:g} ns/patch^2; mix: {}; mean {:.0f} patches, {:.2f} ms",
      cfg.machines, cfg.workers, cfg.images, 100 * cfg.warmup, cfg.patch, cfg.overhead_ms, cfg.per_patch_us,
      cfg.quad_ns, mix_desc, mean_p, 1e3 * mean_s);
  fmt::print("{}\n\n", setup);

  const std::vector<Arrival> stream = DrawStream(cfg, mix);
  std::vector<Result> results;
  fmt::print("{:>5} {:<15} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "load", "policy", "busy",
             "mean/wkr", "max/wkr", "max/mean", "inst m/m", "peak/wkr", "p50 ms", "p99 ms", "p99.9 ms", "mean ms");
  for (double load : loads) {
    for (VisionWorkerPolicy p : policies) {
      Simulation sim(cfg, p);
      const Result r = sim.Run(stream, mix, load);
      results.push_back(r);
      fmt::print("{:>5.2f} {:<15} {:>5.2f} {:>8.0f} {:>8.0f} {:>8.3f} {:>8.3f} {:>8} {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f}\n",
                 load, ladle::lb::VisionWorkerPolicyName(p), r.busy, r.mean_inflight, r.max_inflight,
                 r.max_inflight / r.mean_inflight, r.inst_max_mean, r.peak_inflight, r.p50_ms, r.p99_ms, r.p999_ms,
                 r.mean_ms);
    }
  }

  auto find = [&](double load, VisionWorkerPolicy p) -> const Result* {
    for (const Result& r : results)
      if (r.load == load && r.policy == p) return &r;
    return nullptr;
  };
  bool ok = true;
  if (find(loads[0], VisionWorkerPolicy::kFewestPatches) && find(loads[0], VisionWorkerPolicy::kRoundRobin)) {
    fmt::print("\nratios fewest-patches / round-robin (below 1: the balancer is better)\n");
    fmt::print("{:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "load", "max/wkr", "max/mean", "inst m/m",
               "peak/wkr", "p50", "p99", "p99.9");
    for (double load : loads) {
      const Result &b = *find(load, VisionWorkerPolicy::kFewestPatches), &rr = *find(load, VisionWorkerPolicy::kRoundRobin);
      const double bmm = b.max_inflight / b.mean_inflight, rmm = rr.max_inflight / rr.mean_inflight;
      fmt::print("{:>5.2f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f}\n", load,
                 b.max_inflight / rr.max_inflight, bmm / rmm, b.inst_max_mean / rr.inst_max_mean,
                 static_cast<double>(b.peak_inflight) / static_cast<double>(rr.peak_inflight), b.p50_ms / rr.p50_ms,
                 b.p99_ms / rr.p99_ms, b.p999_ms / rr.p999_ms);
      ok = ok && bmm < rmm && b.p99_ms < rr.p99_ms;
    }
  }

  if (!svg_path.empty()) {
    std::ofstream f(svg_path, std::ios::trunc);
    f << Svg(results, policies, loads,
             fmt::format("{} x {} workers, {} images per point, {:g} ms + {:g} us/patch + {:g} ns/patch^2, mix {}",
                         cfg.machines, cfg.workers, cfg.images, cfg.overhead_ms, cfg.per_patch_us, cfg.quad_ns,
                         mix_text));
    if (!f.good()) return fmt::print(stderr, "cannot write {}\n", svg_path), 1;
    fmt::print("\nwrote {}\n", svg_path);
  }
  if (check) {
    fmt::print("check: fewest-patches below round-robin on max/mean and p99 at every load: {}\n", ok ? "ok" : "FAIL");
    if (!ok) return 1;
  }
  return 0;
}
