// HttpClient over TLS against loopback HTTPS servers whose CA and certificates are made at test
// time: a verified fetch (by name with SNI, and by address), pooling, and every way a
// connection must fail instead of carrying a request: an unknown CA, a certificate for another
// name or address, an old protocol, a peer that speaks no TLS, a handshake that never ends. The
// deadline, the body limit and streaming hold as over plain HTTP.
#include <gtest/gtest.h>

#include <fstream>
#include <future>

#include "ladle/net/http_client.h"
#include "ladle/net/http_server.h"
#include "tls_test_server.h"

namespace ladle::net {
namespace {

using testing::TestCa;
using testing::TlsKeyPair;
using testing::TlsServer;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::unique_ptr<HttpClient> MakeClient(std::string ca_file) {
  HttpClientOptions o;
  o.tls_ca_file = std::move(ca_file);
  auto c = HttpClient::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// 127.0.0.1:port over TLS, the certificate held to `name` (empty: the address itself).
Endpoint Tls(uint16_t port, std::string name = "localhost") {
  return Endpoint{.host = "127.0.0.1", .port = port, .tls = true, .tls_host = std::move(name)};
}

// GET /x answers "x"; POST echoes; /big answers 5000 bytes.
HttpResponse Echo(const HttpRequest& r) {
  if (r.target == "/big") return HttpResponse::WithBody(200, "application/octet-stream", std::string(5000, 'b'));
  return HttpResponse::WithBody(200, "text/plain", r.method == "POST" ? r.body : r.target.substr(1));
}

bool Contains(const Status& s, std::string_view what) { return s.message().find(what) != std::string::npos; }

TEST(HttpTls, FetchesVerifiedByNameWithSniAndReuses) {
  TestCa ca;
  TlsServer server(ca.Issue("localhost", "DNS:localhost,IP:127.0.0.1"), Echo);
  auto client = MakeClient(ca.ca_file());
  for (int i = 0; i < 3; ++i) {
    auto r = client->Fetch(Tls(server.port()), {"GET", "/hello" + std::to_string(i), {}, ""}, {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello" + std::to_string(i));
  }
  auto post = client->Fetch(Tls(server.port()), {"POST", "/", {{"Content-Type", "text/plain"}}, "over tls"}, {});
  ASSERT_TRUE(post.ok()) << post.status().ToString();
  EXPECT_EQ(post->body, "over tls");
  // One TCP connection, one handshake, with SNI; the Host header names the TLS name.
  EXPECT_EQ(server.accepted(), 1u);
  EXPECT_EQ(server.handshakes(), 1);
  EXPECT_EQ(server.sni(), std::vector<std::string>{"localhost"});
  EXPECT_EQ(FindHeader(server.seen()[0].headers, "host"), "localhost:" + std::to_string(server.port()));
  EXPECT_EQ(client->stats().connections_opened, 1u);
  EXPECT_EQ(client->stats().connections_reused, 3u);
  EXPECT_EQ(client->open_connections(Tls(server.port())), 1u);
  // Pools are per TLS name: the same address under another name (or plain) is another pool.
  EXPECT_EQ(client->open_connections(Tls(server.port(), "127.0.0.1")), 0u);
  EXPECT_EQ(client->open_connections(Endpoint{"127.0.0.1", server.port()}), 0u);
  // "localhost." is the same host (in another pool, so another handshake); SNI has no trailing dot.
  auto dotted = client->Fetch(Tls(server.port(), "localhost."), {"GET", "/dot", {}, ""}, {});
  ASSERT_TRUE(dotted.ok()) << dotted.status().ToString();
  EXPECT_EQ(server.sni(), (std::vector<std::string>{"localhost", "localhost"}));
}

TEST(HttpTls, VerifiesAnAddressAgainstIpSansWithoutSni) {
  TestCa ca;
  TlsServer server(ca.Issue("127.0.0.1", "IP:127.0.0.1"), Echo);
  auto client = MakeClient(ca.ca_file());
  auto r = client->Fetch(Endpoint{.host = "127.0.0.1", .port = server.port(), .tls = true}, {"GET", "/ip", {}, ""}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "ip");
  EXPECT_EQ(server.sni(), std::vector<std::string>{""});  // RFC 6066: no SNI for an address
}

TEST(HttpTls, UnknownCaFailsVerification) {
  TestCa ca;
  TlsServer server(ca.Issue("localhost", "DNS:localhost,IP:127.0.0.1"), Echo);
  auto client = MakeClient("");  // the system's CAs only
  auto r = client->Fetch(Tls(server.port()), {"GET", "/x", {}, ""}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(r.status(), "TLS certificate verification failed for host localhost: "))
      << r.status().ToString();
  EXPECT_TRUE(Contains(r.status(), "issuer")) << r.status().ToString();  // "unable to get local issuer certificate"
  EXPECT_TRUE(server.seen().empty());

  // Another CA's file does not help either.
  TestCa other("another CA");
  auto r2 = MakeClient(other.ca_file())->Fetch(Tls(server.port()), {"GET", "/x", {}, ""}, {});
  EXPECT_TRUE(Contains(r2.status(), "TLS certificate verification failed for host localhost"))
      << r2.status().ToString();
  EXPECT_TRUE(server.seen().empty());
}

TEST(HttpTls, CertificateForAnotherNameOrAddressFails) {
  TestCa ca;
  TlsServer server(ca.Issue("other.example", "DNS:other.example,IP:10.9.8.7"), Echo);
  auto client = MakeClient(ca.ca_file());
  auto by_name = client->Fetch(Tls(server.port(), "localhost"), {"GET", "/x", {}, ""}, {});
  EXPECT_EQ(by_name.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(by_name.status(), "TLS certificate verification failed for host localhost: hostname mismatch"))
      << by_name.status().ToString();
  auto by_ip = client->Fetch(Tls(server.port(), ""), {"GET", "/x", {}, ""}, {});
  EXPECT_TRUE(Contains(by_ip.status(), "TLS certificate verification failed for host 127.0.0.1: IP address mismatch"))
      << by_ip.status().ToString();
  // A wildcard covers exactly one label.
  TlsServer wild(ca.Issue("*.test.example", "DNS:*.test.example"), Echo);
  EXPECT_TRUE(client->Fetch(Tls(wild.port(), "a.test.example"), {"GET", "/x", {}, ""}, {}).ok());
  EXPECT_FALSE(client->Fetch(Tls(wild.port(), "a.b.test.example"), {"GET", "/x", {}, ""}, {}).ok());
  EXPECT_TRUE(server.seen().empty());
  EXPECT_EQ(client->open_connections(Tls(server.port())), 0u);
}

TEST(HttpTls, OldProtocolIsRefused) {
  TestCa ca;
  const TlsKeyPair cert = ca.Issue("localhost", "DNS:localhost,IP:127.0.0.1");
  TlsServer server(cert, Echo, {.max_version = TLS1_1_VERSION});
  // First show that this server and OpenSSL can speak TLS 1.1 at all; otherwise the refusal
  // below would prove nothing about the client's floor.
  {
    boost::asio::io_context io;
    boost::asio::ssl::context ctx(boost::asio::ssl::context::tls_client);
    SSL_CTX_set_security_level(ctx.native_handle(), 0);
    SSL_CTX_set_cipher_list(ctx.native_handle(), "DEFAULT:@SECLEVEL=0");
    SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_VERSION);
    SSL_CTX_set_max_proto_version(ctx.native_handle(), TLS1_1_VERSION);
    boost::asio::ssl::stream<testing::tcp::socket> s(io, ctx);
    boost::system::error_code ec;
    s.next_layer().connect({boost::asio::ip::make_address("127.0.0.1"), server.port()}, ec);
    ASSERT_FALSE(ec) << ec.message();
    s.handshake(boost::asio::ssl::stream_base::client, ec);
    if (ec) GTEST_SKIP() << "this OpenSSL cannot do TLS 1.1 even when asked: " << ec.message();
  }
  auto client = MakeClient(ca.ca_file());
  auto r = client->Fetch(Tls(server.port()), {"GET", "/x", {}, ""}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(r.status(), "TLS handshake with localhost failed")) << r.status().ToString();
  EXPECT_TRUE(server.seen().empty());
}

TEST(HttpTls, PlainHttpServerIsAnErrorNotAFallback) {
  auto s = HttpServer::Create({}, [](HttpRequest, HttpServer::Respond respond) {
    respond(HttpResponse::WithBody(200, "text/plain", "plain"));
  });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  (*s)->Start();
  TestCa ca;
  CallOptions o;
  o.timeout = 5s;
  auto r = MakeClient(ca.ca_file())->Fetch(Tls((*s)->port()), {"GET", "/x", {}, ""}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status(), "TLS handshake with localhost failed")) << r.status().ToString();
  (*s)->Stop();
}

TEST(HttpTls, HandshakeThatNeverEndsHitsTheDeadline) {
  TestCa ca;
  TlsServer server(ca.Issue("localhost", "DNS:localhost"), Echo, {.handshake = false});
  auto client = MakeClient(ca.ca_file());
  {
    CallOptions o;
    o.timeout = 300ms;
    const auto start = Clock::now();
    auto r = client->Fetch(Tls(server.port()), {"GET", "/x", {}, ""}, o);
    const auto took = Clock::now() - start;
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status(), "deadline of 300 ms exceeded during TLS handshake")) << r.status().ToString();
    EXPECT_GE(took, 250ms);
    EXPECT_LT(took, 3s);
  }
  {
    // The handshake is part of opening the connection: connect_timeout bounds it too.
    CallOptions o;
    o.connect_timeout = 200ms;
    o.timeout = 10s;
    const auto start = Clock::now();
    auto r = client->Fetch(Tls(server.port()), {"GET", "/x", {}, ""}, o);
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status(), "TLS handshake timed out after 200 ms")) << r.status().ToString();
    EXPECT_LT(Clock::now() - start, 3s);
  }
  EXPECT_EQ(server.accepted(), 2u);
}

