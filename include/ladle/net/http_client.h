// A pooled HTTP/1.1 client with deadlines: keep-alive connections reused per endpoint, a bound
// on connections per endpoint (callers beyond it wait, within their deadline), and bodies
// either collected or streamed to a callback as they arrive (server-sent events: sse.h).
//
//   auto client = HttpClient::Create({.io_threads = 1});
//   CallOptions o;  o.connect_timeout = 500ms;  o.timeout = 10s;
//   Result<HttpResponse> r = (*client)->Fetch(ep, {"POST", "/v1/compile", {}, body}, o);
//
//   o.on_body = [&](const HttpResponse& head, std::string_view bytes) {   // streaming
//     return parser.Feed(bytes, &events).ok();                          // false: stop reading
//   };
//
// HTTPS: an endpoint with tls set (http.h) is reached over TLS 1.2 or later (Debian's OpenSSL
// through Asio's ssl stream). The certificate chain must verify against the system's CAs (plus
// HttpClientOptions::tls_ca_file) and the certificate must be for endpoint.TlsName(); there is
// no switch to turn verification off and no fallback to plain HTTP. TLS connections are pooled
// like plain ones, apart from them and per TLS name, so a connection verified for one name never
// carries a request meant for another. The handshake is part of opening a connection: it counts
// against connect_timeout as well as the call's deadline.
//
// Errors are Status values, never exceptions: kDeadlineExceeded when the connect timeout or
// the call's deadline passes (waiting for a pooled connection included), kUnavailable when the
// endpoint refuses, resets or closes before the response ends (a close mid-body included),
// kOutOfRange for a body over max_body_bytes, kCancelled when on_body asked to stop or the
// client was destroyed, kInvalidArgument for a request Beast cannot send. A certificate that
// does not verify is kUnavailable, "TLS certificate verification failed for host <name>:
// <OpenSSL's reason>"; any other failed handshake is kUnavailable too. An HTTP error status
// is not an error here: it is a response (its body collected even when streaming).
// A request on a reused connection that the server had closed meanwhile (no byte of a response
// came back) is retried once on a fresh connection (CallOptions::retry_stale).
//
// Threads: the client runs its own io threads. Callbacks (on_body, FetchAsync's done) run on
// them and must not block; exceptions they throw are caught and end the call (kInternal).
// Fetch blocks the calling thread and is refused (kFailedPrecondition) on an io thread of this
// client. All methods are thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "ladle/core/result.h"
#include "ladle/net/http.h"

namespace ladle::net {

struct HttpClientOptions {
  int io_threads = 1;
  // Open connections to one endpoint at most (busy, connecting and idle together).
  size_t max_connections_per_endpoint = 16;
  // An idle pooled connection older than this is closed instead of reused.
  std::chrono::milliseconds idle_timeout{30000};
  std::string user_agent = "ladle";
  // A PEM file of CA certificates trusted for TLS endpoints besides the system's (a private CA;
  // tests). Read at Create, so a missing or malformed file fails there (kInvalidArgument).
  std::string tls_ca_file;
};

struct CallOptions {
  // A new connection's TCP connect (name resolution and a TLS handshake included), within the
  // deadline.
  std::chrono::milliseconds connect_timeout{5000};
  // The whole call: pool wait, connect, write and the last body byte. 0: no deadline.
  std::chrono::milliseconds timeout{30000};
  size_t max_body_bytes = 1u << 30;  // collected bodies; a streamed 2xx body is not bounded
  // A reused connection that the server closed with no byte of an answer (it dropped it as
  // idle just as the request went out): send once more on a fresh connection. The server may
  // have read the request, so turn this off for one that must never arrive twice.
  bool retry_stale = true;
  // Set: a 2xx body goes here piece by piece as it arrives, with the response head (status and
  // headers); return false to stop (the call ends kCancelled, the connection closes).
  std::function<bool(const HttpResponse& head, std::string_view bytes)> on_body;
};

struct HttpClientStats {
  uint64_t calls = 0;
  uint64_t connections_opened = 0;  // fresh TCP connections, TLS or not
  uint64_t connections_reused = 0;  // calls served on a pooled keep-alive connection
  uint64_t stale_retries = 0;       // reused connections found closed, retried fresh
};

class HttpClient {
 public:
  static Result<std::unique_ptr<HttpClient>> Create(HttpClientOptions options = {});
  // Ends the calls in flight (kCancelled) and joins the io threads. Not from a callback.
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  using Done = std::function<void(Result<HttpResponse>)>;
  // Starts a call; `done` runs exactly once, on an io thread.
  void FetchAsync(const Endpoint& endpoint, HttpRequest request, CallOptions options, Done done);
  // The blocking form.
  Result<HttpResponse> Fetch(const Endpoint& endpoint, HttpRequest request, const CallOptions& options);

  HttpClientStats stats() const;
  // Open connections to `endpoint` now (busy and idle); TLS ones per TLS name.
  size_t open_connections(const Endpoint& endpoint) const;

  struct Impl;

 private:
  explicit HttpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ladle::net
