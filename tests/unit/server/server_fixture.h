// A real server on a loopback port with a FakeEngine behind it, and a small blocking HTTP
// client, for the server tests.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "fake_engine.h"
#include "ladle/json/json.h"
#include "ladle/server/server.h"
#include "ladle/tokenizer/tokenizer.h"
#include "test_data.h"

namespace ladle::server::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// One HTTP/1.1 request to the server under test (a JSON body when there is one).
inline http::request<http::string_body> MakeRequest(http::verb method, const std::string& target, const std::string& body,
                                                    const std::map<std::string, std::string>& headers) {
  http::request<http::string_body> req(method, target, 11);
  req.set(http::field::host, "127.0.0.1");
  for (const auto& [k, v] : headers) req.set(k, v);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  return req;
}

inline Reply Send(uint16_t port, http::verb method, const std::string& target, const std::string& body = "",
                  const std::map<std::string, std::string>& headers = {}) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  http::write(stream, MakeRequest(method, target, body, headers));
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(stream, buf, parser);
  Reply r;
  r.status = parser.get().result_int();
  for (const auto& f : parser.get()) {
    std::string name(f.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = std::string(f.value());
  }
  r.body = parser.get().body();
  beast::error_code ec;
  stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  return r;
}

inline Reply Post(uint16_t port, const std::string& target, const std::string& body,
                  const std::map<std::string, std::string>& headers = {}) {
  return Send(port, http::verb::post, target, body, headers);
}

inline json::Value ParseJson(const std::string& s) {
  auto v = json::Parse(s);
  EXPECT_TRUE(v.ok()) << s;
  return v.ok() ? *v : json::Value();
}

class ServerFixture : public ::testing::Test {
 protected:
  // Starts a server; call from the test body (after LADLE_REQUIRE_DATA).
  void StartServer(ServerConfig config = {}, std::chrono::microseconds tick = std::chrono::microseconds(200),
                   size_t engine_queue = 1000) {
    auto base = tokenizer::Tokenizer::FromFile(ladle::testing::TokenizerPath());
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    // "Hello world" tokens followed by " and more" ... a long enough script for max_tokens tests.
    std::vector<engine::TokenId> script;
    const auto hello = base->EncodePlain("Hello, world! This is the fake engine speaking.");
    for (int i = 0; i < 40; ++i) script.insert(script.end(), hello.begin(), hello.end());
    engine_ = std::make_unique<FakeEngine>(script, tick, engine_queue);
    config.port = 0;
    config.handle_signals = false;
    auto s = Server::Create(std::move(config), engine_.get(), *base);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    port_ = server_->port();
    thread_ = std::thread([this] { run_status_ = server_->Run(); });
  }

  void TearDown() override {
    if (server_) {
      server_->Drain();
      thread_.join();
      engine_.reset();
      server_.reset();
    }
  }

  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  Status run_status_;
  uint16_t port_ = 0;
};

inline std::string ChatBody(bool stream, int max_tokens = 8, const std::string& extra = "") {
  return std::string(R"({"model":"ladle","messages":[{"role":"user","content":"Hi"}],"max_tokens":)") +
         std::to_string(max_tokens) + (stream ? R"(,"stream":true)" : "") + extra + "}";
}
inline std::string ResponsesBody(bool stream, int max_tokens = 8) {
  return std::string(R"({"model":"ladle","input":"Hi","max_output_tokens":)") + std::to_string(max_tokens) +
         (stream ? R"(,"stream":true)" : "") + "}";
}
inline std::string MessagesBody(bool stream, int max_tokens = 8) {
  return std::string(R"({"model":"ladle","messages":[{"role":"user","content":"Hi"}],"max_tokens":)") +
         std::to_string(max_tokens) + (stream ? R"(,"stream":true)" : "") + "}";
}

}  // namespace ladle::server::testing
