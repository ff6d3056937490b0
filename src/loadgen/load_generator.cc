// The `ladle bench serve` load generator: one thread per in-flight request waits on its call
// (simple, and at the few hundred streams this targets the threads cost less than the model);
// the HTTP is one pooled net::HttpClient whose io threads time each SSE event as it arrives.
#include "ladle/loadgen/load_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "ladle/core/numbers.h"
#include "ladle/json/json.h"
#include "ladle/net/http_client.h"
#include "ladle/net/sse.h"

namespace ladle::loadgen {

using Clock = std::chrono::steady_clock;

namespace {

// Words that are one token each (with their leading space) in the DeepSeek vocabulary, so a
// prompt of k words is about k tokens.
constexpr const char* kWords[] = {" the", " of", " and", " to", " in", " is", " that", " for", " it", " with",
                                  " as", " was", " on", " be", " at", " by", " this", " had", " not", " are",
                                  " but", " from", " or", " have", " an", " they", " which", " one", " you", " were",
                                  " her", " all"};
constexpr int kBlockTokens = 512;  // Mooncake's prefix block

// Deterministic text per prefix block, so requests sharing hash ids share prompt prefixes.
void AppendBlock(uint64_t seed, int tokens, std::string* out) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  for (int i = 0; i < tokens; ++i) *out += kWords[rng() % std::size(kWords)];
}

std::string PromptFor(const BenchRequest& r, size_t index) {
  std::string text;
  int left = r.input_tokens;
  for (size_t b = 0; left > 0; ++b) {
    const int n = std::min(left, kBlockTokens);
    // Without hash ids every request gets its own text (no accidental prefix hits).
    const uint64_t seed = b < r.prefix_ids.size() ? static_cast<uint64_t>(r.prefix_ids[b]) : (index << 20) + b + (1ull << 40);
    AppendBlock(seed, n, &text);
    left -= n;
  }
  return text;
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * v.size()))];
}

// The request body for `api` with a prompt of `text`, streaming, `max_tokens` output.
std::string BodyFor(const std::string& api, const std::string& model, const std::string& text, int max_tokens) {
  std::string body = R"({"model":)";
  json::AppendQuoted(model, &body);
  if (api == "responses") {
    body += R"(,"input":)";
    json::AppendQuoted(text, &body);
    body += fmt::format(R"(,"max_output_tokens":{},"stream":true}})", max_tokens);
    return body;
  }
  body += R"(,"messages":[{"role":"user","content":)";
  json::AppendQuoted(text, &body);
  body += fmt::format(R"(}}],"max_tokens":{},"stream":true)", max_tokens);
  body += api == "chat" ? R"(,"stream_options":{"include_usage":true}})" : "}";
  return body;
}

const char* PathFor(const std::string& api) {
  return api == "responses" ? "/v1/responses" : api == "messages" ? "/v1/messages" : "/v1/chat/completions";
}

bool NonEmptyString(const json::Value* v) { return v && v->is_string() && !v->as_string().empty(); }

int64_t IntAt(const json::Value* obj, const char* key) {
  const json::Value* v = obj ? obj->Find(key) : nullptr;
  return v && v->as_int64().ok() ? *v->as_int64() : -1;
}

// What one SSE event means to the timer: generated text arrived, usage was reported, or the
// server reported an error.
struct FrameMeaning {
  bool token = false;
  std::string error;
  int64_t prompt_tokens = -1, output_tokens = -1;
};

