// vision_bench: image input on the REAL encoder workers and engine (issue 18's benchmarks), in
// one run, side by side. Three sections (--sections throughput,balance,ttft):
//
//   throughput  images/s through one LocalImageEncoder with 1 and with 2 worker threads, for a
//               few fixed sizes (default 224², 512², 1024²): a stream of N preprocessed images
//               submitted at once, timed to the last embedding; the 2-worker/1-worker ratio.
//   balance     the worker balancer (fewest-patches) against round-robin (and fewest-images) on
//               the real workers: a seeded mixed-size stream (default 40% 224², 30% 512², 20%
//               768², 10% 1024×512) arriving open-loop (Poisson) at an offered load relative to
//               the measured capacity of G workers (a closed burst of the same mix, timed first);
//               the same arrivals and sizes for every policy. Per (G, load, policy): patches in
//               flight per worker (the encoder's own ledger, EncoderStats::patches_in_flight,
//               sampled at every arrival and completion and time-averaged: mean/wkr, max/wkr and
//               their ratio), encode latency (queue + encode) p50/p99, and the ratios.
//               bench/lb/vision_lb_bench is the simulated counterpart (many machines and
//               workers, simulated time); this one is the real threads on this machine.
//   ttft        time to first token of a request with one 1024×1024 PNG (a data: URL through
//               vision::ImagePipeline: base64 + probe + decode + resize, then the encoder), its
//               1024 placeholders between a few text tokens, prefilled by the engine in-process
//               (built-in model, ModelConfig{}), with the split (base64, decode/resize, encode,
//               prefill): cold (nothing cached); kv, the same request again with its KV prefix
//               cached but through an image stage without the embedding cache (decoded and
//               encoded again); kv+emb, again as served by default (the image stage's embedding
//               cache, keyed by the file bytes, skips decode and encode too).
//
// Every section prints the load average and the core count: the workers are CPU threads, so a
// busy machine (or one with fewer cores than workers) flattens the 2-worker figures.
//
//   vision_bench [--sections throughput,balance,ttft] [--sizes 224,512,1024] [--seconds 2]
//                [--mix 224x224:0.4,512x512:0.3,768x768:0.2,1024x512:0.1] [--loads 0.5,0.8]
//                [--workers 2] [--duration 8] [--rounds 2] [--ttft-repeats 3] [--svg out.svg]
//                [--smoke] [--check]
//
// --smoke is the ctest (vision_bench_smoke, about ten seconds): 224² throughput, a 224²/512²
// stream at one load, a 640² TTFT; --check fails it unless the repeated image requests hit the
// KV prefix cache and only the third hits the embedding cache. Exit 77 (skipped) when the
// tokenizer is missing: the TTFT section needs it.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <png.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ladle/core/base64.h"
#include "ladle/engine/engine.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/engine/vision_model.h"
#include "ladle/tokenizer/tokenizer.h"
#include "ladle/vision/image.h"
#include "ladle/vision/image_encoder.h"
#include "ladle/vision/image_pipeline.h"

namespace {

using namespace ladle;
using engine::TokenId;
using Clock = std::chrono::steady_clock;
using VisionModelPtr = std::shared_ptr<const engine::VisionModel>;
using TensorPtr = std::shared_ptr<const vision::ImageTensor>;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Sec(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string LoadAvg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "?";
  return fmt::format("{} {} {}", a, b, c);
}

void PrintMachine(std::string_view when) {
  fmt::print("[{}] load average {} (1/5/15 min), {} cores (hardware_concurrency)\n", when, LoadAvg(),
             std::thread::hardware_concurrency());
}

// Nearest-rank percentile of `v` (sorted in place).
double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

double Median(std::vector<double> v) { return Pct(v, 50); }

struct Size {
  int width = 0, height = 0;
  std::string Name() const { return width == height ? fmt::format("{}²", width) : fmt::format("{}x{}", width, height); }
};

// A preprocessed image of `s` (the grid Preprocess would give it) with seeded pixels: the encode
// time depends on the grid, not on the values.
TensorPtr MakeTensor(const Size& s, const vision::PreprocessConfig& pre, uint32_t seed) {
  auto t = std::make_shared<vision::ImageTensor>();
  vision::GridFor(s.width, s.height, pre, &t->grid_h, &t->grid_w);
  t->merge = pre.merge;
  t->hash_hi = seed;
  t->hash_lo = static_cast<uint64_t>(s.width) << 32 | static_cast<uint32_t>(s.height);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  t->pixels.resize(size_t{3} * t->grid_h * pre.patch * t->grid_w * pre.patch);
  for (float& v : t->pixels) v = u(rng);
  return t;
}

// One image's encode time on this thread (median of `n`, after one warm-up).
double CalibrateMs(const engine::VisionModel& vm, const vision::ImageTensor& t, int n) {
  std::vector<float> out;
  (void)vm.Encode(t.pixels.data(), t.grid_h, t.grid_w, &out);
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    (void)vm.Encode(t.pixels.data(), t.grid_h, t.grid_w, &out);
    ms.push_back(Ms(Clock::now() - t0));
  }
  return Median(ms);
}

// Counts completions; the first failure is kept.
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::string error;
  void Finish(const Status& s) {
    std::lock_guard lk(mu);
    if (!s.ok() && error.empty()) error = s.ToString();
    ++done;
    cv.notify_all();
  }
  bool WaitFor(size_t n, std::chrono::seconds limit) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, limit, [&] { return done >= n; });
  }
};

Result<std::unique_ptr<vision::ImageEncoder>> Encoder(const VisionModelPtr& vm, int workers, const std::string& policy) {
  vision::LocalEncoderOptions o;
  o.workers = workers;
  o.policy = policy;
  o.max_queued_images = 1 << 20;  // the benchmark sizes its own bursts
  return vision::MakeLocalEncoder(vm, o);
}

