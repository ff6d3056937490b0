// The image URL fetcher against loopback servers (net's HttpServer, net's test HTTPS server with
// a CA made at test time, and a raw socket for a body without Content-Length): the SSRF guard
// refuses private hosts before any connection, redirects are followed and re-checked, https is
// verified against the URL's host, and every limit ends the fetch with its own status. Plus
// data: URL decoding and the address table of IsBlockedAddress.
#include "ladle/vision/image_fetch.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "../net/tls_test_server.h"
#include "ladle/core/base64.h"
#include "ladle/net/http_server.h"

namespace ladle::vision {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// An HTTP origin with fixed answers per target. A route with status 0 never answers (a slow
// server). It records every request it saw.
class Origin {
 public:
  explicit Origin(std::string host = "127.0.0.1") {
    auto s = net::HttpServer::Create({.host = std::move(host)}, [this](net::HttpRequest req, net::HttpServer::Respond respond) {
      std::lock_guard lock(mu_);
      seen_.push_back(req);
      auto it = routes_.find(req.target);
      if (it == routes_.end()) {
        respond(net::HttpResponse::WithBody(404, "text/plain", "no such image\n"));
      } else if (it->second.status == 0) {
        parked_.push_back(std::move(respond));  // answered never; dropped at Stop()
      } else {
        respond(it->second);
      }
    });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    server_->Start();
  }
  ~Origin() { server_->Stop(); }

  uint16_t port() const { return server_->port(); }
  std::string Url(std::string_view target, std::string_view host = "127.0.0.1") const {
    return fmt::format("http://{}:{}{}", host, port(), target);
  }
  void Route(std::string target, net::HttpResponse r) {
    std::lock_guard lock(mu_);
    routes_[std::move(target)] = std::move(r);
  }
  void Image(std::string target, std::string bytes, std::string type = "image/png") {
    Route(std::move(target), net::HttpResponse::WithBody(200, std::move(type), std::move(bytes)));
  }
  void Redirect(std::string target, std::string location, int status = 302) {
    net::HttpResponse r;
    r.status = status;
    r.headers = {{"Location", std::move(location)}};
    Route(std::move(target), std::move(r));
  }
  std::vector<net::HttpRequest> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }
  uint64_t connections() const { return server_->connections_accepted(); }

 private:
  mutable std::mutex mu_;
  std::map<std::string, net::HttpResponse> routes_;
  std::vector<net::HttpRequest> seen_;
  std::vector<net::HttpServer::Respond> parked_;
  std::unique_ptr<net::HttpServer> server_;
};

