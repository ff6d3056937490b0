// Server metrics in the Prometheus text exposition format (version 0.0.4): request counts by
// API and status, TTFT and inter-token latency histograms, token counters, and the engine's
// gauges (queue depth, running batch, KV blocks, prefix hits, tokens/s). Thread-safe: the
// HTTP threads record, /metrics renders.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ladle/engine/engine.h"

namespace ladle::server {

// A cumulative histogram with fixed upper bounds (seconds), as Prometheus expects.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the _bucket/_sum/_count lines for `name`.
  void Render(std::string_view name, std::string* out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  // One finished HTTP request: `api` is "chat", "responses", "messages" or "other".
  void CountRequest(std::string_view api, int http_status);
  void ObserveTtft(double seconds);
  void ObserveInterToken(double seconds);
  void AddTokens(int64_t prompt, int64_t completion);
  void SetInFlight(int64_t n);

  // The full exposition, with the engine's gauges from `stats`.
  std::string Render(const engine::Stats& stats);

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram ttft_, itl_;
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  int64_t in_flight_ = 0;
  // tokens/s: the rate of engine generated_tokens between two scrapes at least 1 s apart.
  std::chrono::steady_clock::time_point rate_at_;
  uint64_t rate_tokens_ = 0;
  double tokens_per_s_ = 0;
};

}  // namespace ladle::server