// ---------------------------------------------------------------------------------------------
// throughput

struct ThroughputRow {
  Size size;
  int patches = 0, images = 0;
  double one_ms = 0;              // one image, calibrated on the main thread
  std::map<int, double> img_s;    // workers → images/s (the best repeat)
  std::map<int, std::vector<uint64_t>> per_worker;
};

Result<double> Burst(const VisionModelPtr& vm, int workers, const TensorPtr& t, int n,
                     std::vector<uint64_t>* per_worker) {
  LADLE_ASSIGN_OR_RETURN(auto enc, Encoder(vm, workers, "fewest-patches"));
  // One small image per worker first (threads started, BLAS initialised); the counts below
  // subtract it.
  static const TensorPtr tiny = MakeTensor({64, 64}, vision::PreprocessFor(*vm), 1);
  Waiter warm;
  for (int i = 0; i < workers; ++i) enc->Encode(tiny, [&](Result<vision::EncodedImage> r) { warm.Finish(r.status()); });
  if (!warm.WaitFor(static_cast<size_t>(workers), std::chrono::seconds(600))) return Internal("warm-up timed out");
  Waiter w;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) enc->Encode(t, [&](Result<vision::EncodedImage> r) { w.Finish(r.status()); });
  if (!w.WaitFor(static_cast<size_t>(n), std::chrono::seconds(1800))) return Internal("burst timed out");
  const double s = Sec(Clock::now() - t0);
  if (!w.error.empty()) return Internal(w.error);
  std::vector<uint64_t> served = enc->GetStats().images_per_worker;
  for (auto& c : served) c = c > 0 ? c - 1 : 0;  // less the warm-up image each took
  *per_worker = served;
  return static_cast<double>(n) / s;
}

int RunThroughput(const VisionModelPtr& vm, const vision::PreprocessConfig& pre, const std::vector<int>& sizes,
                  const std::vector<int>& workers, double seconds, int repeats, int min_images) {
  fmt::print("\n== throughput: one encoder process, a burst of N images submitted at once ==\n");
  PrintMachine("before");
  std::vector<ThroughputRow> rows;
  for (int side : sizes) {
    ThroughputRow row;
    row.size = {side, side};
    const TensorPtr t = MakeTensor(row.size, pre, 1000u + static_cast<uint32_t>(side));
    row.patches = t->patches();
    row.one_ms = CalibrateMs(*vm, *t, 3);
    // N: about `seconds` of work for one worker; even, so 2 workers split it evenly.
    row.images = std::max(min_images, static_cast<int>(std::lround(seconds * 1000.0 / row.one_ms)));
    row.images += row.images % 2;
    for (int rep = 0; rep < repeats; ++rep) {
      // Worker counts take turns (order flipped each repeat), so drift hits them alike.
      for (size_t j = 0; j < workers.size(); ++j) {
        const int g = workers[(j + static_cast<size_t>(rep)) % workers.size()];
        std::vector<uint64_t> per;
        auto r = Burst(vm, g, t, row.images, &per);
        if (!r.ok()) return fmt::print(stderr, "throughput {} G={}: {}\n", row.size.Name(), g, r.status().ToString()), 1;
        fmt::print(stderr, "  {:>9} G={} rep {}: {:8.2f} images/s\n", row.size.Name(), g, rep, *r);
        if (*r > row.img_s[g]) row.img_s[g] = *r, row.per_worker[g] = per;
      }
    }
    rows.push_back(row);
  }
  fmt::print("\n{:>9} {:>8} {:>9} {:>7}", "size", "patches", "1 img ms", "N");
  for (int g : workers) fmt::print(" {:>12}", fmt::format("G={} img/s", g));
  for (int g : workers) fmt::print(" {:>14}", fmt::format("G={} patch/s", g));
  for (size_t j = 1; j < workers.size(); ++j) fmt::print(" {:>10}", fmt::format("G{}/G{}", workers[j], workers[0]));
  fmt::print("  {}\n", "images per worker");
  for (const auto& r : rows) {
    fmt::print("{:>9} {:>8} {:>9.1f} {:>7}", r.size.Name(), r.patches, r.one_ms, r.images);
    for (int g : workers) fmt::print(" {:>12.2f}", r.img_s.at(g));
    for (int g : workers) fmt::print(" {:>14.0f}", r.img_s.at(g) * r.patches);
    for (size_t j = 1; j < workers.size(); ++j) fmt::print(" {:>10.3f}", r.img_s.at(workers[j]) / r.img_s.at(workers[0]));
    std::string per;
    for (int g : workers) per += fmt::format(" G={}:[{}]", g, fmt::join(r.per_worker.at(g), ","));
    fmt::print(" {}\n", per);
  }
  PrintMachine("after");
  return 0;
}

// ---------------------------------------------------------------------------------------------
// balance

struct Kind {
  Size size;
  double weight = 0;
  TensorPtr tensor;
  double one_ms = 0;
};

struct Arrival {
  double at_s = 0;
  int kind = 0;
};

// One policy's accumulated figures over its rounds.
struct BalanceRow {
  int workers = 0;
  double load = 0;
  std::string policy;
  // Accumulated: ledger areas over time (max and mean over the workers), seconds observed,
  // encode time, per-image latency and dispatcher lag, images per worker.
  double area_max = 0, area_mean = 0, span_s = 0, encode_s = 0, peak = 0;
  std::vector<double> lat, late;
  std::vector<uint64_t> per_worker;

