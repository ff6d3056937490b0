// The server's parts on their own: constant-time key comparison and key loading, error
// shapes per protocol, the Prometheus text format, and the stop-string filter.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "api_errors.h"
#include "ladle/json/json.h"
#include "ladle/server/auth.h"
#include "ladle/server/metrics.h"
#include "stop_filter.h"

namespace ladle::server {
namespace {

using frontend::Api;
using frontend::Event;

TEST(ConstantTimeEquals, MatchesOnlyEqualStrings) {
  EXPECT_TRUE(ConstantTimeEquals("sk-abc", "sk-abc"));
  EXPECT_FALSE(ConstantTimeEquals("sk-abd", "sk-abc"));
  EXPECT_FALSE(ConstantTimeEquals("sk-ab", "sk-abc"));    // a prefix of the secret
  EXPECT_FALSE(ConstantTimeEquals("sk-abcd", "sk-abc"));  // the secret as a prefix
  EXPECT_FALSE(ConstantTimeEquals("", "sk-abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  // A presented key padded with NULs must not match a shorter secret.
  EXPECT_FALSE(ConstantTimeEquals(std::string("sk-abc\0", 7), "sk-abc"));
}

TEST(ApiKeys, OpenWhenNoneConfigured) {
  ApiKeys keys;
  EXPECT_TRUE(keys.open());
  EXPECT_TRUE(keys.Allows("", ""));
}

TEST(ApiKeys, BearerAndXApiKey) {
  auto keys = ApiKeys::Load(" k1 , k2,,", "");
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->Allows("Bearer k1", ""));
  EXPECT_TRUE(keys->Allows("bearer k2", ""));
  EXPECT_TRUE(keys->Allows("", "k2"));
  EXPECT_FALSE(keys->Allows("Bearer k3", ""));
  EXPECT_FALSE(keys->Allows("k1", ""));  // no scheme
  EXPECT_FALSE(keys->Allows("", ""));
  EXPECT_FALSE(keys->Allows("Bearer ", ""));
}

TEST(ApiKeys, KeyFileSkipsCommentsAndBlanks) {
  const std::string path = ::testing::TempDir() + "/ladle_keys.txt";
  {
    std::ofstream f(path);
    f << "# keys\n\nfile-key\r\n";
  }
  auto keys = ApiKeys::Load("env-key", path);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->Allows("", "file-key"));
  EXPECT_TRUE(keys->Allows("Bearer env-key", ""));
  std::remove(path.c_str());
  EXPECT_EQ(ApiKeys::Load("", "/nonexistent/keys").status().code(), StatusCode::kIoError);
}

TEST(ApiErrors, StatusMapsThroughHttpStatusFor) {
  EXPECT_EQ(ErrorFor(Api::kChat, InvalidArgument("x")).http_status(), 400);
  EXPECT_EQ(Unauthorized(Api::kChat).http_status(), 401);
  EXPECT_EQ(Unauthorized(Api::kMessages).type, "authentication_error");
  EXPECT_EQ(ModelNotFound(Api::kChat, "gpt").code, "model_not_found");
  EXPECT_EQ(ModelNotFound(Api::kMessages, "gpt").type, "not_found_error");
  EXPECT_EQ(Overloaded(Api::kChat).http_status(), 429);
  EXPECT_EQ(Overloaded(Api::kResponses).http_status(), 429);
  EXPECT_EQ(Overloaded(Api::kMessages).http_status(), 529);
  EXPECT_EQ(Overloaded(Api::kMessages).type, "overloaded_error");
  EXPECT_EQ(ApiForPath("/v1/messages"), Api::kMessages);
  EXPECT_EQ(ApiForPath("/v1/responses"), Api::kResponses);
  EXPECT_EQ(ApiForPath("/nope"), Api::kChat);
}

// Every line is a comment, or `name{labels} value` with a parseable number.
void ExpectPrometheusText(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    ASSERT_NE(nl, std::string::npos) << "exposition must end with a newline";
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    const size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    const std::string value = line.substr(sp + 1);
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    EXPECT_EQ(*end, '\0') << "bad value in: " << line;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    // Our own series are ladle_*; process_* is the standard name the client libraries use.
    EXPECT_TRUE(name.rfind("ladle_", 0) == 0 || name == "process_resident_memory_bytes") << line;
  }
}

TEST(Metrics, PrometheusTextFormat) {
  Metrics m;
  m.CountRequest("chat", 200);
  m.CountRequest("chat", 200);
  m.CountRequest("messages", 529);
  m.ObserveTtft(0.02);
  m.ObserveTtft(3.0);
  m.ObserveInterToken(0.004);
  m.AddTokens(10, 5);
  engine::Stats stats;
  stats.kv_blocks_used = 7;
  stats.queue_depth = 2;
  const std::string text = m.Render(stats);
  ExpectPrometheusText(text);
  EXPECT_NE(text.find("ladle_requests_total{api=\"chat\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_requests_total{api=\"messages\",status=\"529\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_time_to_first_token_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_kv_blocks_used 7\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE ladle_inter_token_latency_seconds histogram\n"), std::string::npos);
  // The load test watches this one for memory growth: it must be this process's real RSS.
  const size_t rss_at = text.find("\nprocess_resident_memory_bytes ");
  ASSERT_NE(rss_at, std::string::npos);
  EXPECT_GT(std::strtod(text.c_str() + rss_at + 31, nullptr), 1e6);
}

TEST(Metrics, ClusterRankLoadsAndHandoffLatency) {
  Metrics m;
  engine::Stats stats;
  EXPECT_EQ(m.Render(stats).find("ladle_rank_"), std::string::npos) << "a local engine has no rank loads";
  engine::RankLoad r;
  r.engine = "decode\"0";  // a hostile engine name stays one label value
  r.role = "decode";
  r.rank = 1;
  r.kv_tokens = 4096;
  r.quota_seconds_total = 0.25;
  stats.rank_loads.push_back(r);
  stats.handoff_latency_buckets.assign(std::size(engine::kHandoffLatencyBoundsS) + 1, 0);
  stats.handoff_latency_buckets[3] = 2;  // two in (2.5 ms, 5 ms]
  stats.handoff_latency_buckets.back() = 1;  // one above the last bound
  stats.handoff_latency_seconds_total = 3.01;
  const std::string text = m.Render(stats);
  ExpectPrometheusText(text);
  EXPECT_NE(text.find("ladle_rank_kv_tokens{engine=\"decode_0\",role=\"decode\",rank=\"1\"} 4096\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ladle_rank_quota_seconds_total{engine=\"decode_0\",role=\"decode\",rank=\"1\"} 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE ladle_rank_quota_seconds_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_handoff_latency_seconds_bucket{le=\"0.0025\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_handoff_latency_seconds_bucket{le=\"0.005\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_handoff_latency_seconds_bucket{le=\"2.5\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_handoff_latency_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("ladle_handoff_latency_seconds_count 3\n"), std::string::npos);
}

std::vector<Event> Feed(StopFilter& f, const std::vector<std::string>& pieces, bool finish = true) {
  std::vector<Event> out;
  for (const auto& p : pieces) {
    Event e;
    e.kind = Event::Kind::kContent;
    e.text = p;
    f.Push(e, &out);
  }
  if (finish) {
    Event e;
    e.kind = Event::Kind::kFinish;
    e.finish = frontend::FinishReason::kLength;
    f.Push(e, &out);
  }
  return out;
}

std::string Text(const std::vector<Event>& events) {
  std::string s;
  for (const auto& e : events) {
    if (e.kind == Event::Kind::kContent) s += e.text;
  }
  return s;
}

TEST(StopFilter, CutsAtStopSpanningPieces) {
  StopFilter f({"STOP"});
  auto out = Feed(f, {"abc S", "TO", "P and more", "tail"});
  EXPECT_EQ(Text(out), "abc ");
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().kind, Event::Kind::kFinish);
  EXPECT_EQ(out.back().finish, frontend::FinishReason::kStop);
  EXPECT_EQ(out.back().text, "STOP");
}

TEST(StopFilter, NeverEmitsAPartialStop) {
  StopFilter f({"STOP"});
  auto out = Feed(f, {"abc ST"}, /*finish=*/false);
  EXPECT_EQ(Text(out), "abc ");  // "ST" held back
  out = Feed(f, {"AY"});
  EXPECT_EQ(Text(out), "STAY");  // ruled out, then released
  EXPECT_EQ(out.back().finish, frontend::FinishReason::kLength);
}

TEST(StopFilter, EarliestOfSeveral) {
  StopFilter f({"world", "lo"});
  auto out = Feed(f, {"hello world"});
  EXPECT_EQ(Text(out), "hel");
  EXPECT_EQ(out.back().text, "lo");
}

TEST(StopFilter, PassThroughWithoutStops) {
  StopFilter f({});
  auto out = Feed(f, {"a", "b"});
  EXPECT_EQ(Text(out), "ab");
  EXPECT_EQ(out.size(), 3u);
}

std::string Repair(std::string_view in, std::string* tail) {
  std::string out;
  StopFilter::RepairUtf8(in, tail, &out);
  return out;
}

TEST(RepairUtf8, IllFormedSubpartsBecomeReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  std::string tail;
  EXPECT_EQ(Repair("plain ascii", &tail), "plain ascii");
  EXPECT_EQ(Repair("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", &tail), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_TRUE(tail.empty());
  // A stray continuation byte; C0/C1 and F5+ never start a sequence.
  EXPECT_EQ(Repair("\xBEok", &tail), fffd + "ok");
  EXPECT_EQ(Repair("\xC0\xAF", &tail), fffd + fffd);
  EXPECT_EQ(Repair("\xF5x", &tail), fffd + "x");
  // A lead byte cut short by ASCII: one U+FFFD for the subpart, the ASCII kept.
  EXPECT_EQ(Repair("\xE2\x82x", &tail), fffd + "x");
  // Surrogates and values past U+10FFFF are ill-formed at their second byte.
  EXPECT_EQ(Repair("\xED\xA0\x80", &tail), fffd + fffd + fffd);
  EXPECT_EQ(Repair("\xF4\x90\x80\x80", &tail), fffd + fffd + fffd + fffd);
  EXPECT_TRUE(tail.empty());
  // A valid sequence split across calls is held, then completed.
  EXPECT_EQ(Repair("ab\xF0\x9F", &tail), "ab");
  EXPECT_EQ(tail, "\xF0\x9F");
  EXPECT_EQ(Repair("\x98\x80!", &tail), "\xF0\x9F\x98\x80!");
  EXPECT_TRUE(tail.empty());
  // ... or, when the next bytes do not continue it, replaced.
  EXPECT_EQ(Repair("\xE2", &tail), "");
  EXPECT_EQ(Repair("z", &tail), fffd + "z");
}

TEST(StopFilter, OutputIsAlwaysValidUtf8) {
  const std::string fffd = "\xEF\xBF\xBD";
  for (const std::vector<std::string>& stops : {std::vector<std::string>{}, std::vector<std::string>{"STOP"}}) {
    StopFilter f(stops);
    auto out = Feed(f, {"a\xBE", "b\xE2\x82", "\xAC c \xF0", "\x9F"});
    std::string text;
    for (const auto& e : out) {
      if (e.kind == Event::Kind::kContent) text += e.text;
    }
    // The euro sign split across events survives; the lone 0xBE and the sequence the
    // finish cut short become U+FFFD.
    EXPECT_EQ(text, "a" + fffd + "b\xE2\x82\xAC c " + fffd);
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(out.back().kind, Event::Kind::kFinish);
  }
}

}  // namespace
}  // namespace ladle::server
