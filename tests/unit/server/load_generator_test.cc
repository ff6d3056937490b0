// `ladle bench serve`'s parts: trace readers (Mooncake JSONL, Azure CSV), the report table and
// plot, and a short run against the fake-engine server.
#include "ladle/loadgen/load_generator.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "server_fixture.h"

namespace ladle::server::testing {
namespace {

using namespace ladle::loadgen;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(LoadTrace, Mooncake) {
  const std::string path = WriteTemp("mc.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \"hash_ids\": [0, 1]}\n"
                                     "{\"timestamp\": 1500, \"input_length\": 30, \"output_length\": 7, \"hash_ids\": [0]}\n"
                                     "{\"timestamp\": 2000, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}\n");
  auto reqs = LoadTrace("mooncake", path, 2, 1024, 64);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  ASSERT_EQ(reqs->size(), 2u);
  EXPECT_EQ((*reqs)[0].input_tokens, 1024);  // clamped
  EXPECT_EQ((*reqs)[0].output_tokens, 64);
  EXPECT_EQ((*reqs)[0].prefix_ids, (std::vector<int64_t>{0, 1}));
  EXPECT_DOUBLE_EQ((*reqs)[1].arrival_s, 1.5);
  EXPECT_EQ((*reqs)[1].input_tokens, 30);
}

TEST(LoadTrace, Azure) {
  const std::string path = WriteTemp("az.csv",
                                     "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     "2023-11-16 18:15:46.6805900,374,44\n"
                                     "2023-11-16 18:15:50.9951690,396,109\n");
  auto reqs = LoadTrace("azure", path, 0, 0, 0);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  ASSERT_EQ(reqs->size(), 2u);
  EXPECT_DOUBLE_EQ((*reqs)[0].arrival_s, 0.0);
  EXPECT_NEAR((*reqs)[1].arrival_s, 4.314579, 1e-6);
  EXPECT_EQ((*reqs)[1].input_tokens, 396);
  EXPECT_EQ((*reqs)[1].output_tokens, 109);
  EXPECT_FALSE(LoadTrace("csv", path, 0, 0, 0).ok());
  EXPECT_EQ(LoadTrace("azure", "/nonexistent", 0, 0, 0).status().code(), StatusCode::kIoError);
}

TEST(Report, TableAndSvg) {
  BenchReport report;
  report.duration_s = 2;
  RequestResult r;
  r.ok = true;
  r.ttft_s = 0.1;
  r.end_s = 0.5;
  r.output_tokens = 5;
  r.itl_s = {0.1, 0.1, 0.1, 0.1};
  report.results = {r, r};
  RequestResult bad;
  bad.error = "HTTP 429";
  report.results.push_back(bad);
  const std::string table = FormatReport(report);
  EXPECT_NE(table.find("2 ok, 1 failed"), std::string::npos) << table;
  EXPECT_NE(table.find("TTFT"), std::string::npos);
  EXPECT_NE(table.find("first error: HTTP 429"), std::string::npos);
  const std::string svg = RenderSvg(report);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

class LoadGeneratorServerTest : public ServerFixture {};

TEST_F(LoadGeneratorServerTest, SyntheticRunAgainstServer) {
  LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
  StartServer();
  BenchOptions o;
  o.port = port_;
  o.concurrency = 4;
  auto report = RunBench(SyntheticRequests(12, 20, 8), o, nullptr);
  ASSERT_EQ(report.results.size(), 12u);
  for (const auto& r : report.results) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_tokens, 8);
    EXPECT_GT(r.prompt_tokens, 20);  // the words plus the chat template
    EXPECT_LE(r.ttft_s, r.end_s);
  }
}

// Each API's SSE is parsed: tokens are timed and usage read from that API's own frames.
TEST_F(LoadGeneratorServerTest, EveryApiIsTimedFromItsOwnStream) {
  LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
  StartServer();
  for (const std::string api : {"chat", "responses", "messages"}) {
    SCOPED_TRACE(api);
    BenchOptions o;
    o.port = port_;
    o.api = api;
    o.concurrency = 3;
    o.sample_interval_s = 0;
    auto report = RunBench(SyntheticRequests(6, 20, 7), o, nullptr);
    EXPECT_EQ(report.api, api);
    ASSERT_EQ(report.results.size(), 6u);
    for (const auto& r : report.results) {
      EXPECT_TRUE(r.ok) << r.error;
      EXPECT_EQ(r.output_tokens, 7);
      EXPECT_GT(r.prompt_tokens, 20);
      EXPECT_GT(r.ttft_s, 0);
      EXPECT_FALSE(r.itl_s.empty());  // several content frames, each one timed
      EXPECT_LE(r.ttft_s, r.end_s);
    }
    EXPECT_NE(FormatReport(report).find("api        " + api), std::string::npos);
  }
}

TEST_F(LoadGeneratorServerTest, ServerErrorsAreCountedNotTimed) {
  LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
  StartServer();
  BenchOptions o;
  o.port = port_;
  o.api = "messages";
  o.model = "not-served";
  o.sample_interval_s = 0;
  auto report = RunBench(SyntheticRequests(2, 5, 3), o, nullptr);
  ASSERT_EQ(report.results.size(), 2u);
  for (const auto& r : report.results) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("HTTP 404"), std::string::npos) << r.error;
  }
  EXPECT_FALSE(CheckBenchApi("completions").ok());
  EXPECT_TRUE(CheckBenchApi("responses").ok());
}

