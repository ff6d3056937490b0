// Image URL fetching: data: URL decoding, the address guard, a name lookup bounded by the
// fetch's deadline, and the redirect loop over net's HttpClient. The guard checks every address
// a hop's host resolves to, then the client connects to one of those numeric addresses (with
// the URL's host in the Host header, and for https as the TLS name the certificate must carry
// and the SNI), so the name is never looked up a second time.
#include "ladle/vision/image_fetch.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "ladle/core/base64.h"
#include "ladle/core/numbers.h"
#include "ladle/net/http.h"
#include "ladle/net/http_client.h"

namespace ladle::vision {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::string_view kPrivateHint =
    "a loopback/private address; the server refuses these unless started with --allow-private-image-urls";

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string LowerCopy(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(c);
  return out;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (Lower(s[i]) != Lower(prefix[i])) return false;
  }
  return true;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A URL as it may appear in an error message: bounded (a client may send megabytes) and with
// control bytes escaped (it may end up in a log line).
std::string Quote(std::string_view url) {
  constexpr size_t kMax = 200;
  std::string out;
  for (size_t i = 0; i < url.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(url[i]);
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (url.size() > kMax) out += "...";
  return out;
}

Status Unavailable(std::string message) { return Status(StatusCode::kUnavailable, std::move(message)); }
Status DeadlineExceeded(std::string message) { return Status(StatusCode::kDeadlineExceeded, std::move(message)); }
Status PermissionDenied(std::string message) { return Status(StatusCode::kPermissionDenied, std::move(message)); }

// ---- addresses ----

// 16 bytes; an IPv4 address is stored as ::ffff:a.b.c.d so one table covers both families.
using Addr = std::array<uint8_t, 16>;

std::optional<Addr> ParseAddress(std::string_view text) {
  std::string s(text);
  Addr a{};
  if (s.find(':') != std::string::npos) {
    if (const size_t zone = s.find('%'); zone != std::string::npos) s.resize(zone);
    in6_addr v6;
    if (inet_pton(AF_INET6, s.c_str(), &v6) != 1) return std::nullopt;
    std::memcpy(a.data(), &v6, 16);
    return a;
  }
  in_addr v4;
  if (inet_pton(AF_INET, s.c_str(), &v4) != 1) return std::nullopt;
  a[10] = a[11] = 0xff;
  std::memcpy(a.data() + 12, &v4, 4);
  return a;
}

uint32_t V4At(const Addr& a, size_t at) {
  return (uint32_t{a[at]} << 24) | (uint32_t{a[at + 1]} << 16) | (uint32_t{a[at + 2]} << 8) | a[at + 3];
}

bool BlockedV4(uint32_t a) {
  struct Range {
    uint32_t net;
    int bits;
  };
  static constexpr Range kRanges[] = {
      {0x00000000, 8},   // 0.0.0.0/8 "this network" (0.0.0.0 reaches the local host on Linux)
      {0x0A000000, 8},   // 10/8
      {0x64400000, 10},  // 100.64/10 carrier-grade NAT
      {0x7F000000, 8},   // loopback
      {0xA9FE0000, 16},  // link-local (cloud metadata services live at 169.254.169.254)
      {0xAC100000, 12},  // 172.16/12
      {0xC0000000, 24},  // 192.0.0/24 IETF protocol assignments
      {0xC0000200, 24},  // TEST-NET-1
      {0xC0586300, 24},  // 6to4 relay anycast
      {0xC0A80000, 16},  // 192.168/16
      {0xC6120000, 15},  // 198.18/15 benchmarking
      {0xC6336400, 24},  // TEST-NET-2
      {0xCB007100, 24},  // TEST-NET-3
      {0xE0000000, 4},   // multicast
      {0xF0000000, 4},   // reserved, 255.255.255.255 broadcast included
  };
  for (const Range& r : kRanges) {
    if ((a >> (32 - r.bits)) == (r.net >> (32 - r.bits))) return true;
  }
  return false;
}

bool InPrefix(const Addr& a, const Addr& net, int bits) {
  for (int i = 0; i < bits; ++i) {
    const int byte = i / 8, shift = 7 - i % 8;
    if (((a[byte] >> shift) & 1) != ((net[byte] >> shift) & 1)) return false;
  }
  return true;
}

Addr V6(const char* text) {
  Addr a{};
  in6_addr v6;
  inet_pton(AF_INET6, text, &v6);  // constants below, all valid
  std::memcpy(a.data(), &v6, 16);
  return a;
}

bool BlockedAddr(const Addr& a) {
  static const Addr kMapped = V6("::ffff:0:0"), kNat64 = V6("64:ff9b::"), k6to4 = V6("2002::"),
                    kGlobal = V6("2000::");
  // Addresses that carry an IPv4 address: judged by it, so ::ffff:127.0.0.1 is loopback.
  if (InPrefix(a, kMapped, 96) || InPrefix(a, kNat64, 96)) return BlockedV4(V4At(a, 12));
  if (InPrefix(a, k6to4, 16)) return BlockedV4(V4At(a, 2));
  // Everything outside global unicast: ::/96 (unspecified, loopback, deprecated
  // IPv4-compatible), local NAT64, discard-only, unique local, link-local, site-local,
  // multicast and the unassigned rest. An allow-list, so a range nobody listed is refused.
  if (!InPrefix(a, kGlobal, 3)) return true;
  struct Range {
    Addr net;
    int bits;
  };
  static const Range kRanges[] = {
      {V6("2001::"), 32},      // Teredo: a tunnel whose far end is any IPv4 address
      {V6("2001:2::"), 48},    // benchmarking
      {V6("2001:10::"), 28},   // ORCHID (deprecated)
      {V6("2001:20::"), 28},   // ORCHIDv2: identifiers, not locators
      {V6("2001:db8::"), 32},  // documentation
      {V6("3fff::"), 20},      // documentation (RFC 9637)
  };
  for (const Range& r : kRanges) {
    if (InPrefix(a, r.net, r.bits)) return true;
  }
  return false;
}

// ---- URLs ----

struct Url {
  bool https = false;
  std::string host;  // lower case; an IPv6 literal without brackets
  bool v6_literal = false;
  uint16_t port = 80;
  std::string target = "/";  // path and query, fragment dropped

  uint16_t DefaultPort() const { return https ? 443 : 80; }
  // host[:port] as the Host header and the URL write it.
  std::string Authority() const {
    std::string h = v6_literal ? "[" + host + "]" : host;
    return port == DefaultPort() ? h : fmt::format("{}:{}", h, port);
  }
  std::string ToString() const { return fmt::format("{}://{}{}", https ? "https" : "http", Authority(), target); }
};

bool IsSchemeChar(char c, bool first) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return alpha || (!first && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
}

// The scheme of an absolute URL ("HTTP" → "http"), or nullopt when `s` does not start with one.
std::optional<std::string> SchemeOf(std::string_view s) {
  const size_t colon = s.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  for (size_t i = 0; i < colon; ++i) {
    if (!IsSchemeChar(s[i], i == 0)) return std::nullopt;
  }
  return LowerCopy(s.substr(0, colon));
}

// RFC 3986 §5.2.4: "/a/./b/../c" → "/a/c", so a path cannot climb above the root and a
// redirect's relative reference resolves as a browser's would.
std::string RemoveDotSegments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 1;  // path starts with '/'
  bool trailing_slash = false;
  while (i <= path.size()) {
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view seg = path.substr(i, end - i);
    const bool last = end == path.size();
    if (seg == ".") {
      trailing_slash = last;
    } else if (seg == "..") {
      if (!out.empty()) out.pop_back();
      trailing_slash = last;
    } else {
      out.push_back(seg);
      trailing_slash = false;
    }
    i = end + 1;
  }
  std::string result;
  for (const auto& seg : out) {
    result += '/';
    result += seg;
  }
  if (trailing_slash || result.empty()) result += '/';
  return result;
}

Result<Url> ParseHttpUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("image URL '{}' is malformed: {}", Quote(url), why));
  };
  const std::optional<std::string> scheme = SchemeOf(url);
  if (!scheme) return bad("no scheme (expected http://, https:// or data:)");
  if (*scheme != "http" && *scheme != "https") {
    return InvalidArgument(
        fmt::format("image URL scheme '{}' is not supported; send an http(s) URL or a data: URL", Quote(*scheme)));
  }
  Url u;
  u.https = *scheme == "https";
  u.port = u.DefaultPort();
  std::string_view rest = url.substr(scheme->size() + 1);
  if (rest.substr(0, 2) != "//") return bad("no host");
  rest.remove_prefix(2);
  if (const size_t hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  const size_t auth_end = std::min(rest.find('/'), rest.find('?'));
  const std::string_view authority = rest.substr(0, auth_end);
  const std::string_view target = auth_end == std::string_view::npos ? std::string_view() : rest.substr(auth_end);
  if (authority.find('@') != std::string_view::npos) {
    return InvalidArgument(fmt::format("image URL '{}' carries a user name or password, which is not allowed", Quote(url)));
  }

  std::string_view host, port;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unbalanced brackets around the IPv6 address");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') return bad("text after the IPv6 address");
    if (!after.empty()) {
      has_port = true;
      port = after.substr(1);
    }
    in6_addr v6;
    if (inet_pton(AF_INET6, std::string(host).c_str(), &v6) != 1) return bad("bad IPv6 address");
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &v6, text, sizeof text);
    u.host = text;  // one spelling for every way of writing the address
    u.v6_literal = true;
  } else {
    const size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      has_port = true;
      port = authority.substr(colon + 1);
      if (port.find(':') != std::string_view::npos) return bad("an IPv6 address needs brackets");
    }
    if (host.empty()) return bad("no host");
    if (host.size() > 253) return bad("host name too long");
    for (char c : host) {
      const char l = Lower(c);
      if (!((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.' || l == '-' || l == '_')) {
        return bad("bad character in the host name");
      }
    }
    u.host = LowerCopy(host);
  }
  if (has_port && !port.empty()) {  // "host:" is the default port (RFC 3986 §3.2.3)
    const auto p = ParseU64(port);
    if (!p || *p < 1 || *p > 65535) return bad("bad port");
    u.port = static_cast<uint16_t>(*p);
  }

  // The request target: control bytes refused (a CR or LF would split the request), spaces and
  // non-ASCII bytes percent-encoded as a browser sends them.
  std::string t;
  for (char ch : target) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return bad("control character in the path");
    if (c == ' ' || c >= 0x80) {
      t += fmt::format("%{:02X}", c);
    } else {
      t.push_back(ch);
    }
  }
  if (t.empty() || t.front() == '?') t.insert(t.begin(), '/');
  const size_t q = t.find('?');
  u.target = RemoveDotSegments(std::string_view(t).substr(0, q)) + (q == std::string::npos ? "" : t.substr(q));
  return u;
}

