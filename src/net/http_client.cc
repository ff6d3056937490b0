// HttpClient: a call is an object (Call) that acquires a pooled connection (or opens one,
// within the endpoint's bound, or waits for one), writes the request and reads the response on
// the connection's strand, and hands the connection back for reuse when the response ended
// cleanly with keep-alive. Every Asio/Beast error becomes a Status here; callbacks run inside
// try/catch, so nothing throws into an io thread. A TLS connection is the same state machine
// with a handshake after the connect: Conn::With hands each read and write the stream to use.
#include "ladle/net/http_client.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "http_tls.h"
#include "ladle/core/logging.h"

namespace ladle::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// One connection: plain TCP, or TLS over TCP (`tls_context` set). Either way the deadlines live
// on the TCP layer (beast::tcp_stream), so they bound the handshake and TLS reads too.
struct Conn {
  Conn(asio::io_context& io, asio::ssl::context* tls_context) {
    if (tls_context != nullptr) {
      tls.emplace(asio::make_strand(io), *tls_context);
    } else {
      plain.emplace(asio::make_strand(io));
    }
  }
  beast::tcp_stream& Tcp() { return tls ? tls->next_layer() : *plain; }
  // Calls f with the stream requests and responses go over.
  template <typename F>
  void With(F&& f) {
    if (tls) {
      f(*tls);
    } else {
      f(*plain);
    }
  }

  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  Clock::time_point idle_since{};
};

