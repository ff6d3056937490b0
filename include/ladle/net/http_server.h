// A small request/response HTTP/1.1 server on a Listener: its own io threads, keep-alive, one
// request at a time per connection (HTTP/1.1 answers in order), `Expect: 100-continue`
// answered. For services whose answers are whole bodies (the grammar worker, test servers);
// `ladle serve`, which streams and drains, uses the Listener directly.
//
//   auto s = HttpServer::Create({.port = 0}, [](HttpRequest req, HttpServer::Respond respond) {
//     respond(HttpResponse::WithBody(200, "application/json", R"({"status":"ok"})"));
//   });
//   (*s)->Start();  ...  (*s)->port()  ...  (*s)->Stop();
//
// The handler runs on the connection's io thread; it may call `respond` later from any thread
// (a compile pool). `respond` is called once; a second call is ignored. A handler that throws
// answers 500; a handler that drops `respond` uncalled closes the connection. A body over
// max_body_bytes is answered 413 and the connection closed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ladle/core/result.h"
#include "ladle/net/http.h"

namespace ladle::net {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see port())
  int io_threads = 1;
  std::string server_name = "ladle";  // the Server header
  uint64_t max_body_bytes = 64u << 20;
  std::chrono::seconds idle_timeout{120};  // a connection with no request for this long closes
};

class HttpServer {
 public:
  using Respond = std::function<void(HttpResponse)>;
  using Handler = std::function<void(HttpRequest request, Respond respond)>;

  // Binds at once (so port() is known); serves after Start().
  static Result<std::unique_ptr<HttpServer>> Create(HttpServerOptions options, Handler handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  // Serves on background threads until Stop().
  void Start();
  // Closes the listener and every connection and joins the io threads; answers still being
  // computed go nowhere. Idempotent.
  void Stop();
  uint64_t connections_accepted() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ladle::net