  int images() const { return static_cast<int>(lat.size()); }
  double busy() const { return span_s > 0 ? encode_s / (span_s * workers) : 0; }
  double max_wkr() const { return span_s > 0 ? area_max / span_s : 0; }
  double mean_wkr() const { return span_s > 0 ? area_mean / span_s : 0; }
  double MaxOverMean() const { return mean_wkr() > 0 ? max_wkr() / mean_wkr() : 0; }
  double LatPct(double p) const {
    std::vector<double> v = lat;
    return Pct(v, p);
  }
  double LatMean() const {
    double sum = 0;
    for (double x : lat) sum += x;
    return lat.empty() ? 0 : sum / static_cast<double>(lat.size());
  }
  double LateMean() const {
    double sum = 0;
    for (double x : late) sum += x;
    return late.empty() ? 0 : sum / static_cast<double>(late.size());
  }
  double LateMax() const { return late.empty() ? 0 : *std::max_element(late.begin(), late.end()); }
};

// The ledger over time: (t, patches in flight per worker) at each event.
struct Sampler {
  std::mutex mu;
  Clock::time_point t0;
  std::vector<std::pair<double, std::vector<int64_t>>> samples;
  void Take(const vision::ImageEncoder& enc) {
    std::lock_guard lk(mu);
    samples.emplace_back(Sec(Clock::now() - t0), enc.GetStats().patches_in_flight);
  }
};

// One round: `arrivals` through a fresh encoder of `row->workers` workers under `row->policy`,
// added to `row`.
Status RunRound(const VisionModelPtr& vm, const std::vector<Kind>& kinds, const std::vector<Arrival>& arrivals,
                BalanceRow* row) {
  const int workers = row->workers;
  LADLE_ASSIGN_OR_RETURN(auto enc, Encoder(vm, workers, row->policy));
  {
    static const TensorPtr tiny = MakeTensor({64, 64}, vision::PreprocessFor(*vm), 1);
    Waiter warm;
    for (int i = 0; i < workers; ++i) enc->Encode(tiny, [&](Result<vision::EncodedImage> r) { warm.Finish(r.status()); });
    if (!warm.WaitFor(static_cast<size_t>(workers), std::chrono::seconds(600))) return Internal("warm-up timed out");
  }
  const vision::EncoderStats before = enc->GetStats();
  Sampler sampler;
  Waiter w;
  std::vector<double> lat(arrivals.size(), 0), late(arrivals.size(), 0);
  std::atomic<int64_t> encode_us{0};
  const auto t0 = Clock::now() + std::chrono::milliseconds(5);
  sampler.t0 = t0;
  std::this_thread::sleep_until(t0);
  sampler.Take(*enc);
  vision::ImageEncoder* e = enc.get();
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const auto at = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i].at_s));
    std::this_thread::sleep_until(at);
    late[i] = Ms(Clock::now() - at);
    e->Encode(kinds[static_cast<size_t>(arrivals[i].kind)].tensor, [&, i, e](Result<vision::EncodedImage> r) {
      if (r.ok()) {
        lat[i] = r->queue_ms + r->encode_ms;
        encode_us += static_cast<int64_t>(r->encode_ms * 1000);
      }
      sampler.Take(*e);  // after the worker's Complete: the ledger without this image
      w.Finish(r.status());
    });
    sampler.Take(*e);  // after Assign: the ledger with it
  }
  if (!w.WaitFor(arrivals.size(), std::chrono::seconds(1800))) return Internal("the stream did not drain in 30 min");
  if (!w.error.empty()) return Internal(w.error);

  // Time-averaged over [first sample, last sample]: the ledger is constant between events.
  std::lock_guard lk(sampler.mu);
  auto& s = sampler.samples;
  std::stable_sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 0; k + 1 < s.size(); ++k) {
    const double dt = s[k + 1].first - s[k].first;
    const auto& v = s[k].second;
    const int64_t mx = *std::max_element(v.begin(), v.end());
    double sum = 0;
    for (int64_t x : v) sum += static_cast<double>(x);
    row->area_max += dt * static_cast<double>(mx);
    row->area_mean += dt * sum / static_cast<double>(v.size());
    row->peak = std::max(row->peak, static_cast<double>(mx));
  }
  row->span_s += s.back().first - s.front().first;
  row->encode_s += static_cast<double>(encode_us.load()) / 1e6;
  row->lat.insert(row->lat.end(), lat.begin(), lat.end());
  row->late.insert(row->late.end(), late.begin(), late.end());
  const vision::EncoderStats after = enc->GetStats();
  row->per_worker.resize(after.images_per_worker.size(), 0);
  for (size_t k = 0; k < after.images_per_worker.size(); ++k)
    row->per_worker[k] += after.images_per_worker[k] - before.images_per_worker[k];
  return Status::Ok();
}

