// A stream's response head (status line + SSE headers) goes out when the engine accepts the
// request, not when the first token exists: clients' first-byte watchdogs time the head, and a
// long prefill can outlast them. The fake engine is held (it accepts requests but emits no
// token) while the test reads the head; a server that waited for the first token would never
// send it, and the bounded read would fail.
#include <chrono>

#include "bounded_client.h"
#include "server_fixture.h"

namespace ladle::server::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class StreamHeadTest : public ServerFixture {
 protected:
  void SetUp() override { LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath()); }
};

template <typename F>
bool WaitFor(F cond, std::chrono::milliseconds limit = 5000ms) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return cond();
}

struct Case {
  const char* target;
  std::string body;
  const char* last_event;  // the stream's final SSE line must contain this
};

TEST_F(StreamHeadTest, HeadArrivesBeforeTheFirstTokenEachApi) {
  StartServer({}, 1ms);
  const Case cases[] = {
      {"/v1/chat/completions", ChatBody(true, 4), "data: [DONE]"},
      {"/v1/responses", ResponsesBody(true, 4), "event: response.incomplete"},
      {"/v1/messages", MessagesBody(true, 4), "event: message_stop"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    const int submitted = engine_->submitted();
    const uint64_t generated = engine_->generated();
    engine_->HoldOutputs(true);
    BoundedConn conn(port_);
    conn.Write(http::verb::post, c.target, c.body);
    conn.StartReadHeader();
    const auto t0 = Clock::now();
    const bool got_head = conn.Await(5000ms);
    const auto head_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    // The engine is still holding: no token of this request exists.
    EXPECT_EQ(engine_->generated(), generated);
    if (!got_head) {
      engine_->HoldOutputs(false);
      FAIL() << "no response head within 5 s while the engine held the first token";
    }
    ASSERT_FALSE(conn.ec()) << conn.ec().message();
    EXPECT_EQ(engine_->submitted(), submitted + 1);
    EXPECT_EQ(conn.response().result_int(), 200);
    EXPECT_EQ(conn.header(http::field::content_type), "text/event-stream");
    EXPECT_EQ(conn.header(http::field::transfer_encoding), "chunked");
    EXPECT_FALSE(conn.header("x-request-id").empty());
    EXPECT_LT(head_ms, 2000) << "the head took " << head_ms << " ms";

    // And the stream is still open: nothing ends it while the engine holds.
    conn.StartReadRest();
    EXPECT_FALSE(conn.Await(100ms)) << "the stream ended while the engine held its first token";
    EXPECT_EQ(engine_->generated(), generated);

    // Release the engine: the same read goes on to the end of the stream.
    engine_->HoldOutputs(false);
    ASSERT_TRUE(conn.Await(5000ms)) << "the stream did not finish within 5 s after the release";
    ASSERT_FALSE(conn.ec()) << conn.ec().message();
    EXPECT_TRUE(conn.is_done());
    const std::string& body = conn.response().body();
    EXPECT_NE(body.find(c.last_event), std::string::npos) << body;
    EXPECT_EQ(engine_->generated(), generated + 4);
    EXPECT_TRUE(conn.response().keep_alive());
  }
  EXPECT_TRUE(WaitFor([&] { return engine_->running() == 0; }));
}

}  // namespace
}  // namespace ladle::server::testing