// The timed closed loop keeps `concurrency` clients busy until the duration ends and scrapes
// the server's RSS meanwhile.
TEST_F(LoadGeneratorServerTest, TimedClosedLoopSamplesServerMemory) {
  LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
  StartServer();
  BenchOptions o;
  o.port = port_;
  o.concurrency = 4;
  o.duration_s = 0.5;
  o.sample_interval_s = 0.1;
  auto report = RunBench(SyntheticRequests(2, 10, 4), o, nullptr);
  // Every client ran at least one request; the two requests were cycled through.
  EXPECT_GE(report.results.size(), 4u);
  for (const auto& r : report.results) EXPECT_TRUE(r.ok) << r.error;
  EXPECT_GE(report.duration_s, 0.5);
  ASSERT_GE(report.samples.size(), 2u);  // the first at t=0 and the last after the load at least
  for (const auto& smp : report.samples) {
    EXPECT_GT(smp.rss_bytes, 1e6);
    EXPECT_GE(smp.kv_blocks_used, 0);
  }
  EXPECT_TRUE(std::is_sorted(report.samples.begin(), report.samples.end(),
                             [](const ServerSample& a, const ServerSample& b) { return a.t_s < b.t_s; }));
  EXPECT_NE(FormatReport(report).find("server RSS start"), std::string::npos);
  const std::string svg = RenderSvg(report);
  EXPECT_NE(svg.find("Server RSS"), std::string::npos);
}

TEST(AnalyzeMemory, TrendIgnoresWarmupAndSpikesButSeesALeak) {
  auto report_of = [](const std::vector<double>& mb) {
    BenchReport r;
    for (size_t i = 0; i < mb.size(); ++i) {
      ServerSample s;
      s.t_s = static_cast<double>(i);
      s.rss_bytes = mb[i] * 1048576.0;
      r.samples.push_back(s);
    }
    r.samples.push_back(ServerSample{});  // a missed scrape (rss -1) is skipped
    r.samples.back().t_s = static_cast<double>(mb.size());
    return r;
  };
  // Warm-up from 100 to 200 MB, then flat with one spike.
  MemoryTrend flat = AnalyzeMemory(report_of({100, 150, 200, 200, 201, 260, 200, 200, 201, 200}), 2);
  ASSERT_TRUE(flat.valid);
  EXPECT_DOUBLE_EQ(flat.start_mb, 100);
  EXPECT_DOUBLE_EQ(flat.peak_mb, 260);
  EXPECT_DOUBLE_EQ(flat.end_mb, 200);
  EXPECT_DOUBLE_EQ(flat.after_warmup_mb, 200);
  EXPECT_LT(std::abs(flat.growth_mb), 15);
  // 10 MB a second after the warm-up: 70 MB over the 7 seconds measured.
  MemoryTrend leak = AnalyzeMemory(report_of({100, 150, 200, 210, 220, 230, 240, 250, 260, 270}), 2);
  ASSERT_TRUE(leak.valid);
  EXPECT_NEAR(leak.growth_mb, 70, 1e-6);
  // Too few samples after the warm-up to judge.
  EXPECT_FALSE(AnalyzeMemory(report_of({100, 200, 300}), 2).valid);
}

}  // namespace
}  // namespace ladle::server::testing
