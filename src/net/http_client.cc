// HttpClient: a call is an object (Call) that acquires a pooled connection (or opens one,
// within the endpoint's bound, or waits for one), writes the request and reads the response on
// the connection's strand, and hands the connection back for reuse when the response ended
// cleanly with keep-alive. Every Asio/Beast error becomes a Status here; callbacks run inside
// try/catch, so nothing throws into an io thread.
#include "ladle/net/http_client.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ladle/core/logging.h"

namespace ladle::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Conn {
  explicit Conn(asio::io_context& io) : stream(asio::make_strand(io)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  Clock::time_point idle_since{};
};

// The peer has not closed an idle connection, and sent nothing unasked: a non-blocking peek.
bool LooksAlive(Conn& c) {
  if (c.buffer.size() != 0 || !c.stream.socket().is_open()) return false;
  char byte;
  const ssize_t n = ::recv(c.stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void CloseConn(Conn& c) {
  beast::error_code ec;
  c.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  c.stream.socket().close(ec);
}

std::string Ms(std::chrono::milliseconds d) { return fmt::format("{} ms", d.count()); }

}  // namespace

class Call;

struct HttpClient::Impl {
  struct Pool {
    std::vector<std::unique_ptr<Conn>> idle;  // most recently used last
    size_t open = 0;                          // busy + connecting + idle
    std::deque<std::shared_ptr<Call>> waiters;
  };

  HttpClientOptions options;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{io.get_executor()};
  std::vector<std::thread> threads;
  mutable std::mutex mu;
  std::unordered_map<std::string, Pool> pools;
  std::atomic<uint64_t> calls{0}, opened{0}, reused{0}, stale_retries{0};

  // A connection for `call`, now or later (Call::Run / Call::Connect / queued). Any thread.
  void Acquire(const std::shared_ptr<Call>& call);
  // Gives a connection back (`reusable`) or its slot (conn closed or null) after a call.
  void Release(const std::string& key, std::unique_ptr<Conn> conn, bool reusable);
  // A waiter whose deadline passed: true if it was still queued (and now is not).
  bool Unqueue(const std::string& key, const Call* call);
};

class Call : public std::enable_shared_from_this<Call> {
 public:
  Call(HttpClient::Impl& client, Endpoint ep, HttpRequest request, CallOptions options, HttpClient::Done done)
      : client_(client),
        ep_(std::move(ep)),
        key_(ep_.ToString()),
        options_(std::move(options)),
        done_(std::move(done)),
        wait_timer_(asio::make_strand(client.io)),
        request_(std::move(request)) {
    start_ = Clock::now();
    deadline_ = options_.timeout.count() > 0 ? start_ + options_.timeout : Clock::time_point::max();
  }

  // Never invoked (the client shut down with this call queued or in flight): say so.
  ~Call() { Finish(Status(StatusCode::kCancelled, "http client shut down")); }

  const std::string& key() const { return key_; }

  // Builds the Beast request; false (and finished) when it cannot be sent.
  bool Prepare(const std::string& user_agent) {
    const http::verb verb = http::string_to_verb(request_.method);
    if (verb == http::verb::unknown) {
      Finish(InvalidArgument("unknown HTTP method '" + request_.method + "'"));
      return false;
    }
    try {
      req_.method(verb);
      req_.target(request_.target);
      req_.version(11);
      for (const auto& [k, v] : request_.headers) req_.insert(k, v);
      if (req_.find(http::field::host) == req_.end()) req_.set(http::field::host, key_);
      if (req_.find(http::field::user_agent) == req_.end()) req_.set(http::field::user_agent, user_agent);
      req_.body() = std::move(request_.body);
      if (!req_.body().empty() || verb == http::verb::post || verb == http::verb::put) req_.prepare_payload();
      head_only_ = verb == http::verb::head;
    } catch (const std::exception& e) {  // Beast rejects bad header names/values by throwing
      Finish(InvalidArgument(fmt::format("bad HTTP request: {}", e.what())));
      return false;
    }
    return true;
  }

  // Queued for a connection: the deadline also bounds the wait.
  void ArmWait() {
    if (deadline_ == Clock::time_point::max()) return;
    asio::dispatch(wait_timer_.get_executor(), [self = shared_from_this()] {
      self->wait_timer_.expires_at(self->deadline_);
      self->wait_timer_.async_wait([self](beast::error_code ec) {
        if (ec || !self->client_.Unqueue(self->key_, self.get())) return;
        self->Finish(Status(StatusCode::kDeadlineExceeded,
                            fmt::format("{}: no connection within {} ({} busy)", self->key_, Ms(self->options_.timeout),
                                        self->client_.options.max_connections_per_endpoint)));
      });
    });
  }

  void CancelWait() {
    asio::dispatch(wait_timer_.get_executor(), [self = shared_from_this()] { self->wait_timer_.cancel(); });
  }

  // A fresh connection (the slot is already counted).
  void Connect() {
    conn_ = std::make_unique<Conn>(client_.io);
    reused_ = false;
    asio::dispatch(conn_->stream.get_executor(), [self = shared_from_this()] { self->Resolve(); });
  }

  // A pooled connection.
  void Run(std::unique_ptr<Conn> conn) {
    conn_ = std::move(conn);
    reused_ = true;
    asio::dispatch(conn_->stream.get_executor(), [self = shared_from_this()] { self->Write(); });
  }

 private:
  Clock::time_point ConnectDeadline() const {
    return std::min(deadline_, start_ + options_.connect_timeout);
  }

  void Resolve() {
    beast::error_code ec;
    const auto address = asio::ip::make_address(ep_.host, ec);
    if (!ec) {
      ConnectTo({tcp::endpoint(address, ep_.port)});
      return;
    }
    // A name: resolved on Asio's resolver thread, abandoned at the connect deadline.
    resolver_.emplace(conn_->stream.get_executor());
    resolve_timer_.emplace(conn_->stream.get_executor());
    resolve_timer_->expires_at(ConnectDeadline());
    resolve_timer_->async_wait([self = shared_from_this()](beast::error_code e) {
      if (!e) self->resolver_->cancel();
    });
    resolver_->async_resolve(ep_.host, std::to_string(ep_.port),
                             [self = shared_from_this()](beast::error_code e, tcp::resolver::results_type results) {
                               self->resolve_timer_->cancel();
                               if (e == asio::error::operation_aborted) {
                                 self->Fail(beast::error::timeout, "resolve");
                                 return;
                               }
                               if (e) {
                                 self->Fail(e, "resolve");
                                 return;
                               }
                               std::vector<tcp::endpoint> eps;
                               for (const auto& r : results) eps.push_back(r.endpoint());
                               self->ConnectTo(std::move(eps));
                             });
  }

  void ConnectTo(std::vector<tcp::endpoint> eps) {
    conn_->stream.expires_at(ConnectDeadline());
    auto shared = std::make_shared<std::vector<tcp::endpoint>>(std::move(eps));
    conn_->stream.async_connect(*shared, [self = shared_from_this(), shared](beast::error_code ec, const tcp::endpoint&) {
      if (ec) {
        self->Fail(ec, "connect");
        return;
      }
      self->client_.opened.fetch_add(1);
      self->conn_->stream.socket().set_option(tcp::no_delay(true), ec);
      self->Write();
    });
  }

  void ArmDeadline() {
    if (deadline_ == Clock::time_point::max()) {
      conn_->stream.expires_never();
    } else {
      conn_->stream.expires_at(deadline_);
    }
  }

  void Write() {
    if (Clock::now() >= deadline_) {  // it waited in the queue to the end: the connection is fine
      client_.Release(key_, std::move(conn_), true);
      Finish(Status(StatusCode::kDeadlineExceeded, fmt::format("{}: deadline of {} exceeded before the request was sent",
                                                               key_, Ms(options_.timeout))));
      return;
    }
    ArmDeadline();
    http::async_write(conn_->stream, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        self->Fail(ec, "write");
        return;
      }
      self->ReadHead();
    });
  }