TEST(HttpTls, ServerThatNeverAnswersHitsTheDeadline) {
  TestCa ca;
  TlsServer server(ca.Issue("localhost", "DNS:localhost"), [](const HttpRequest&) { return HttpResponse{}; });
  CallOptions o;
  o.timeout = 300ms;
  auto r = MakeClient(ca.ca_file())->Fetch(Tls(server.port()), {"GET", "/x", {}, ""}, o);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status(), "exceeded during read")) << r.status().ToString();
  EXPECT_EQ(server.handshakes(), 1);
}

TEST(HttpTls, BodyLimitAndStreaming) {
  TestCa ca;
  TlsServer server(ca.Issue("localhost", "DNS:localhost"), Echo);
  auto client = MakeClient(ca.ca_file());
  CallOptions small;
  small.max_body_bytes = 1000;
  auto r = client->Fetch(Tls(server.port()), {"GET", "/big", {}, ""}, small);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << r.status().ToString();

  std::string got;
  CallOptions streamed;
  streamed.on_body = [&](const HttpResponse& head, std::string_view bytes) {
    EXPECT_EQ(head.status, 200);
    got.append(bytes);
    return true;
  };
  auto s = client->Fetch(Tls(server.port()), {"GET", "/big", {}, ""}, streamed);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->body.empty());
  EXPECT_EQ(got, std::string(5000, 'b'));

  CallOptions stop;
  stop.on_body = [](const HttpResponse&, std::string_view) { return false; };
  EXPECT_EQ(client->Fetch(Tls(server.port()), {"GET", "/big", {}, ""}, stop).status().code(), StatusCode::kCancelled);
}

