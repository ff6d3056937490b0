// Image URLs → bytes (issue 18, "Remote URLs"): data: URLs decoded in place, http:// and
// https:// URLs fetched through net's HttpClient behind an SSRF guard.
//
//   auto f = ImageFetcher::Create({.max_bytes = 20 << 20});               // once per server
//   Result<FetchedImage> img = (*f)->Fetch("http://example.com/cat.png");
//   Result<FetchedImage> d = DecodeDataUrl("data:image/png;base64,iVBOR...", 20 << 20);
//
// The guard: the server resolves the host itself, refuses the URL (kPermissionDenied) when any
// address it resolves to is loopback, private, link-local, multicast, reserved and so on
// (IsBlockedAddress), and then connects to the address it checked, never to the name again, so
// a DNS answer that changes between the check and the connect (DNS rebinding) cannot reach an
// internal service. Every redirect hop is parsed and checked the same way. A server started
// with --allow-private-image-urls (FetchLimits::allow_private) skips the guard: local tests,
// or a deployment whose images live on an internal host.
//
// https:// URLs (default port 443) go over TLS 1.2+ to the same checked address: the URL's host
// is sent as SNI and the certificate must verify for that name (or, for an address literal, that
// address) against the system's CAs plus FetchLimits::tls_ca_file. A certificate that does not
// verify fails the fetch; there is no fallback to http. Redirects may go http → https and
// https → https (each hop guarded like the first); https → http is refused (kInvalidArgument),
// since the client asked for a transfer nobody on the path could tamper with.
//
// Errors, each with a message a client can act on: kInvalidArgument for a malformed URL, a
// non-2xx answer ("fetching the image URL returned HTTP 404"), a Content-Type that is not
// image/*, too many redirects, an https → http redirect or a bad data: URL; kPermissionDenied
// for a refused address; kResourceExhausted for a body over max_bytes; kDeadlineExceeded when
// the whole fetch (resolution, every hop, the last body byte) passes limits.timeout;
// kUnavailable when the host cannot be reached, its TLS handshake fails or its certificate does
// not verify ("TLS certificate verification failed for host example.com: certificate has
// expired"). Nothing throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ladle/core/result.h"

namespace ladle::net {
class HttpClient;
}

namespace ladle::vision {

struct FetchLimits {
  int64_t max_bytes = 20 << 20;                      // body bytes (and decoded data: bytes)
  std::chrono::milliseconds timeout{10000};          // the whole fetch, redirects included
  std::chrono::milliseconds connect_timeout{3000};   // each TCP connect, within timeout
  int max_redirects = 3;                             // hops followed; one more is an error
  bool allow_private = false;                        // `ladle serve --allow-private-image-urls`
  // Which addresses the guard refuses when !allow_private; empty: IsBlockedAddress. Tests set
  // it to block one loopback address (127.0.0.2) and allow another, so a redirect from an
  // allowed to a refused address can be tested with both servers on this machine. Called with
  // a numeric address (as IsBlockedAddress takes it) from the fetching thread; thread-safe.
  std::function<bool(std::string_view address)> is_blocked;
  // A PEM file of CA certificates trusted for https images besides the system's: for a
  // deployment whose image hosts use a private CA, and for tests. Empty: the system's only.
  // A file that cannot be read fails Create (kInvalidArgument).
  std::string tls_ca_file;
};

struct FetchedImage {
  std::string bytes;
  std::string media_type;  // lower case, without parameters ("image/png"); "" when a data:
                           // URL names none. Callers sniff the bytes anyway.
  std::string final_url;   // the URL the bytes came from after redirects; "" for data:
};

// data:[<media type>][;base64],<data> → its bytes: base64 (whitespace ignored, padding
// optional) or percent-encoded. The media type is checked for form only (type/subtype), not
// for being an image: the decoder sniffs the magic bytes. kInvalidArgument for a URL that is not data:, has no ',', no data, bad base64
// or a bad %-escape; kResourceExhausted when the bytes exceed max_bytes (a base64 payload is
// refused by its length, before it is decoded).
Result<FetchedImage> DecodeDataUrl(std::string_view url, int64_t max_bytes);

// Whether the guard refuses a numeric address ("10.1.2.3", "::ffff:127.0.0.1", "fe80::1%2";
// an IPv6 zone is ignored). Refused:
//   IPv4: 0/8, 10/8, 100.64/10 (CGNAT), 127/8, 169.254/16, 172.16/12, 192.0.0/24, 192.0.2/24,
//         192.88.99/24 (6to4 relay), 192.168/16, 198.18/15 (benchmarking), 198.51.100/24,
//         203.0.113/24, 224/4 (multicast), 240/4 (reserved, 255.255.255.255 included);
//   IPv6: everything outside global unicast 2000::/3 (::, ::1, fc00::/7 unique local,
//         fe80::/10 link-local, fec0::/10 site-local, ff00::/8 multicast, 100::/64 ...), and
//         inside it 2001::/32 (Teredo, a tunnel to any IPv4 address), 2001:2::/48
//         (benchmarking), 2001:10::/28 and 2001:20::/28 (ORCHID), 2001:db8::/32 and 3fff::/20
//         (documentation). Except: ::ffff:0:0/96 (IPv4-mapped), 64:ff9b::/96 (NAT64) and
//         2002::/16 (6to4) are judged by the IPv4 address they carry.
// Text that is not an address is refused too: the guard fails closed.
bool IsBlockedAddress(std::string_view address);

// Thread-safe: Fetch may run on many threads at once (each call blocks its own thread).
class ImageFetcher {
 public:
  // kInvalidArgument for limits that make no sense (non-positive sizes or times).
  static Result<std::unique_ptr<ImageFetcher>> Create(FetchLimits limits);
  ~ImageFetcher();
  ImageFetcher(const ImageFetcher&) = delete;
  ImageFetcher& operator=(const ImageFetcher&) = delete;

  // Blocking, bounded by limits().timeout. A data: URL goes to DecodeDataUrl. Not from one of
  // net's io threads (HttpClient::Fetch refuses those).
  Result<FetchedImage> Fetch(const std::string& url);

  const FetchLimits& limits() const { return limits_; }

 private:
  ImageFetcher(FetchLimits limits, std::unique_ptr<net::HttpClient> client);

  const FetchLimits limits_;
  std::unique_ptr<net::HttpClient> client_;
};

}  // namespace ladle::vision