// A redirect's Location against the URL that answered it (RFC 3986 §5.2, without the
// fragment): an absolute URL, "//host/...", "/path", "?query" or a path relative to base's.
std::string ResolveLocation(const Url& base, std::string_view loc) {
  loc = Trim(loc);
  if (SchemeOf(loc)) return std::string(loc);
  const std::string scheme = base.https ? "https:" : "http:";
  if (loc.substr(0, 2) == "//") return scheme + std::string(loc);
  const std::string origin = scheme + "//" + base.Authority();
  if (const size_t hash = loc.find('#'); hash != std::string_view::npos) loc = loc.substr(0, hash);
  const std::string_view base_path = std::string_view(base.target).substr(0, base.target.find('?'));
  if (loc.empty()) return origin + base.target;
  if (loc.front() == '/') return origin + std::string(loc);
  if (loc.front() == '?') return origin + std::string(base_path) + std::string(loc);
  return origin + std::string(base_path.substr(0, base_path.rfind('/') + 1)) + std::string(loc);
}

// ---- name lookup ----

// getaddrinfo cannot be cancelled, so a lookup runs on its own detached thread and the caller
// waits only until its deadline; a resolver that hangs costs a parked thread, not the request.
// The bound on threads parked this way keeps a dead resolver from exhausting the process.
constexpr int kMaxLookupsInFlight = 64;
std::atomic<int> lookups_in_flight{0};