TEST(HttpTls, IdleConnectionClosedByTheServerIsReplaced) {
  TestCa ca;
  TlsServer server(ca.Issue("localhost", "DNS:localhost"), Echo, {.close_after = true});
  auto client = MakeClient(ca.ca_file());
  for (int i = 0; i < 3; ++i) {
    auto r = client->Fetch(Tls(server.port()), {"GET", "/again", {}, ""}, {});
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(r->body, "again");
    // Let the close arrive, so the next call finds it (by peek or as a stale connection).
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(server.handshakes(), 3);
  EXPECT_EQ(client->stats().connections_opened, 3u);
}

TEST(HttpTls, ClientDestroyedWithTlsCallsInFlight) {
  TestCa ca;
  TlsServer silent(ca.Issue("localhost", "DNS:localhost"), Echo, {.handshake = false});
  TlsServer parked(ca.Issue("localhost", "DNS:localhost"), [](const HttpRequest&) { return HttpResponse{}; });
  std::vector<std::future<Result<HttpResponse>>> results;
  {
    auto client = MakeClient(ca.ca_file());
    for (uint16_t port : {silent.port(), parked.port()}) {
      for (int i = 0; i < 3; ++i) {
        auto p = std::make_shared<std::promise<Result<HttpResponse>>>();
        results.push_back(p->get_future());
        client->FetchAsync(Tls(port), {"GET", "/x", {}, ""}, {},
                           [p](Result<HttpResponse> r) { p->set_value(std::move(r)); });
      }
    }
    const auto until = Clock::now() + 2s;
    while ((silent.accepted() < 3 || parked.seen().size() < 3) && Clock::now() < until) {
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(parked.seen().size(), 3u);
  }
  for (auto& f : results) {
    ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
    EXPECT_EQ(f.get().status().code(), StatusCode::kCancelled);
  }
}

TEST(HttpTls, CaFileIsCheckedAtCreate) {
  HttpClientOptions missing;
  missing.tls_ca_file = "/nonexistent/ca.pem";
  auto a = HttpClient::Create(missing);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << a.status().ToString();
  EXPECT_TRUE(Contains(a.status(), "TLS CA file '/nonexistent/ca.pem' cannot be read: No such file"))
      << a.status().ToString();

  TestCa ca;
  const std::string junk = ca.dir() + "/junk.pem";
  std::ofstream(junk) << "not a certificate\n";
  HttpClientOptions bad;
  bad.tls_ca_file = junk;
  auto b = HttpClient::Create(bad);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(b.status(), "holds no usable certificate")) << b.status().ToString();
}

}  // namespace
}  // namespace ladle::net
