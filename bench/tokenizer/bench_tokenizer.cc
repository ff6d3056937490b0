// ladle_bench_tokenizer: throughput, latency, load time and memory of Ladle's tokenizer.
//
// Google Benchmark binary; every Google Benchmark flag works (--benchmark_filter=...,
// --benchmark_repetitions=..., --benchmark_format=json, ...). Its own flags:
//   --tokenizer=PATH        tokenizer.json (else $LADLE_TOKENIZER, else the set-up cache, else
//                           shared/tokenizers/deepseek-v3/tokenizer.json)
//   --corpus-dir=DIR        every *.txt in DIR, sorted by name (else $LADLE_CORPUS_DIR, else
//                           .cache/corpus)
//   --corpus=FILE[,FILE]    explicit corpus files in this order (repeatable; overrides the dir)
//   --json-summary=PATH     writes the headline numbers as a small JSON object
//   --dump-ids=PATH         writes EncodeTrusted's ids of the mixed corpus (uint32 LE), for the
//                           parity check against Hugging Face in peers/peers.js
//   --threads=1,2           thread counts for the EncodePlain scaling benchmarks
//   --prompt-runs=N         timed runs behind the 8K-token prompt's p50/p95
//   --quick                 short run (CI): fewer samples, shorter minimum time per benchmark
//
// The corpus is the given files; "mixed" is all of them concatenated in order, and each file
// is also a category of its own (named after the file's stem). See README.md beside this file
// for what each number means.

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ladle/core/thread_pool.h"
#include "ladle/tokenizer/tokenizer.h"

#ifndef LADLE_BENCH_CACHE_DIR
#define LADLE_BENCH_CACHE_DIR ".cache"
#endif
#ifndef LADLE_BENCH_SHARED_DIR
#define LADLE_BENCH_SHARED_DIR "../shared"
#endif

namespace {

namespace fs = std::filesystem;
using ladle::ThreadPool;
using ladle::tokenizer::EncodeOptions;
using ladle::tokenizer::TokenId;
using ladle::tokenizer::Tokenizer;
using Clock = std::chrono::steady_clock;

constexpr double kMB = 1e6;  // every "MB" this binary prints is 10^6 bytes
constexpr size_t kPromptTokens = 8192;
constexpr size_t kLongPromptTokens = 1'000'000;
constexpr size_t kScalingSliceBytes = 1 << 20;  // the ">= 1 MB" input of the scaling benchmarks

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
  std::string tokenizer_path;
  std::string corpus_dir;
  std::vector<std::string> corpus_files;
  std::string json_summary;
  std::string dump_ids;
  std::vector<size_t> threads = {1, 2};
  size_t prompt_runs = 0;  // 0: 1000, or 200 with --quick
  bool quick = false;
  bool user_min_time = false;
  bool user_repetitions = false;
};

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "ladle_bench_tokenizer: %s\n", msg.c_str());
  std::exit(2);
}

std::vector<std::string> SplitComma(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string_view::npos) comma = s.size();
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

void PrintOwnHelp() {
  std::printf(
      "ladle_bench_tokenizer [own flags] [Google Benchmark flags]\n"
      "  --tokenizer=PATH       tokenizer.json ($LADLE_TOKENIZER)\n"
      "  --corpus-dir=DIR       *.txt files, sorted by name ($LADLE_CORPUS_DIR)\n"
      "  --corpus=FILE[,FILE]   explicit corpus files, in order (repeatable)\n"
      "  --json-summary=PATH    headline numbers as JSON\n"
      "  --dump-ids=PATH        EncodeTrusted ids of the mixed corpus, uint32 LE\n"
      "  --threads=1,2          thread counts for the EncodePlain scaling benchmarks\n"
      "  --prompt-runs=N        timed runs behind the 8K-token prompt p50/p95\n"
      "  --quick                short run (CI)\n\n");
}

