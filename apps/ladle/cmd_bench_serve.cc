// `ladle bench serve`: load generator against a running `ladle serve` (see
// include/ladle/loadgen/load_generator.h). Prints a progress line each second, then the table;
// `--plot FILE.svg` also writes the plot and `--json FILE` the raw per-request results.
// `--duration S -c C` is the load test: C clients back to back for S seconds, the server's RSS
// scraped from /metrics, and with `--max-rss-growth-mb` a failing exit when memory grows.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "commands.h"
#include "ladle/core/logging.h"
#include "ladle/json/json.h"
#include "ladle/loadgen/load_generator.h"

namespace ladle::app {

namespace {

struct BenchServeOpts {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model = "ladle";
  std::string trace;          // file; empty: synthetic
  std::string format = "mooncake";
  size_t num = 64;            // requests (trace: the first num; 0 = all)
  int input = 256, output = 64;  // synthetic lengths
  int max_input = 2048, max_output = 256;
  double rate = 0, time_scale = 1;
  int concurrency = 0;
  std::string api = "chat";
  double duration = 0;        // > 0: closed loop for this many seconds
  double sample_interval = 1;
  double warmup = -1;         // memory trend ignores this long (default: a fifth of the run)
  double max_rss_growth_mb = -1;
  std::string plot, json_out;
};

int RunBenchServe(const BenchServeOpts& o) {
  if (Status s = loadgen::CheckBenchApi(o.api); !s.ok()) {
    LADLE_LOG_ERROR("bench_serve.failed error='{}'", s.ToString());
    return 2;
  }
  std::vector<loadgen::BenchRequest> reqs;
  if (o.trace.empty()) {
    reqs = loadgen::SyntheticRequests(o.num, o.input, o.output);
  } else {
    auto t = loadgen::LoadTrace(o.format, o.trace, o.num, o.max_input, o.max_output);
    if (!t.ok()) {
      LADLE_LOG_ERROR("bench_serve.failed error='{}'", t.status().ToString());
      return 2;
    }
    reqs = std::move(t).value();
  }
  loadgen::BenchOptions bo;
  bo.host = o.host;
  bo.port = static_cast<uint16_t>(o.port);
  bo.model = o.model;
  if (const char* keys = std::getenv("LADLE_API_KEYS")) {
    std::string k(keys);
    bo.api_key = k.substr(0, k.find(','));
  }
  bo.rate = o.rate;
  bo.time_scale = o.time_scale;
  bo.concurrency = o.concurrency;
  bo.api = o.api;
  bo.duration_s = o.duration;
  bo.sample_interval_s = o.sample_interval;
  if (o.duration > 0) {
    std::fprintf(stderr, "bench serve: %s, %d clients back to back for %.0f s against %s:%d\n", o.api.c_str(),
                 std::max(1, o.concurrency), o.duration, o.host.c_str(), o.port);
  } else {
    std::fprintf(stderr, "bench serve: %s, %zu requests against %s:%d (rate %s, concurrency %s)\n", o.api.c_str(),
                 reqs.size(), o.host.c_str(), o.port,
                 o.rate > 0 ? fmt::format("{}/s", o.rate).c_str() : "trace/at once",
                 o.concurrency > 0 ? std::to_string(o.concurrency).c_str() : "unlimited");
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto report = loadgen::RunBench(reqs, bo, [t0](size_t done, size_t total, size_t errors) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (total > 0) {
      std::fprintf(stderr, "\r  %zu/%zu done, %zu errors   ", done, total, errors);
    } else {
      std::fprintf(stderr, "\r  %.0f s: %zu done, %zu errors   ", t, done, errors);
    }
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\n");
  std::cout << loadgen::FormatReport(report);
  // Flat memory: no RSS trend after the warm-up beyond the bound.
  bool memory_ok = true;
  if (o.sample_interval > 0) {
    const double warmup = o.warmup >= 0 ? o.warmup : report.duration_s / 5;
    const auto mem = loadgen::AnalyzeMemory(report, warmup);
    if (mem.valid) {
      std::cout << fmt::format("server RSS after {:.0f} s warm-up {:.1f} MB, trend over the rest {:+.1f} MB", warmup,
                               mem.after_warmup_mb, mem.growth_mb);
      if (o.max_rss_growth_mb >= 0) {
        memory_ok = mem.growth_mb <= o.max_rss_growth_mb;
        std::cout << fmt::format(" (bound {:.1f} MB: {})", o.max_rss_growth_mb, memory_ok ? "flat" : "GROWING");
      }
      std::cout << "\n";
    } else if (o.max_rss_growth_mb >= 0) {
      std::cout << "server RSS: too few samples after the warm-up to judge a trend (does /metrics have "
                   "process_resident_memory_bytes?)\n";
      memory_ok = false;
    }
  }
  if (!o.plot.empty()) {
    std::ofstream(o.plot) << loadgen::RenderSvg(report);
    std::cout << "plot: " << o.plot << "\n";
  }
  if (!o.json_out.empty()) {
    json::Value::Array rows;
    for (const auto& r : report.results) {
      json::Value row = json::Value::MakeObject();
      row.Set("ok", json::Value::Bool(r.ok));
      row.Set("start_s", json::Value::Double(r.start_s));
      row.Set("ttft_s", json::Value::Double(r.ttft_s));
      row.Set("end_s", json::Value::Double(r.end_s));
      row.Set("prompt_tokens", json::Value::Int(r.prompt_tokens));
      row.Set("output_tokens", json::Value::Int(r.output_tokens));
      if (!r.ok) row.Set("error", json::Value::String(r.error));
      rows.push_back(std::move(row));
    }
    json::Value::Array samples;
    for (const auto& smp : report.samples) {
      json::Value row = json::Value::MakeObject();
      row.Set("t_s", json::Value::Double(smp.t_s));
      row.Set("rss_bytes", json::Value::Double(smp.rss_bytes));
      row.Set("kv_blocks_used", json::Value::Double(smp.kv_blocks_used));
      row.Set("running", json::Value::Double(smp.running));
      row.Set("in_flight", json::Value::Double(smp.in_flight));
      samples.push_back(std::move(row));
    }
    json::Value doc = json::Value::MakeObject();
    doc.Set("api", json::Value::String(report.api));
    doc.Set("duration_s", json::Value::Double(report.duration_s));
    doc.Set("requests", json::Value::MakeArray(std::move(rows)));
    doc.Set("server_samples", json::Value::MakeArray(std::move(samples)));
    std::ofstream(o.json_out) << json::Dump(doc) << "\n";
  }
  size_t failed = 0;
  for (const auto& r : report.results) failed += r.ok ? 0 : 1;
  if (report.results.empty()) failed = 1;  // nothing ran: not a pass
  return failed == 0 && memory_ok ? 0 : 1;
}

void RegisterBenchServe(CLI::App& app, RunFn* run) {
  // `bench` may be registered by another command file too; share it.
  CLI::App* bench = nullptr;
  try {
    bench = app.get_subcommand("bench");
  } catch (const CLI::OptionNotFound&) {
    bench = app.add_subcommand("bench", "Benchmarks");
    bench->require_subcommand(1);
  }
  auto o = std::make_shared<BenchServeOpts>();
  auto* cmd = bench->add_subcommand("serve", "Replay a trace or a synthetic load against a running server");
  cmd->add_option("--host", o->host)->capture_default_str();
  cmd->add_option("--port", o->port)->capture_default_str();
  cmd->add_option("--model", o->model, "model name to request")->capture_default_str();
  cmd->add_option("--trace", o->trace, "trace file (e.g. ../shared/traces/mooncake_fast25/conversation_trace.jsonl)");
  cmd->add_option("--format", o->format, "trace format: mooncake or azure")->capture_default_str();
  cmd->add_option("-n,--num", o->num, "requests (trace: the first n; 0 = all)")->capture_default_str();
  cmd->add_option("--input", o->input, "synthetic prompt tokens")->capture_default_str();
  cmd->add_option("--output", o->output, "synthetic max_tokens")->capture_default_str();
  cmd->add_option("--max-input", o->max_input, "clamp trace prompt lengths")->capture_default_str();
  cmd->add_option("--max-output", o->max_output, "clamp trace output lengths")->capture_default_str();
  cmd->add_option("--rate", o->rate, "Poisson arrivals per second (0: trace timestamps / all at once)");
  cmd->add_option("--time-scale", o->time_scale, "multiply trace timestamps")->capture_default_str();
  cmd->add_option("-c,--concurrency", o->concurrency, "most requests in flight (0: unlimited)")->capture_default_str();
  cmd->add_option("--api", o->api, "endpoint and SSE dialect: chat, responses or messages")
      ->capture_default_str()
      ->check(CLI::IsMember({"chat", "responses", "messages"}));
  cmd->add_option("--duration", o->duration, "closed loop: -c clients back to back for this many seconds");
  cmd->add_option("--sample-interval", o->sample_interval, "scrape the server's /metrics every this many s (0: off)")
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "seconds the memory trend ignores (default: a fifth of the run)");
  cmd->add_option("--max-rss-growth-mb", o->max_rss_growth_mb, "fail when the server's RSS trend after the warm-up exceeds this");
  cmd->add_option("--plot", o->plot, "write an SVG plot here");
  cmd->add_option("--json", o->json_out, "write per-request results here");
  cmd->callback([run, o] { *run = [o] { return RunBenchServe(*o); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterBenchServe);

}  // namespace ladle::app