FrameMeaning Interpret(const std::string& api, const net::SseEvent& ev) {
  FrameMeaning m;
  const std::string& event = ev.event;
  const std::string& data = ev.data;
  if (data.empty() || data == "[DONE]") return m;
  auto v = json::Parse(data);
  if (!v.ok() || !v->is_object()) {
    // A frame a client cannot parse is a failed request (it caught invalid UTF-8 once).
    m.error = "unparsable SSE frame (" + (v.ok() ? std::string("not an object") : v.status().ToString()) + "): " +
              data.substr(0, 120);
    return m;
  }
  if (event == "error" || v->Find("error")) {
    m.error = data.substr(0, 200);
    return m;
  }
  const json::Value* type = v->Find("type");
  const std::string t = type && type->is_string() ? type->as_string() : event;
  if (api == "chat") {
    if (const json::Value* u = v->Find("usage"); u && u->is_object()) {
      m.prompt_tokens = IntAt(u, "prompt_tokens");
      m.output_tokens = IntAt(u, "completion_tokens");
    }
    const json::Value* choices = v->Find("choices");
    if (!choices || !choices->is_array() || choices->as_array().empty()) return m;
    const json::Value* delta = choices->as_array()[0].Find("delta");
    m.token = delta && (NonEmptyString(delta->Find("content")) || NonEmptyString(delta->Find("reasoning_content")));
  } else if (api == "responses") {
    if (t == "response.failed") {
      m.error = data.substr(0, 200);
    } else if (t == "response.output_text.delta" || t == "response.reasoning_text.delta") {
      m.token = NonEmptyString(v->Find("delta"));
    } else if (t == "response.completed" || t == "response.incomplete") {
      const json::Value* r = v->Find("response");
      const json::Value* u = r ? r->Find("usage") : nullptr;
      m.prompt_tokens = IntAt(u, "input_tokens");
      m.output_tokens = IntAt(u, "output_tokens");
    }
  } else {  // messages
    if (t == "content_block_delta") {
      const json::Value* d = v->Find("delta");
      m.token = d && (NonEmptyString(d->Find("text")) || NonEmptyString(d->Find("thinking")));
    } else if (t == "message_start") {
      const json::Value* msg = v->Find("message");
      m.prompt_tokens = IntAt(msg ? msg->Find("usage") : nullptr, "input_tokens");
    } else if (t == "message_delta") {
      const json::Value* u = v->Find("usage");
      m.output_tokens = IntAt(u, "output_tokens");
      if (const int64_t in = IntAt(u, "input_tokens"); in >= 0) m.prompt_tokens = in;
    }
  }
  return m;
}

RequestResult RunOne(net::HttpClient& client, const BenchRequest& r, size_t index, const BenchOptions& o,
                     Clock::time_point t0) {
  RequestResult res;
  const auto start = Clock::now();
  res.start_s = std::chrono::duration<double>(start - t0).count();
  auto since = [&](Clock::time_point t) { return std::chrono::duration<double>(t - start).count(); };
  net::HttpRequest req;
  req.method = "POST";
  req.target = PathFor(o.api);
  req.headers.emplace_back("Content-Type", "application/json");
  if (!o.api_key.empty()) {
    // Each API's own header, so the bench exercises what its SDK sends.
    if (o.api == "messages") {
      req.headers.emplace_back("x-api-key", o.api_key);
    } else {
      req.headers.emplace_back("Authorization", "Bearer " + o.api_key);
    }
  }
  if (o.api == "messages") req.headers.emplace_back("anthropic-version", "2023-06-01");
  req.body = BodyFor(o.api, o.model, PromptFor(r, index), std::max(1, r.output_tokens));
  // Each event is timed on the client's io thread as its bytes arrive.
  net::SseParser parser;
  std::vector<net::SseEvent> events;
  bool first = true;
  Clock::time_point last{};
  net::CallOptions call;
  call.timeout = std::chrono::milliseconds(0);  // a long generation is not an error: no deadline
  call.on_body = [&](const net::HttpResponse& head, std::string_view bytes) {
    if (head.status != 200) return true;  // another 2xx: its body is read and dropped
    if (Status st = parser.Feed(bytes, &events); !st.ok()) {
      res.error = st.ToString();
      return false;
    }
    for (const auto& ev : events) {
      FrameMeaning m = Interpret(o.api, ev);
      if (!m.error.empty()) {
        res.error = std::move(m.error);
        return false;
      }
      if (m.prompt_tokens >= 0) res.prompt_tokens = m.prompt_tokens;
      if (m.output_tokens >= 0) res.output_tokens = m.output_tokens;
      if (!m.token) continue;
      const auto now = Clock::now();
      if (first) {
        res.ttft_s = since(now);
        first = false;
      } else {
        res.itl_s.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    }
    events.clear();
    return true;
  };
  auto answer = client.Fetch(net::Endpoint{o.host, o.port}, std::move(req), call);
  if (!res.error.empty()) return res;  // the stream carried an error (the call was stopped)
  if (!answer.ok()) {
    res.error = answer.status().message();
    return res;
  }
  if (answer->status != 200) {
    res.error = fmt::format("HTTP {}: {}", answer->status, answer->body.substr(0, 200));
    return res;
  }
  res.end_s = since(Clock::now());
  if (first) res.ttft_s = res.end_s;  // no content at all: the first byte is the end
  res.ok = true;
  return res;
}

// One GET /metrics; the gauges the load test watches.
ServerSample Scrape(net::HttpClient& client, const BenchOptions& o, double t_s) {
  ServerSample s;
  s.t_s = t_s;
  net::CallOptions call;
  call.timeout = std::chrono::seconds(5);
  auto res = client.Fetch(net::Endpoint{o.host, o.port}, {"GET", "/metrics", {}, ""}, call);
  // A missed scrape is a gap in the plot, not a failed run.
  if (!res.ok() || res->status != 200) return s;
  auto gauge = [&](std::string_view name) {
    const std::string& b = res->body;
    for (size_t pos = 0; (pos = b.find(name, pos)) != std::string::npos; pos += name.size()) {
      if ((pos == 0 || b[pos - 1] == '\n') && pos + name.size() < b.size() && b[pos + name.size()] == ' ') {
        return std::strtod(b.c_str() + pos + name.size() + 1, nullptr);
      }
    }
    return -1.0;
  };
  s.rss_bytes = gauge("process_resident_memory_bytes");
  s.kv_blocks_used = gauge("ladle_kv_blocks_used");
  s.running = gauge("ladle_running_batch");
  s.in_flight = gauge("ladle_requests_in_flight");
  return s;
}

// Per-second output tokens over the run, from each request's frame times (a request's
// tokens spread evenly over its frames: frames can carry more than one token).
std::vector<double> TokensPerSecond(const BenchReport& report) {
  std::vector<double> buckets(static_cast<size_t>(std::ceil(std::max(report.duration_s, 1.0))), 0.0);
  for (const auto& r : report.results) {
    if (!r.ok || r.output_tokens <= 0) continue;
    const double per_frame = static_cast<double>(r.output_tokens) / static_cast<double>(r.itl_s.size() + 1);
    double t = r.start_s + r.ttft_s;
    for (size_t i = 0; i <= r.itl_s.size(); ++i) {
      if (i > 0) t += r.itl_s[i - 1];
      const size_t b = std::min(buckets.size() - 1, static_cast<size_t>(std::max(0.0, t)));
      buckets[b] += per_frame;
    }
  }
  return buckets;
}

}  // namespace