std::string BalanceSvg(const std::vector<BalanceRow>& rows, const std::vector<int>& gs, const std::vector<double>& loads,
                       const std::vector<std::string>& policies) {
  const int pw = 300, ph = 220, pad = 70, gap = 90;
  const int W = pad + static_cast<int>(gs.size()) * (pw + gap), H = 320;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  const std::map<std::string, std::string> color = {
      {"fewest-patches", "#d62728"}, {"round-robin", "#888"}, {"fewest-images", "#1f77b4"}};
  const double lo = *std::min_element(loads.begin(), loads.end()), hi = *std::max_element(loads.begin(), loads.end());
  for (size_t gi = 0; gi < gs.size(); ++gi) {
    const int x0 = pad + static_cast<int>(gi) * (pw + gap);
    double ymax = 1;
    for (const auto& r : rows)
      if (r.workers == gs[gi]) ymax = std::max(ymax, r.LatPct(99));
    ymax *= 1.1;
    auto x_of = [&](double load) { return x0 + (hi > lo ? (load - lo) / (hi - lo) : 0.5) * pw; };
    auto y_of = [&](double v) { return 30 + ph - v / ymax * ph; };
    s += fmt::format("<text x=\"{}\" y=\"20\" font-weight=\"bold\">encode p99 (ms) vs offered load, G={} real workers</text>\n",
                     x0, gs[gi]);
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>", x0, 30 + ph, x0 + pw, 30 + ph);
    s += fmt::format("<line x1=\"{}\" y1=\"30\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", x0, x0, 30 + ph);
    for (double l : loads)
      s += fmt::format("<text x=\"{:.0f}\" y=\"{}\" text-anchor=\"middle\">{:.2f}</text>", x_of(l), 48 + ph, l);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">offered load (of measured capacity)</text>\n",
                     x0 + pw / 2, 64 + ph);
    for (int t = 0; t <= 4; ++t)
      s += fmt::format("<text x=\"{}\" y=\"{:.0f}\" text-anchor=\"end\">{:.0f}</text>", x0 - 4, 34 + ph - t * ph / 4.0,
                       ymax * t / 4);
    int li = 0;
    for (const auto& p : policies) {
      std::string pts;
      for (double l : loads)
        for (const auto& r : rows)
          if (r.workers == gs[gi] && r.policy == p && r.load == l) pts += fmt::format("{:.1f},{:.1f} ", x_of(l), y_of(r.LatPct(99)));
      const std::string c = color.count(p) ? color.at(p) : "#000";
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", pts, c);
      s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", x0 + 8, 44 + 14 * li++, c, p);
    }
  }
  return s + "</svg>\n";
}

Result<std::vector<Kind>> ParseMix(const std::string& mix, const vision::PreprocessConfig& pre) {
  std::vector<Kind> kinds;
  std::stringstream ss(mix);
  std::string item;
  uint32_t seed = 7;
  while (std::getline(ss, item, ',')) {
    Kind k;
    double weight = 0;
    if (std::sscanf(item.c_str(), "%dx%d:%lf", &k.size.width, &k.size.height, &weight) != 3 || k.size.width < 1 ||
        k.size.height < 1 || weight <= 0)
      return InvalidArgument(fmt::format("--mix: '{}' is not WxH:weight", item));
    k.weight = weight;
    k.tensor = MakeTensor(k.size, pre, seed++);
    kinds.push_back(std::move(k));
  }
  if (kinds.empty()) return InvalidArgument("--mix is empty");
  double total = 0;
  for (const auto& k : kinds) total += k.weight;
  for (auto& k : kinds) k.weight /= total;
  return kinds;
}

std::vector<int> DrawKinds(const std::vector<Kind>& kinds, size_t n, std::mt19937_64& rng) {
  std::vector<double> w;
  for (const auto& k : kinds) w.push_back(k.weight);
  std::discrete_distribution<int> pick(w.begin(), w.end());
  std::vector<int> out(n);
  for (int& k : out) k = pick(rng);
  return out;
}