// Takes this binary's flags out of argv, leaving Google Benchmark's.
Config ParseOwnFlags(int* argc, char** argv) {
  Config cfg;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string_view a = argv[i];
    auto value_of = [&](std::string_view flag) -> std::optional<std::string> {
      if (a.size() > flag.size() && a.substr(0, flag.size()) == flag && a[flag.size()] == '=') {
        return std::string(a.substr(flag.size() + 1));
      }
      if (a == flag) {
        if (i + 1 >= *argc) Die(std::string(flag) + " needs a value");
        return std::string(argv[++i]);
      }
      return std::nullopt;
    };
    if (auto v = value_of("--tokenizer")) {
      cfg.tokenizer_path = *v;
    } else if (auto v2 = value_of("--corpus-dir")) {
      cfg.corpus_dir = *v2;
    } else if (auto v3 = value_of("--corpus")) {
      for (auto& f : SplitComma(*v3)) cfg.corpus_files.push_back(f);
    } else if (auto v4 = value_of("--json-summary")) {
      cfg.json_summary = *v4;
    } else if (auto v5 = value_of("--dump-ids")) {
      cfg.dump_ids = *v5;
    } else if (auto v6 = value_of("--threads")) {
      cfg.threads.clear();
      for (auto& t : SplitComma(*v6)) {
        size_t n = std::strtoul(t.c_str(), nullptr, 10);
        if (n == 0) Die("--threads takes positive integers, got '" + t + "'");
        cfg.threads.push_back(n);
      }
    } else if (auto v7 = value_of("--prompt-runs")) {
      cfg.prompt_runs = std::strtoul(v7->c_str(), nullptr, 10);
    } else if (a == "--quick") {
      cfg.quick = true;
    } else {
      if (a == "--help" || a == "-h") PrintOwnHelp();
      if (a.substr(0, 21) == "--benchmark_min_time=") cfg.user_min_time = true;
      if (a.substr(0, 24) == "--benchmark_repetitions=") cfg.user_repetitions = true;
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
  if (cfg.prompt_runs == 0) cfg.prompt_runs = cfg.quick ? 200 : 1000;
  return cfg;
}

std::string FirstExisting(const std::vector<std::string>& candidates) {
  for (const auto& c : candidates) {
    std::error_code ec;
    if (!c.empty() && fs::is_regular_file(c, ec)) return c;
  }
  return {};
}

std::string EnvOr(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

void ResolvePaths(Config* cfg) {
  if (cfg->tokenizer_path.empty()) {
    std::string env = EnvOr("LADLE_TOKENIZER");
    if (!env.empty()) {
      cfg->tokenizer_path = env;
    } else {
      cfg->tokenizer_path = FirstExisting({
          std::string(LADLE_BENCH_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json",
          std::string(LADLE_BENCH_SHARED_DIR) + "/tokenizers/deepseek-v3/tokenizer.json",
      });
    }
    if (cfg->tokenizer_path.empty()) {
      Die("no tokenizer.json: pass --tokenizer=PATH or set LADLE_TOKENIZER");
    }
  }
  if (cfg->corpus_files.empty()) {
    if (cfg->corpus_dir.empty()) cfg->corpus_dir = EnvOr("LADLE_CORPUS_DIR");
    if (cfg->corpus_dir.empty()) cfg->corpus_dir = std::string(LADLE_BENCH_CACHE_DIR) + "/corpus";
    std::error_code ec;
    if (!fs::is_directory(cfg->corpus_dir, ec)) {
      Die("corpus directory '" + cfg->corpus_dir +
          "' does not exist: pass --corpus-dir, --corpus or set LADLE_CORPUS_DIR "
          "(scripts/bench makes one)");
    }
    for (const auto& e : fs::directory_iterator(cfg->corpus_dir)) {
      if (e.is_regular_file() && e.path().extension() == ".txt") {
        cfg->corpus_files.push_back(e.path().string());
      }
    }
    // Byte order of the names: peers.js sorts the same way.
    std::sort(cfg->corpus_files.begin(), cfg->corpus_files.end(),
              [](const std::string& a, const std::string& b) {
                return fs::path(a).filename().string() < fs::path(b).filename().string();
              });
    if (cfg->corpus_files.empty()) Die("no *.txt files in '" + cfg->corpus_dir + "'");
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

// Resident set size in KiB, from /proc/self/status.
long VmRssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// The 1-minute load average: other work on the machine skews every number, the thread scaling
// most.
double LoadAvg1() {
  std::ifstream in("/proc/loadavg");
  double v = NAN;
  if (!(in >> v)) return NAN;
  return v;
}

// Largest n' <= n that does not cut a UTF-8 sequence of s.
size_t Utf8Floor(std::string_view s, size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Process-wide CPU seconds and involuntary context switches: with the wall time they tell
// whether the pool's threads really ran in parallel (cpu_util near the thread count) or were
// pushed off the CPUs by other processes (cpu_util near 1, many involuntary switches).
struct Usage {
  double cpu_s = 0;
  long nivcsw = 0;
  static Usage Now() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    auto sec = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) * 1e-6; };
    return Usage{sec(ru.ru_utime) + sec(ru.ru_stime), ru.ru_nivcsw};
  }
};

// The text of (about) the first `k` tokens of `text`: byte-level BPE is lossless, so decoding
// a prefix of the ids gives a prefix of the text. Trimmed to a code-point boundary.
std::string PrefixOfTokens(const Tokenizer& tok, std::string_view text, size_t k) {
  // Encode a window that surely holds k tokens (a token is at least one byte), growing if not.
  size_t window = std::min(text.size(), k * 8 + 64);
  for (;;) {
    std::string_view w = text.substr(0, Utf8Floor(text, window));
    std::vector<TokenId> ids = tok.EncodePlainSerial(w);
    if (ids.size() > k || w.size() == text.size()) {
      ids.resize(std::min(ids.size(), k));
      auto bytes = tok.Decode(ids);
      if (!bytes.ok()) Die("Decode failed: " + bytes.status().ToString());
      std::string s = std::move(bytes).value();
      s.resize(Utf8Floor(s, s.size()));
      return s;
    }
    window *= 2;
  }
}

std::string JsonEscape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string JsonNum(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", *v);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// What the benchmarks share

struct Category {
  std::string name;
  std::string path;
  std::string text;
};

struct Bench {
  Config cfg;
  std::optional<Tokenizer> tok;
  std::vector<Category> cats;
  std::string mixed;              // all categories concatenated
  std::vector<TokenId> mixed_ids;  // EncodePlainSerial(mixed)
  std::string slice_1mb;          // ~1 MiB: an equal share of each category
  std::vector<TokenId> slice_ids;
  std::string prompt_8k;
  std::string prompt_1m;
  // threads -> pool; threads:1 has a pool too but takes the serial path.
  std::map<size_t, std::unique_ptr<ThreadPool>> pools;

  // Measured outside Google Benchmark.
  double load_ms_first = NAN;
  double load_avg_start = NAN;  // 1-minute load average before anything ran
  double rss_delta_mb = NAN;
  double memory_bytes_mb = NAN;
  size_t tokens_trusted = 0;
  bool roundtrip_ok = false;
  std::map<std::string, bool> parallel_equal;  // benchmark -> EncodePlain == EncodePlainSerial

  // Bytes and tokens of one iteration, per benchmark, for the summary.
  struct Work {
    double bytes = 0;
    double tokens = 0;
  };
  std::map<std::string, Work> work;
};

Bench* g = nullptr;

// Serial options: a 1-thread pool that is never handed anything.
EncodeOptions OptionsFor(size_t threads) {
  EncodeOptions o;
  o.pool = g->pools.at(threads).get();
  if (threads == 1) {
    o.parallel_min_bytes = std::numeric_limits<size_t>::max();
  } else {
    o.max_parallelism = threads;
  }
  return o;
}

void SetThroughput(benchmark::State& state, double bytes, double tokens) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["tokens/s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB"] =
      benchmark::Counter(bytes / kMB, benchmark::Counter::kIsIterationInvariantRate);
}

// ---------------------------------------------------------------------------------------------
// Summary capture: a reporter that forwards to the normal one and keeps each benchmark's time
// and counters (the median aggregate when --benchmark_repetitions gives one).

struct Captured {
  double seconds = NAN;  // real (or manual) time per iteration
  std::map<std::string, double> counters;
  bool from_median = false;
  int runs = 0;
};

class CaptureReporter : public benchmark::BenchmarkReporter {
 public:
  explicit CaptureReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner)
      : inner_(std::move(inner)) {}

  bool ReportContext(const Context& context) override { return inner_->ReportContext(context); }

  void ReportRuns(const std::vector<Run>& reports) override {
    for (const Run& r : reports) {
      if (r.error_occurred) continue;
      const std::string& name = r.run_name.function_name;
      Captured& c = results_[name];
      double sec = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      if (r.run_type == Run::RT_Aggregate) {
        if (r.aggregate_name != "median") continue;
        c = Captured{};
        c.from_median = true;
      } else if (c.from_median) {
        continue;
      }
      // Iteration runs of several repetitions without a median: keep their mean.
      int n = ++c.runs;
      c.seconds = (n == 1 ? 0.0 : c.seconds) * (n - 1) / n + sec / n;
      for (const auto& [k, counter] : r.counters) {
        double prev = (n == 1 || !c.counters.count(k)) ? 0.0 : c.counters[k];
        c.counters[k] = prev * (n - 1) / n + counter.value / n;
      }
    }
    inner_->ReportRuns(reports);
  }

  void Finalize() override { inner_->Finalize(); }

  const Captured* Get(const std::string& name) const {
    auto it = results_.find(name);
    return it == results_.end() || !std::isfinite(it->second.seconds) ? nullptr : &it->second;
  }

 private:
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
  std::map<std::string, Captured> results_;
};

// ---------------------------------------------------------------------------------------------
// Benchmarks

void RegisterAll() {
  const Config& cfg = g->cfg;
  std::vector<benchmark::internal::Benchmark*> timed;  // get --quick's shorter min time

  // Loading tokenizer.json (page cache warm after the first load in main()).
  benchmark::RegisterBenchmark("Load", [](benchmark::State& state) {
    for (auto _ : state) {
      auto t0 = Clock::now();
      auto r = Tokenizer::FromFile(g->cfg.tokenizer_path);
      auto t1 = Clock::now();
      if (!r.ok()) {
        state.SkipWithError(r.status().ToString().c_str());
        break;
      }
      state.SetIterationTime(Seconds(t1 - t0));
      // The handle is destroyed here, outside the timed region.
    }
  })->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(cfg.quick ? 2 : 5);

  struct Input {
    const char* label;
    const std::string* text;
    const std::vector<TokenId>* serial_ids;
  };
  // First (while a machine that was idle at the start most likely still is): thread scaling
  // measured in pairs: each round runs the 1-thread call and the N-thread call
  // back to back (in alternating order), and the speed-up is the median of the per-round
  // ratios, so that other work on a shared machine hits both sides alike. The reported time
  // is the N-thread call's; cpu_util is process CPU per wall second during the N-thread calls.
  for (Input in : {Input{"1MB", &g->slice_1mb, &g->slice_ids},
                   Input{"mixed", &g->mixed, &g->mixed_ids}}) {
    for (size_t t : cfg.threads) {
      if (t == 1) continue;
      std::string name = std::string("Scaling/") + in.label + "/threads:" + std::to_string(t);
      int rounds = std::string_view(in.label) == "1MB" ? (cfg.quick ? 10 : 30)
                                                       : (cfg.quick ? 4 : 10);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), [in, t](benchmark::State& state) {
        EncodeOptions o1 = OptionsFor(1), on = OptionsFor(t);
        std::vector<double> ratios, t1s, tns;
        double cpu = 0, wall = 0;
        bool odd = false;
        for (auto _ : state) {
          auto run = [&](const EncodeOptions& o) {
            Usage u0 = Usage::Now();
            auto c0 = Clock::now();
            std::vector<TokenId> ids = g->tok->EncodePlain(*in.text, o);
            double sec = Seconds(Clock::now() - c0);
            benchmark::DoNotOptimize(ids.data());
            return std::pair<double, double>(sec, Usage::Now().cpu_s - u0.cpu_s);
          };
          std::pair<double, double> a, n;
          if (odd) {
            n = run(on);
            a = run(o1);
          } else {
            a = run(o1);
            n = run(on);
          }
          odd = !odd;
          t1s.push_back(a.first);
          tns.push_back(n.first);
          ratios.push_back(a.first / n.first);
          cpu += n.second;
          wall += n.first;
          state.SetIterationTime(n.first);
        }
        if (ratios.empty()) return;
        auto median = [](std::vector<double> v) {
          std::sort(v.begin(), v.end());
          size_t m = v.size() / 2;
          return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
        };
        state.counters["speedup"] = median(ratios);
        state.counters["t1_ms"] = median(t1s) * 1e3;
        state.counters["tN_ms"] = median(tns) * 1e3;
        if (wall > 0) state.counters["cpu_util"] = cpu / wall;
      });
      b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(rounds);
    }
  }

  // Single thread, whole mixed corpus and each category.
  auto serial = [](const std::string* text) {
    return [text](benchmark::State& state) {
      std::vector<TokenId> ids;
      for (auto _ : state) {
        ids = g->tok->EncodePlainSerial(*text);
        benchmark::DoNotOptimize(ids.data());
      }
      SetThroughput(state, text->size(), ids.size());
    };
  };
  g->work["EncodePlainSerial/mixed"] = {double(g->mixed.size()), double(g->mixed_ids.size())};
  timed.push_back(benchmark::RegisterBenchmark("EncodePlainSerial/mixed", serial(&g->mixed)));
  for (const Category& c : g->cats) {
    std::string name = "EncodePlainSerial/" + c.name;
    g->work[name].bytes = c.text.size();
    timed.push_back(benchmark::RegisterBenchmark(name.c_str(), serial(&c.text)));
  }

  // EncodePlain with a pool: 1 thread (serial path) vs N threads, on the ~1 MiB slice and the
  // whole mixed corpus.
  for (Input in : {Input{"1MB", &g->slice_1mb, &g->slice_ids},
                   Input{"mixed", &g->mixed, &g->mixed_ids}}) {
    for (size_t t : cfg.threads) {
      std::string name = std::string("EncodePlain/") + in.label + "/threads:" + std::to_string(t);
      g->work[name] = {double(in.text->size()), double(in.serial_ids->size())};
      timed.push_back(benchmark::RegisterBenchmark(
          name.c_str(), [in, t, name](benchmark::State& state) {
            EncodeOptions opts = OptionsFor(t);
            std::vector<TokenId> ids = g->tok->EncodePlain(*in.text, opts);
            bool equal = ids == *in.serial_ids;
            g->parallel_equal[name] = equal;
            if (!equal) {
              state.SkipWithError("EncodePlain differs from EncodePlainSerial");
              return;
            }
            Usage u0 = Usage::Now();
            auto t0 = Clock::now();
            for (auto _ : state) {
              ids = g->tok->EncodePlain(*in.text, opts);
              benchmark::DoNotOptimize(ids.data());
            }
            double wall = Seconds(Clock::now() - t0);
            Usage u1 = Usage::Now();
            SetThroughput(state, in.text->size(), ids.size());
            if (wall > 0) state.counters["cpu_util"] = (u1.cpu_s - u0.cpu_s) / wall;
            state.counters["nivcsw"] = benchmark::Counter(
                double(u1.nivcsw - u0.nivcsw), benchmark::Counter::kAvgIterations);
          }));
    }
  }

  // EncodeTrusted (added-token matching + BPE), single thread.
  g->work["EncodeTrusted/mixed"].bytes = g->mixed.size();
  timed.push_back(benchmark::RegisterBenchmark("EncodeTrusted/mixed", [](benchmark::State& state) {
    EncodeOptions opts = OptionsFor(1);
    std::vector<TokenId> ids;
    for (auto _ : state) {
      ids = g->tok->EncodeTrusted(g->mixed, opts);
      benchmark::DoNotOptimize(ids.data());
    }
    SetThroughput(state, g->mixed.size(), ids.size());
  }));

  // Decode of the mixed corpus' ids; MB/s counts output bytes.
  g->work["Decode/mixed"] = {double(g->mixed.size()), double(g->mixed_ids.size())};
  timed.push_back(benchmark::RegisterBenchmark("Decode/mixed", [](benchmark::State& state) {
    size_t bytes = 0;
    for (auto _ : state) {
      auto r = g->tok->Decode(g->mixed_ids);
      if (!r.ok()) {
        state.SkipWithError(r.status().ToString().c_str());
        break;
      }
      bytes = r->size();
      benchmark::DoNotOptimize(r->data());
    }
    SetThroughput(state, bytes, g->mixed_ids.size());
  }));

  // An 8K-token prompt through the server's path (EncodePlain, default options): each call
  // timed on its own; p50/p95/p99 over the calls.
  auto* prompt8k = benchmark::RegisterBenchmark("Prompt8K/EncodePlain", [](benchmark::State& state) {
    const std::string& p = g->prompt_8k;
    for (int i = 0; i < 20; ++i) benchmark::DoNotOptimize(g->tok->EncodePlain(p).data());  // warm
    std::vector<double> samples;
    samples.reserve(state.max_iterations);
    size_t tokens = 0;
    for (auto _ : state) {
      auto t0 = Clock::now();
      std::vector<TokenId> ids = g->tok->EncodePlain(p);
      auto t1 = Clock::now();
      benchmark::DoNotOptimize(ids.data());
      tokens = ids.size();
      double s = Seconds(t1 - t0);
      samples.push_back(s);
      state.SetIterationTime(s);
    }
    if (samples.empty()) return;
    std::sort(samples.begin(), samples.end());
    auto pct = [&](double q) {  // nearest rank
      size_t idx = static_cast<size_t>(std::ceil(q * samples.size()));
      return samples[std::min(samples.size() - 1, idx == 0 ? 0 : idx - 1)] * 1e3;
    };
    state.counters["p50_ms"] = pct(0.50);
    state.counters["p95_ms"] = pct(0.95);
    state.counters["p99_ms"] = pct(0.99);
    state.counters["tokens"] = double(tokens);
    state.counters["bytes"] = double(p.size());
  })->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(cfg.prompt_runs);

  // A 1M-token prompt: the default path (shared pool) and the serial reference.
  g->work["Prompt1M/EncodePlain"].bytes = g->prompt_1m.size();
  g->work["Prompt1M/EncodePlainSerial"].bytes = g->prompt_1m.size();
  timed.push_back(benchmark::RegisterBenchmark("Prompt1M/EncodePlain", [](benchmark::State& state) {
    std::vector<TokenId> ids;
    for (auto _ : state) {
      ids = g->tok->EncodePlain(g->prompt_1m);
      benchmark::DoNotOptimize(ids.data());
    }
    SetThroughput(state, g->prompt_1m.size(), ids.size());
    state.counters["tokens"] = double(ids.size());
  }));
  timed.push_back(
      benchmark::RegisterBenchmark("Prompt1M/EncodePlainSerial", [](benchmark::State& state) {
        std::vector<TokenId> ids;
        for (auto _ : state) {
          ids = g->tok->EncodePlainSerial(g->prompt_1m);
          benchmark::DoNotOptimize(ids.data());
        }
        SetThroughput(state, g->prompt_1m.size(), ids.size());
        state.counters["tokens"] = double(ids.size());
      }));

  for (auto* b : timed) {
    b->UseRealTime()->Unit(benchmark::kMillisecond);
    if (cfg.quick && !cfg.user_min_time) b->MinTime(0.2);
  }
  // A full run repeats each benchmark and reports the median (and the spread).
  if (!cfg.quick && !cfg.user_repetitions) {
    for (auto* b : timed) b->Repetitions(3)->DisplayAggregatesOnly(true);
    prompt8k->Repetitions(3)->DisplayAggregatesOnly(true);
  }
}

