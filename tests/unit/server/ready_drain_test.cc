// /ready while draining: 503 {"status":"draining"} (HttpStatusFor(kUnavailable)) and the
// connection closes; /health stays 200 (liveness). The listener stops at the drain, so the
// probes use keep-alive connections opened before it; a held engine keeps one stream in flight
// so the drain cannot finish (and Run return) under the probes.
#include <chrono>

#include "bounded_client.h"
#include "server_fixture.h"

namespace ladle::server::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ReadyDrainTest : public ServerFixture {
 protected:
  void SetUp() override { LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath()); }
};

TEST_F(ReadyDrainTest, ReadyAnswers503WhileDrainingAndHealthStays200) {
  ServerConfig config;
  config.drain_deadline_ms = 10'000;
  StartServer(config, 1ms);
  engine_->HoldOutputs(true);
  BoundedConn stream(port_);
  stream.Write(http::verb::post, "/v1/chat/completions", ChatBody(true, 3));
  stream.StartReadHeader();
  ASSERT_TRUE(stream.Await(5000ms));
  ASSERT_EQ(stream.response().result_int(), 200);

  BoundedConn ready_probe(port_), health_probe(port_);
  auto ready = ready_probe.Exchange(http::verb::get, "/ready", "", 5000ms);
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(ready->body, R"({"status":"ready"})");
  EXPECT_TRUE(ready_probe.response().keep_alive());
  auto health = health_probe.Exchange(http::verb::get, "/health", "", 5000ms);
  ASSERT_TRUE(health.has_value());
  EXPECT_TRUE(health_probe.response().keep_alive());

  server_->Drain();  // asynchronous: /ready turns 503 once the server's thread starts it
  const auto until = Clock::now() + 5000ms;
  do {
    ready = ready_probe.Exchange(http::verb::get, "/ready", "", 5000ms);
    ASSERT_TRUE(ready.has_value()) << ready_probe.ec().message();
    if (ready->status != 200) break;
    ASSERT_TRUE(ready_probe.response().keep_alive());
    std::this_thread::sleep_for(2ms);
  } while (Clock::now() < until);
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(ready->header("content-type"), "application/json");
  EXPECT_EQ(ready->body, R"({"status":"draining"})");
  EXPECT_FALSE(ready->header("x-request-id").empty());
  EXPECT_FALSE(ready_probe.response().keep_alive());

  health = health_probe.Exchange(http::verb::get, "/health", "", 5000ms);
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, R"({"status":"ok"})");
  EXPECT_FALSE(health_probe.response().keep_alive());  // draining: every answer closes

  // The in-flight stream still finishes, and then the drain does.
  engine_->HoldOutputs(false);
  stream.StartReadRest();
  ASSERT_TRUE(stream.Await(5000ms));
  EXPECT_FALSE(stream.ec()) << stream.ec().message();
  EXPECT_NE(stream.response().body().find("[DONE]"), std::string::npos);
}

}  // namespace
}  // namespace ladle::server::testing