Result<std::vector<BenchRequest>> LoadTrace(const std::string& format, const std::string& path, size_t limit,
                                            int max_input, int max_output) {
  std::ifstream in(path);
  if (!in) return IoError("cannot read trace " + path);
  std::vector<BenchRequest> out;
  std::string line;
  auto clamp = [](int v, int hi) { return std::max(1, hi > 0 ? std::min(v, hi) : v); };
  if (format == "mooncake") {
    while ((limit == 0 || out.size() < limit) && std::getline(in, line)) {
      if (line.empty()) continue;
      auto v = json::Parse(line);
      if (!v.ok()) return v.status().WithContext("trace line " + std::to_string(out.size() + 1));
      BenchRequest r;
      auto num = [&](const char* k) -> int64_t {
        const json::Value* f = v->Find(k);
        return f && f->as_int64().ok() ? *f->as_int64() : 0;
      };
      r.arrival_s = num("timestamp") / 1000.0;
      r.input_tokens = clamp(static_cast<int>(num("input_length")), max_input);
      r.output_tokens = clamp(static_cast<int>(num("output_length")), max_output);
      if (const json::Value* h = v->Find("hash_ids"); h && h->is_array()) {
        for (const auto& id : h->as_array()) r.prefix_ids.push_back(id.as_int64().ok() ? *id.as_int64() : 0);
      }
      out.push_back(std::move(r));
    }
  } else if (format == "azure") {
    std::getline(in, line);  // header
    double first = -1;
    while ((limit == 0 || out.size() < limit) && std::getline(in, line)) {
      // "2023-11-16 18:15:46.6805900,374,44"
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const size_t c1 = line.find(','), c2 = line.find(',', c1 + 1);
      if (c1 == std::string::npos || c2 == std::string::npos) continue;
      std::tm tm{};
      std::istringstream ts(line.substr(0, c1));
      ts >> std::get_time(&tm, "%Y-%m-%d %H:%M:%S");
      if (ts.fail()) return ParseError("bad timestamp in trace line: " + line);
      double frac = 0;
      const size_t dot = line.find('.');
      if (dot != std::string::npos && dot < c1) frac = ParseDouble("0" + line.substr(dot, c1 - dot)).value_or(0.0);
      const double t = static_cast<double>(timegm(&tm)) + frac;
      if (first < 0) first = t;
      BenchRequest r;
      r.arrival_s = t - first;
      auto in_tok = ParseI64(std::string_view(line).substr(c1 + 1, c2 - c1 - 1));
      auto out_tok = ParseI64(std::string_view(line).substr(c2 + 1));
      if (!in_tok || !out_tok || *in_tok > INT32_MAX || *out_tok > INT32_MAX) return ParseError("bad token counts in trace line: " + line);
      r.input_tokens = clamp(static_cast<int>(*in_tok), max_input);
      r.output_tokens = clamp(static_cast<int>(*out_tok), max_output);
      out.push_back(std::move(r));
    }
  } else {
    return InvalidArgument("unknown trace format " + format + " (mooncake or azure)");
  }
  if (out.empty()) return InvalidArgument("trace " + path + " has no requests");
  return out;
}

