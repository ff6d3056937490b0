// `ladle bench serve`: load generator against a running `ladle serve` (see
// include/ladle/server/load_generator.h). Prints a progress line each second, then the table;
// `--plot FILE.svg` also writes the plot and `--json FILE` the raw per-request results.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "commands.h"
#include "ladle/core/logging.h"
#include "ladle/json/json.h"
#include "ladle/server/load_generator.h"

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
  std::string plot, json_out;
};

int RunBenchServe(const BenchServeOpts& o) {
  std::vector<server::BenchRequest> reqs;
  if (o.trace.empty()) {
    reqs = server::SyntheticRequests(o.num, o.input, o.output);
  } else {
    auto t = server::LoadTrace(o.format, o.trace, o.num, o.max_input, o.max_output);
    if (!t.ok()) {
      LADLE_LOG_ERROR("bench_serve.failed error='{}'", t.status().ToString());
      return 2;
    }
    reqs = std::move(t).value();
  }
  server::BenchOptions bo;
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
  std::fprintf(stderr, "bench serve: %zu requests against %s:%d (rate %s, concurrency %s)\n", reqs.size(),
               o.host.c_str(), o.port, o.rate > 0 ? fmt::format("{}/s", o.rate).c_str() : "trace/at once",
               o.concurrency > 0 ? std::to_string(o.concurrency).c_str() : "unlimited");
  auto report = server::RunBench(reqs, bo, [](size_t done, size_t total, size_t errors) {
    std::fprintf(stderr, "\r  %zu/%zu done, %zu errors   ", done, total, errors);
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\n");
  std::cout << server::FormatReport(report);
  if (!o.plot.empty()) {
    std::ofstream(o.plot) << server::RenderSvg(report);
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
    std::ofstream(o.json_out) << json::Dump(json::Value::MakeArray(std::move(rows))) << "\n";
  }
  size_t failed = 0;
  for (const auto& r : report.results) failed += r.ok ? 0 : 1;
  return failed == 0 ? 0 : 1;
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
  cmd->add_option("--plot", o->plot, "write an SVG plot here");
  cmd->add_option("--json", o->json_out, "write per-request results here");
  cmd->callback([run, o] { *run = [o] { return RunBenchServe(*o); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterBenchServe);

}  // namespace ladle::app