  void ReadHead() {
    parser_.emplace();
    parser_->body_limit(options_.max_body_bytes);
    if (head_only_) parser_->skip(true);
    http::async_read_header(conn_->stream, conn_->buffer, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->OnHead(ec);
    });
  }

  void OnHead(beast::error_code ec) {
    if (ec) {
      Fail(ec, "read");
      return;
    }
    const auto& msg = parser_->get();
    head_.status = static_cast<int>(msg.result_int());
    for (const auto& f : msg) head_.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    streaming_ = options_.on_body && head_.status >= 200 && head_.status < 300;
    if (!streaming_) {
      http::async_read(conn_->stream, conn_->buffer, *parser_, [self = shared_from_this()](beast::error_code e, size_t) {
        if (e) {
          self->Fail(e, "read");
          return;
        }
        self->head_.body = std::move(self->parser_->get().body());
        self->Complete();
      });
      return;
    }
    parser_->body_limit(boost::none);
    ReadSome();
  }

  void ReadSome() {
    if (parser_->is_done()) {
      Complete();
      return;
    }
    http::async_read_some(conn_->stream, conn_->buffer, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      std::string& body = self->parser_->get().body();
      if (!body.empty()) {
        bool go_on = false;
        try {
          go_on = self->options_.on_body(self->head_, body);
        } catch (const std::exception& e) {
          self->Abandon(Internal(fmt::format("{}: the body callback threw: {}", self->key_, e.what())));
          return;
        } catch (...) {
          self->Abandon(Internal(self->key_ + ": the body callback threw"));
          return;
        }
        body.clear();
        if (!go_on) {
          self->Abandon(Status(StatusCode::kCancelled, self->key_ + ": stopped by the body callback"));
          return;
        }
      }
      if (ec) {
        self->Fail(ec, "read");
        return;
      }
      self->ReadSome();
    });
  }

  void Complete() {
    // need_eof: a close-delimited body, so the connection is spent.
    const bool keep = parser_->is_done() && parser_->get().keep_alive() && !parser_->need_eof();
    if (!keep) CloseConn(*conn_);
    client_.Release(key_, std::move(conn_), keep);
    Finish(std::move(head_));
  }

  // Ends the call on a connection that cannot be reused.
  void Abandon(Status s) {
    CloseConn(*conn_);
    client_.Release(key_, std::move(conn_), false);
    Finish(std::move(s));
  }

  void Fail(beast::error_code ec, std::string_view step) {
    // A pooled connection the server closed while idle: nothing of an answer came back, so
    // the request was not served; once more on a fresh connection.
    const bool nothing_back = step == "write" || (step == "read" && parser_ && !parser_->got_some());
    if (reused_ && nothing_back && !retried_ && options_.retry_stale &&
        (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe)) {
      retried_ = true;
      client_.stale_retries.fetch_add(1);
      CloseConn(*conn_);
      conn_->buffer.clear();
      parser_.reset();
      client_.Release(key_, std::move(conn_), false);
      client_.Acquire(shared_from_this());
      return;
    }
    Status s;
    if (ec == beast::error::timeout) {
      const bool connecting = step == "connect" || step == "resolve";
      s = Status(StatusCode::kDeadlineExceeded,
                 connecting && ConnectDeadline() < deadline_
                     ? fmt::format("{}: {} timed out after {}", key_, step, Ms(options_.connect_timeout))
                     : fmt::format("{}: deadline of {} exceeded during {}", key_, Ms(options_.timeout), step));
    } else if (ec == http::error::body_limit) {
      s = Status(StatusCode::kOutOfRange, fmt::format("{}: response body over {} bytes", key_, options_.max_body_bytes));
    } else if (ec == http::error::partial_message || (step == "read" && parser_ && parser_->got_some() &&
                                                       (ec == http::error::end_of_stream || ec == asio::error::eof ||
                                                        ec == asio::error::connection_reset))) {
      s = Status(StatusCode::kUnavailable, fmt::format("{}: connection closed before the response ended", key_));
    } else {
      s = Status(StatusCode::kUnavailable, fmt::format("{}: {}: {}", key_, step, ec.message()));
    }
    CloseConn(*conn_);
    client_.Release(key_, std::move(conn_), false);
    Finish(std::move(s));
  }

 public:
  void Finish(Result<HttpResponse> r) {
    if (finished_.exchange(true)) return;
    HttpClient::Done done = std::move(done_);
    try {
      if (done) done(std::move(r));
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("net.http_callback_threw endpoint={} what='{}'", key_, e.what());
    } catch (...) {
      LADLE_LOG_ERROR("net.http_callback_threw endpoint={} what='(not a std::exception)'", key_);
    }
  }

 private:
  HttpClient::Impl& client_;
  Endpoint ep_;
  std::string key_;
  CallOptions options_;
  HttpClient::Done done_;
  asio::steady_timer wait_timer_;
  HttpRequest request_;
  http::request<http::string_body> req_;
  bool head_only_ = false;
  Clock::time_point start_, deadline_;
  std::unique_ptr<Conn> conn_;
  bool reused_ = false, retried_ = false, streaming_ = false;
  std::optional<tcp::resolver> resolver_;
  std::optional<asio::steady_timer> resolve_timer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  HttpResponse head_;
  std::atomic<bool> finished_{false};
};

