// The server end to end on loopback with a fake engine: routing, auth, error shapes, limits
// and overload, SSE framing for each API, cancellation on disconnect, drain, and a short load.
#include <atomic>
#include <thread>

#include "server_fixture.h"

namespace ladle::server::testing {
namespace {

using Clock = std::chrono::steady_clock;

class ServerTest : public ServerFixture {
 protected:
  void SetUp() override { LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath()); }
};

// Splits an SSE body into frames; every line of a frame must be "event: ..." or "data: ...".
std::vector<std::pair<std::string, std::string>> Frames(const std::string& body) {
  std::vector<std::pair<std::string, std::string>> frames;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated SSE frame: " << body.substr(pos);
    if (end == std::string::npos) break;
    std::string frame = body.substr(pos, end - pos), event, data;
    pos = end + 2;
    size_t lp = 0;
    while (lp <= frame.size()) {
      size_t nl = frame.find('\n', lp);
      if (nl == std::string::npos) nl = frame.size();
      const std::string line = frame.substr(lp, nl - lp);
      lp = nl + 1;
      if (line.rfind("event: ", 0) == 0) {
        event = line.substr(7);
      } else if (line.rfind("data: ", 0) == 0) {
        data += line.substr(6);
      } else {
        ADD_FAILURE() << "bad SSE line: '" << line << "'";
      }
    }
    frames.emplace_back(event, data);
  }
  return frames;
}

TEST_F(ServerTest, HealthReadyModelsMetricsAndUnknownRoutes) {
  StartServer();
  EXPECT_EQ(Send(port_, http::verb::get, "/health").status, 200);
  EXPECT_EQ(Send(port_, http::verb::get, "/ready").status, 200);
  Reply models = Send(port_, http::verb::get, "/v1/models");
  ASSERT_EQ(models.status, 200);
  json::Value m = ParseJson(models.body);
  ASSERT_TRUE(m.Find("data") && m.Find("data")->is_array());
  EXPECT_EQ(m.Find("data")->as_array()[0].Find("id")->as_string(), "ladle");
  Reply metrics = Send(port_, http::verb::get, "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.header("content-type").find("text/plain"), std::string::npos);
  EXPECT_NE(metrics.body.find("ladle_kv_blocks_used"), std::string::npos);
  Reply missing = Send(port_, http::verb::get, "/v2/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(ParseJson(missing.body).Find("error"));
  EXPECT_FALSE(missing.header("x-request-id").empty());
  // A client's own request id comes back.
  Reply with_id = Send(port_, http::verb::get, "/health", "", {{"x-request-id", "abc-123"}});
  EXPECT_EQ(with_id.header("x-request-id"), "abc-123");
}

TEST_F(ServerTest, NonStreamingEachApi) {
  StartServer();
  Reply chat = Post(port_, "/v1/chat/completions", ChatBody(false, 5));
  ASSERT_EQ(chat.status, 200) << chat.body;
  json::Value c = ParseJson(chat.body);
  EXPECT_EQ(c.Find("object")->as_string(), "chat.completion");
  const json::Value& choice = c.Find("choices")->as_array()[0];
  EXPECT_EQ(choice.Find("finish_reason")->as_string(), "length");
  EXPECT_EQ(choice.Find("message")->Find("content")->as_string().rfind("Hello", 0), 0u);
  EXPECT_EQ(*c.Find("usage")->Find("completion_tokens")->as_int64(), 5);
  EXPECT_EQ(*c.Find("usage")->Find("prompt_tokens")->as_int64(), static_cast<int64_t>(engine_->last_prompt().size()));
  EXPECT_EQ(engine_->last_sampling().max_tokens, 5);

  Reply resp = Post(port_, "/v1/responses", ResponsesBody(false, 4));
  ASSERT_EQ(resp.status, 200) << resp.body;
  json::Value r = ParseJson(resp.body);
  EXPECT_EQ(r.Find("object")->as_string(), "response");
  EXPECT_EQ(r.Find("status")->as_string(), "incomplete");
  EXPECT_EQ(*r.Find("usage")->Find("output_tokens")->as_int64(), 4);

  Reply msg = Post(port_, "/v1/messages", MessagesBody(false, 3));
  ASSERT_EQ(msg.status, 200) << msg.body;
  json::Value a = ParseJson(msg.body);
  EXPECT_EQ(a.Find("type")->as_string(), "message");
  EXPECT_EQ(a.Find("stop_reason")->as_string(), "max_tokens");
  EXPECT_EQ(*a.Find("usage")->Find("output_tokens")->as_int64(), 3);
}

TEST_F(ServerTest, StreamingFramesEachApi) {
  StartServer();
  Reply chat = Post(port_, "/v1/chat/completions", ChatBody(true, 6, R"(,"stream_options":{"include_usage":true})"));
  ASSERT_EQ(chat.status, 200);
  EXPECT_EQ(chat.header("content-type"), "text/event-stream");
  EXPECT_EQ(chat.header("transfer-encoding"), "chunked");
  auto frames = Frames(chat.body);
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames.back().second, "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    json::Value chunk = ParseJson(frames[i].second);
    EXPECT_EQ(chunk.Find("object")->as_string(), "chat.completion.chunk");
    for (const auto& ch : chunk.Find("choices")->as_array()) {
      if (const json::Value* d = ch.Find("delta")->Find("content"); d && d->is_string()) text += d->as_string();
    }
  }
  EXPECT_EQ(text.rfind("Hello", 0), 0u) << text;
  json::Value usage_chunk = ParseJson(frames[frames.size() - 2].second);
  EXPECT_EQ(*usage_chunk.Find("usage")->Find("completion_tokens")->as_int64(), 6);

  Reply resp = Post(port_, "/v1/responses", ResponsesBody(true, 4));
  ASSERT_EQ(resp.status, 200);
  frames = Frames(resp.body);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.front().first, "response.created");
  EXPECT_EQ(frames.back().first, "response.incomplete");

  Reply msg = Post(port_, "/v1/messages", MessagesBody(true, 4));
  ASSERT_EQ(msg.status, 200);
  frames = Frames(msg.body);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.front().first, "message_start");
  EXPECT_EQ(frames.back().first, "message_stop");
  bool saw_max_tokens = false;
  for (const auto& [ev, data] : frames) {
    if (ev == "message_delta") saw_max_tokens = data.find(R"("stop_reason":"max_tokens")") != std::string::npos;
  }
  EXPECT_TRUE(saw_max_tokens);
}

