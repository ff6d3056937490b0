// Listener: port 0 reports the port it got, accepts hand sockets to the callback, Stop closes
// the port, bind errors are Status values.
#include "ladle/net/listener.h"

#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <future>
#include <thread>

namespace ladle::net {
namespace {

using tcp = boost::asio::ip::tcp;

bool Connects(uint16_t port) {
  boost::asio::io_context io;
  tcp::socket s(io);
  boost::system::error_code ec;
  s.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port), ec);
  return !ec;
}

TEST(Listener, PortZeroReportsThePortAndAccepts) {
  boost::asio::io_context io;
  std::promise<uint16_t> peer;
  int calls = 0;
  auto l = Listener::Create(io, ListenOptions{}, [&](tcp::socket s) {
    if (++calls == 1) peer.set_value(s.remote_endpoint().port());
  });
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const uint16_t port = (*l)->port();
  EXPECT_NE(port, 0);
  (*l)->Start();
  std::thread io_thread([&] { io.run(); });

  boost::asio::io_context cio;
  tcp::socket client(cio);
  client.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  auto f = peer.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), client.local_endpoint().port());  // the callback got this very connection

  (*l)->Stop();
  EXPECT_TRUE((*l)->stopped());
  EXPECT_FALSE(Connects(port));  // closed at once, not queued in a backlog
  EXPECT_EQ((*l)->accepted(), 1u);
  io.stop();
  io_thread.join();
}

TEST(Listener, StopClosesThePortEvenWithNoIoThread) {
  boost::asio::io_context io;
  auto l = Listener::Create(io, {}, [](tcp::socket) {});
  ASSERT_TRUE(l.ok());
  (*l)->Start();
  const uint16_t port = (*l)->port();
  (*l)->Stop();
  (*l)->Stop();  // idempotent
  EXPECT_FALSE(Connects(port));
}

TEST(Listener, BindErrorsAreStatuses) {
  boost::asio::io_context io;
  auto first = Listener::Create(io, {}, [](tcp::socket) {});
  ASSERT_TRUE(first.ok());
  auto clash = Listener::Create(io, ListenOptions{"127.0.0.1", (*first)->port(), true}, [](tcp::socket) {});
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(clash.status().message().find("cannot listen on"), std::string::npos);
  auto bad = Listener::Create(io, ListenOptions{"not an address", 0, true}, [](tcp::socket) {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(Listener, ACallbackThatThrowsDoesNotStopTheLoop) {
  boost::asio::io_context io;
  std::atomic<int> calls{0};
  auto l = Listener::Create(io, {}, [&](tcp::socket) {
    if (calls.fetch_add(1) == 0) throw std::runtime_error("boom");
  });
  ASSERT_TRUE(l.ok());
  (*l)->Start();
  std::thread io_thread([&] { io.run(); });
  EXPECT_TRUE(Connects((*l)->port()));
  EXPECT_TRUE(Connects((*l)->port()));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((*l)->accepted() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  EXPECT_EQ((*l)->accepted(), 2u);
  l->reset();  // the destructor waits for a running callback; none runs after it
  io.stop();
  io_thread.join();
}

}  // namespace
}  // namespace ladle::net
