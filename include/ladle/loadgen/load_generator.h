// `ladle bench serve`: replays a request trace (Mooncake JSONL or Azure 2023 CSV) or a
// synthetic load against a running server's streaming Chat Completions, Responses or Messages
// endpoint, and reports throughput and TTFT / TPOT / ITL / end-to-end percentiles as a table
// and an SVG plot. A timed closed-loop mode (`duration_s`) with the server's RSS scraped from
// /metrics is the load test: zero errors and flat memory. The HTTP is net's HttpClient (pooled
// keep-alive connections, each stream read as it arrives through an SseParser).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::loadgen {

struct BenchRequest {
  double arrival_s = 0;  // relative to the start of the run
  int input_tokens = 0;
  int output_tokens = 0;
  std::vector<int64_t> prefix_ids;  // Mooncake hash_ids (512-token prefix blocks); may be empty
};

// "mooncake" (JSONL: timestamp ms, input_length, output_length, hash_ids) or "azure" (CSV:
// TIMESTAMP, ContextTokens, GeneratedTokens). At most `limit` requests (0: all); lengths are
// clamped to max_input / max_output so a CPU model can replay production shapes.
Result<std::vector<BenchRequest>> LoadTrace(const std::string& format, const std::string& path, size_t limit,
                                            int max_input, int max_output);
// `n` requests of `input` and `output` tokens, all arriving at 0 (pace them with a rate).
std::vector<BenchRequest> SyntheticRequests(size_t n, int input, int output);

struct BenchOptions {
  std::string host = "127.0.0.1";  // a numeric address or a name
  uint16_t port = 8000;
  std::string model = "ladle";
  std::string api_key;
  double rate = 0;         // requests/s as a Poisson process; 0: trace timestamps (synthetic: at once)
  double time_scale = 1;   // trace timestamps are multiplied by this
  int concurrency = 0;     // most requests in flight; 0: no limit
  uint64_t seed = 1;
  std::string api = "chat";  // "chat", "responses" or "messages": the endpoint and its SSE
  // > 0: closed loop. `concurrency` clients (at least 1) send requests back to back, cycling
  // through the list, and stop starting new ones after this many seconds (rate is ignored).
  double duration_s = 0;
  double sample_interval_s = 1;  // scrape the server's /metrics this often (0: never)
};

struct RequestResult {
  bool ok = false;
  std::string error;
  double start_s = 0, ttft_s = 0, end_s = 0;  // start relative to the run; the others from start
  std::vector<double> itl_s;                   // gaps between streamed content frames
  int64_t prompt_tokens = 0, output_tokens = 0;
};

// One scrape of the server's /metrics during the run; -1 where the server did not say.
struct ServerSample {
  double t_s = 0;  // relative to the run's start
  double rss_bytes = -1;  // process_resident_memory_bytes
  double kv_blocks_used = -1, running = -1, in_flight = -1;
};

struct BenchReport {
  std::vector<RequestResult> results;
  std::vector<ServerSample> samples;
  double duration_s = 0;
  std::string api = "chat";
};

// The server's resident memory over the run. After `warmup_s` (allocator pools, caches and
// the running batch fill up) memory should be flat: `growth_mb` is the least-squares slope of
// the later samples times their span, so one spike or a GC-like sawtooth does not count as a
// trend but a steady leak does.
struct MemoryTrend {
  bool valid = false;  // at least 3 RSS samples after the warm-up
  double start_mb = 0, peak_mb = 0, end_mb = 0;  // first sample, maximum, last sample
  double after_warmup_mb = 0;                     // the first sample after the warm-up
  double growth_mb = 0;
};
MemoryTrend AnalyzeMemory(const BenchReport& report, double warmup_s);

// "chat", "responses" or "messages"; anything else is an InvalidArgument naming them.
Status CheckBenchApi(const std::string& api);

// Runs the load; `progress(done, total, errors)` is called about once a second.
BenchReport RunBench(const std::vector<BenchRequest>& requests, const BenchOptions& options,
                     const std::function<void(size_t, size_t, size_t)>& progress);

// The summary table (text) and an SVG: TTFT per request over time and the ITL CDF; with
// server samples also RSS and output tokens/s over time.
std::string FormatReport(const BenchReport& report);
std::string RenderSvg(const BenchReport& report);

}  // namespace ladle::loadgen