// ---------------------------------------------------------------------------------------------
// Set-up outside the timed region

void LoadTokenizer() {
  malloc_trim(0);
  long rss0 = VmRssKiB();
  auto t0 = Clock::now();
  auto r = Tokenizer::FromFile(g->cfg.tokenizer_path);
  auto t1 = Clock::now();
  if (!r.ok()) Die("loading " + g->cfg.tokenizer_path + ": " + r.status().ToString());
  g->tok.emplace(std::move(r).value());
  malloc_trim(0);
  long rss1 = VmRssKiB();
  g->load_ms_first = Seconds(t1 - t0) * 1e3;
  if (rss0 >= 0 && rss1 >= 0) g->rss_delta_mb = double(rss1 - rss0) * 1024.0 / kMB;
  g->memory_bytes_mb = double(g->tok->MemoryBytes()) / kMB;
}

void LoadCorpus() {
  for (const std::string& path : g->cfg.corpus_files) {
    auto text = ReadFile(path);
    if (!text) Die("cannot read corpus file " + path);
    if (text->empty()) continue;
    std::string name = fs::path(path).stem().string();
    for (char& ch : name) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
    }
    g->mixed += *text;
    g->cats.push_back(Category{name, path, std::move(*text)});
  }
  if (g->mixed.empty()) Die("the corpus is empty");

  g->mixed_ids = g->tok->EncodePlainSerial(g->mixed);
  auto back = g->tok->Decode(g->mixed_ids);
  g->roundtrip_ok = back.ok() && *back == g->mixed;
  if (!g->roundtrip_ok) {
    std::fprintf(stderr, "WARNING: Decode(EncodePlainSerial(corpus)) != corpus\n");
  }

  // ~1 MiB made of an equal share of each category (or repeats when the corpus is smaller).
  size_t share = kScalingSliceBytes / g->cats.size() + 1;
  while (g->slice_1mb.size() < kScalingSliceBytes) {
    for (const Category& c : g->cats) {
      g->slice_1mb += c.text.substr(0, Utf8Floor(c.text, share));
    }
  }
  g->slice_ids = g->tok->EncodePlainSerial(g->slice_1mb);

  // 8K-token prompt: an equal share of tokens from each category.
  size_t per = kPromptTokens / g->cats.size();
  for (size_t i = 0; i < g->cats.size(); ++i) {
    size_t k = per + (i + 1 == g->cats.size() ? kPromptTokens % g->cats.size() : 0);
    g->prompt_8k += PrefixOfTokens(*g->tok, g->cats[i].text, k);
  }

  // 1M-token prompt: the mixed corpus, repeated if it is shorter, cut at 1M tokens.
  std::string big = g->mixed;
  size_t big_tokens = g->mixed_ids.size();
  while (big_tokens < kLongPromptTokens + 1000) {
    big += g->mixed;
    big_tokens += g->mixed_ids.size();
  }
  g->prompt_1m = PrefixOfTokens(*g->tok, big, kLongPromptTokens);

  std::vector<TokenId> trusted = g->tok->EncodeTrusted(g->mixed, OptionsFor(1));
  g->tokens_trusted = trusted.size();
  if (!g->cfg.dump_ids.empty()) {
    std::ofstream out(g->cfg.dump_ids, std::ios::binary);
    static_assert(sizeof(TokenId) == 4);
    // Little-endian host assumed (x86-64, aarch64).
    out.write(reinterpret_cast<const char*>(trusted.data()),
              static_cast<std::streamsize>(trusted.size() * sizeof(TokenId)));
    if (!out) Die("cannot write " + g->cfg.dump_ids);
  }
}