struct Lookup {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int rc = 0;
  std::vector<std::string> addresses;
};

void RunLookup(const std::shared_ptr<Lookup>& lookup, const std::string& host) {
  std::vector<std::string> out;
  int rc = EAI_FAIL;
  try {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    for (const addrinfo* ai = rc == 0 ? res : nullptr; ai != nullptr; ai = ai->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      std::string addr;
      if (ai->ai_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(ai->ai_addr)->sin_addr, text, sizeof text);
        addr = text;
      } else if (ai->ai_family == AF_INET6) {
        const auto* sa6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
        inet_ntop(AF_INET6, &sa6->sin6_addr, text, sizeof text);
        addr = text;
        if (sa6->sin6_scope_id != 0) addr += fmt::format("%{}", sa6->sin6_scope_id);
      } else {
        continue;
      }
      if (std::find(out.begin(), out.end(), addr) == out.end()) out.push_back(std::move(addr));
    }
    if (res != nullptr) freeaddrinfo(res);
  } catch (...) {  // allocation failure: reported as a failed lookup
    rc = EAI_MEMORY;
    out.clear();
  }
  {
    std::lock_guard lock(lookup->mu);
    lookup->rc = rc;
    lookup->addresses = std::move(out);
    lookup->done = true;
  }
  lookup->cv.notify_all();
}