TEST_F(ServerTest, StopStringCutsOutputAndReportsStop) {
  StartServer();
  Reply chat = Post(port_, "/v1/chat/completions", ChatBody(false, 40, R"(,"stop":["world"])"));
  ASSERT_EQ(chat.status, 200) << chat.body;
  json::Value c = ParseJson(chat.body);
  const json::Value& choice = c.Find("choices")->as_array()[0];
  // The fake engine does not stop on strings (the real one does, and so may a remote worker
  // not); the server's filter still cuts the text and reports a stop, so no byte of the stop
  // string leaks, ends the sample at the token that completed it ("Hello", ",", " world")...
  EXPECT_EQ(choice.Find("message")->Find("content")->as_string(), "Hello, ");
  EXPECT_EQ(choice.Find("finish_reason")->as_string(), "stop");
  EXPECT_EQ(*c.Find("usage")->Find("completion_tokens")->as_int64(), 3);
  EXPECT_EQ(engine_->last_sampling().stop, std::vector<std::string>{"world"});
  // ... and cancels the engine's request instead of letting it run to max_tokens.
  for (int i = 0; i < 400 && engine_->cancelled() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine_->cancelled(), 1);
  EXPECT_LT(engine_->generated(), 40u);
}

TEST_F(ServerTest, AuthErrorsInEachProtocolsShape) {
  ServerConfig config;
  config.keys = ApiKeys({"secret-key"});
  StartServer(config);
  Reply chat = Post(port_, "/v1/chat/completions", ChatBody(false));
  EXPECT_EQ(chat.status, 401);
  json::Value c = ParseJson(chat.body);
  EXPECT_EQ(c.Find("error")->Find("code")->as_string(), "invalid_api_key");
  EXPECT_EQ(chat.body.find("secret-key"), std::string::npos);
  Reply msg = Post(port_, "/v1/messages", MessagesBody(false), {{"x-api-key", "wrong"}});
  EXPECT_EQ(msg.status, 401);
  json::Value a = ParseJson(msg.body);
  EXPECT_EQ(a.Find("type")->as_string(), "error");
  EXPECT_EQ(a.Find("error")->Find("type")->as_string(), "authentication_error");
  EXPECT_EQ(Send(port_, http::verb::get, "/v1/models").status, 401);
  EXPECT_EQ(Post(port_, "/v1/chat/completions", ChatBody(false), {{"authorization", "Bearer secret-key"}}).status, 200);
  EXPECT_EQ(Post(port_, "/v1/messages", MessagesBody(false), {{"x-api-key", "secret-key"}}).status, 200);
  EXPECT_EQ(Send(port_, http::verb::get, "/health").status, 200);  // liveness stays open
}

