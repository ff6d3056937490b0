// HttpServer: a Listener, io threads, and one keep-alive connection loop per client (read a
// request, hand it to the handler, write its answer, read the next).
#include "ladle/net/http_server.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ladle/core/logging.h"
#include "ladle/net/listener.h"

namespace ladle::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

class ServerConn;

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  asio::io_context io;
  std::unique_ptr<Listener> listener;
  std::vector<std::thread> threads;
  std::atomic<bool> started{false}, stopped{false};
  std::mutex mu;
  std::vector<std::weak_ptr<ServerConn>> conns;  // for Stop(); expired ones pruned as they pile up
  size_t prune_at = 64;

  void Track(const std::shared_ptr<ServerConn>& c) {
    std::lock_guard lock(mu);
    if (conns.size() >= prune_at) {
      std::erase_if(conns, [](const std::weak_ptr<ServerConn>& w) { return w.expired(); });
      prune_at = std::max<size_t>(64, 2 * conns.size());
    }
    conns.push_back(c);
  }
};

namespace {

class ServerConn : public std::enable_shared_from_this<ServerConn> {
 public:
  ServerConn(HttpServer::Impl& server, tcp::socket socket) : server_(server) {
    stream_.emplace(std::move(socket));
  }

  void Start() {
    asio::dispatch(stream_->get_executor(), [self = shared_from_this()] { self->Read(); });
  }

  // Stop(), with no io thread running: closes the socket and drops the stream while the io
  // context still exists. A handler may still hold this connection's Respond (an answer it
  // never sent) after the server is gone; destroying the connection then must not touch the
  // io context, and a late Respond does nothing.
  void CloseNow() {
    detached_ = true;
    beast::error_code ec;
    stream_->socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_->socket().close(ec);
    stream_.reset();
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    stream_->expires_after(server_.options.idle_timeout);
    http::async_read_header(*stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) {
      OnRead(ec);
      return;
    }
    auto read_body = [self = shared_from_this()] {
      http::async_read(*self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code e, size_t) { self->OnRead(e); });
    };
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(*stream_, asio::buffer(kContinue), [self = shared_from_this(), read_body](beast::error_code e, size_t) {
        if (e) {
          self->CloseSend();
          return;
        }
        read_body();
      });
      return;
    }
    read_body();
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      Reply(HttpResponse::WithBody(413, "text/plain",
                                   fmt::format("request body over {} bytes\n", server_.options.max_body_bytes)));
      return;
    }
    if (ec) {  // end of stream, idle timeout, reset: nothing to answer
      CloseSend();
      return;
    }
    auto msg = parser_->release();
    keep_alive_ = msg.keep_alive();
    version_ = msg.version() == 10 ? 10 : 11;
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req.body = std::move(msg.body());
    auto once = std::make_shared<std::atomic<bool>>(false);
    HttpServer::Respond respond = [self = shared_from_this(), once](HttpResponse res) {
      if (once->exchange(true) || self->detached_) return;
      asio::dispatch(self->stream_->get_executor(),
                     [self, res = std::move(res)]() mutable { self->Reply(std::move(res)); });
    };
    try {
      server_.handler(std::move(req), respond);
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("net.http_handler_threw port={} what='{}'", server_.listener->port(), e.what());
      respond(HttpResponse::WithBody(500, "text/plain", "internal error\n"));
    } catch (...) {
      LADLE_LOG_ERROR("net.http_handler_threw port={} what='(not a std::exception)'", server_.listener->port());
      respond(HttpResponse::WithBody(500, "text/plain", "internal error\n"));
    }
  }

  void Reply(HttpResponse r) {
    auto res = std::make_shared<http::response<http::string_body>>();
    try {
      res->version(version_);
      res->result(static_cast<unsigned>(r.status));
      res->set(http::field::server, server_.options.server_name);
      for (const auto& [k, v] : r.headers) res->set(k, v);
      res->keep_alive(keep_alive_);
      res->body() = std::move(r.body);
      res->prepare_payload();
    } catch (const std::exception& e) {  // a header Beast refuses: the handler's bug, answered 500
      LADLE_LOG_ERROR("net.http_bad_response port={} what='{}'", server_.listener->port(), e.what());
      res = std::make_shared<http::response<http::string_body>>(http::status::internal_server_error, version_);
      res->keep_alive(false);
      keep_alive_ = false;
      res->prepare_payload();
    }
    const bool keep = keep_alive_;
    stream_->expires_after(server_.options.idle_timeout);
    http::async_write(*stream_, *res, [self = shared_from_this(), res, keep](beast::error_code ec, size_t) {
      if (ec || !keep) {
        self->CloseSend();
        return;
      }
      self->Read();
    });
  }

  void CloseSend() {
    beast::error_code ec;
    stream_->socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  HttpServer::Impl& server_;
  std::optional<beast::tcp_stream> stream_;  // reset by CloseNow
  std::atomic<bool> detached_{false};
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
};

}  // namespace

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<HttpServer>> HttpServer::Create(HttpServerOptions options, Handler handler) {
  if (!handler) return InvalidArgument("http server needs a handler");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->options.io_threads = std::max(1, impl->options.io_threads);
  impl->handler = std::move(handler);
  Impl* raw = impl.get();
  LADLE_ASSIGN_OR_RETURN(impl->listener,
                         Listener::Create(impl->io, ListenOptions{raw->options.host, raw->options.port, true},
                                          [raw](tcp::socket socket) {
                                            auto c = std::make_shared<ServerConn>(*raw, std::move(socket));
                                            raw->Track(c);
                                            c->Start();
                                          }));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() { Stop(); }

uint16_t HttpServer::port() const { return impl_->listener->port(); }

void HttpServer::Start() {
  if (impl_->started.exchange(true) || impl_->stopped.load()) return;
  impl_->listener->Start();
  Impl* raw = impl_.get();
  for (int i = 0; i < raw->options.io_threads; ++i) {
    raw->threads.emplace_back([raw] {
      while (true) {
        try {
          raw->io.run();
          return;
        } catch (const std::exception& e) {
          LADLE_LOG_ERROR("net.http_server_io_threw what='{}'", e.what());
        } catch (...) {
          LADLE_LOG_ERROR("net.http_server_io_threw what='(not a std::exception)'");
        }
      }
    });
  }
}

void HttpServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  impl_->listener->Stop();
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // No io thread runs now: close every connection, so clients see the server gone at once.
  std::vector<std::weak_ptr<ServerConn>> conns;
  {
    std::lock_guard lock(impl_->mu);
    conns.swap(impl_->conns);
  }
  for (auto& w : conns) {
    if (auto c = w.lock()) c->CloseNow();
  }
}

uint64_t HttpServer::connections_accepted() const { return impl_->listener->accepted(); }

}  // namespace ladle::net