std::vector<BenchRequest> SyntheticRequests(size_t n, int input, int output) {
  std::vector<BenchRequest> out(n);
  for (auto& r : out) {
    r.input_tokens = std::max(1, input);
    r.output_tokens = std::max(1, output);
  }
  return out;
}

Status CheckBenchApi(const std::string& api) {
  if (api == "chat" || api == "responses" || api == "messages") return Status::Ok();
  return InvalidArgument("unknown --api " + api + " (chat, responses or messages)");
}

BenchReport RunBench(const std::vector<BenchRequest>& requests, const BenchOptions& o,
                     const std::function<void(size_t, size_t, size_t)>& progress) {
  BenchReport report;
  report.api = o.api;
  const bool timed = o.duration_s > 0;
  if (requests.empty()) return report;
  // Enough connections for every request in flight plus the scrape: no call waits for one.
  net::HttpClientOptions co;
  co.io_threads = 2;
  const size_t in_flight_max = timed ? static_cast<size_t>(std::max(1, o.concurrency))
                               : o.concurrency > 0 ? static_cast<size_t>(o.concurrency)
                                                   : requests.size();
  co.max_connections_per_endpoint = in_flight_max + 1;
  auto made = net::HttpClient::Create(co);
  if (!made.ok()) {
    report.results.resize(timed ? 1 : requests.size());
    for (auto& r : report.results) r.error = made.status().ToString();
    return report;
  }
  net::HttpClient& client = **made;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<size_t> done{0}, errors{0};
  std::atomic<bool> finished{false};
  const auto t0 = Clock::now();
  // The reporter ticks once a second; it also scrapes the server every sample_interval_s.
  std::thread reporter([&] {
    double next_sample = 0;
    std::unique_lock lock(mu);
    while (!finished.load()) {
      const double now = std::chrono::duration<double>(Clock::now() - t0).count();
      if (o.sample_interval_s > 0 && now >= next_sample) {
        lock.unlock();
        ServerSample sample = Scrape(client, o, now);
        lock.lock();
        report.samples.push_back(sample);
        next_sample += o.sample_interval_s;
      }
      if (progress) progress(done.load(), timed ? 0 : requests.size(), errors.load());
      const double wait = o.sample_interval_s > 0 ? std::min(1.0, std::max(0.0, next_sample - now)) : 1.0;
      cv.wait_for(lock, std::chrono::duration<double>(wait), [&] { return finished.load(); });
    }
  });
  if (timed) {
    // Closed loop: each client runs its next request as soon as the last one ends.
    const int clients = std::max(1, o.concurrency);
    const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&] {
        while (Clock::now() < until) {
          const size_t i = next++;
          RequestResult r = RunOne(client, requests[i % requests.size()], i, o, t0);
          if (!r.ok) ++errors;
          ++done;
          std::lock_guard lock(mu);
          report.results.push_back(std::move(r));
        }
      });
    }
    for (auto& th : threads) th.join();
  } else {
    report.results.resize(requests.size());
    std::vector<double> arrivals(requests.size());
    std::mt19937_64 rng(o.seed);
    std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
    double t = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (o.rate > 0) {
        arrivals[i] = t;
        t += gap(rng);
      } else {
        arrivals[i] = requests[i].arrival_s * o.time_scale;
      }
    }
    int in_flight = 0;
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i) {
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return o.concurrency <= 0 || in_flight < o.concurrency; });
        ++in_flight;
      }
      threads.emplace_back([&, i] {
        RequestResult r = RunOne(client, requests[i], i, o, t0);
        if (!r.ok) ++errors;
        ++done;
        std::lock_guard lock(mu);
        report.results[i] = std::move(r);
        --in_flight;
        cv.notify_all();
      });
    }
    for (auto& th : threads) th.join();
  }
  report.duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // One last scrape after the load: the end of the memory curve.
  if (o.sample_interval_s > 0) {
    ServerSample last = Scrape(client, o, report.duration_s);
    std::lock_guard lock(mu);
    report.samples.push_back(last);
  }
  {
    std::lock_guard lock(mu);
    finished = true;
    cv.notify_all();
  }
  reporter.join();
  if (progress) progress(done.load(), timed ? 0 : requests.size(), errors.load());
  std::sort(report.samples.begin(), report.samples.end(),
            [](const ServerSample& x, const ServerSample& y) { return x.t_s < y.t_s; });
  return report;
}

