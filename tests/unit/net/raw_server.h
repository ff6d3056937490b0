// A loopback TCP server for the net tests whose every connection runs a scripted function on
// its own thread with blocking socket calls: a server that never answers, one that closes
// mid-body, one that streams in pieces.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ladle/net/listener.h"

namespace ladle::net::testing {

using tcp = boost::asio::ip::tcp;

class RawServer {
 public:
  using Script = std::function<void(tcp::socket& socket)>;

  explicit RawServer(Script script) : script_(std::move(script)) {
    auto l = Listener::Create(io_, {}, [this](tcp::socket s) {
      auto sock = std::make_shared<tcp::socket>(std::move(s));
      std::lock_guard lock(mu_);
      sockets_.push_back(sock);
      threads_.emplace_back([this, sock] { script_(*sock); });
    });
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
    listener_->Start();
    io_thread_ = std::thread([this] { io_.run(); });
  }

  ~RawServer() {
    listener_->Stop();
    {
      std::lock_guard lock(mu_);
      for (auto& s : sockets_) {
        boost::system::error_code ec;
        s->shutdown(tcp::socket::shutdown_both, ec);
      }
    }
    io_.stop();
    io_thread_.join();
    for (auto& t : threads_) t.join();
  }

  uint16_t port() const { return listener_->port(); }
  uint64_t accepted() const { return listener_->accepted(); }

  // Reads until the end of a request head (a request without a body).
  static std::string ReadHead(tcp::socket& s) {
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\n") == std::string::npos) {
      boost::system::error_code ec;
      const size_t n = s.read_some(boost::asio::buffer(buf), ec);
      if (ec) break;
      got.append(buf, n);
    }
    return got;
  }
  static void Write(tcp::socket& s, std::string_view bytes) {
    boost::system::error_code ec;
    boost::asio::write(s, boost::asio::buffer(bytes.data(), bytes.size()), ec);
  }
  // Blocks until the peer closes (or the server shuts down).
  static void WaitForClose(tcp::socket& s) {
    char buf[256];
    boost::system::error_code ec;
    while (!ec) s.read_some(boost::asio::buffer(buf), ec);
  }

 private:
  Script script_;
  boost::asio::io_context io_;
  std::unique_ptr<Listener> listener_;
  std::thread io_thread_;
  std::mutex mu_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> threads_;
};

}  // namespace ladle::net::testing
