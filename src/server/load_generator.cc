// The `ladle bench serve` load generator: one blocking client thread per in-flight request
// (simple, and at the few hundred streams this targets the threads cost less than the model).
#include "ladle/server/load_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "ladle/json/json.h"

namespace ladle::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
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

RequestResult RunOne(const BenchRequest& r, size_t index, const BenchOptions& o, Clock::time_point t0) {
  RequestResult res;
  const auto start = Clock::now();
  res.start_s = std::chrono::duration<double>(start - t0).count();
  auto since = [&](Clock::time_point t) { return std::chrono::duration<double>(t - start).count(); };
  try {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address(o.host), o.port));
    std::string body = R"({"model":)";
    json::AppendQuoted(o.model, &body);
    body += R"(,"messages":[{"role":"user","content":)";
    json::AppendQuoted(PromptFor(r, index), &body);
    body += fmt::format(R"(}}],"max_tokens":{},"stream":true,"stream_options":{{"include_usage":true}}}})",
                        std::max(1, r.output_tokens));
    http::request<http::string_body> req(http::verb::post, "/v1/chat/completions", 11);
    req.set(http::field::host, o.host);
    req.set(http::field::content_type, "application/json");
    if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
    req.body() = std::move(body);
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1u << 30);
    http::read_header(stream, buf, parser);
    if (parser.get().result_int() != 200) {
      http::read(stream, buf, parser);
      res.error = fmt::format("HTTP {}: {}", parser.get().result_int(), parser.get().body().substr(0, 200));
      return res;
    }
    size_t scanned = 0;
    bool first = true;
    Clock::time_point last{};
    while (!parser.is_done()) {
      http::read_some(stream, buf, parser);
      const std::string& b = parser.get().body();
      size_t end;
      while ((end = b.find("\n\n", scanned)) != std::string::npos) {
        std::string_view frame(b.data() + scanned, end - scanned);
        scanned = end + 2;
        if (frame.rfind("data: ", 0) != 0 || frame == "data: [DONE]") continue;
        auto v = json::Parse(frame.substr(6));
        if (!v.ok()) continue;
        if (const json::Value* u = v->Find("usage"); u && u->is_object()) {
          if (auto* c = u->Find("completion_tokens")) res.output_tokens = c->as_int64().ok() ? *c->as_int64() : 0;
          if (auto* p = u->Find("prompt_tokens")) res.prompt_tokens = p->as_int64().ok() ? *p->as_int64() : 0;
        }
        if (v->Find("error")) {
          res.error = std::string(frame.substr(6, 200));
          return res;
        }
        const json::Value* choices = v->Find("choices");
        if (!choices || !choices->is_array() || choices->as_array().empty()) continue;
        const json::Value* delta = choices->as_array()[0].Find("delta");
        const json::Value* content = delta ? delta->Find("content") : nullptr;
        const json::Value* reasoning = delta ? delta->Find("reasoning_content") : nullptr;
        if (!(content && content->is_string()) && !(reasoning && reasoning->is_string())) continue;
        const auto now = Clock::now();
        if (first) {
          res.ttft_s = since(now);
          first = false;
        } else {
          res.itl_s.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
      }
    }
    res.end_s = since(Clock::now());
    if (first) res.ttft_s = res.end_s;  // no content at all: the first byte is the end
    res.ok = true;
  } catch (const std::exception& e) {
    res.error = e.what();  // Beast reports socket errors as exceptions; they stop here
  }
  return res;
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
      const size_t c1 = line.find(','), c2 = line.find(',', c1 + 1);
      if (c1 == std::string::npos || c2 == std::string::npos) continue;
      std::tm tm{};
      std::istringstream ts(line.substr(0, c1));
      ts >> std::get_time(&tm, "%Y-%m-%d %H:%M:%S");
      if (ts.fail()) return ParseError("bad timestamp in trace line: " + line);
      double frac = 0;
      const size_t dot = line.find('.');
      if (dot != std::string::npos && dot < c1) frac = std::stod("0" + line.substr(dot, c1 - dot));
      const double t = static_cast<double>(timegm(&tm)) + frac;
      if (first < 0) first = t;
      BenchRequest r;
      r.arrival_s = t - first;
      r.input_tokens = clamp(std::stoi(line.substr(c1 + 1, c2 - c1 - 1)), max_input);
      r.output_tokens = clamp(std::stoi(line.substr(c2 + 1)), max_output);
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

BenchReport RunBench(const std::vector<BenchRequest>& requests, const BenchOptions& o,
                     const std::function<void(size_t, size_t, size_t)>& progress) {
  BenchReport report;
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
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  std::atomic<size_t> done{0}, errors{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  std::thread reporter([&] {
    while (done.load() < requests.size()) {
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(1));
      if (progress) progress(done.load(), requests.size(), errors.load());
    }
  });
  for (size_t i = 0; i < requests.size(); ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return o.concurrency <= 0 || in_flight < o.concurrency; });
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      report.results[i] = RunOne(requests[i], i, o, t0);
      if (!report.results[i].ok) ++errors;
      ++done;
      std::lock_guard lock(mu);
      --in_flight;
      cv.notify_all();
    });
  }
  for (auto& th : threads) th.join();
  {
    std::lock_guard lock(mu);
    cv.notify_all();
  }
  reporter.join();
  report.duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
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
  if (!first_error.empty()) fmt::format_to(it, "first error: {}\n", first_error);
  return s;
}

std::string RenderSvg(const BenchReport& report) {
  // Left: TTFT of each request against its start time. Right: the ITL CDF.
  constexpr double W = 420, H = 300, M = 50;
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
  const double imax = itl.empty() ? 1 : std::max(itl.back(), 1e-9);
  std::string s;
  auto it = std::back_inserter(s);
  fmt::format_to(it, R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">)",
                 2 * W, H);
  s += "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  auto axes = [&](double ox, const char* title, const char* xl, const char* yl, double xm, double ym) {
    fmt::format_to(it, R"(<text x="{}" y="20" font-size="13">{}</text>)" "\n", ox + M, title);
    fmt::format_to(it, R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="black"/><line x1="{0}" y1="{3}" x2="{0}" y2="{1}" stroke="black"/>)" "\n",
                   ox + M, H - M, ox + W - 10, 30);
    fmt::format_to(it, R"(<text x="{}" y="{}">{}  (max {:.1f})</text><text x="{}" y="40">{} (max {:.1f})</text>)" "\n",
                   ox + M, H - M + 30, xl, xm, ox + M + 6, yl, ym);
  };
  axes(0, "TTFT per request", "start (s)", "ms", xmax, ymax);
  for (auto [x, y] : pts) {
    fmt::format_to(it, R"(<circle cx="{:.1f}" cy="{:.1f}" r="2" fill="steelblue"/>)", M + x / xmax * (W - M - 10),
                   H - M - y / ymax * (H - M - 30));
  }
  s += "\n";
  axes(W, "Inter-token latency CDF", "ms", "fraction", imax, 1.0);
  if (!itl.empty()) {
    s += "<polyline fill=\"none\" stroke=\"darkorange\" stroke-width=\"1.5\" points=\"";
    const size_t step = std::max<size_t>(1, itl.size() / 400);
    for (size_t i = 0; i < itl.size(); i += step) {
      fmt::format_to(it, "{:.1f},{:.1f} ", W + M + itl[i] / imax * (W - M - 10),
                     H - M - (static_cast<double>(i + 1) / itl.size()) * (H - M - 30));
    }
    s += "\"/>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace ladle::server
