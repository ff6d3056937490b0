// Endpoint parsing and header lookup.
#include "ladle/net/http.h"

#include "ladle/core/numbers.h"

namespace ladle::net {

namespace {
char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}
}  // namespace

std::string_view FindHeader(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return {};
}

Result<Endpoint> Endpoint::Parse(std::string_view s) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("endpoint '" + std::string(s) + "': " + std::string(why) + " (expected host:port)");
  };
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("no host or port");
  std::string_view host = s.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad("unbalanced brackets");
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return bad("an IPv6 address needs brackets");
  }
  const auto port = ParseI64(s.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) return bad("bad port");
  return Endpoint{std::string(host), static_cast<uint16_t>(*port)};
}

std::string Endpoint::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HttpResponse HttpResponse::WithBody(int status, std::string content_type, std::string body) {
  HttpResponse r;
  r.status = status;
  r.headers.emplace_back("Content-Type", std::move(content_type));
  r.body = std::move(body);
  return r;
}

}  // namespace ladle::net