int RunBalance(const VisionModelPtr& vm, const vision::PreprocessConfig& pre, const std::string& mix,
               const std::vector<int>& gs, const std::vector<double>& loads, std::vector<std::string> policies,
               double duration, int rounds, int min_images, uint64_t seed, const std::string& svg) {
  fmt::print("\n== balance: open-loop Poisson stream of a mixed-size image stream on the real workers ==\n");
  PrintMachine("before");
  auto parsed = ParseMix(mix, pre);
  if (!parsed.ok()) return fmt::print(stderr, "{}\n", parsed.status().ToString()), 1;
  std::vector<Kind> kinds = std::move(parsed).value();
  double mean_ms = 0, mean_patches = 0;
  fmt::print("\n{:>10} {:>7} {:>8} {:>12}\n", "size", "share", "patches", "encode ms");
  for (auto& k : kinds) {
    k.one_ms = CalibrateMs(*vm, *k.tensor, 3);
    mean_ms += k.weight * k.one_ms;
    mean_patches += k.weight * k.tensor->patches();
    fmt::print("{:>10} {:>7.2f} {:>8} {:>12.1f}\n", k.size.Name(), k.weight, k.tensor->patches(), k.one_ms);
  }
  fmt::print("mix: mean {:.0f} patches, mean encode {:.1f} ms on one thread (calibrated, median of 3)\n", mean_patches,
             mean_ms);

  std::vector<BalanceRow> rows;
  for (int g : gs) {
    // Capacity of G workers, measured: a closed burst of the mix (fewest-patches), timed.
    std::mt19937_64 crng(seed ^ 0xca9ac17u);
    const size_t nb = static_cast<size_t>(std::max(4 * g, static_cast<int>(std::lround(2.0 * g * 1000.0 / mean_ms))));
    const std::vector<int> burst = DrawKinds(kinds, nb, crng);
    double cap = 0;
    {
      auto enc = Encoder(vm, g, "fewest-patches");
      if (!enc.ok()) return fmt::print(stderr, "{}\n", enc.status().ToString()), 1;
      Waiter w;
      double burst_ms = 0;
      for (int k : burst) burst_ms += kinds[static_cast<size_t>(k)].one_ms;
      const auto t0 = Clock::now();
      for (int k : burst)
        (*enc)->Encode(kinds[static_cast<size_t>(k)].tensor, [&](Result<vision::EncodedImage> r) { w.Finish(r.status()); });
      if (!w.WaitFor(burst.size(), std::chrono::seconds(1800))) return fmt::print(stderr, "capacity burst timed out\n"), 1;
      // Images/s of the mix = (work in the burst / its wall time) / E[encode].
      const double wall_ms = Ms(Clock::now() - t0);
      cap = burst_ms / wall_ms * 1000.0 / mean_ms;
      fmt::print("G={}: measured capacity {:.2f} images/s of the mix ({} images in {:.2f} s; nominal G/E[encode] = {:.2f}, "
                 "i.e. {:.2f} workers' worth)\n",
                 g, cap, burst.size(), wall_ms / 1000, g * 1000.0 / mean_ms, cap * mean_ms / 1000.0);
    }
    for (size_t li = 0; li < loads.size(); ++li) {
      const double load = loads[li];
      const double rate = load * cap;
      std::vector<BalanceRow> got(policies.size());
      for (size_t p = 0; p < policies.size(); ++p) got[p].workers = g, got[p].load = load, got[p].policy = policies[p];
      // Each round is a fresh seeded stream that every policy runs in turn (the order rotating),
      // so drift on a shared machine spreads over the policies instead of landing on one.
      for (int round = 0; round < rounds; ++round) {
        const double secs = duration / rounds;
        const size_t n = static_cast<size_t>(std::max(min_images, static_cast<int>(std::lround(rate * secs))));
        std::mt19937_64 rng(seed + static_cast<uint64_t>(g) * 1000000 + li * 1000 + static_cast<uint64_t>(round));
        std::exponential_distribution<double> gap(rate);
        std::vector<Arrival> arrivals(n);
        const std::vector<int> k = DrawKinds(kinds, n, rng);
        double t = 0;
        for (size_t i = 0; i < n; ++i) {
          t += gap(rng);
          arrivals[i] = {t, k[i]};
        }
        fmt::print(stderr, "  G={} load {:.2f} round {}: {} images at {:.2f}/s over {:.1f} s\n", g, load, round, n, rate, t);
        for (size_t j = 0; j < policies.size(); ++j) {
          const size_t p = (j + li + static_cast<size_t>(round)) % policies.size();
          const size_t before = got[p].lat.size();
          if (Status st = RunRound(vm, kinds, arrivals, &got[p]); !st.ok())
            return fmt::print(stderr, "{} G={} load {}: {}\n", policies[p], g, load, st.ToString()), 1;
          std::vector<double> mine(got[p].lat.begin() + static_cast<std::ptrdiff_t>(before), got[p].lat.end());
          fmt::print(stderr, "    {:>15}: p50 {:8.1f} ms  p99 {:8.1f} ms\n", policies[p], Pct(mine, 50), Pct(mine, 99));
        }
      }
      for (auto& r : got) rows.push_back(std::move(r));
    }
  }

  fmt::print("\npatches in flight per worker (queued + encoding; the encoder's ledger), time-averaged over the run;\n"
             "latency = queue + encode per image (ms); late = the dispatcher's lag behind the Poisson schedule (ms)\n");
  fmt::print("\n{:>2} {:>5} {:>15} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>8} {:>8} {:>8} {:>11}  {}\n", "G", "load",
             "policy", "images", "busy", "mean/wkr", "max/wkr", "max/mean", "peak", "p50", "p99", "mean", "late mean/max",
             "images per worker");
  for (const auto& r : rows)
    fmt::print("{:>2} {:>5.2f} {:>15} {:>6} {:>6.2f} {:>9.0f} {:>9.0f} {:>9.3f} {:>7.0f} {:>8.1f} {:>8.1f} {:>8.1f} {:>5.1f}/{:<5.0f}  [{}]\n",
               r.workers, r.load, r.policy, r.images(), r.busy(), r.mean_wkr(), r.max_wkr(), r.MaxOverMean(), r.peak,
               r.LatPct(50), r.LatPct(99), r.LatMean(), r.LateMean(), r.LateMax(), fmt::join(r.per_worker, ","));
  const std::string base = policies[0];
  fmt::print("\nratios {} / other (below 1: {} better)\n", base, base);
  fmt::print("{:>2} {:>5} {:>15} {:>10} {:>8} {:>8} {:>8} {:>8}\n", "G", "load", "vs", "max/mean", "max/wkr", "p50", "p99",
             "mean");
  for (int g : gs)
    for (double load : loads) {
      const BalanceRow* b = nullptr;
      for (const auto& r : rows)
        if (r.workers == g && r.load == load && r.policy == base) b = &r;
      for (const auto& r : rows) {
        if (r.workers != g || r.load != load || r.policy == base || !b) continue;
        fmt::print("{:>2} {:>5.2f} {:>15} {:>10.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f}\n", g, load, r.policy,
                   b->MaxOverMean() / r.MaxOverMean(), b->max_wkr() / r.max_wkr(), b->LatPct(50) / r.LatPct(50),
                   b->LatPct(99) / r.LatPct(99), b->LatMean() / r.LatMean());
      }
    }
  PrintMachine("after");
  if (!svg.empty()) {
    std::ofstream f(svg, std::ios::trunc);
    f << BalanceSvg(rows, gs, loads, policies);
    if (!f.good()) return fmt::print(stderr, "cannot write {}\n", svg), 1;
    fmt::print("wrote {}\n", svg);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// ttft

// A side × side RGB PNG of something photo-like (smooth gradients, a few discs, mild noise),
// encoded with libpng's simplified API.
Result<std::string> MakePng(int side, uint32_t seed) {
  std::vector<uint8_t> rgb(size_t{3} * side * side);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(-6, 6);
  std::uniform_real_distribution<double> u(0, 1);
  struct Disc {
    double x, y, r;
    int c[3];
  };
  std::vector<Disc> discs;
  for (int i = 0; i < 12; ++i)
    discs.push_back({u(rng) * side, u(rng) * side, (0.03 + 0.12 * u(rng)) * side,
                     {static_cast<int>(u(rng) * 255), static_cast<int>(u(rng) * 255), static_cast<int>(u(rng) * 255)}});
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x) {
      int c[3] = {x * 255 / side, y * 255 / side, (x + y) * 127 / side};
      for (const Disc& d : discs)
        if ((x - d.x) * (x - d.x) + (y - d.y) * (y - d.y) < d.r * d.r) std::copy(d.c, d.c + 3, c);
      for (int ch = 0; ch < 3; ++ch)
        rgb[(size_t(y) * side + x) * 3 + ch] = static_cast<uint8_t>(std::clamp(c[ch] + noise(rng), 0, 255));
    }
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  im.width = static_cast<png_uint_32>(side);
  im.height = static_cast<png_uint_32>(side);
  im.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&im, nullptr, &size, 0, rgb.data(), 0, nullptr))
    return Internal(fmt::format("libpng: {}", im.message));
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&im, out.data(), &size, 0, rgb.data(), 0, nullptr))
    return Internal(fmt::format("libpng: {}", im.message));
  out.resize(size);
  png_image_free(&im);
  return out;
}