std::unique_ptr<ImageFetcher> MakeFetcher(FetchLimits limits) {
  auto f = ImageFetcher::Create(std::move(limits));
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

FetchLimits AllowPrivate() {
  FetchLimits l;
  l.allow_private = true;
  return l;
}

// The guard as tests on one machine need it: only 127.0.0.2 counts as private.
FetchLimits Only127002Blocked() {
  FetchLimits l;
  l.is_blocked = [](std::string_view a) { return a == "127.0.0.2"; };
  return l;
}

const std::string kPng = std::string("\x89PNG\r\n\x1a\n", 8) + "rest of a png";

// ---------------------------------------------------------------------------------------------
// Fetching

TEST(ImageFetch, FetchesWithAllowPrivate) {
  Origin o;
  o.Image("/cat.png", kPng, "Image/PNG; charset=binary");
  auto f = MakeFetcher(AllowPrivate());
  auto r = f->Fetch(o.Url("/cat.png"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, kPng);
  EXPECT_EQ(r->media_type, "image/png");
  EXPECT_EQ(r->final_url, o.Url("/cat.png"));
  const auto seen = o.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(net::FindHeader(seen[0].headers, "host"), fmt::format("127.0.0.1:{}", o.port()));
}

TEST(ImageFetch, FetchesIpv6LiteralWithAllowPrivate) {
  auto s = net::HttpServer::Create({.host = "::1"}, [](net::HttpRequest, net::HttpServer::Respond respond) {
    respond(net::HttpResponse::WithBody(200, "image/gif", "GIF89a"));
  });
  if (!s.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << s.status().ToString();
  (*s)->Start();
  auto f = MakeFetcher(AllowPrivate());
  const std::string url = fmt::format("http://[::1]:{}/a.gif", (*s)->port());
  auto r = f->Fetch(url);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, "GIF89a");
  EXPECT_EQ(r->final_url, url);
}

TEST(ImageFetch, NameIsResolvedOnceAndSentAsHost) {
  // "localhost" passes the test guard (only 127.0.0.2 is blocked); the request reaches the
  // server by the checked address while carrying the name in Host.
  Origin o;
  o.Image("/x.png", kPng);
  auto f = MakeFetcher(Only127002Blocked());
  auto r = f->Fetch(o.Url("/x.png", "LocalHost"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, kPng);
  EXPECT_EQ(r->final_url, o.Url("/x.png", "localhost"));
  const auto seen = o.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(net::FindHeader(seen[0].headers, "host"), fmt::format("localhost:{}", o.port()));
}

TEST(ImageFetch, RefusesPrivateHostsWithoutConnecting) {
  Origin o;
  o.Image("/x.png", kPng);
  auto f = MakeFetcher(FetchLimits{});
  const uint16_t p = o.port();
  for (const std::string& url : {
           fmt::format("http://127.0.0.1:{}/x.png", p),
           fmt::format("http://localhost:{}/x.png", p),
           fmt::format("http://[::1]:{}/x.png", p),
           fmt::format("http://[::ffff:127.0.0.1]:{}/x.png", p),
           fmt::format("http://[0:0:0:0:0:0:0:1]:{}/x.png", p),
           fmt::format("http://0.0.0.0:{}/x.png", p),
           fmt::format("http://2130706433:{}/x.png", p),  // 127.0.0.1 as one number
           fmt::format("http://0x7f.1:{}/x.png", p),      // and in inet_aton's short hex form
           fmt::format("http://127.1:{}/x.png", p),
           std::string("http://10.0.0.1/x.png"),
           std::string("http://10.255.0.7:8080/x.png"),
           std::string("http://192.168.1.1/x.png"),
           std::string("http://172.16.5.4/x.png"),
           std::string("http://100.64.0.1/x.png"),
           std::string("http://169.254.169.254/latest/meta-data/"),
           std::string("http://[fe80::1]/x.png"),
           std::string("http://[fd00::1]/x.png"),
       }) {
    auto r = f->Fetch(url);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << url << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find("--allow-private-image-urls"), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(o.connections(), 0u);
  EXPECT_TRUE(o.seen().empty());
}

TEST(ImageFetch, RefusalNamesTheHostAndTheAddress) {
  auto f = MakeFetcher(FetchLimits{});
  auto lit = f->Fetch("http://127.0.0.1:9/x.png");
  EXPECT_EQ(lit.status().message(),
            "image URL host 127.0.0.1 is a loopback/private address; the server refuses these unless started "
            "with --allow-private-image-urls");
  auto name = f->Fetch("http://localhost:9/x.png");
  EXPECT_EQ(name.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(name.status().message().find("image URL host localhost resolves to "), std::string::npos)
      << name.status().message();
}

TEST(ImageFetch, RedirectChainWithinLimit) {
  Origin o;
  o.Redirect("/r1", "/dir/r2", 301);                                // absolute path
  o.Redirect("/dir/r2", "r3", 302);                                 // relative to /dir/
  o.Redirect("/dir/r3", "../img.png?v=1", 303);                     // dot segments
  o.Redirect("/img.png?v=1", o.Url("/final.png#frag"), 307);        // absolute URL
  o.Image("/final.png", kPng, "image/webp");
  {
    FetchLimits l = AllowPrivate();
    l.max_redirects = 4;
    auto r = MakeFetcher(l)->Fetch(o.Url("/r1"));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->bytes, kPng);
    EXPECT_EQ(r->media_type, "image/webp");
    EXPECT_EQ(r->final_url, o.Url("/final.png"));
    std::vector<std::string> targets;
    for (const auto& req : o.seen()) targets.push_back(req.target);
    EXPECT_EQ(targets, (std::vector<std::string>{"/r1", "/dir/r2", "/dir/r3", "/img.png?v=1", "/final.png"}));
  }
  {
    FetchLimits l = AllowPrivate();
    l.max_redirects = 3;
    auto r = MakeFetcher(l)->Fetch(o.Url("/r1"));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("redirected more than 3 times"), std::string::npos) << r.status().message();
  }
  {
    FetchLimits l = AllowPrivate();
    l.max_redirects = 0;
    auto r = MakeFetcher(l)->Fetch(o.Url("/r1"));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ImageFetch, RedirectLoopEndsAtTheLimit) {
  Origin o;
  o.Redirect("/loop", "/loop", 308);
  auto r = MakeFetcher(AllowPrivate())->Fetch(o.Url("/loop"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(o.seen().size(), 4u);  // the first request and three redirects followed
}

TEST(ImageFetch, RedirectToBlockedAddressIsRefused) {
  Origin a("127.0.0.1");
  Origin b("127.0.0.2");  // loopback too on Linux; the test guard calls it private
  b.Image("/secret.png", kPng);
  a.Redirect("/start", b.Url("/secret.png", "127.0.0.2"));
  {
    auto r = MakeFetcher(Only127002Blocked())->Fetch(a.Url("/start"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
    EXPECT_NE(r.status().message().find("redirects to host 127.0.0.2"), std::string::npos) << r.status().message();
    EXPECT_EQ(a.seen().size(), 1u);
    EXPECT_EQ(b.connections(), 0u);  // refused before connecting
  }
  {
    // The same chain with nothing blocked reaches b: the refusal above was the guard's.
    FetchLimits l;
    l.is_blocked = [](std::string_view) { return false; };
    auto r = MakeFetcher(l)->Fetch(a.Url("/start"));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->bytes, kPng);
    EXPECT_EQ(r->final_url, b.Url("/secret.png", "127.0.0.2"));
  }
  {
    // And with allow_private the hook is not consulted at all.
    FetchLimits l = Only127002Blocked();
    l.allow_private = true;
    EXPECT_TRUE(MakeFetcher(l)->Fetch(a.Url("/start")).ok());
  }
}

TEST(ImageFetch, RedirectWithoutLocationOrToOtherSchemes) {
  Origin o;
  net::HttpResponse bare;
  bare.status = 302;
  o.Route("/bare", bare);
  o.Redirect("/to-data", "data:image/png;base64,iVBORw0KGgo=");
  o.Redirect("/to-file", "file:///etc/passwd");
  auto f = MakeFetcher(AllowPrivate());
  auto r = f->Fetch(o.Url("/bare"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("without a Location"), std::string::npos) << r.status().message();
  auto data = f->Fetch(o.Url("/to-data"));
  EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(data.status().message().find("redirects to a data: URL"), std::string::npos) << data.status().message();
  EXPECT_EQ(f->Fetch(o.Url("/to-file")).status().code(), StatusCode::kInvalidArgument);
}

TEST(ImageFetch, WrongContentType) {
  Origin o;
  o.Image("/page", "<html></html>", "text/html; charset=utf-8");
  o.Image("/octets", kPng, "application/octet-stream");
  net::HttpResponse untyped;
  untyped.status = 200;
  untyped.body = kPng;
  o.Route("/untyped", untyped);
  auto f = MakeFetcher(AllowPrivate());
  auto html = f->Fetch(o.Url("/page"));
  EXPECT_EQ(html.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(html.status().message().find("'text/html'"), std::string::npos) << html.status().message();
  EXPECT_EQ(f->Fetch(o.Url("/octets")).status().code(), StatusCode::kInvalidArgument);
  auto none = f->Fetch(o.Url("/untyped"));
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no Content-Type"), std::string::npos) << none.status().message();
}

TEST(ImageFetch, EmptyBodyIsRefused) {
  Origin o;
  o.Image("/empty.png", "");
  auto r = MakeFetcher(AllowPrivate())->Fetch(o.Url("/empty.png"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(ImageFetch, TooBig) {
  Origin o;
  o.Image("/big.png", std::string(5000, 'x'));
  o.Image("/exact.png", std::string(1000, 'x'));
  FetchLimits l = AllowPrivate();
  l.max_bytes = 1000;
  auto f = MakeFetcher(l);
  auto big = f->Fetch(o.Url("/big.png"));
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().ToString();
  auto exact = f->Fetch(o.Url("/exact.png"));
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  EXPECT_EQ(exact->bytes.size(), 1000u);
}

// One connection answered by hand: a 200 image whose body has no Content-Length and ends when
// the server closes, so only the fetcher's running count can stop it.
TEST(ImageFetch, TooBigWithoutContentLength) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const uint16_t port = ntohs(addr.sin_port);
  std::atomic<size_t> sent{0};
  std::thread server([fd, &sent] {
    const int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    (void)::recv(c, buf, sizeof buf, 0);  // the request (small; one read is enough here)
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nConnection: close\r\n\r\n";
    (void)::send(c, head.data(), head.size(), MSG_NOSIGNAL);
    const std::string chunk(16 << 10, 'x');
    for (int i = 0; i < 64; ++i) {  // 1 MiB at most, then close
      const ssize_t n = ::send(c, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::close(c);
  });
  FetchLimits l = AllowPrivate();
  l.max_bytes = 100 << 10;
  auto r = MakeFetcher(l)->Fetch(fmt::format("http://127.0.0.1:{}/stream.png", port));
  server.join();
  ::close(fd);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
}

TEST(ImageFetch, SlowServerHitsTheDeadline) {
  Origin o;
  net::HttpResponse never;
  never.status = 0;
  o.Route("/slow.png", never);
  FetchLimits l = AllowPrivate();
  l.timeout = 300ms;
  auto f = MakeFetcher(l);
  const auto start = Clock::now();
  auto r = f->Fetch(o.Url("/slow.png"));
  const auto took = Clock::now() - start;
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("timed out after 300 ms"), std::string::npos) << r.status().message();
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
}

TEST(ImageFetch, DeadlineCoversTheWholeRedirectChain) {
  // Each hop is fast, but the last never answers: the one deadline still ends the fetch.
  Origin o;
  o.Redirect("/a", "/b");
  net::HttpResponse never;
  never.status = 0;
  o.Route("/b", never);
  FetchLimits l = AllowPrivate();
  l.timeout = 300ms;
  const auto start = Clock::now();
  auto r = MakeFetcher(l)->Fetch(o.Url("/a"));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_LT(Clock::now() - start, 3s);
}

TEST(ImageFetch, HttpErrorStatus) {
  Origin o;
  o.Route("/boom", net::HttpResponse::WithBody(500, "text/plain", "oops"));
  o.Route("/img-typed-404", net::HttpResponse::WithBody(404, "image/png", kPng));
  auto f = MakeFetcher(AllowPrivate());
  auto r404 = f->Fetch(o.Url("/missing.png"));
  EXPECT_EQ(r404.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r404.status().message(), "fetching the image URL returned HTTP 404");
  EXPECT_EQ(f->Fetch(o.Url("/img-typed-404")).status().message(), "fetching the image URL returned HTTP 404");
  EXPECT_EQ(f->Fetch(o.Url("/boom")).status().message(), "fetching the image URL returned HTTP 500");
}

TEST(ImageFetch, UnreachableIsUnavailable) {
  uint16_t port = 0;
  {
    Origin o;  // bound, then closed: nothing listens on its port now
    port = o.port();
  }
  auto r = MakeFetcher(AllowPrivate())->Fetch(fmt::format("http://127.0.0.1:{}/x.png", port));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

TEST(ImageFetch, UnknownHostName) {
  // .invalid never resolves (RFC 6761); a sandbox without DNS fails the lookup instead.
  // A resolver that cannot answer at all is cut off by the deadline.
  FetchLimits l = AllowPrivate();
  l.timeout = 1500ms;
  const auto start = Clock::now();
  auto r = MakeFetcher(l)->Fetch("http://no-such-host.invalid/x.png");
  const StatusCode code = r.status().code();
  EXPECT_TRUE(code == StatusCode::kInvalidArgument || code == StatusCode::kUnavailable ||
              code == StatusCode::kDeadlineExceeded)
      << r.status().ToString();
  EXPECT_LT(Clock::now() - start, 3s);
}

TEST(ImageFetch, MalformedUrls) {
  Origin o;
  auto f = MakeFetcher(AllowPrivate());
  for (const std::string& url : {
           std::string(""),
           std::string("not a url"),
           std::string("/relative/path.png"),
           std::string("//127.0.0.1/x.png"),
           std::string("http:127.0.0.1/x.png"),
           std::string("http:///x.png"),
           std::string("http://:80/x.png"),
           std::string("http://?x"),
           std::string("http://127.0.0.1:99999/x.png"),
           std::string("http://127.0.0.1:0/x.png"),
           std::string("http://127.0.0.1:-1/x.png"),
           std::string("http://127.0.0.1:8a/x.png"),
           std::string("http://127.0.0.1:1:2/x.png"),
           std::string("http://::1/x.png"),
           std::string("http://[::1/x.png"),
           std::string("http://[::1]x/x.png"),
           std::string("http://[not-v6]/x.png"),
           std::string("http://exa mple.com/x.png"),
           std::string("http://exa%6dple.com/x.png"),
           fmt::format("http://127.0.0.1:{}/x\r\nX-Injected: 1", o.port()),
           fmt::format("http://user:pw@127.0.0.1:{}/x.png", o.port()),
           fmt::format("http://user@127.0.0.1:{}/x.png", o.port()),
           fmt::format("http://@127.0.0.1:{}/x.png", o.port()),
           std::string("file:///etc/passwd"),
           std::string("gopher://127.0.0.1:70/_x"),
           std::string("ftp://example.com/x.png"),
           std::string("javascript:alert(1)"),
       }) {
    auto r = f->Fetch(url);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << url << ": " << r.status().ToString();
  }
  auto userinfo = f->Fetch(fmt::format("http://user:pw@127.0.0.1:{}/x.png", o.port()));
  EXPECT_NE(userinfo.status().message().find("user name or password"), std::string::npos);
  auto scheme = f->Fetch("gopher://127.0.0.1:70/_x");
  EXPECT_NE(scheme.status().message().find("scheme 'gopher'"), std::string::npos) << scheme.status().message();
  EXPECT_EQ(o.connections(), 0u);
}

TEST(ImageFetch, TargetIsNormalised) {
  Origin o;
  o.Image("/img.png", kPng);
  o.Image("/a%20b.png?q=1", kPng);
  o.Image("/", kPng);
  auto f = MakeFetcher(AllowPrivate());
  auto r = f->Fetch(o.Url("/x/../img.png#fragment"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->final_url, o.Url("/img.png"));
  ASSERT_TRUE(f->Fetch(o.Url("/a b.png?q=1")).ok());
  ASSERT_TRUE(f->Fetch(fmt::format("HTTP://127.0.0.1:{}", o.port())).ok());
  ASSERT_TRUE(f->Fetch(fmt::format("http://127.0.0.1:{}/../../", o.port())).ok());
  std::vector<std::string> targets;
  for (const auto& req : o.seen()) targets.push_back(req.target);
  EXPECT_EQ(targets, (std::vector<std::string>{"/img.png", "/a%20b.png?q=1", "/", "/"}));
}

// ---------------------------------------------------------------------------------------------
// https

using net::testing::TestCa;
using net::testing::TlsServer;

// An HTTPS handler with fixed answers per target (404 otherwise).
TlsServer::Handler Routes(std::map<std::string, net::HttpResponse> routes) {
  return [routes = std::move(routes)](const net::HttpRequest& req) {
    auto it = routes.find(req.target);
    return it != routes.end() ? it->second : net::HttpResponse::WithBody(404, "text/plain", "no such image\n");
  };
}

net::HttpResponse RedirectTo(std::string location) {
  net::HttpResponse r;
  r.status = 302;
  r.headers = {{"Location", std::move(location)}};
  return r;
}

std::string HttpsUrl(const TlsServer& s, std::string_view target, std::string_view host = "localhost") {
  return fmt::format("https://{}:{}{}", host, s.port(), target);
}

FetchLimits Trusting(const TestCa& ca, FetchLimits l = AllowPrivate()) {
  l.tls_ca_file = ca.ca_file();
  return l;
}

TEST(ImageFetch, HttpsFetchesVerifiedAgainstTheUrlsHost) {
  TestCa ca;
  TlsServer tls(ca.Issue("localhost", "DNS:localhost,IP:127.0.0.1"),
                Routes({{"/cat.png", net::HttpResponse::WithBody(200, "image/png", kPng)},
                        {"/big.png", net::HttpResponse::WithBody(200, "image/png", std::string(5000, 'x'))}}));
  auto f = MakeFetcher(Trusting(ca));
  auto r = f->Fetch(HttpsUrl(tls, "/cat.png"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, kPng);
  EXPECT_EQ(r->media_type, "image/png");
  EXPECT_EQ(r->final_url, HttpsUrl(tls, "/cat.png"));
  // Connected to a checked address, with the name as SNI and in Host.
  EXPECT_EQ(tls.sni(), std::vector<std::string>{"localhost"});
  ASSERT_EQ(tls.seen().size(), 1u);
  EXPECT_EQ(net::FindHeader(tls.seen()[0].headers, "host"), fmt::format("localhost:{}", tls.port()));
  // An address literal is verified against the certificate's IP SAN.
  auto ip = f->Fetch(HttpsUrl(tls, "/cat.png", "127.0.0.1"));
  ASSERT_TRUE(ip.ok()) << ip.status().ToString();
  EXPECT_EQ(ip->bytes, kPng);
  // The byte limit holds over TLS.
  FetchLimits small = Trusting(ca);
  small.max_bytes = 1000;
  EXPECT_EQ(MakeFetcher(small)->Fetch(HttpsUrl(tls, "/big.png")).status().code(), StatusCode::kResourceExhausted);
  // With the guard on (only 127.0.0.2 private here): resolved, checked, fetched over TLS.
  auto guarded = MakeFetcher(Trusting(ca, Only127002Blocked()))->Fetch(HttpsUrl(tls, "/cat.png"));
  ASSERT_TRUE(guarded.ok()) << guarded.status().ToString();
  EXPECT_EQ(guarded->bytes, kPng);
}

TEST(ImageFetch, HttpsPrivateHostsAreRefusedWithoutConnecting) {
  TestCa ca;
  TlsServer tls(ca.Issue("localhost", "DNS:localhost,IP:127.0.0.1"),
                Routes({{"/cat.png", net::HttpResponse::WithBody(200, "image/png", kPng)}}));
  auto f = MakeFetcher(Trusting(ca, FetchLimits{}));
  for (const std::string& url : {HttpsUrl(tls, "/cat.png", "127.0.0.1"), HttpsUrl(tls, "/cat.png", "localhost"),
                                 HttpsUrl(tls, "/cat.png", "[::1]")}) {
    auto r = f->Fetch(url);
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << url << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find("--allow-private-image-urls"), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(tls.accepted(), 0u);
}

TEST(ImageFetch, HttpsCertificateMustVerify) {
  TestCa ca;
  TlsServer tls(ca.Issue("localhost", "DNS:localhost"),
                Routes({{"/cat.png", net::HttpResponse::WithBody(200, "image/png", kPng)}}));
  // Not trusting the test CA: the system's CAs do not know it.
  auto untrusted = MakeFetcher(AllowPrivate())->Fetch(HttpsUrl(tls, "/cat.png"));
  EXPECT_EQ(untrusted.status().code(), StatusCode::kUnavailable) << untrusted.status().ToString();
  EXPECT_NE(untrusted.status().message().find("TLS certificate verification failed for host localhost: "),
            std::string::npos)
      << untrusted.status().message();
  // Trusted CA, but the certificate is for localhost, not for the address in the URL.
  auto wrong = MakeFetcher(Trusting(ca))->Fetch(HttpsUrl(tls, "/cat.png", "127.0.0.1"));
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnavailable) << wrong.status().ToString();
  EXPECT_NE(
      wrong.status().message().find("TLS certificate verification failed for host 127.0.0.1: IP address mismatch"),
      std::string::npos)
      << wrong.status().message();
  EXPECT_TRUE(tls.seen().empty());
  // An http server on an https URL: the handshake fails; nothing is fetched over plain http.
  Origin plain;
  plain.Image("/x.png", kPng);
  auto no_tls = MakeFetcher(Trusting(ca))->Fetch(fmt::format("https://127.0.0.1:{}/x.png", plain.port()));
  EXPECT_EQ(no_tls.status().code(), StatusCode::kUnavailable) << no_tls.status().ToString();
  EXPECT_TRUE(plain.seen().empty());
}

TEST(ImageFetch, RedirectsToHttpsAreFollowedAndGuarded) {
  TestCa ca;
  TlsServer tls(ca.Issue("localhost", "DNS:localhost,IP:127.0.0.1"),
                Routes({{"/cat.png", net::HttpResponse::WithBody(200, "image/png", kPng)},
                        {"/moved", RedirectTo("/cat.png")}}));
  Origin o;
  o.Redirect("/go", HttpsUrl(tls, "/moved"));
  o.Redirect("/private", fmt::format("https://127.0.0.2:{}/cat.png", tls.port()));
  // http → https → https (relative): both hops over TLS to the checked address.
  auto r = MakeFetcher(Trusting(ca))->Fetch(o.Url("/go"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, kPng);
  EXPECT_EQ(r->final_url, HttpsUrl(tls, "/cat.png"));
  std::vector<std::string> targets;
  for (const auto& req : tls.seen()) targets.push_back(req.target);
  EXPECT_EQ(targets, (std::vector<std::string>{"/moved", "/cat.png"}));
  // The https hop is checked like any other.
  const uint64_t before = tls.accepted();
  auto refused = MakeFetcher(Trusting(ca, Only127002Blocked()))->Fetch(o.Url("/private"));
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("redirects to host 127.0.0.2"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(tls.accepted(), before);
}

TEST(ImageFetch, HttpsToHttpDowngradeIsRefused) {
  Origin o;
  o.Image("/x.png", kPng);
  TestCa ca;
  TlsServer tls(ca.Issue("localhost", "DNS:localhost"), Routes({{"/down", RedirectTo(o.Url("/x.png"))}}));
  auto r = MakeFetcher(Trusting(ca))->Fetch(HttpsUrl(tls, "/down"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("a downgrade is not followed"), std::string::npos) << r.status().message();
  EXPECT_TRUE(o.seen().empty());
}

TEST(ImageFetch, CreateRefusesAnUnreadableCaFile) {
  FetchLimits l;
  l.tls_ca_file = "/nonexistent/ca.pem";
  auto f = ImageFetcher::Create(l);
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("/nonexistent/ca.pem"), std::string::npos) << f.status().message();
}

TEST(ImageFetch, DataUrlsNeedNoNetwork) {
  auto f = MakeFetcher(FetchLimits{});
  auto r = f->Fetch("data:image/png;base64," + Base64Encode(kPng));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, kPng);
  EXPECT_EQ(r->media_type, "image/png");
  EXPECT_EQ(r->final_url, "");
  FetchLimits small;
  small.max_bytes = 4;
  EXPECT_EQ(MakeFetcher(small)->Fetch("data:image/png;base64," + Base64Encode(kPng)).status().code(),
            StatusCode::kResourceExhausted);
}

TEST(ImageFetch, CreateRefusesBadLimits) {
  FetchLimits l;
  l.max_bytes = 0;
  EXPECT_EQ(ImageFetcher::Create(l).status().code(), StatusCode::kInvalidArgument);
  l = {};
  l.timeout = 0ms;
  EXPECT_EQ(ImageFetcher::Create(l).status().code(), StatusCode::kInvalidArgument);
  l = {};
  l.connect_timeout = -1ms;
  EXPECT_EQ(ImageFetcher::Create(l).status().code(), StatusCode::kInvalidArgument);
  l = {};
  l.max_redirects = -1;
  EXPECT_EQ(ImageFetcher::Create(l).status().code(), StatusCode::kInvalidArgument);
}

TEST(ImageFetch, ConcurrentFetches) {
  Origin o;
  for (int i = 0; i < 8; ++i) o.Image(fmt::format("/{}.png", i), kPng + std::to_string(i));
  o.Redirect("/r", "/3.png");
  auto f = MakeFetcher(AllowPrivate());
  std::vector<std::future<bool>> done;
  for (int t = 0; t < 8; ++t) {
    done.push_back(std::async(std::launch::async, [&, t] {
      for (int k = 0; k < 10; ++k) {
        const int i = (t + k) % 8;
        auto r = f->Fetch(o.Url(fmt::format("/{}.png", i)));
        if (!r.ok() || r->bytes != kPng + std::to_string(i)) return false;
        auto rr = f->Fetch(o.Url("/r"));
        if (!rr.ok() || rr->bytes != kPng + "3") return false;
      }
      return true;
    }));
    (void)t;
  }
  for (auto& d : done) EXPECT_TRUE(d.get());
}

// ---------------------------------------------------------------------------------------------
// data: URLs

TEST(DataUrl, Base64) {
  auto r = DecodeDataUrl("data:image/png;base64," + Base64Encode(kPng), 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, kPng);
  EXPECT_EQ(r->media_type, "image/png");
  EXPECT_EQ(r->final_url, "");

  auto upper = DecodeDataUrl("DATA:Image/JPEG;BASE64,/9j/4A==", 100);
  ASSERT_TRUE(upper.ok()) << upper.status().ToString();
  EXPECT_EQ(upper->bytes, std::string("\xff\xd8\xff\xe0", 4));
  EXPECT_EQ(upper->media_type, "image/jpeg");

  auto params = DecodeDataUrl("data:image/gif;name=a.gif;charset=binary;base64,R0lGODlh", 100);
  ASSERT_TRUE(params.ok()) << params.status().ToString();
  EXPECT_EQ(params->bytes, "GIF89a");
  EXPECT_EQ(params->media_type, "image/gif");

  auto wrapped = DecodeDataUrl("data:image/gif;base64,R0lG\r\nODlh\n", 100);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
  EXPECT_EQ(wrapped->bytes, "GIF89a");

  auto unpadded = DecodeDataUrl("data:image/jpeg;base64,/9j/4A", 100);
  ASSERT_TRUE(unpadded.ok());
  EXPECT_EQ(unpadded->bytes, std::string("\xff\xd8\xff\xe0", 4));

  auto escaped = DecodeDataUrl("data:image/png;base64,%2F9j%2F4A%3D%3D", 100);  // "/9j/4A=="
  ASSERT_TRUE(escaped.ok()) << escaped.status().ToString();
  EXPECT_EQ(escaped->bytes, std::string("\xff\xd8\xff\xe0", 4));

  auto no_type = DecodeDataUrl("data:;base64,R0lGODlh", 100);
  ASSERT_TRUE(no_type.ok());
  EXPECT_EQ(no_type->media_type, "");
}

TEST(DataUrl, PercentEncoded) {
  auto r = DecodeDataUrl("data:image/svg+xml,%3Csvg%20xmlns%3D%22x%22%3E%3C/svg%3E", 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes, "<svg xmlns=\"x\"></svg>");
  EXPECT_EQ(r->media_type, "image/svg+xml");
  auto plain = DecodeDataUrl("data:,hello", 100);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->bytes, "hello");
  EXPECT_EQ(plain->media_type, "");
  auto binary = DecodeDataUrl("data:image/png,%89PNG%0D%0A%1A%0A", 100);
  ASSERT_TRUE(binary.ok());
  EXPECT_EQ(binary->bytes, std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST(DataUrl, Malformed) {
  struct Case {
    const char* url;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"data:image/png;base64", "no ','"},
           {"data:image/png;base64iVBOR", "no ','"},
           {"data:image/png;base64,", "no data"},
           {"data:image/png;base64,  \n", "no data"},
           {"data:,", "no data"},
           {"data:image/png;base64,!!!!", "malformed"},
           {"data:image/png;base64,YQ=x", "malformed"},
           {"data:image/png;base64,Y", "malformed"},
           {"data:image/png;base64,YR==", "malformed"},  // non-zero bits after the last byte
           {"data:image/png;base64,%zz==", "%-escape"},
           {"data:image/png,%zz", "%-escape"},
           {"data:image/png,abc%4", "%-escape"},
           {"data:image/png,abc%", "%-escape"},
           {"data:png;base64,R0lGODlh", "media type"},
           {"data:image/;base64,R0lGODlh", "media type"},
           {"http://example.com/x.png", "not a data: URL"},
           {"", "not a data: URL"},
       }) {
    auto r = DecodeDataUrl(c.url, 1 << 20);
    ASSERT_FALSE(r.ok()) << c.url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.url;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.url << ": " << r.status().message();
  }
}

TEST(DataUrl, TooLarge) {
  const std::string bytes(1001, 'z');
  auto b64 = DecodeDataUrl("data:image/png;base64," + Base64Encode(bytes), 1000);
  EXPECT_EQ(b64.status().code(), StatusCode::kResourceExhausted) << b64.status().ToString();
  auto at_limit = DecodeDataUrl("data:image/png;base64," + Base64Encode(std::string(1000, 'z')), 1000);
  ASSERT_TRUE(at_limit.ok()) << at_limit.status().ToString();
  EXPECT_EQ(at_limit->bytes.size(), 1000u);
  // Refused by its length: a huge payload of invalid characters is still "too large".
  auto huge = DecodeDataUrl("data:image/png;base64," + std::string(4 << 20, '!'), 1000);
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  auto pct = DecodeDataUrl("data:image/png," + bytes, 1000);
  EXPECT_EQ(pct.status().code(), StatusCode::kResourceExhausted);
  auto pct_escaped = DecodeDataUrl("data:image/png;base64," + std::string(1400, 'A') + "%3D", 1000);
  EXPECT_EQ(pct_escaped.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(DecodeDataUrl("data:image/png," + std::string(1000, 'z'), 1000).ok());
}

// ---------------------------------------------------------------------------------------------
// The address table: both sides of each range's boundary.

TEST(BlockedAddress, Ipv4) {
  for (const char* a : {"0.0.0.0", "0.255.255.255", "10.0.0.0", "10.255.255.255", "100.64.0.0", "100.127.255.255",
                        "127.0.0.1", "127.0.0.2", "127.255.255.255", "169.254.0.0", "169.254.169.254",
                        "169.254.255.255", "172.16.0.0", "172.31.255.255", "192.0.0.0", "192.0.0.255", "192.0.2.1",
                        "192.0.2.255", "192.88.99.1", "192.168.0.0", "192.168.255.255", "198.18.0.0",
                        "198.19.255.255", "198.51.100.7", "203.0.113.9", "224.0.0.1", "239.255.255.255",
                        "240.0.0.0", "255.255.255.254", "255.255.255.255"}) {
    EXPECT_TRUE(IsBlockedAddress(a)) << a;
  }
  for (const char* a : {"1.0.0.0", "8.8.8.8", "1.1.1.1", "9.255.255.255", "11.0.0.0", "100.63.255.255",
                        "100.128.0.0", "126.255.255.255", "128.0.0.0", "169.253.255.255", "169.255.0.0",
                        "172.15.255.255", "172.32.0.0", "192.0.1.0", "192.0.3.0", "192.88.98.255", "192.88.100.0",
                        "192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0", "198.51.99.255",
                        "198.51.101.0", "203.0.112.255", "203.0.114.0", "223.255.255.255", "93.184.216.34"}) {
    EXPECT_FALSE(IsBlockedAddress(a)) << a;
  }
}

TEST(BlockedAddress, Ipv6) {
  for (const char* a : {
           "::", "::1", "::2", "0:0:0:0:0:0:0:1", "::127.0.0.1", "::8.8.8.8",  // ::/96, compat included
           "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:10.0.0.1", "::ffff:192.168.1.1", "::ffff:169.254.169.254",
           "::ffff:0.0.0.0", "::ffff:255.255.255.255", "::FFFF:172.16.0.1",          // mapped, private inside
           "64:ff9b::7f00:1", "64:ff9b::10.0.0.1", "64:ff9b::192.168.0.1",           // NAT64 of private
           "64:ff9b:1::1", "64:ff9b:1:ffff::1",                                        // local NAT64
           "2002:7f00:1::", "2002:a00:1::1", "2002:c0a8:101::1", "2002:a9fe:a9fe::", // 6to4 of private
           "100::", "100::ffff:ffff:ffff:ffff",                                        // discard-only
           "2001::", "2001::1", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff",               // Teredo
           "2001:2::1", "2001:2:0:ffff::1",                                            // benchmarking
           "2001:10::1", "2001:2f::1",                                                 // ORCHID(v2)
           "2001:db8::", "2001:db8::1", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",     // documentation
           "3fff::1", "3fff:fff:ffff::1",                                              // documentation
           "fc00::", "fc00::1", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",            // unique local
           "fe80::", "fe80::1", "fe80::1%2", "fe80::1%eth0", "febf:ffff::1",          // link-local
           "fec0::1", "feff:ffff::1",                                                  // site-local
           "ff00::", "ff02::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",            // multicast
           "0:0:0:1::", "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "4000::1", "e000::1",  // not global unicast
       }) {
    EXPECT_TRUE(IsBlockedAddress(a)) << a;
  }
  for (const char* a : {
           "2000::", "2001:4860:4860::8888", "2606:4700:4700::1111", "2a00:1450:4001:82b::200e",
           "3ffe::1", "3fff:1000::1", "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",  // global unicast's ends
           "2001:1::1", "2001:1:ffff::1", "2001:3::1", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::",
           "2001:f::1", "2001:30::1",                                     // around ORCHID
           "::ffff:8.8.8.8", "::ffff:0808:0808", "::ffff:1.0.0.0",      // mapped public
           "64:ff9b::8.8.8.8", "64:ff9b::808:808",                       // NAT64 of public
           "2002:808:808::1", "2002:5db8:d822::",                        // 6to4 of public
       }) {
    EXPECT_FALSE(IsBlockedAddress(a)) << a;
  }
}

TEST(BlockedAddress, NotAnAddressIsBlocked) {
  for (const char* a : {"", "localhost", "example.com", "1.2.3", "1.2.3.4.5", "256.0.0.1", "01.2.3.4", "0x7f.0.0.1",
                        "2130706433", "::g", "1::2::3", "[::1]", " 8.8.8.8", "8.8.8.8 ", "8.8.8.8%1"}) {
    EXPECT_TRUE(IsBlockedAddress(a)) << "'" << a << "'";
  }
}

}  // namespace
}  // namespace ladle::vision
