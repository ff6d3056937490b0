// A client connection for the server tests whose every wait is bounded: each read is started
// asynchronously and Await runs the connection's own io_context until it finishes or a
// deadline passes, so a server that never answers fails the test instead of hanging it. The
// response head and body are read separately, so a test can look at the head while the body
// is still to come.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "server_fixture.h"

namespace ladle::server::testing {

class BoundedConn {
 public:
  using Clock = std::chrono::steady_clock;

  explicit BoundedConn(uint16_t port) {
    // Loopback to a listening socket: completes at once (or throws).
    stream_.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }
  ~BoundedConn() {
    Close();
    // A read still pending completes (aborted) here, not in a destroyed object.
    ioc_.restart();
    ioc_.poll();
  }
  BoundedConn(const BoundedConn&) = delete;
  BoundedConn& operator=(const BoundedConn&) = delete;

  // Writes one HTTP/1.1 request (keep-alive) and resets the parser for its response. The
  // write is small and the socket's buffer takes it whole, so a synchronous write is bounded.
  void Write(http::verb method, const std::string& target, const std::string& body = "",
             const std::map<std::string, std::string>& headers = {}) {
    http::write(stream_, MakeRequest(method, target, body, headers));
    parser_.emplace();
    parser_->body_limit(64 << 20);
  }

  // Starts reading the response head / the rest of the response; Await waits for it.
  void StartReadHeader() {
    done_.reset();
    http::async_read_header(stream_, buf_, *parser_, [this](beast::error_code ec, size_t) { done_ = ec; });
  }
  void StartReadRest() {
    done_.reset();
    http::async_read(stream_, buf_, *parser_, [this](beast::error_code ec, size_t) { done_ = ec; });
  }
  // Runs until the started read finishes or `limit` passes; true when it finished (see ec()).
  // A read that has not finished stays pending: a later Await goes on waiting for it.
  bool Await(std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    ioc_.restart();
    while (!done_ && Clock::now() < until) ioc_.run_one_until(until);
    return done_.has_value();
  }
  beast::error_code ec() const { return done_.value_or(beast::error_code{}); }

  // The response read so far (head fields valid once the head is read).
  const http::response<http::string_body>& response() const { return parser_->get(); }
  std::string header(http::field f) const { return std::string(parser_->get()[f]); }
  std::string header(const std::string& name) const { return std::string(parser_->get()[name]); }
  bool is_done() const { return parser_->is_done(); }

  // Write + read the whole response within `limit`; nullopt when it did not come in time.
  std::optional<Reply> Exchange(http::verb method, const std::string& target, const std::string& body,
                                std::chrono::milliseconds limit,
                                const std::map<std::string, std::string>& headers = {}) {
    Write(method, target, body, headers);
    StartReadRest();
    if (!Await(limit) || ec()) return std::nullopt;
    Reply r;
    r.status = parser_->get().result_int();
    for (const auto& f : parser_->get()) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = std::string(f.value());
    }
    r.body = parser_->get().body();
    return r;
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  net::io_context ioc_;
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buf_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::optional<beast::error_code> done_;
};

}  // namespace ladle::server::testing