// The numeric addresses `host` stands for (a numeric host is itself), by `deadline`.
Result<std::vector<std::string>> Resolve(const Url& u, Clock::time_point deadline, milliseconds timeout) {
  if (u.v6_literal) return std::vector<std::string>{u.host};
  in_addr v4;
  if (inet_pton(AF_INET, u.host.c_str(), &v4) == 1) return std::vector<std::string>{u.host};
  if (lookups_in_flight.fetch_add(1) >= kMaxLookupsInFlight) {
    lookups_in_flight.fetch_sub(1);
    return Unavailable(fmt::format("image URL host {}: too many name lookups in flight", u.host));
  }
  auto lookup = std::make_shared<Lookup>();
  try {
    std::thread([lookup, host = u.host] {
      RunLookup(lookup, host);
      lookups_in_flight.fetch_sub(1);
    }).detach();
  } catch (const std::system_error& e) {
    lookups_in_flight.fetch_sub(1);
    return Unavailable(fmt::format("image URL host {}: cannot start a name lookup: {}", u.host, e.what()));
  }
  std::unique_lock lock(lookup->mu);
  if (!lookup->cv.wait_until(lock, deadline, [&] { return lookup->done; })) {
    return DeadlineExceeded(
        fmt::format("fetching the image URL timed out after {} ms (looking up {})", timeout.count(), u.host));
  }
  if (lookup->rc == EAI_NONAME || lookup->rc == EAI_NODATA) {
    return InvalidArgument(fmt::format("image URL host {} does not resolve", u.host));
  }
  if (lookup->rc != 0) {
    return Unavailable(fmt::format("image URL host {}: name lookup failed: {}", u.host, gai_strerror(lookup->rc)));
  }
  if (lookup->addresses.empty()) return InvalidArgument(fmt::format("image URL host {} has no address", u.host));
  return std::move(lookup->addresses);
}

// ---- responses ----

bool IsRedirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

// "image/png" from "Image/PNG; charset=binary"; kInvalidArgument unless it is image/<something>.
Result<std::string> ImageMediaType(std::string_view content_type) {
  const std::string type = LowerCopy(Trim(content_type.substr(0, content_type.find(';'))));
  if (type.empty()) {
    return InvalidArgument("the image URL's response has no Content-Type; an image/* type is required");
  }
  if (type.size() <= 6 || type.compare(0, 6, "image/") != 0) {
    return InvalidArgument(fmt::format("the image URL returned Content-Type '{}', not an image/* type", Quote(type)));
  }
  return type;
}