// The peer has not closed an idle connection, and sent nothing unasked: a non-blocking peek.
// For TLS this sees the raw socket: a close_notify alert counts as something sent, so the
// connection is dropped; bytes OpenSSL already buffered are not seen, and a request sent on such
// a connection ends as a stale one (retried).
bool LooksAlive(Conn& c) {
  tcp::socket& socket = c.Tcp().socket();
  if (c.buffer.size() != 0 || !socket.is_open()) return false;
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Closes the socket; a TLS connection goes without a close_notify (nothing waits for one, and
// the request/response exchange is already complete or abandoned).
void CloseConn(Conn& c) {
  beast::error_code ec;
  c.Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
  c.Tcp().socket().close(ec);
}

// A transport end with nothing more to read: a close (with or without TLS's close_notify) or reset.
bool IsClosed(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::ssl::error::stream_truncated;
}

// Connections that can carry each other's requests share a pool: TLS ones per name verified.
std::string PoolKey(const Endpoint& ep) {
  return ep.tls ? fmt::format("tls:{}@{}", ep.TlsName(), ep.ToString()) : ep.ToString();
}

constexpr std::string_view kHandshake = "TLS handshake";

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
  // Made on the first TLS call (or at Create when a CA file is named); it outlives every Conn.
  std::mutex tls_mu;
  std::unique_ptr<asio::ssl::context> tls_context;
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
  // The shared TLS client context, made on first use.
  Result<asio::ssl::context*> TlsContext();
};

class Call : public std::enable_shared_from_this<Call> {
 public:
  Call(HttpClient::Impl& client, Endpoint ep, HttpRequest request, CallOptions options, HttpClient::Done done)
      : client_(client),
        ep_(std::move(ep)),
        key_(ep_.ToString()),
        pool_key_(PoolKey(ep_)),
        options_(std::move(options)),
        done_(std::move(done)),
        wait_timer_(asio::make_strand(client.io)),
        request_(std::move(request)) {
    start_ = Clock::now();
    deadline_ = options_.timeout.count() > 0 ? start_ + options_.timeout : Clock::time_point::max();
  }

  // Never invoked (the client shut down with this call queued or in flight): say so.
  ~Call() { Finish(Status(StatusCode::kCancelled, "http client shut down")); }

  const std::string& key() const { return pool_key_; }

  // Builds the Beast request (and finds the TLS context); false (and finished) when it cannot be sent.
  bool Prepare(const std::string& user_agent) {
    if (ep_.tls) {
      Result<asio::ssl::context*> context = client_.TlsContext();
      if (!context.ok()) {
        Finish(context.status());
        return false;
      }
      tls_context_ = *context;
    }
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
      if (req_.find(http::field::host) == req_.end()) {
        // Over TLS to an address checked for a name, the server expects that name.
        const bool named = ep_.tls && !ep_.tls_host.empty();
        req_.set(http::field::host, named ? Endpoint{ep_.tls_host, ep_.port}.ToString() : key_);
      }
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
        if (ec || !self->client_.Unqueue(self->pool_key_, self.get())) return;
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
    try {  // Asio throws when OpenSSL cannot make the connection's SSL (out of memory)
      conn_ = std::make_unique<Conn>(client_.io, tls_context_);
    } catch (const std::exception& e) {
      client_.Release(pool_key_, nullptr, false);
      Finish(Status(StatusCode::kUnavailable, fmt::format("{}: cannot open a connection: {}", key_, e.what())));
      return;
    }
    reused_ = false;
    asio::dispatch(conn_->Tcp().get_executor(), [self = shared_from_this()] { self->Resolve(); });
  }

  // A pooled connection.
  void Run(std::unique_ptr<Conn> conn) {
    conn_ = std::move(conn);
    reused_ = true;
    asio::dispatch(conn_->Tcp().get_executor(), [self = shared_from_this()] { self->Write(); });
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
    resolver_.emplace(conn_->Tcp().get_executor());
    resolve_timer_.emplace(conn_->Tcp().get_executor());
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
    conn_->Tcp().expires_at(ConnectDeadline());
    auto shared = std::make_shared<std::vector<tcp::endpoint>>(std::move(eps));
    auto on_connect = [self = shared_from_this(), shared](beast::error_code ec, const tcp::endpoint&) {
      if (ec) {
        self->Fail(ec, "connect");
        return;
      }
      self->client_.opened.fetch_add(1);
      self->conn_->Tcp().socket().set_option(tcp::no_delay(true), ec);
      if (self->conn_->tls) {
        self->Handshake();
      } else {
        self->Write();
      }
    };
    conn_->Tcp().async_connect(*shared, std::move(on_connect));
  }

  // Still under the connect deadline: a server that accepts but never completes a handshake is
  // as unreachable as one that never accepts.
  void Handshake() {
    if (Status s = PrepareTlsConnection(conn_->tls->native_handle(), ep_.TlsName()); !s.ok()) {
      Abandon(s.WithContext(key_));
      return;
    }
    conn_->tls->async_handshake(asio::ssl::stream_base::client, [self = shared_from_this()](beast::error_code ec) {
      if (ec) {
        self->Fail(ec, kHandshake);
        return;
      }
      self->Write();
    });
  }

  void ArmDeadline() {
    if (deadline_ == Clock::time_point::max()) {
      conn_->Tcp().expires_never();
    } else {
      conn_->Tcp().expires_at(deadline_);
    }
  }

  void Write() {
    if (Clock::now() >= deadline_) {  // it waited in the queue to the end: the connection is fine
      client_.Release(pool_key_, std::move(conn_), true);
      Finish(Status(StatusCode::kDeadlineExceeded, fmt::format("{}: deadline of {} exceeded before the request was sent",
                                                               key_, Ms(options_.timeout))));
      return;
    }
    ArmDeadline();
    conn_->With([&](auto& stream) {
      http::async_write(stream, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) {
          self->Fail(ec, "write");
          return;
        }
        self->ReadHead();
      });
    });
  }

  void ReadHead() {
    parser_.emplace();
    parser_->body_limit(options_.max_body_bytes);
    if (head_only_) parser_->skip(true);
    conn_->With([&](auto& stream) {
      http::async_read_header(stream, conn_->buffer, *parser_,
                              [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); });
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
      conn_->With([&](auto& stream) {
        http::async_read(stream, conn_->buffer, *parser_, [self = shared_from_this()](beast::error_code e, size_t) {
          if (e) {
            self->Fail(e, "read");
            return;
          }
          self->head_.body = std::move(self->parser_->get().body());
          self->Complete();
        });
      });
      return;
    }
    parser_->body_limit(boost::none);
    ReadSome();
  }

  // ReadSome's handler: the piece to on_body, then the next read.
  auto OnSome() {
    return [self = shared_from_this()](beast::error_code ec, size_t) {
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
    };
  }

  // After OnSome: a function with a deduced return type must be defined before a call (clang).
  void ReadSome() {
    if (parser_->is_done()) {
      Complete();
      return;
    }
    conn_->With([&](auto& stream) { http::async_read_some(stream, conn_->buffer, *parser_, OnSome()); });
  }

  void Complete() {
    // need_eof: a close-delimited body, so the connection is spent.
    const bool keep = parser_->is_done() && parser_->get().keep_alive() && !parser_->need_eof();
    if (!keep) CloseConn(*conn_);
    client_.Release(pool_key_, std::move(conn_), keep);
    Finish(std::move(head_));
  }

  // Ends the call on a connection that cannot be reused.
  void Abandon(Status s) {
    CloseConn(*conn_);
    client_.Release(pool_key_, std::move(conn_), false);
    Finish(std::move(s));
  }

  void Fail(beast::error_code ec, std::string_view step) {
    // A pooled connection the server closed while idle: nothing of an answer came back, so
    // the request was not served; once more on a fresh connection.
    const bool nothing_back = step == "write" || (step == "read" && parser_ && !parser_->got_some());
    const bool closed = IsClosed(ec) || ec == asio::error::broken_pipe;
    if (reused_ && nothing_back && !retried_ && options_.retry_stale && closed) {
      retried_ = true;
      client_.stale_retries.fetch_add(1);
      CloseConn(*conn_);
      conn_->buffer.clear();
      parser_.reset();
      client_.Release(pool_key_, std::move(conn_), false);
      client_.Acquire(shared_from_this());
      return;
    }
    Status s;
    if (ec == beast::error::timeout) {
      const bool connecting = step == "connect" || step == "resolve" || step == kHandshake;
      s = Status(StatusCode::kDeadlineExceeded,
                 connecting && ConnectDeadline() < deadline_
                     ? fmt::format("{}: {} timed out after {}", key_, step, Ms(options_.connect_timeout))
                     : fmt::format("{}: deadline of {} exceeded during {}", key_, Ms(options_.timeout), step));
    } else if (ec == http::error::body_limit) {
      s = Status(StatusCode::kOutOfRange, fmt::format("{}: response body over {} bytes", key_, options_.max_body_bytes));
    } else if (ec == http::error::partial_message ||
               (step == "read" && parser_ && parser_->got_some() && IsClosed(ec))) {
      // Over TLS a close without close_notify (stream_truncated) lands here too: a body cut
      // short by a forged FIN is never taken for a whole one.
      s = Status(StatusCode::kUnavailable, fmt::format("{}: connection closed before the response ended", key_));
    } else if (step == kHandshake) {
      s = TlsHandshakeError(conn_->tls->native_handle(), ep_.TlsName(), ec, key_);
    } else {
      s = Status(StatusCode::kUnavailable, fmt::format("{}: {}: {}", key_, step, ec.message()));
    }
    CloseConn(*conn_);
    client_.Release(pool_key_, std::move(conn_), false);
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
  std::string key_;       // host:port, for messages
  std::string pool_key_;  // which pool (PoolKey)
  asio::ssl::context* tls_context_ = nullptr;  // set for a TLS endpoint; the client's
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

Result<asio::ssl::context*> HttpClient::Impl::TlsContext() {
  std::lock_guard lock(tls_mu);
  if (!tls_context) {
    LADLE_ASSIGN_OR_RETURN(tls_context, MakeTlsClientContext(options.tls_ca_file));
  }
  return tls_context.get();
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
  // A CA file named is read now, so a bad one fails the start rather than the first call.
  if (!impl->options.tls_ca_file.empty()) {
    if (Result<asio::ssl::context*> context = impl->TlsContext(); !context.ok()) {
      return context.status().WithContext("http client");
    }
  }
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
  auto it = impl_->pools.find(PoolKey(endpoint));
  return it == impl_->pools.end() ? 0 : it->second.open;
}

}  // namespace ladle::net