void HttpClient::Impl::Acquire(const std::shared_ptr<Call>& call) {
  std::unique_ptr<Conn> conn;
  std::vector<std::unique_ptr<Conn>> dead;
  {
    std::lock_guard lock(mu);
    Pool& p = pools[call->key()];
    const auto now = Clock::now();
    while (!p.idle.empty()) {
      std::unique_ptr<Conn> c = std::move(p.idle.back());
      p.idle.pop_back();
      if (now - c->idle_since < options.idle_timeout && LooksAlive(*c)) {
        conn = std::move(c);
        break;
      }
      --p.open;
      dead.push_back(std::move(c));
    }
    if (!conn) {
      if (p.open >= options.max_connections_per_endpoint) {
        p.waiters.push_back(call);
        call->ArmWait();
        return;
      }
      ++p.open;
    }
  }
  for (auto& c : dead) CloseConn(*c);
  if (conn) {
    reused.fetch_add(1);
    call->Run(std::move(conn));
  } else {
    call->Connect();
  }
}

void HttpClient::Impl::Release(const std::string& key, std::unique_ptr<Conn> conn, bool reusable) {
  std::shared_ptr<Call> next;
  {
    std::lock_guard lock(mu);
    Pool& p = pools[key];
    if (!p.waiters.empty()) {
      next = std::move(p.waiters.front());
      p.waiters.pop_front();
    } else if (conn && reusable) {
      conn->idle_since = Clock::now();
      p.idle.push_back(std::move(conn));
      return;
    } else {
      --p.open;
    }
  }
  if (!next) return;  // the connection (if any) closes with its destructor
  next->CancelWait();
  // The slot passes to the waiter: with this connection, or a fresh one in its place.
  if (conn && reusable) {
    reused.fetch_add(1);
    next->Run(std::move(conn));
  } else {
    next->Connect();
  }
}