Status TooBig(int64_t max_bytes) {
  return ResourceExhausted(fmt::format("the image at the URL is over the limit of {} bytes", max_bytes));
}

// A 2xx body as it streams in, checked before it is kept: the Content-Type on the first piece
// (a 1 GB HTML page is refused after its first bytes) and the size on every piece.
struct BodySink {
  int64_t max_bytes = 0;
  bool started = false;
  std::string bytes;
  Status refusal;  // why the sink stopped the transfer

  bool Feed(const net::HttpResponse& head, std::string_view piece) {
    if (!started) {
      started = true;
      if (auto type = ImageMediaType(head.Header("content-type")); !type.ok()) {
        refusal = type.status();
        return false;
      }
      if (const auto length = ParseU64(Trim(head.Header("content-length")))) {
        if (*length > static_cast<uint64_t>(max_bytes)) {
          refusal = TooBig(max_bytes);
          return false;
        }
        bytes.reserve(*length);
      }
    }
    if (static_cast<int64_t>(bytes.size() + piece.size()) > max_bytes) {
      refusal = TooBig(max_bytes);
      return false;
    }
    bytes.append(piece);
    return true;
  }
};

}  // namespace

bool IsBlockedAddress(std::string_view address) {
  const std::optional<Addr> a = ParseAddress(address);
  return !a || BlockedAddr(*a);
}

Result<FetchedImage> DecodeDataUrl(std::string_view url, int64_t max_bytes) {
  if (!StartsWithIgnoreCase(url, "data:")) return InvalidArgument("not a data: URL");
  const std::string_view rest = url.substr(5);
  const size_t comma = rest.find(',');
  if (comma == std::string_view::npos) {
    return InvalidArgument("data URL has no ',' between its media type and its data");
  }
  std::string_view meta = rest.substr(0, comma);
  const std::string_view data = rest.substr(comma + 1);

  // data:image/png;name=x.png;base64 — the media type, parameters, and ";base64" last.
  bool base64 = false;
  const size_t semi = meta.find(';');
  if (semi != std::string_view::npos) {
    const std::string_view params = meta.substr(semi);
    base64 = params.size() >= 7 && StartsWithIgnoreCase(params.substr(params.size() - 7), ";base64");
  }
  FetchedImage out;
  out.media_type = LowerCopy(Trim(meta.substr(0, semi)));
  if (!out.media_type.empty()) {
    const size_t slash = out.media_type.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == out.media_type.size()) {
      return InvalidArgument(fmt::format("data URL media type '{}' is malformed", Quote(out.media_type)));
    }
  }
  if (Trim(data).empty()) return InvalidArgument("data URL has no data");

  if (!base64) {
    out.bytes.reserve(std::min<size_t>(data.size(), static_cast<size_t>(max_bytes) + 1));
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] == '%') {
        const int hi = i + 2 < data.size() ? HexValue(data[i + 1]) : -1;
        const int lo = hi >= 0 ? HexValue(data[i + 2]) : -1;
        if (lo < 0) return InvalidArgument(fmt::format("data URL has a bad %-escape at byte {} of its data", i));
        out.bytes.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
      } else {
        out.bytes.push_back(data[i]);
      }
      if (static_cast<int64_t>(out.bytes.size()) > max_bytes) {
        return ResourceExhausted(fmt::format("data URL image is over the limit of {} bytes", max_bytes));
      }
    }
    return out;
  }

  // Base64: whitespace (line-wrapped encoders) and %-escapes (URL-encoded '+', '/', '=') are
  // allowed. The size is bounded from the character count before anything is decoded.
  const size_t chars = static_cast<size_t>(std::count_if(data.begin(), data.end(), [](char c) { return !IsSpace(c); }));
  // n characters carry n·6 bits, less at most two '=' of padding: at least n·3/4 − 2 bytes.
  auto over = [&](size_t n) { return static_cast<int64_t>(n * 3 / 4) - 2 > max_bytes; };
  auto too_big = [&](size_t n) {
    return ResourceExhausted(
        fmt::format("data URL image is about {} bytes, over the limit of {} bytes", n * 3 / 4, max_bytes));
  };
  // An escape takes three characters for one, so with escapes the bound waits for unescaping.
  const bool escaped = data.find('%') != std::string_view::npos;
  if (!escaped && over(chars)) return too_big(chars);
  std::string clean;
  // The common case (no whitespace, no escapes) decodes the data where it is.
  const bool plain = !escaped && chars == data.size();
  if (!plain) clean.reserve(chars);
  for (size_t i = 0; !plain && i < data.size(); ++i) {
    char c = data[i];
    if (c == '%') {
      const int hi = i + 2 < data.size() ? HexValue(data[i + 1]) : -1;
      const int lo = hi >= 0 ? HexValue(data[i + 2]) : -1;
      if (lo < 0) return InvalidArgument(fmt::format("data URL has a bad %-escape at byte {} of its data", i));
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (!IsSpace(c)) clean.push_back(c);
  }
  if (escaped && over(clean.size())) return too_big(clean.size());
  std::optional<std::string> bytes = Base64Decode(plain ? data : std::string_view(clean));
  if (!bytes) return InvalidArgument("data URL's base64 data is malformed");
  if (static_cast<int64_t>(bytes->size()) > max_bytes) {
    return ResourceExhausted(
        fmt::format("data URL image is {} bytes, over the limit of {} bytes", bytes->size(), max_bytes));
  }
  if (bytes->empty()) return InvalidArgument("data URL has no data");
  out.bytes = std::move(*bytes);
  return out;
}