TEST_F(ServerTest, BadRequestsAndUnknownModel) {
  ServerConfig config;
  config.limits.max_body_bytes = 4096;
  StartServer(config);
  Reply bad = Post(port_, "/v1/chat/completions", R"({"model":"ladle","messages":"nope"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(ParseJson(bad.body).Find("error")->Find("type")->as_string(), "invalid_request_error");
  Reply bad_msg = Post(port_, "/v1/messages", R"({"model":"ladle","messages":[]})");
  EXPECT_EQ(bad_msg.status, 400);
  EXPECT_EQ(ParseJson(bad_msg.body).Find("type")->as_string(), "error");
  Reply model = Post(port_, "/v1/chat/completions",
                     R"({"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]})");
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(ParseJson(model.body).Find("error")->Find("code")->as_string(), "model_not_found");
  Reply model_msg = Post(port_, "/v1/messages",
                         R"({"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"Hi"}]})");
  EXPECT_EQ(model_msg.status, 404);
  EXPECT_EQ(ParseJson(model_msg.body).Find("error")->Find("type")->as_string(), "not_found_error");
  std::string big = R"({"model":"ladle","messages":[{"role":"user","content":")" + std::string(8000, 'x') + "\"}]}";
  Reply too_big = Post(port_, "/v1/messages", big);
  EXPECT_EQ(too_big.status, 413);
  EXPECT_EQ(ParseJson(too_big.body).Find("error")->Find("type")->as_string(), "request_too_large");
  EXPECT_EQ(Send(port_, http::verb::get, "/v1/chat/completions").status, 400);
}

// Opens a streaming chat request on a raw socket and reads its response head.
struct OpenStream {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  OpenStream(uint16_t port, const std::string& target, const std::string& body) {
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    http::request<http::string_body> req(http::verb::post, target, 11);
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(stream, req);
    http::read_header(stream, buf, parser);
  }
  void Close() {
    beast::error_code ec;
    stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    stream.socket().close(ec);
  }
};