// ---------------------------------------------------------------------------------------------
// Summary

void WriteSummary(const CaptureReporter& rep) {
  auto secs = [&](const std::string& name) -> std::optional<double> {
    const Captured* c = rep.Get(name);
    if (!c) return std::nullopt;
    return c->seconds;
  };
  auto counter = [&](const std::string& name, const std::string& k) -> std::optional<double> {
    const Captured* c = rep.Get(name);
    if (!c || !c->counters.count(k)) return std::nullopt;
    return c->counters.at(k);
  };
  auto mbps = [&](const std::string& name) -> std::optional<double> {
    auto s = secs(name);
    auto w = g->work.find(name);
    if (!s || w == g->work.end() || *s <= 0) return counter(name, "MB");
    return w->second.bytes / *s / kMB;
  };
  auto tps = [&](const std::string& name) -> std::optional<double> {
    return counter(name, "tokens/s");
  };
  auto ratio = [](std::optional<double> a, std::optional<double> b) -> std::optional<double> {
    if (!a || !b || *b == 0) return std::nullopt;
    return *a / *b;
  };
  auto ms = [](std::optional<double> s) -> std::optional<double> {
    if (!s) return std::nullopt;
    return *s * 1e3;
  };
  size_t tmax = 0;
  for (size_t t : g->cfg.threads) tmax = std::max(tmax, t);
  auto tname = [](const char* in, size_t t) {
    return std::string("EncodePlain/") + in + "/threads:" + std::to_string(t);
  };
  auto sname = [](const char* in, size_t t) {
    return std::string("Scaling/") + in + "/threads:" + std::to_string(t);
  };

  std::ostringstream j;
  j << "{\n";
  j << "  \"engine\": \"ladle\",\n";
  j << "  \"quick\": " << (g->cfg.quick ? "true" : "false") << ",\n";
  j << "  \"tokenizer\": \"" << JsonEscape(g->cfg.tokenizer_path) << "\",\n";
  j << "  \"hardware_threads\": " << std::thread::hardware_concurrency() << ",\n";
  j << "  \"load_avg_start\": " << JsonNum(g->load_avg_start) << ",\n";
  j << "  \"load_avg_end\": " << JsonNum(LoadAvg1()) << ",\n";
  j << "  \"corpus_bytes\": " << g->mixed.size() << ",\n";
  j << "  \"corpus_files\": [";
  for (size_t i = 0; i < g->cats.size(); ++i) {
    j << (i ? ", " : "") << "\"" << JsonEscape(g->cats[i].path) << "\"";
  }
  j << "],\n";
  j << "  \"tokens_plain\": " << g->mixed_ids.size() << ",\n";
  j << "  \"tokens_trusted\": " << g->tokens_trusted << ",\n";
  j << "  \"roundtrip_ok\": " << (g->roundtrip_ok ? "true" : "false") << ",\n";
  bool all_equal = true;
  for (const auto& [k, v] : g->parallel_equal) all_equal = all_equal && v;
  j << "  \"parallel_equals_serial\": " << (all_equal ? "true" : "false") << ",\n";
  j << "  \"mb_per_s_1t\": " << JsonNum(mbps("EncodePlainSerial/mixed")) << ",\n";
  j << "  \"tokens_per_s_1t\": " << JsonNum(tps("EncodePlainSerial/mixed")) << ",\n";
  j << "  \"mb_per_s_pool1\": " << JsonNum(mbps(tname("mixed", 1))) << ",\n";
  j << "  \"mb_per_s_2t\": " << JsonNum(mbps(tname("mixed", 2))) << ",\n";
  j << "  \"tokens_per_s_2t\": " << JsonNum(tps(tname("mixed", 2))) << ",\n";
  j << "  \"speedup_2t\": " << JsonNum(counter(sname("mixed", 2), "speedup")) << ",\n";
  j << "  \"speedup_2t_1mb\": " << JsonNum(counter(sname("1MB", 2), "speedup")) << ",\n";
  // The same from the separate throughput benchmarks (more exposed to other load).
  j << "  \"speedup_2t_unpaired\": "
    << JsonNum(ratio(secs(tname("mixed", 1)), secs(tname("mixed", 2)))) << ",\n";
  // Process CPU seconds per wall second during the 2-thread run: near 2 when both threads ran.
  j << "  \"cpu_util_2t\": " << JsonNum(counter(sname("mixed", 2), "cpu_util")) << ",\n";
  if (tmax > 2) {
    j << "  \"threads_max\": " << tmax << ",\n";
    j << "  \"speedup_max\": " << JsonNum(counter(sname("mixed", tmax), "speedup")) << ",\n";
  }
  j << "  \"mb_per_s_trusted\": " << JsonNum(mbps("EncodeTrusted/mixed")) << ",\n";
  j << "  \"mb_per_s_decode\": " << JsonNum(mbps("Decode/mixed")) << ",\n";
  j << "  \"tokens_per_s_decode\": " << JsonNum(tps("Decode/mixed")) << ",\n";
  j << "  \"p50_8k_ms\": " << JsonNum(counter("Prompt8K/EncodePlain", "p50_ms")) << ",\n";
  j << "  \"p95_8k_ms\": " << JsonNum(counter("Prompt8K/EncodePlain", "p95_ms")) << ",\n";
  j << "  \"p99_8k_ms\": " << JsonNum(counter("Prompt8K/EncodePlain", "p99_ms")) << ",\n";
  j << "  \"tokens_8k\": " << JsonNum(counter("Prompt8K/EncodePlain", "tokens")) << ",\n";
  j << "  \"ms_1m_tokens\": " << JsonNum(ms(secs("Prompt1M/EncodePlain"))) << ",\n";
  j << "  \"ms_1m_tokens_serial\": " << JsonNum(ms(secs("Prompt1M/EncodePlainSerial"))) << ",\n";
  j << "  \"tokens_1m\": " << JsonNum(counter("Prompt1M/EncodePlainSerial", "tokens")) << ",\n";
  j << "  \"load_ms\": " << JsonNum(ms(secs("Load"))) << ",\n";
  j << "  \"load_ms_first\": " << JsonNum(g->load_ms_first) << ",\n";
  j << "  \"rss_mb\": " << JsonNum(g->rss_delta_mb) << ",\n";
  j << "  \"memory_bytes_mb\": " << JsonNum(g->memory_bytes_mb) << ",\n";
  j << "  \"categories\": {";
  for (size_t i = 0; i < g->cats.size(); ++i) {
    const std::string name = "EncodePlainSerial/" + g->cats[i].name;
    j << (i ? "," : "") << "\n    \"" << JsonEscape(g->cats[i].name) << "\": {\"bytes\": "
      << g->cats[i].text.size() << ", \"mb_per_s\": " << JsonNum(mbps(name))
      << ", \"tokens_per_s\": " << JsonNum(tps(name)) << "}";
  }
  j << "\n  }\n}\n";

  std::ofstream out(g->cfg.json_summary);
  out << j.str();
  if (!out) Die("cannot write " + g->cfg.json_summary);
}

}  // namespace