ImageFetcher::ImageFetcher(FetchLimits limits, std::unique_ptr<net::HttpClient> client)
    : limits_(std::move(limits)), client_(std::move(client)) {}

ImageFetcher::~ImageFetcher() = default;

Result<std::unique_ptr<ImageFetcher>> ImageFetcher::Create(FetchLimits limits) {
  if (limits.max_bytes <= 0) return InvalidArgument("image fetch: max_bytes must be positive");
  if (limits.timeout.count() <= 0) return InvalidArgument("image fetch: timeout must be positive");
  if (limits.connect_timeout.count() <= 0) return InvalidArgument("image fetch: connect_timeout must be positive");
  if (limits.max_redirects < 0) return InvalidArgument("image fetch: max_redirects must not be negative");
  net::HttpClientOptions options;
  options.io_threads = 1;  // the client only waits on sockets; the bytes are copied once
  options.user_agent = "ladle-image-fetch";
  options.tls_ca_file = limits.tls_ca_file;
  auto client = net::HttpClient::Create(std::move(options));
  if (!client.ok()) return client.status().WithContext("image fetch");
  return std::unique_ptr<ImageFetcher>(new ImageFetcher(std::move(limits), std::move(client).value()));
}

Result<FetchedImage> ImageFetcher::Fetch(const std::string& url) {
  if (StartsWithIgnoreCase(url, "data:")) return DecodeDataUrl(url, limits_.max_bytes);
  const Clock::time_point deadline = Clock::now() + limits_.timeout;
  auto timed_out = [&](std::string_view detail) {
    return DeadlineExceeded(
        fmt::format("fetching the image URL timed out after {} ms ({})", limits_.timeout.count(), detail));
  };

  LADLE_ASSIGN_OR_RETURN(Url u, ParseHttpUrl(url));
  for (int hop = 0;; ++hop) {
    LADLE_ASSIGN_OR_RETURN(std::vector<std::string> addresses, Resolve(u, deadline, limits_.timeout));
    if (!limits_.allow_private) {
      for (const std::string& a : addresses) {
        if (limits_.is_blocked ? limits_.is_blocked(a) : IsBlockedAddress(a)) {
          const std::string what = hop == 0 ? "image URL host" : "image URL redirects to host";
          return PermissionDenied(a == u.host ? fmt::format("{} {} is {}", what, u.host, kPrivateHint)
                                              : fmt::format("{} {} resolves to {}, {}", what, u.host, a, kPrivateHint));
        }
      }
    }

    // Each address in turn while it cannot be reached ("localhost" is ::1 and 127.0.0.1, and a
    // server may listen on one of them only).
    Result<net::HttpResponse> response = Internal("image fetch: no address tried");
    auto sink = std::make_shared<BodySink>();
    for (size_t i = 0; i < addresses.size(); ++i) {
      const auto remaining = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (remaining.count() <= 0) return timed_out(fmt::format("connecting to {}", u.host));
      net::CallOptions o;
      o.timeout = remaining;
      o.connect_timeout = std::min(limits_.connect_timeout, remaining);
      o.max_body_bytes = static_cast<size_t>(limits_.max_bytes);  // non-2xx bodies (collected)
      sink = std::make_shared<BodySink>();
      sink->max_bytes = limits_.max_bytes;
      o.on_body = [sink](const net::HttpResponse& head, std::string_view piece) { return sink->Feed(head, piece); };
      net::HttpRequest req;
      req.method = "GET";
      req.target = u.target;
      req.headers = {{"Host", u.Authority()}, {"Accept", "image/*"}, {"Accept-Encoding", "identity"}};
      // https: TLS to the checked address, the certificate held to the URL's host (name or literal).
      const net::Endpoint ep{.host = addresses[i], .port = u.port, .tls = u.https, .tls_host = u.host};
      response = client_->Fetch(ep, std::move(req), o);
      const bool unreachable = !response.ok() && response.status().code() == StatusCode::kUnavailable && !sink->started;
      if (!unreachable) break;
    }
    if (!response.ok()) {
      const Status& s = response.status();
      if (!sink->refusal.ok()) return sink->refusal;
      switch (s.code()) {
        case StatusCode::kDeadlineExceeded:
          return timed_out(s.message());
        case StatusCode::kOutOfRange:
          return TooBig(limits_.max_bytes);
        case StatusCode::kUnavailable:
          return Unavailable(fmt::format("could not fetch the image URL: {}", s.message()));
        default:
          return s.WithContext("fetching the image URL");
      }
    }

    const net::HttpResponse& r = *response;
    if (IsRedirect(r.status)) {
      const std::string_view location = r.Header("location");
      if (Trim(location).empty()) {
        return InvalidArgument(fmt::format("fetching the image URL returned HTTP {} without a Location", r.status));
      }
      if (hop >= limits_.max_redirects) {
        return InvalidArgument(fmt::format("the image URL redirected more than {} times", limits_.max_redirects));
      }
      const std::string next = ResolveLocation(u, location);
      if (const auto scheme = SchemeOf(next); scheme && *scheme != "http" && *scheme != "https") {
        // A data: or file: target is never followed: only a URL the guard can check is.
        return InvalidArgument(
            fmt::format("the image URL redirects to a {}: URL; only http(s) redirects are followed", Quote(*scheme)));
      }
      const bool was_https = u.https;
      LADLE_ASSIGN_OR_RETURN(u, ParseHttpUrl(next));
      if (was_https && !u.https) {
        // A URL sent as https was meant to arrive intact; an http hop would let anyone on the
        // path swap the image.
        return InvalidArgument(fmt::format("the https image URL redirects to http ({}); a downgrade is not followed",
                                           Quote(u.ToString())));
      }
      continue;
    }
    if (r.status < 200 || r.status >= 300) {
      return InvalidArgument(fmt::format("fetching the image URL returned HTTP {}", r.status));
    }
    LADLE_ASSIGN_OR_RETURN(std::string media_type, ImageMediaType(r.Header("content-type")));
    if (sink->bytes.empty()) return InvalidArgument("the image URL returned an empty body");
    return FetchedImage{std::move(sink->bytes), std::move(media_type), u.ToString()};
  }
}

}  // namespace ladle::vision
