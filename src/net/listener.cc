// Listener: bind, the accept loop, stop. Every call on the acceptor happens under State::mu,
// which is what a strand would give, and lets Stop() close it at once from any thread (even
// when no io thread runs, so a stopped service refuses connections instead of queueing them).
#include "ladle/net/listener.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <exception>
#include <mutex>

#include "ladle/core/logging.h"

namespace ladle::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
// An accept that failed for a reason other than the close (no fds left): wait this long before
// the next one, so the loop does not spin while the process is out of descriptors.
constexpr auto kAcceptRetry = std::chrono::milliseconds(20);
}  // namespace

struct Listener::State : std::enable_shared_from_this<Listener::State> {
  State(asio::io_context& io, ListenOptions o, AcceptFn fn)
      : io(io), options(std::move(o)), acceptor(io), retry(io), on_accept(std::move(fn)) {}

  void AcceptLocked() {
    acceptor.async_accept(asio::make_strand(io), [self = shared_from_this()](boost::system::error_code ec,
                                                                            tcp::socket socket) {
      self->OnAccept(ec, std::move(socket));
    });
  }

  void OnAccept(boost::system::error_code ec, tcp::socket socket) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (stopped) return;  // the socket closes with its destructor
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      LADLE_LOG_WARN("net.accept_failed port={} error='{}'", port, ec.message());
      retry.expires_after(kAcceptRetry);
      retry.async_wait([self = shared_from_this()](boost::system::error_code e) {
        std::lock_guard<std::recursive_mutex> lock(self->mu);
        if (!e && !self->stopped) self->AcceptLocked();
      });
      return;
    }
    if (options.no_delay) socket.set_option(tcp::no_delay(true), ec);
    accepted.fetch_add(1);
    try {
      if (on_accept) on_accept(std::move(socket));
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("net.accept_callback_threw port={} what='{}'", port, e.what());
    } catch (...) {
      LADLE_LOG_ERROR("net.accept_callback_threw port={} what='(not a std::exception)'", port);
    }
    if (!stopped) AcceptLocked();
  }

  void StopLocked() {
    stopped = true;
    boost::system::error_code ec;
    acceptor.close(ec);
    retry.cancel();
  }

  asio::io_context& io;
  ListenOptions options;
  // The acceptor, the retry timer, started/stopped and on_accept. Recursive: on_accept may Stop.
  std::recursive_mutex mu;
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  AcceptFn on_accept;
  bool started = false, stopped = false;
  std::atomic<bool> stopped_flag{false};
  uint16_t port = 0;
  std::atomic<uint64_t> accepted{0};
};

Result<std::unique_ptr<Listener>> Listener::Create(asio::io_context& io, const ListenOptions& options,
                                                   AcceptFn on_accept) {
  auto state = std::make_shared<State>(io, options, std::move(on_accept));
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec) return InvalidArgument("bad --host " + options.host + ": " + ec.message());
  const tcp::endpoint endpoint(address, options.port);
  tcp::acceptor& a = state->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) state->port = a.local_endpoint(ec).port();
  if (ec) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("cannot listen on {}:{}: {}", options.host, options.port, ec.message()));
  }
  return std::unique_ptr<Listener>(new Listener(std::move(state)));
}

Listener::~Listener() {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  state_->StopLocked();
  state_->stopped_flag = true;
  state_->on_accept = nullptr;
}

uint16_t Listener::port() const { return state_->port; }

void Listener::Start() {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  if (state_->started || state_->stopped) return;
  state_->started = true;
  state_->AcceptLocked();
}

void Listener::Stop() {
  std::lock_guard<std::recursive_mutex> lock(state_->mu);
  state_->StopLocked();
  state_->stopped_flag = true;
}

bool Listener::stopped() const { return state_->stopped_flag.load(); }

uint64_t Listener::accepted() const { return state_->accepted.load(); }

}  // namespace ladle::net
