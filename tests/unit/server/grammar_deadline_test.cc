// --grammar-deadline-ms (ServerConfig::grammar_deadline_ms): a constrained request whose
// grammar is not compiled in time gets a 504 in its API's error shape, and the server goes on
// serving. The compile is made to hang by a grammar worker that accepts the connection, reads
// the compile request and never answers (the worker timeout is far longer than the deadline,
// so only the deadline can answer the request in time).
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "bounded_client.h"
#include "server_fixture.h"

namespace ladle::server::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using tcp = net::ip::tcp;

// Accepts connections on loopback and reads whatever comes, never writing a byte. Stop()
// closes every connection, which the server's compile client sees as a transport failure
// (it then falls back to compiling in-process).
class SilentGrammarWorker {
 public:
  SilentGrammarWorker() : acceptor_(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
    Accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~SilentGrammarWorker() { Stop(); }

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_.load(); }
  size_t bytes_read() const { return bytes_.load(); }

  void Stop() {
    if (!thread_.joinable()) return;
    ioc_.stop();
    thread_.join();
    beast::error_code ec;
    acceptor_.close(ec);
    for (auto& c : conns_) {
      c->socket.shutdown(tcp::socket::shutdown_both, ec);
      c->socket.close(ec);
    }
  }

 private:
  struct Conn {
    explicit Conn(tcp::socket s) : socket(std::move(s)) {}
    tcp::socket socket;
    char buf[4096];
  };

  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec) return;
      ++connections_;
      conns_.push_back(std::make_shared<Conn>(std::move(s)));
      Read(conns_.back());
      Accept();
    });
  }
  void Read(std::shared_ptr<Conn> c) {
    c->socket.async_read_some(net::buffer(c->buf), [this, c](beast::error_code ec, size_t n) {
      if (ec) return;
      bytes_ += n;
      Read(c);
    });
  }

  net::io_context ioc_;
  tcp::acceptor acceptor_;
  const uint16_t port_ = acceptor_.local_endpoint().port();
  std::vector<std::shared_ptr<Conn>> conns_;  // only the worker's thread touches it while running
  std::atomic<int> connections_{0};
  std::atomic<size_t> bytes_{0};
  std::thread thread_;
};

class GrammarDeadlineTest : public ServerFixture {
 protected:
  void SetUp() override { LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath()); }
};

constexpr int64_t kDeadlineMs = 200;
constexpr char kSchema[] =
    R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},)"
    R"("required":["city","days"],"additionalProperties":false})";

std::string ChatSchemaBody() {
  return ChatBody(false, 8, std::string(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"trip",)") +
                                R"("strict":true,"schema":)" + kSchema + "}}");
}
std::string ResponsesSchemaBody() {
  return std::string(R"({"model":"ladle","input":"Hi","max_output_tokens":8,)") +
         R"("text":{"format":{"type":"json_schema","name":"trip","strict":true,"schema":)" + kSchema + "}}}";
}
std::string MessagesSchemaBody() {
  return std::string(R"({"model":"ladle","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,)") +
         R"("output_format":{"type":"json_schema","schema":)" + kSchema + "}}";
}

template <typename F>
bool WaitFor(F cond, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

TEST_F(GrammarDeadlineTest, UncompiledConstraintGets504InEachApisShapeAndTheServerGoesOn) {
  SilentGrammarWorker worker;
  ServerConfig config;
  config.grammar_deadline_ms = kDeadlineMs;
  config.grammar_service.workers = {worker.endpoint()};
  config.grammar_service.worker_timeout_ms = 20'000;  // far past the deadline: the worker never answers in time
  StartServer(config);

  const std::string deadline_text = "did not compile within " + std::to_string(kDeadlineMs) + " ms";
  struct Case {
    const char* target;
    std::string body;
    bool anthropic;
  };
  const Case cases[] = {
      {"/v1/chat/completions", ChatSchemaBody(), false},
      {"/v1/responses", ResponsesSchemaBody(), false},
      {"/v1/messages", MessagesSchemaBody(), true},
  };
  BoundedConn conn(port_);  // one keep-alive connection for the errors and the requests after them
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    const auto t0 = Clock::now();
    auto r = conn.Exchange(http::verb::post, c.target, c.body, 5000ms);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    ASSERT_TRUE(r.has_value()) << "no answer within 5 s (error: " << conn.ec().message() << ")";
    EXPECT_EQ(r->status, 504) << r->body;
    EXPECT_EQ(r->header("content-type"), "application/json");
    EXPECT_FALSE(r->header("x-request-id").empty());
    EXPECT_TRUE(conn.response().keep_alive());
    // Answered by the deadline: not before it, and long before the worker timeout.
    EXPECT_GE(ms, kDeadlineMs - 5);
    EXPECT_LT(ms, 3000);
    json::Value v = ParseJson(r->body);
    const json::Value* err = v.Find("error");
    ASSERT_TRUE(err != nullptr && err->is_object()) << r->body;
    ASSERT_TRUE(err->Find("message") && err->Find("message")->is_string()) << r->body;
    EXPECT_NE(err->Find("message")->as_string().find(deadline_text), std::string::npos) << r->body;
    if (c.anthropic) {
      // {"type":"error","error":{"type":...,"message":...}}
      ASSERT_TRUE(v.Find("type")) << r->body;
      EXPECT_EQ(v.Find("type")->as_string(), "error");
      EXPECT_EQ(err->Find("type")->as_string(), "timeout_error");
      EXPECT_EQ(err->Find("param"), nullptr);
    } else {
      // {"error":{"message","type","param","code"}}
      EXPECT_EQ(v.Find("type"), nullptr);
      EXPECT_EQ(err->Find("type")->as_string(), "server_error");
      ASSERT_TRUE(err->Find("param") && err->Find("code")) << r->body;
      EXPECT_TRUE(err->Find("param")->is_null()) << r->body;
      EXPECT_TRUE(err->Find("code")->is_null()) << r->body;
    }
  }
  // The compile requests reached the worker (the hang was the worker's, not something else).
  EXPECT_GE(worker.connections(), 1);
  EXPECT_GT(worker.bytes_read(), 0u);
  EXPECT_EQ(engine_->submitted(), 0);  // none of them reached the engine

  // The server goes on: the next request on the same connection, and on a new one.
  auto next = conn.Exchange(http::verb::post, "/v1/chat/completions", ChatBody(false, 3), 5000ms);
  ASSERT_TRUE(next.has_value()) << conn.ec().message();
  EXPECT_EQ(next->status, 200) << next->body;
  auto msg = BoundedConn(port_).Exchange(http::verb::post, "/v1/messages", MessagesBody(false, 3), 5000ms);
  ASSERT_TRUE(msg.has_value());
  EXPECT_EQ(msg->status, 200) << msg->body;
  // Each timed-out request gave its admission slot back.
  auto metrics = BoundedConn(port_).Exchange(http::verb::get, "/metrics", "", 5000ms);
  ASSERT_TRUE(metrics.has_value());
  EXPECT_NE(metrics->body.find("ladle_requests_in_flight 0\n"), std::string::npos) << metrics->body;

  // Once the worker goes away the compile falls back in-process, and a constrained request is
  // served again (the first tries may still meet the deadline while that compile runs).
  worker.Stop();
  std::optional<Reply> served;
  EXPECT_TRUE(WaitFor(
      [&] {
        served = BoundedConn(port_).Exchange(http::verb::post, "/v1/chat/completions", ChatSchemaBody(), 5000ms);
        return served && served->status == 200;
      },
      15'000ms))
      << (served ? served->body : "no answer");
}

}  // namespace
}  // namespace ladle::server::testing
