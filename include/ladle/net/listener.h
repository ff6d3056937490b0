// A TCP listener on an io_context: binds host:port at once (port 0 picks a free port, which
// port() then reports), accepts on the io_context's threads and hands each connection to a
// callback, on its own strand. The one acceptor loop of the server, the grammar worker and
// HttpServer.
//
//   auto l = Listener::Create(io, {.host = "127.0.0.1", .port = 0},
//                             [](tcp::socket s) { std::make_shared<Session>(std::move(s))->Start(); });
//   (*l)->Start();   // accepting while io.run() runs
//   (*l)->Stop();    // from any thread: the acceptor closes, no callback starts afterwards
//
// Errors: a host that is not a numeric address is an InvalidArgument; a port in use (or any
// bind/listen failure) is kUnavailable. Accept errors (a full fd table) are logged and retried
// after a short pause, never thrown. An exception from the callback is caught and logged; the
// loop goes on. The io_context must outlive the Listener.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ladle/core/result.h"

namespace ladle::net {

struct ListenOptions {
  std::string host = "127.0.0.1";  // a numeric IPv4/IPv6 address; "0.0.0.0" for every interface
  uint16_t port = 0;               // 0: any free port
  bool no_delay = true;            // TCP_NODELAY on accepted sockets (small, latency-bound writes)
};

class Listener {
 public:
  // The socket's executor is a strand of the io_context of its own.
  using AcceptFn = std::function<void(boost::asio::ip::tcp::socket socket)>;

  // Binds and listens now; accepting starts with Start().
  static Result<std::unique_ptr<Listener>> Create(boost::asio::io_context& io, const ListenOptions& options,
                                                  AcceptFn on_accept);
  // Stops; when it returns no callback is running or will run. Not from inside on_accept
  // (Stop() is fine there).
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  uint16_t port() const;
  // Starts the accept loop (once; later calls do nothing).
  void Start();
  // Closes the acceptor: from any thread, any number of times.
  void Stop();
  bool stopped() const;
  // Connections handed to the callback so far.
  uint64_t accepted() const;

  struct State;

 private:
  explicit Listener(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace ladle::net