MemoryTrend AnalyzeMemory(const BenchReport& report, double warmup_s) {
  MemoryTrend m;
  std::vector<std::pair<double, double>> all, late;  // (t, MB)
  for (const auto& s : report.samples) {
    if (s.rss_bytes < 0) continue;
    all.emplace_back(s.t_s, s.rss_bytes / 1048576.0);
    if (s.t_s >= warmup_s) late.push_back(all.back());
  }
  if (all.empty()) return m;
  m.start_mb = all.front().second;
  m.end_mb = all.back().second;
  for (auto [t, mb] : all) m.peak_mb = std::max(m.peak_mb, mb);
  if (late.size() < 3) return m;
  m.valid = true;
  m.after_warmup_mb = late.front().second;
  double mt = 0, mv = 0;
  for (auto [t, mb] : late) {
    mt += t;
    mv += mb;
  }
  mt /= static_cast<double>(late.size());
  mv /= static_cast<double>(late.size());
  double num = 0, den = 0;
  for (auto [t, mb] : late) {
    num += (t - mt) * (mb - mv);
    den += (t - mt) * (t - mt);
  }
  const double slope = den > 0 ? num / den : 0;  // MB per second
  m.growth_mb = slope * (late.back().first - late.front().first);
  return m;
}

std::string FormatReport(const BenchReport& report) {
  std::vector<double> ttft, tpot, itl, e2e;
  size_t ok = 0;
  int64_t out_tokens = 0, in_tokens = 0;
  std::string first_error;
  for (const auto& r : report.results) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++ok;
    out_tokens += r.output_tokens;
    in_tokens += r.prompt_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2e.push_back(r.end_s * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.end_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1));
    for (double g : r.itl_s) itl.push_back(g * 1e3);
  }
  std::string s;
  auto it = std::back_inserter(s);
  const size_t failed = report.results.size() - ok;
  fmt::format_to(it, "api        {}\n", report.api);
  fmt::format_to(it, "requests   {} ok, {} failed, {:.1f} s, {:.2f} req/s\n", ok, failed, report.duration_s,
                 ok / std::max(report.duration_s, 1e-9));
  fmt::format_to(it, "tokens     {} prompt, {} generated, {:.1f} output tok/s\n", in_tokens, out_tokens,
                 out_tokens / std::max(report.duration_s, 1e-9));
  fmt::format_to(it, "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "ms", "mean", "p50", "p90", "p99", "max");
  auto row = [&](const char* name, const std::vector<double>& v) {
    double mean = 0;
    for (double x : v) mean += x;
    mean = v.empty() ? 0 : mean / static_cast<double>(v.size());
    fmt::format_to(it, "{:<10} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f}\n", name, mean, Pct(v, 50), Pct(v, 90),
                   Pct(v, 99), v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()));
  };
  row("TTFT", ttft);
  row("TPOT", tpot);
  row("ITL", itl);
  row("E2E", e2e);
  const MemoryTrend mem = AnalyzeMemory(report, 0);
  if (mem.peak_mb > 0) {
    fmt::format_to(it, "server RSS start {:.1f} MB, peak {:.1f} MB, end {:.1f} MB ({} samples)\n", mem.start_mb,
                   mem.peak_mb, mem.end_mb, report.samples.size());
  }
  if (!first_error.empty()) fmt::format_to(it, "first error: {}\n", first_error);
  return s;
}