struct TtftSample {
  double total_ms = 0;     // Prepare called → first token
  double pipeline_ms = 0;  // Prepare called → embeddings back
  double fetch_ms = 0, decode_ms = 0, encode_ms = 0;
  double engine_ms = 0;    // Submit → first token (prefill)
  int64_t cached = 0, prompt = 0;
  TokenId first = 0;
  uint64_t hash_hi = 0, hash_lo = 0;
};

Result<vision::PreparedImage> PrepareOne(vision::ImagePipeline& pipe, const std::string& url) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<std::vector<vision::PreparedImage>>> got;
  pipe.Prepare({vision::ImageRef{url, "bench.image"}}, [&](Result<std::vector<vision::PreparedImage>> r) {
    std::lock_guard lk(mu);
    got = std::move(r);
    cv.notify_all();
  });
  std::unique_lock lk(mu);
  if (!cv.wait_for(lk, std::chrono::minutes(10), [&] { return got.has_value(); })) return Internal("pipeline timed out");
  if (!got->ok()) return got->status();
  if ((*got)->size() != 1) return Internal("pipeline returned the wrong image count");
  return std::move((**got)[0]);
}

// Submits and waits for the first (and only) token; returns submit → first token.
Result<double> FirstToken(engine::Engine& e, engine::SubmitRequest req, TtftSample* s) {
  req.sampling.max_tokens = 1;
  req.sampling.temperature = 0;
  req.sampling.ignore_eos = true;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<Clock::time_point> first;
  std::string error;
  const auto t0 = Clock::now();
  auto id = e.Submit(std::move(req), [&](const engine::Output& o) {
    std::lock_guard lk(mu);
    if (!first && !o.tokens.empty()) {
      first = Clock::now();
      if (s) s->first = o.tokens[0].token;
    }
    if (o.finished) {
      if (s) s->cached = o.cached_tokens, s->prompt = o.prompt_tokens;
      error = o.error;
      done = true;
      cv.notify_all();
    }
  });
  LADLE_RETURN_IF_ERROR(id.status());
  std::unique_lock lk(mu);
  if (!cv.wait_for(lk, std::chrono::minutes(10), [&] { return done; })) return Internal("no answer in 10 minutes");
  if (!error.empty()) return Internal(error);
  if (!first) return Internal("no token");
  return Ms(*first - t0);
}

Result<TtftSample> OneTtft(vision::ImagePipeline& pipe, engine::Engine& e, const std::string& url,
                           const std::vector<TokenId>& before, const std::vector<TokenId>& after, TokenId image_token) {
  TtftSample s;
  const auto t0 = Clock::now();
  LADLE_ASSIGN_OR_RETURN(vision::PreparedImage im, PrepareOne(pipe, url));
  s.pipeline_ms = Ms(Clock::now() - t0);
  s.fetch_ms = im.fetch_ms;
  s.decode_ms = im.decode_ms;
  s.encode_ms = im.encode_ms;
  s.hash_hi = im.hash_hi;
  s.hash_lo = im.hash_lo;
  engine::SubmitRequest req;
  req.prompt = before;
  req.prompt.insert(req.prompt.end(), static_cast<size_t>(im.groups), image_token);
  req.prompt.insert(req.prompt.end(), after.begin(), after.end());
  engine::PromptImage pi;
  pi.pos = static_cast<int64_t>(before.size());
  pi.tokens = im.groups;
  pi.hash_hi = im.hash_hi;
  pi.hash_lo = im.hash_lo;
  pi.embeds = im.embeds;
  req.images.push_back(std::move(pi));
  LADLE_ASSIGN_OR_RETURN(s.engine_ms, FirstToken(e, std::move(req), &s));
  s.total_ms = s.pipeline_ms + s.engine_ms;  // building the prompt in between: microseconds
  return s;
}