bool HttpClient::Impl::Unqueue(const std::string& key, const Call* call) {
  std::lock_guard lock(mu);
  auto it = pools.find(key);
  if (it == pools.end()) return false;
  auto& w = it->second.waiters;
  for (auto i = w.begin(); i != w.end(); ++i) {
    if (i->get() == call) {
      w.erase(i);
      return true;
    }
  }
  return false;
}

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<HttpClient>> HttpClient::Create(HttpClientOptions options) {
  if (options.io_threads < 1) return InvalidArgument("http client: io_threads must be at least 1");
  if (options.max_connections_per_endpoint < 1) {
    return InvalidArgument("http client: max_connections_per_endpoint must be at least 1");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl* raw = impl.get();
  for (int i = 0; i < raw->options.io_threads; ++i) {
    raw->threads.emplace_back([raw] {
      while (true) {
        try {
          raw->io.run();
          return;
        } catch (const std::exception& e) {  // a handler bug; the loop must keep serving
          LADLE_LOG_ERROR("net.http_client_io_threw what='{}'", e.what());
        } catch (...) {
          LADLE_LOG_ERROR("net.http_client_io_threw what='(not a std::exception)'");
        }
      }
    });
  }
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl)));
}

HttpClient::~HttpClient() {
  impl_->work.reset();
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  // Queued calls and idle connections go now; calls in flight go with the io context's
  // handlers (each Call's destructor reports kCancelled).
  std::unordered_map<std::string, Impl::Pool> pools;
  {
    std::lock_guard lock(impl_->mu);
    pools.swap(impl_->pools);
  }
  pools.clear();
}

void HttpClient::FetchAsync(const Endpoint& endpoint, HttpRequest request, CallOptions options, Done done) {
  impl_->calls.fetch_add(1);
  auto call = std::make_shared<Call>(*impl_, endpoint, std::move(request), std::move(options), std::move(done));
  if (!call->Prepare(impl_->options.user_agent)) return;
  impl_->Acquire(call);
}

Result<HttpResponse> HttpClient::Fetch(const Endpoint& endpoint, HttpRequest request, const CallOptions& options) {
  if (impl_->io.get_executor().running_in_this_thread()) {
    return Status(StatusCode::kFailedPrecondition, "HttpClient::Fetch on one of the client's own io threads");
  }
  std::promise<Result<HttpResponse>> promise;
  auto future = promise.get_future();
  FetchAsync(endpoint, std::move(request), options,
             [&promise](Result<HttpResponse> r) { promise.set_value(std::move(r)); });
  return future.get();
}

HttpClientStats HttpClient::stats() const {
  HttpClientStats s;
  s.calls = impl_->calls.load();
  s.connections_opened = impl_->opened.load();
  s.connections_reused = impl_->reused.load();
  s.stale_retries = impl_->stale_retries.load();
  return s;
}

size_t HttpClient::open_connections(const Endpoint& endpoint) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->pools.find(endpoint.ToString());
  return it == impl_->pools.end() ? 0 : it->second.open;
}

}  // namespace ladle::net