int main(int argc, char** argv) {
  Bench bench;
  g = &bench;
  bench.cfg = ParseOwnFlags(&argc, argv);
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) help = true;
  }
  std::string format = "console";
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.rfind("--benchmark_format=", 0) == 0) format = std::string(a.substr(19));
  }
  benchmark::Initialize(&argc, argv);  // exits on --help
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (help) return 0;

  ResolvePaths(&bench.cfg);
  bench.load_avg_start = LoadAvg1();
  if (bench.load_avg_start > 0.5) {
    std::fprintf(stderr,
                 "WARNING: load average %.2f before the run: other processes are using the CPUs, "
                 "so timings (the thread scaling most) are unreliable\n",
                 bench.load_avg_start);
  }
  // First, before the process has touched much memory: load time and RSS delta.
  LoadTokenizer();
  for (size_t t : bench.cfg.threads) {
    bench.pools[t] = std::make_unique<ThreadPool>(t == 1 ? 1 : t - 1);
  }
  if (!bench.pools.count(1)) bench.pools[1] = std::make_unique<ThreadPool>(1);
  LoadCorpus();

  std::fprintf(stderr,
               "tokenizer %s: loaded in %.1f ms, RSS +%.1f MB (MemoryBytes %.1f MB)\n"
               "corpus: %zu file(s), %.2f MB, %zu tokens; 8K prompt %.1f KB; 1M prompt %.2f MB\n",
               bench.cfg.tokenizer_path.c_str(), bench.load_ms_first, bench.rss_delta_mb,
               bench.memory_bytes_mb, bench.cats.size(), bench.mixed.size() / kMB,
               bench.mixed_ids.size(), bench.prompt_8k.size() / 1e3,
               bench.prompt_1m.size() / kMB);

  RegisterAll();

  std::unique_ptr<benchmark::BenchmarkReporter> inner;
  if (format == "json") {
    inner = std::make_unique<benchmark::JSONReporter>();
  } else {
    inner = std::make_unique<benchmark::ConsoleReporter>(
        isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_Color
                              : benchmark::ConsoleReporter::OO_None);
  }
  CaptureReporter reporter(std::move(inner));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  if (!bench.cfg.json_summary.empty()) WriteSummary(reporter);
  bool ok = bench.roundtrip_ok;
  for (const auto& [k, v] : bench.parallel_equal) ok = ok && v;
  return ok ? 0 : 1;
}
