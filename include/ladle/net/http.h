// The plain HTTP/1.1 values the net module's client and server pass around: an endpoint, a
// request, a response. No Beast or Asio types, so a module that only calls the client needs
// no network headers of its own.
//
//   auto ep = Endpoint::Parse("127.0.0.1:8000");        // or "[::1]:8000", "localhost:80"
//   HttpRequest req{"POST", "/v1/compile", {{"Content-Type", "application/json"}}, body};
//   HttpResponse res = ...;  res.status, res.Header("content-type"), res.body
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::net {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The first value of header `name` (case-insensitive), or empty.
std::string_view FindHeader(const HttpHeaders& headers, std::string_view name);

// host:port. The host is a name or a numeric address (IPv6 in brackets when written).
//
// tls: HTTPS. The client verifies the server's certificate chain (the system's CAs, plus
// HttpClientOptions::tls_ca_file) and that the certificate is for tls_host, which it also sends
// as SNI (unless tls_host is a numeric address). tls_host empty: `host`. Setting tls_host apart
// from host is how a caller that resolved and checked a name itself connects to the address it
// checked while the certificate is still held to the name:
//   Endpoint{.host = "93.184.215.14", .port = 443, .tls = true, .tls_host = "example.com"}
struct Endpoint {
  std::string host;
  uint16_t port = 0;
  bool tls = false;
  std::string tls_host = {};

  // The name the certificate must carry (and the SNI): tls_host, or host when that is empty.
  const std::string& TlsName() const { return tls_host.empty() ? host : tls_host; }

  // "host:port" or "[v6]:port"; a missing or bad port is an InvalidArgument.
  static Result<Endpoint> Parse(std::string_view host_port);
  // "host:port", with brackets around an IPv6 address (TLS or not).
  std::string ToString() const;
};

struct HttpRequest {
  std::string method = "GET";  // GET, POST, HEAD, PUT, DELETE, ...
  std::string target = "/";
  HttpHeaders headers;  // the client adds Host, User-Agent and Content-Length when missing
  std::string body;
};

struct HttpResponse {
  int status = 0;
  HttpHeaders headers;
  // The body; when the client streamed a 2xx body to a callback, empty.
  std::string body;

  std::string_view Header(std::string_view name) const { return FindHeader(headers, name); }
  // A response with a Content-Type and a body.
  static HttpResponse WithBody(int status, std::string content_type, std::string body);
};

}  // namespace ladle::net
