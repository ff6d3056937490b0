// `ladle bench serve`'s parts: trace readers (Mooncake JSONL, Azure CSV), the report table and
// plot, and a short run against the fake-engine server.
#include "ladle/server/load_generator.h"

#include <fstream>

#include "server_fixture.h"

namespace ladle::server::testing {
namespace {

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

}  // namespace
}  // namespace ladle::server::testing