namespace {

// A 420x300 panel at (ox, oy): title, axes, and the axis maxima as labels.
struct Panel {
  static constexpr double W = 420, H = 300, M = 50;
  double ox, oy, xmax, ymax;
  double X(double x) const { return ox + M + x / xmax * (W - M - 10); }
  double Y(double y) const { return oy + H - M - y / ymax * (H - M - 30); }
  void Axes(std::string* s, const char* title, const char* xl, const char* yl) const {
    auto it = std::back_inserter(*s);
    fmt::format_to(it, R"(<text x="{}" y="{}" font-size="13">{}</text>)" "\n", ox + M, oy + 20, title);
    fmt::format_to(it, R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="black"/><line x1="{0}" y1="{3}" x2="{0}" y2="{1}" stroke="black"/>)" "\n",
                   ox + M, oy + H - M, ox + W - 10, oy + 30);
    fmt::format_to(it, R"(<text x="{}" y="{}">{}  (max {:.1f})</text><text x="{}" y="{}">{} (max {:.1f})</text>)" "\n",
                   ox + M, oy + H - M + 30, xl, xmax, ox + M + 6, oy + 40, yl, ymax);
  }
  void Line(std::string* s, const std::vector<std::pair<double, double>>& pts, const char* colour) const {
    if (pts.empty()) return;
    *s += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points=")", colour);
    for (auto [x, y] : pts) fmt::format_to(std::back_inserter(*s), "{:.1f},{:.1f} ", X(x), Y(y));
    *s += "\"/>\n";
  }
};

}  // namespace

std::string RenderSvg(const BenchReport& report) {
  // Top row: TTFT of each request against its start time; the ITL CDF. With server samples a
  // second row: the server's RSS and the output tokens/s over the run.
  std::vector<std::pair<double, double>> pts;
  std::vector<double> itl;
  for (const auto& r : report.results) {
    if (!r.ok) continue;
    pts.emplace_back(r.start_s, r.ttft_s * 1e3);
    for (double g : r.itl_s) itl.push_back(g * 1e3);
  }
  std::sort(itl.begin(), itl.end());
  double xmax = 1e-9, ymax = 1e-9;
  for (auto [x, y] : pts) {
    xmax = std::max(xmax, x);
    ymax = std::max(ymax, y);
  }
  std::vector<std::pair<double, double>> rss;
  for (const auto& smp : report.samples) {
    if (smp.rss_bytes >= 0) rss.emplace_back(smp.t_s, smp.rss_bytes / 1048576.0);
  }
  const bool second_row = !rss.empty() || report.duration_s >= 2;
  const double W = Panel::W, H = Panel::H;
  std::string s;
  auto it = std::back_inserter(s);
  fmt::format_to(it, R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">)",
                 2 * W, second_row ? 2 * H : H);
  s += "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  Panel ttft{0, 0, xmax, ymax};
  ttft.Axes(&s, "TTFT per request", "start (s)", "ms");
  for (auto [x, y] : pts) fmt::format_to(it, R"(<circle cx="{:.1f}" cy="{:.1f}" r="2" fill="steelblue"/>)", ttft.X(x), ttft.Y(y));
  s += "\n";
  Panel cdf{W, 0, itl.empty() ? 1 : std::max(itl.back(), 1e-9), 1.0};
  cdf.Axes(&s, "Inter-token latency CDF", "ms", "fraction");
  std::vector<std::pair<double, double>> cdf_pts;
  const size_t step = std::max<size_t>(1, itl.size() / 400);
  for (size_t i = 0; i < itl.size(); i += step) cdf_pts.emplace_back(itl[i], static_cast<double>(i + 1) / itl.size());
  cdf.Line(&s, cdf_pts, "darkorange");
  if (second_row) {
    const double tmax = std::max(report.duration_s, 1e-9);
    double rmax = 1e-9;
    for (auto [t, mb] : rss) rmax = std::max(rmax, mb);
    Panel mem{0, H, tmax, rmax * 1.1};
    mem.Axes(&s, "Server RSS", "time (s)", "MB");
    mem.Line(&s, rss, "seagreen");
    std::vector<std::pair<double, double>> tput;
    double tmax_rate = 1e-9;
    const std::vector<double> buckets = TokensPerSecond(report);
    for (size_t i = 0; i < buckets.size(); ++i) {
      tput.emplace_back(static_cast<double>(i) + 0.5, buckets[i]);
      tmax_rate = std::max(tmax_rate, buckets[i]);
    }
    Panel rate{W, H, tmax, tmax_rate * 1.1};
    rate.Axes(&s, "Output tokens/s", "time (s)", "tok/s");
    rate.Line(&s, tput, "purple");
  }
  s += "</svg>\n";
  return s;
}

}  // namespace ladle::loadgen
