// HttpClient against loopback servers: keep-alive reuse, the pool bound, deadlines that fire
// on a server that never answers, a close mid-body, streamed bodies, and errors as Statuses.
#include "ladle/net/http_client.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <future>

#include "ladle/net/http_server.h"
#include "ladle/net/sse.h"
#include "raw_server.h"

namespace ladle::net {
namespace {

using testing::RawServer;
using testing::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

Endpoint Local(uint16_t port) { return Endpoint{"127.0.0.1", port}; }

std::unique_ptr<HttpClient> MakeClient(HttpClientOptions o = {}) {
  auto c = HttpClient::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// Runs `fn` on a thread and fails the test (instead of hanging) when it has not returned
// within `bound`: the assertion that a call is bounded in time.
template <typename Fn>
auto WithinBound(std::chrono::milliseconds bound, Fn fn) {
  auto f = std::async(std::launch::async, std::move(fn));
  EXPECT_EQ(f.wait_for(bound), std::future_status::ready) << "call not bounded by " << bound.count() << " ms";
  return f.get();
}

// An echo server: GET /n answers "n"; POST echoes the body.
std::unique_ptr<HttpServer> EchoServer(HttpServerOptions o = {}) {
  auto s = HttpServer::Create(std::move(o), [](HttpRequest req, HttpServer::Respond respond) {
    respond(HttpResponse::WithBody(200, "text/plain", req.method == "POST" ? req.body : req.target.substr(1)));
  });
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  (*s)->Start();
  return std::move(s).value();
}

TEST(Endpoint, Parse) {
  auto e = Endpoint::Parse("127.0.0.1:8080");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 8080);
  auto v6 = Endpoint::Parse("[::1]:9");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->ToString(), "[::1]:9");
  for (const char* bad : {"nohost", ":80", "h:", "h:0", "h:70000", "h:x", "::1:80", "[::1:80"}) {
    EXPECT_EQ(Endpoint::Parse(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(HttpClient, KeepAliveReusesOneConnection) {
  auto server = EchoServer();
  auto client = MakeClient();
  for (int i = 0; i < 10; ++i) {
    auto r = client->Fetch(Local(server->port()), {"GET", "/" + std::to_string(i), {}, ""}, {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, std::to_string(i));
    EXPECT_EQ(r->Header("content-type"), "text/plain");
  }
  auto post = client->Fetch(Local(server->port()), {"POST", "/", {{"Content-Type", "text/plain"}}, "hello"}, {});
  ASSERT_TRUE(post.ok());
  EXPECT_EQ(post->body, "hello");
  EXPECT_EQ(server->connections_accepted(), 1u);
  EXPECT_EQ(client->stats().connections_opened, 1u);
  EXPECT_EQ(client->stats().connections_reused, 10u);
}

TEST(HttpClient, PoolBoundsConnectionsPerEndpoint) {
  // The handler parks each request; a responder answers them one by one, so the client has
  // many calls waiting on few connections.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<HttpServer::Respond> parked;
  size_t most_parked = 0;
  bool quit = false;
  HttpServerOptions so;
  so.io_threads = 2;
  auto s = HttpServer::Create(so, [&](HttpRequest, HttpServer::Respond respond) {
    std::lock_guard lock(mu);
    parked.push_back(std::move(respond));
    most_parked = std::max(most_parked, parked.size());
    cv.notify_all();
  });
  ASSERT_TRUE(s.ok());
  auto server = std::move(s).value();
  server->Start();
  std::thread responder([&] {
    std::unique_lock lock(mu);
    while (true) {
      cv.wait(lock, [&] { return quit || !parked.empty(); });
      if (quit) return;
      auto r = std::move(parked.front());
      parked.pop_front();
      lock.unlock();
      r(HttpResponse::WithBody(200, "text/plain", "ok"));
      lock.lock();
    }
  });
  HttpClientOptions co;
  co.io_threads = 2;
  co.max_connections_per_endpoint = 2;
  auto client = MakeClient(co);
  constexpr int kCalls = 12;
  std::vector<std::future<Result<HttpResponse>>> calls;
  size_t most_open = 0;
  for (int i = 0; i < kCalls; ++i) {
    auto p = std::make_shared<std::promise<Result<HttpResponse>>>();
    calls.push_back(p->get_future());
    client->FetchAsync(Local(server->port()), {}, {}, [p](Result<HttpResponse> r) { p->set_value(std::move(r)); });
    most_open = std::max(most_open, client->open_connections(Local(server->port())));
  }
  for (auto& f : calls) {
    ASSERT_EQ(f.wait_for(20s), std::future_status::ready);
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, "ok");
  }
  {
    std::lock_guard lock(mu);
    quit = true;
    cv.notify_all();
  }
  responder.join();
  EXPECT_LE(most_open, 2u);
  EXPECT_LE(most_parked, 2u);  // never more than two requests at the server at once
  EXPECT_EQ(server->connections_accepted(), 2u);
  EXPECT_EQ(client->stats().connections_reused, kCalls - 2u);
}

TEST(HttpClient, DeadlineFiresOnAServerThatNeverAnswers) {
  RawServer silent([](tcp::socket& s) { RawServer::WaitForClose(s); });
  auto client = MakeClient();
  CallOptions o;
  o.timeout = 300ms;
  const auto t0 = Clock::now();
  auto r = WithinBound(10s, [&] { return client->Fetch(Local(silent.port()), {}, o); });
  const auto took = Clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s);
  // The streaming form is bounded by the same deadline.
  o.on_body = [](const HttpResponse&, std::string_view) { return true; };
  auto s = WithinBound(10s, [&] { return client->Fetch(Local(silent.port()), {}, o); });
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(HttpClient, WaitingForAPooledConnectionIsBoundedByTheDeadline) {
  RawServer silent([](tcp::socket& s) { RawServer::WaitForClose(s); });
  HttpClientOptions co;
  co.max_connections_per_endpoint = 1;
  auto client = MakeClient(co);
  std::promise<Result<HttpResponse>> first;
  CallOptions slow;
  slow.timeout = 1s;
  client->FetchAsync(Local(silent.port()), {}, slow, [&](Result<HttpResponse> r) { first.set_value(std::move(r)); });
  CallOptions quick;
  quick.timeout = 200ms;
  auto r = WithinBound(10s, [&] { return client->Fetch(Local(silent.port()), {}, quick); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("no connection within"), std::string::npos) << r.status().message();
  EXPECT_EQ(first.get_future().get().status().code(), StatusCode::kDeadlineExceeded);
}

TEST(HttpClient, ConnectTimeoutAndRefusal) {
  auto client = MakeClient();
  // A port nothing listens on: refused at once.
  uint16_t closed_port;
  {
    auto s = EchoServer();
    closed_port = s->port();
  }
  auto r = WithinBound(10s, [&] { return client->Fetch(Local(closed_port), {}, {}); });
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  // A non-routable address (TEST-NET-1): the connect timeout fires, well before the deadline.
  CallOptions o;
  o.connect_timeout = 200ms;
  o.timeout = 20s;
  auto t = WithinBound(10s, [&] { return client->Fetch(Endpoint{"192.0.2.1", 80}, {}, o); });
  ASSERT_FALSE(t.ok());
  // Some sandboxes answer unreachable at once instead of dropping: either way not a hang.
  EXPECT_TRUE(t.status().code() == StatusCode::kDeadlineExceeded || t.status().code() == StatusCode::kUnavailable)
      << t.status().ToString();
}

TEST(HttpClient, ServerClosingMidBodyIsAnErrorNotAHang) {
  RawServer cut([](tcp::socket& s) {
    RawServer::ReadHead(s);
    RawServer::Write(s, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part of it");
    boost::system::error_code ec;
    s.shutdown(tcp::socket::shutdown_both, ec);
  });
  auto client = MakeClient();
  CallOptions o;
  o.timeout = 0ms;  // no deadline: only the close can end it
  auto r = WithinBound(10s, [&] { return client->Fetch(Local(cut.port()), {}, o); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("closed before the response ended"), std::string::npos);

  RawServer cut_chunked([](tcp::socket& s) {
    RawServer::ReadHead(s);
    RawServer::Write(s, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    boost::system::error_code ec;
    s.shutdown(tcp::socket::shutdown_both, ec);
  });
  std::string streamed;
  o.on_body = [&](const HttpResponse&, std::string_view b) {
    streamed.append(b);
    return true;
  };
  auto c = WithinBound(10s, [&] { return client->Fetch(Local(cut_chunked.port()), {}, o); });
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().ToString();
  EXPECT_EQ(streamed, "hello");  // what came before the close was delivered
}

TEST(HttpClient, StreamsServerSentEventsAsTheyArrive) {
  // Three events in separate chunks, each written only after the client saw the previous one
  // (the script waits on a signal), so the body really arrives in pieces.
  std::mutex mu;
  std::condition_variable cv;
  size_t seen = 0;
  RawServer sse([&](tcp::socket& s) {
    RawServer::ReadHead(s);
    RawServer::Write(s, SseResponseHead(SseHeadOptions{}));
    for (int i = 0; i < 3; ++i) {
      std::string frame, chunk;
      AppendSseEvent("delta", "{\"i\":" + std::to_string(i) + "}", &frame);
      AppendChunk(frame, &chunk);
      RawServer::Write(s, chunk);
      std::unique_lock lock(mu);
      cv.wait_for(lock, 10s, [&] { return seen > static_cast<size_t>(i); });
    }
    RawServer::Write(s, kLastChunk);
    RawServer::WaitForClose(s);
  });
  auto client = MakeClient();
  SseParser parser;
  std::vector<SseEvent> events;
  CallOptions o;
  o.timeout = 20s;
  o.on_body = [&](const HttpResponse& head, std::string_view bytes) {
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.Header("content-type"), "text/event-stream");
    if (!parser.Feed(bytes, &events).ok()) return false;
    std::lock_guard lock(mu);
    seen = events.size();
    cv.notify_all();
    return true;
  };
  auto r = client->Fetch(Local(sse.port()), {}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->body.empty());  // streamed, not collected
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].event, "delta");
  EXPECT_EQ(events[2].data, "{\"i\":2}");
  EXPECT_TRUE(parser.idle());
}

TEST(HttpClient, BodyCallbackCanStopTheCallAndErrorsAreCollected) {
  RawServer sse([](tcp::socket& s) {
    const std::string head = RawServer::ReadHead(s);
    if (head.find("GET /error") == 0) {
      RawServer::Write(s, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno route\n");
    } else {
      RawServer::Write(s, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
    }
    RawServer::WaitForClose(s);
  });
  auto client = MakeClient();
  CallOptions o;
  o.timeout = 10s;
  int pieces = 0;
  o.on_body = [&](const HttpResponse&, std::string_view) {
    ++pieces;
    return false;
  };
  auto stopped = client->Fetch(Local(sse.port()), {"GET", "/", {}, ""}, o);
  EXPECT_EQ(stopped.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(pieces, 1);
  // A non-2xx answer is a response, its body collected even with a body callback.
  auto err = client->Fetch(Local(sse.port()), {"GET", "/error", {}, ""}, o);
  ASSERT_TRUE(err.ok()) << err.status().ToString();
  EXPECT_EQ(err->status, 404);
  EXPECT_EQ(err->body, "no route\n");
  EXPECT_EQ(pieces, 1);
  // A callback that throws ends its call with kInternal; the io thread lives on.
  o.on_body = [](const HttpResponse&, std::string_view) -> bool { throw std::runtime_error("parser bug"); };
  auto threw = client->Fetch(Local(sse.port()), {"GET", "/", {}, ""}, o);
  EXPECT_EQ(threw.status().code(), StatusCode::kInternal);
  auto again = client->Fetch(Local(sse.port()), {"GET", "/error", {}, ""}, {});
  EXPECT_TRUE(again.ok());
}

TEST(HttpClient, AStaleKeptAliveConnectionIsRetriedFresh) {
  // Answers one request per connection with keep-alive, then closes it.
  RawServer once([](tcp::socket& s) {
    RawServer::ReadHead(s);
    RawServer::Write(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    boost::system::error_code ec;
    s.shutdown(tcp::socket::shutdown_both, ec);
  });
  auto client = MakeClient();
  for (int i = 0; i < 3; ++i) {
    auto r = client->Fetch(Local(once.port()), {}, {});
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(r->body, "ok");
  }
  EXPECT_EQ(once.accepted(), 3u);
}

TEST(HttpClient, ARequestTheServerDroppedOnAReusedConnectionIsSentAgain) {
  // Each connection answers its first request with keep-alive, then reads the next one and
  // closes without a word (a server closing an idle connection as the request arrives).
  RawServer dropper([](tcp::socket& s) {
    RawServer::ReadHead(s);
    RawServer::Write(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    RawServer::ReadHead(s);
    boost::system::error_code ec;
    s.shutdown(tcp::socket::shutdown_both, ec);
  });
  auto client = MakeClient();
  for (int i = 0; i < 2; ++i) {
    auto r = WithinBound(10s, [&] { return client->Fetch(Local(dropper.port()), {}, {}); });
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(r->body, "ok");
  }
  EXPECT_EQ(client->stats().stale_retries, 1u);
  EXPECT_EQ(dropper.accepted(), 2u);
}

TEST(HttpClient, MisuseAndShutdownAreStatuses) {
  auto server = EchoServer();
  auto client = MakeClient();
  auto bad = client->Fetch(Local(server->port()), {"BREW", "/", {}, ""}, {});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  // The blocking form from the client's own io thread would deadlock: refused.
  std::promise<Status> inner;
  client->FetchAsync(Local(server->port()), {}, {}, [&](Result<HttpResponse>) {
    inner.set_value(client->Fetch(Local(server->port()), {}, {}).status());
  });
  EXPECT_EQ(inner.get_future().get().code(), StatusCode::kFailedPrecondition);
  // Destroying the client ends a call in flight with kCancelled.
  RawServer silent([](tcp::socket& s) { RawServer::WaitForClose(s); });
  std::promise<Result<HttpResponse>> pending;
  CallOptions o;
  o.timeout = 0ms;
  client->FetchAsync(Local(silent.port()), {}, o, [&](Result<HttpResponse> r) { pending.set_value(std::move(r)); });
  while (silent.accepted() == 0) std::this_thread::yield();
  client.reset();
  auto f = pending.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get().status().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace ladle::net

namespace ladle::net {
namespace {

// A handler that keeps a Respond it never used past the server's life (an async handler still
// waiting when the server stops): dropping it, or calling it late, must not touch the server's
// destroyed io context (ASan saw a use-after-free here before connections dropped their
// streams at Stop).
TEST(HttpServer, RespondOutlivingTheServerIsHarmless) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<HttpServer::Respond> parked;
  {
    auto s = HttpServer::Create({}, [&](HttpRequest, HttpServer::Respond respond) {
      std::lock_guard lock(mu);
      parked.push_back(std::move(respond));
      cv.notify_all();
    });
    ASSERT_TRUE(s.ok());
    auto server = std::move(s).value();
    server->Start();
    auto client = MakeClient({});
    CallOptions o;
    o.timeout = 2s;
    auto p = std::make_shared<std::promise<Result<HttpResponse>>>();
    auto f = p->get_future();
    client->FetchAsync(Local(server->port()), {}, o, [p](Result<HttpResponse> r) { p->set_value(std::move(r)); });
    {
      std::unique_lock lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return !parked.empty(); }));
    }
    server.reset();  // stops and destroys the io context while the Respond is parked
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
    EXPECT_FALSE(f.get().ok());
  }
  parked[0](HttpResponse::WithBody(200, "text/plain", "late"));
  parked.clear();
}

}  // namespace
}  // namespace ladle::net