template <typename F>
bool WaitFor(F cond, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

TEST_F(ServerTest, FullQueueAnswers429And529WithRetryAfter) {
  ServerConfig config;
  config.max_queue = 1;
  StartServer(config, std::chrono::milliseconds(5));
  OpenStream busy(port_, "/v1/chat/completions", ChatBody(true, 400));
  ASSERT_EQ(busy.parser.get().result_int(), 200);
  Reply chat = Post(port_, "/v1/chat/completions", ChatBody(false));
  EXPECT_EQ(chat.status, 429);
  EXPECT_EQ(chat.header("retry-after"), "1");
  EXPECT_EQ(ParseJson(chat.body).Find("error")->Find("type")->as_string(), "rate_limit_error");
  Reply msg = Post(port_, "/v1/messages", MessagesBody(false));
  EXPECT_EQ(msg.status, 529);
  EXPECT_EQ(msg.header("retry-after"), "1");
  EXPECT_EQ(ParseJson(msg.body).Find("error")->Find("type")->as_string(), "overloaded_error");
  busy.Close();
  ASSERT_TRUE(WaitFor([&] { return engine_->running() == 0; }));
  // The slot is free again once the cancelled request is released.
  ASSERT_TRUE(WaitFor([&] { return Post(port_, "/v1/chat/completions", ChatBody(false, 2)).status == 200; }));
}

TEST_F(ServerTest, DisconnectCancelsTheEngineRequest) {
  StartServer({}, std::chrono::milliseconds(5));
  for (const char* target : {"/v1/chat/completions", "/v1/messages"}) {
    const int before = engine_->cancelled();
    std::string body = std::string(target) == "/v1/messages" ? MessagesBody(true, 400) : ChatBody(true, 400);
    OpenStream s(port_, target, body);
    ASSERT_EQ(s.parser.get().result_int(), 200);
    s.Close();
    EXPECT_TRUE(WaitFor([&] { return engine_->cancelled() == before + 1 && engine_->running() == 0; }));
  }
  // Non-streaming too: the client gives up before the body comes.
  {
    const int before = engine_->cancelled();
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
    http::request<http::string_body> req(http::verb::post, "/v1/chat/completions", 11);
    req.body() = ChatBody(false, 400);
    req.prepare_payload();
    http::write(stream, req);
    ASSERT_TRUE(WaitFor([&] { return engine_->running() == 1; }));
    stream.close();
    EXPECT_TRUE(WaitFor([&] { return engine_->cancelled() == before + 1 && engine_->running() == 0; }));
  }
  Reply metrics = Send(port_, http::verb::get, "/metrics");
  EXPECT_NE(metrics.body.find("ladle_kv_blocks_used 0\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("status=\"499\""), std::string::npos);
}

TEST_F(ServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  StartServer();
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
  beast::flat_buffer buf;
  for (int i = 0; i < 3; ++i) {
    http::request<http::string_body> req(http::verb::post, "/v1/chat/completions", 11);
    req.body() = ChatBody(i % 2 == 0, 3);
    req.prepare_payload();
    http::write(stream, req);
    http::response<http::string_body> res;
    http::read(stream, buf, res);
    EXPECT_EQ(res.result_int(), 200);
    EXPECT_TRUE(res.keep_alive());
  }
}

TEST_F(ServerTest, ExpectContinueGetsA100First) {
  StartServer();
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
  http::request<http::string_body> req(http::verb::post, "/v1/chat/completions", 11);
  req.set(http::field::expect, "100-continue");
  req.body() = ChatBody(false, 2, R"(,"user":")" + std::string(2000, 'u') + "\"");
  req.prepare_payload();
  http::request_serializer<http::string_body> sr(req);
  http::write_header(stream, sr);
  beast::flat_buffer buf;
  http::response<http::empty_body> cont;
  const auto t0 = Clock::now();
  http::read(stream, buf, cont);
  EXPECT_EQ(cont.result_int(), 100);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));
  http::write(stream, sr);
  http::response<http::string_body> res;
  http::read(stream, buf, res);
  EXPECT_EQ(res.result_int(), 200) << res.body();
}

TEST_F(ServerTest, DrainFinishesInFlightAndStops) {
  StartServer({}, std::chrono::milliseconds(2));
  OpenStream s(port_, "/v1/chat/completions", ChatBody(true, 50));
  ASSERT_EQ(s.parser.get().result_int(), 200);
  server_->Drain();
  beast::error_code ec;
  http::read(s.stream, s.buf, s.parser, ec);
  EXPECT_FALSE(ec) << ec.message();
  auto frames = Frames(s.parser.get().body());
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().second, "[DONE]");
  thread_.join();
  EXPECT_TRUE(run_status_.ok());
  engine_.reset();
  server_.reset();
}

TEST_F(ServerTest, DrainDeadlineCancelsWhatIsLeft) {
  ServerConfig config;
  config.drain_deadline_ms = 100;
  StartServer(config, std::chrono::milliseconds(5));
  OpenStream s(port_, "/v1/chat/completions", ChatBody(true, 400));
  ASSERT_EQ(s.parser.get().result_int(), 200);
  const auto t0 = Clock::now();
  server_->Drain();
  thread_.join();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(engine_->cancelled(), 1);
  engine_.reset();
  server_.reset();
}

TEST_F(ServerTest, LoadManyConcurrentStreamsWithoutErrors) {
  ServerConfig config;
  config.max_queue = 64;
  StartServer(config, std::chrono::microseconds(500));
  constexpr int kClients = 32;
  const auto until = Clock::now() + std::chrono::seconds(3);
  std::atomic<int> ok{0}, errors{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      while (Clock::now() < until) {
        try {
          Reply r = Post(port_, i % 3 == 2 ? "/v1/messages" : "/v1/chat/completions",
                         i % 3 == 2 ? MessagesBody(true, 16) : ChatBody(true, 16));
          const bool good = r.status == 200 && (r.body.find("[DONE]") != std::string::npos ||
                                                r.body.find("message_stop") != std::string::npos);
          (good ? ok : errors)++;
        } catch (const std::exception&) {
          errors++;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(ok.load(), kClients);
  EXPECT_TRUE(WaitFor([&] { return engine_->running() == 0; }));
}

}  // namespace
}  // namespace ladle::server::testing