int RunTtft(const VisionModelPtr& vm, const std::string& tokenizer_path, int side, int repeats, int workers, bool check) {
  fmt::print("\n== ttft: one {}x{} PNG (data: URL) → ImagePipeline → engine prefill (built-in model) ==\n", side, side);
  PrintMachine("before");
  auto tok = tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) {
    fmt::print("skipped: no tokenizer ({}: {})\n", tokenizer_path, tok.status().ToString());
    return 77;
  }
  auto png = MakePng(side, 42);
  if (!png.ok()) return fmt::print(stderr, "{}\n", png.status().ToString()), 1;
  const std::string url = "data:image/png;base64," + Base64Encode(*png);
  auto enc = Encoder(vm, workers, "fewest-patches");
  if (!enc.ok()) return fmt::print(stderr, "{}\n", enc.status().ToString()), 1;
  std::shared_ptr<vision::ImageEncoder> encoder = std::move(enc).value();
  // The image stage without its embedding cache: every request decodes and encodes.
  vision::ImagePipelineOptions no_cache;
  no_cache.embedding_cache_bytes = 0;
  auto bare = vision::ImagePipeline::Create(no_cache, vision::PreprocessFor(*vm), encoder);
  if (!bare.ok()) return fmt::print(stderr, "{}\n", bare.status().ToString()), 1;
  const engine::ModelConfig mc = vm->config();
  const std::vector<TokenId> before = tok->EncodePlain("You are looking at a photograph. Here it is: ");
  const std::vector<TokenId> after = tok->EncodePlain(" Describe what is in the top left corner, in one sentence.");
  fmt::print("PNG {} bytes ({} as a data: URL); prompt: {} text tokens + the image's placeholders + {} text tokens\n",
             png->size(), url.size(), before.size(), after.size());

  // cold: nothing cached (a fresh engine, a fresh image stage). kv: the same request again on
  // the same engine through a stage without the embedding cache (the KV prefix hits, the image
  // is decoded and encoded again). kv+emb: once more through the first stage, as served by
  // default (the embedding cache and the KV prefix both hit).
  const std::vector<std::string> cases = {"cold", "kv", "kv+emb"};
  std::vector<std::vector<TtftSample>> got(cases.size());
  std::vector<uint64_t> emb_hits(cases.size(), 0);
  for (int rep = 0; rep < repeats; ++rep) {
    // A fresh engine per repeat (an empty prefix cache), warmed up on an unrelated text prompt
    // (threads, first touch of the KV pool) that shares no block with the image request.
    auto m = engine::Model::Create(mc, "");
    if (!m.ok()) return fmt::print(stderr, "{}\n", m.status().ToString()), 1;
    engine::EngineConfig c;
    c.num_blocks = 64;
    c.max_running = 4;
    c.chunk_policy = "fixed";  // no cost-model profile per engine; one chunk holds the prompt
    c.chunk_tokens = 2048;
    auto e = engine::CreateEngine(c, std::move(m).value(), *tok);
    if (!e.ok()) return fmt::print(stderr, "{}\n", e.status().ToString()), 1;
    auto cached = vision::ImagePipeline::Create(vision::ImagePipelineOptions{}, vision::PreprocessFor(*vm), encoder);
    if (!cached.ok()) return fmt::print(stderr, "{}\n", cached.status().ToString()), 1;
    engine::SubmitRequest wu;
    for (int i = 0; i < 1100; ++i) wu.prompt.push_back(static_cast<TokenId>(1000 + (i * 7919) % 60000));
    if (auto r = FirstToken(**e, wu, nullptr); !r.ok()) return fmt::print(stderr, "warm-up: {}\n", r.status().ToString()), 1;
    vision::ImagePipeline* stage[] = {cached->get(), bare->get(), cached->get()};
    std::string line;
    for (size_t k = 0; k < cases.size(); ++k) {
      const uint64_t hits0 = stage[k]->GetStats().cache_hits;
      auto r = OneTtft(*stage[k], **e, url, before, after, mc.image_token_id);
      if (!r.ok()) return fmt::print(stderr, "{}: {}\n", cases[k], r.status().ToString()), 1;
      emb_hits[k] += stage[k]->GetStats().cache_hits - hits0;
      if (k > 0 && r->first != got[0].back().first)
        fmt::print(stderr, "note: {}'s first token {} differs from cold's {}\n", cases[k], r->first, got[0].back().first);
      line += fmt::format("  {} {:.1f} ms ({} KV cached)", cases[k], r->total_ms, r->cached);
      got[k].push_back(*r);
    }
    fmt::print(stderr, "  rep {}:{}\n", rep, line);
    (*e)->Shutdown();
  }
  auto med = [](const std::vector<TtftSample>& v, double TtftSample::*f) {
    std::vector<double> x;
    for (const auto& s : v) x.push_back(s.*f);
    return Median(x);
  };
  fmt::print("\nmedians of {} repeats (ms). cold: nothing cached; kv: the same request again, its KV prefix cached, the "
             "image stage without its embedding cache; kv+emb: again, as served by default (embedding cache on).\n"
             "fetch = the data: URL's base64 decode; decode = probe + PNG decode + resize + normalise; encode = the "
             "vision tower on one worker; pipeline = Prepare → embeddings; prefill = Submit → first token; "
             "TTFT = pipeline + prefill\n",
             repeats);
  fmt::print("\n{:>8} {:>9} {:>8} {:>8} {:>9} {:>10} {:>9} {:>8} {:>10} {:>8} {:>8}\n", "case", "TTFT", "fetch", "decode",
             "encode", "pipeline", "prefill", "prompt", "KV cached", "emb hit", "token");
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& v = got[k];
    fmt::print("{:>8} {:>9.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>10.1f} {:>9.1f} {:>8} {:>10} {:>8} {:>8}\n", cases[k],
               med(v, &TtftSample::total_ms), med(v, &TtftSample::fetch_ms), med(v, &TtftSample::decode_ms),
               med(v, &TtftSample::encode_ms), med(v, &TtftSample::pipeline_ms), med(v, &TtftSample::engine_ms),
               v[0].prompt, v[0].cached, fmt::format("{}/{}", emb_hits[k], v.size()), v[0].first);
  }
  const double cold = med(got[0], &TtftSample::total_ms);
  fmt::print("\nTTFT / cold: kv {:.3f}, kv+emb {:.3f}; prefill alone / cold's: kv {:.3f}, kv+emb {:.3f}\n",
             med(got[1], &TtftSample::total_ms) / cold, med(got[2], &TtftSample::total_ms) / cold,
             med(got[1], &TtftSample::engine_ms) / med(got[0], &TtftSample::engine_ms),
             med(got[2], &TtftSample::engine_ms) / med(got[0], &TtftSample::engine_ms));
  PrintMachine("after");
  if (check) {
    for (size_t k = 1; k < cases.size(); ++k)
      for (const auto& w : got[k])
        if (w.cached <= 0) return fmt::print(stderr, "check: {}: the repeated image request hit no cached prefix\n", cases[k]), 1;
    if (emb_hits[2] != got[2].size() || emb_hits[0] != 0 || emb_hits[1] != 0)
      return fmt::print(stderr, "check: the embedding cache hit {}/{}/{} times (cold/kv/kv+emb)\n", emb_hits[0], emb_hits[1],
                        emb_hits[2]), 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"image input on the real encoder workers and engine: throughput, balancer vs round-robin, TTFT"};
  std::vector<std::string> sections = {"throughput", "balance", "ttft"};
  std::vector<int> sizes = {224, 512, 1024}, tp_workers = {1, 2}, gs = {2};
  std::vector<double> loads = {0.5, 0.8};
  std::vector<std::string> policies = {"fewest-patches", "round-robin", "fewest-images"};
  std::string mix = "224x224:0.4,512x512:0.3,768x768:0.2,1024x512:0.1", svg;
  std::string tokenizer_path = std::string(LADLE_BENCH_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
  double seconds = 2.0, duration = 8.0;
  int repeats = 2, min_images = 4, min_stream = 20, rounds = 2, ttft_repeats = 3, ttft_side = 1024, ttft_workers = 1;
  uint64_t seed = 20261218;
  bool smoke = false, check = false;
  app.add_option("--sections", sections, "which sections")->delimiter(',')->capture_default_str();
  app.add_option("--sizes", sizes, "throughput: square image sides")->delimiter(',')->capture_default_str();
  app.add_option("--tp-workers", tp_workers, "throughput: worker counts compared")->delimiter(',')->capture_default_str();
  app.add_option("--seconds", seconds, "throughput: about this much one-worker work per burst")->capture_default_str();
  app.add_option("--repeats", repeats, "throughput: bursts per point (the fastest kept)")->capture_default_str();
  app.add_option("--mix", mix, "balance: WxH:weight,...")->capture_default_str();
  app.add_option("--loads", loads, "balance: offered loads (of the measured capacity)")->delimiter(',')->capture_default_str();
  app.add_option("--workers", gs, "balance: encoder workers G")->delimiter(',')->capture_default_str();
  app.add_option("--policies", policies, "balance: worker policies (the first is the one the ratios are of)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--duration", duration, "balance: seconds of arrivals per (G, load, policy)")->capture_default_str();
  app.add_option("--rounds", rounds, "balance: the duration split into this many streams, policies taking turns")
      ->capture_default_str();
  app.add_option("--min-images", min_stream, "balance: at least this many images per round")->capture_default_str();
  app.add_option("--seed", seed, "balance: arrival and size seed")->capture_default_str();
  app.add_option("--svg", svg, "balance: write p99 vs load per policy here");
  app.add_option("--ttft-repeats", ttft_repeats, "ttft: fresh engines (medians reported)")->capture_default_str();
  app.add_option("--ttft-side", ttft_side, "ttft: the PNG's side")->capture_default_str();
  app.add_option("--ttft-workers", ttft_workers, "ttft: encoder workers (one image: 1 is enough)")->capture_default_str();
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json")->capture_default_str();
  app.add_flag("--smoke", smoke, "about ten seconds: small sizes and streams, a 640² TTFT, one repeat");
  app.add_flag("--check", check, "fail unless the repeated image requests hit the KV prefix (and embedding) cache");
  CLI11_PARSE(app, argc, argv);
  if (smoke) {
    sizes = {224};
    seconds = 0.3;
    repeats = 1;
    mix = "224x224:0.7,512x512:0.3";
    loads = {0.7};
    duration = 1.5;
    rounds = 1;
    min_stream = 10;
    ttft_repeats = 1;
    ttft_side = 640;  // 400 placeholders: long enough for a prefix hit past the hit policy's cap
  }

  auto created = engine::VisionModel::Create(engine::ModelConfig{}, "");
  if (!created.ok()) return fmt::print(stderr, "{}\n", created.status().ToString()), 1;
  const VisionModelPtr vm = std::move(created).value();
  const vision::PreprocessConfig pre = vision::PreprocessFor(*vm);
  const auto& c = vm->config();
  fmt::print("vision_bench: built-in vision tower (ModelConfig{{}}: {} layers, width {}, {} heads, patch {}, merge {}, "
             "max side {}; hidden {})\n",
             c.vision_layers, c.vision_hidden, c.vision_heads, c.vision_patch, c.vision_merge, c.vision_max_side, c.hidden);
  PrintMachine("start");
  const auto t0 = Clock::now();
  bool skipped = false;
  for (const std::string& s : sections) {
    int rc = 0;
    if (s == "throughput") {
      rc = RunThroughput(vm, pre, sizes, tp_workers, seconds, repeats, min_images);
    } else if (s == "balance") {
      rc = RunBalance(vm, pre, mix, gs, loads, policies, duration, std::max(1, rounds), min_stream, seed, svg);
    } else if (s == "ttft") {
      rc = RunTtft(vm, tokenizer_path, ttft_side, ttft_repeats, ttft_workers, check);
      if (rc == 77) skipped = true, rc = 0;
    } else {
      fmt::print(stderr, "unknown section '{}' (throughput, balance, ttft)\n", s);
      rc = 2;
    }
    if (rc != 0) return rc;
  }
  fmt::print("\ntotal {:.1f} s\n", Sec(Clock::now() - t0));
  return skipped ? 77 : 0;  // 77: a section was skipped (ctest's SKIP_RETURN_CODE)
}
