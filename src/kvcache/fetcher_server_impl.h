// FetcherServer's internals, shared by fetcher_server.cc (the socket loop, the listener, the
// lifecycle) and fetcher_handlers.cc (the protocol: FETCH, PUT, store completions and answers).
// Internal to the kvcache module; the design (one loop thread, completions posted to it) is
// described at the top of fetcher_server.cc.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "fetcher_wire.h"
#include "ladle/core/logging.h"
#include "ladle/kvcache/fetcher.h"
#include "shm_pool.h"


namespace ladle::kvcache {

namespace fetcher_detail {

using wire::Type;

constexpr size_t kMaxClients = 1024;
// A client whose replies pile up past this is not reading: it is dropped, the queue never grows
// without bound.
constexpr size_t kMaxOutBytes = 64u << 20;
// Packets read from one client per loop round, so that one busy client cannot starve the rest.
constexpr int kReadsPerRound = 64;

inline std::string ErrnoText(int e) { return std::strerror(e); }

struct OutMsg {
  std::string bytes;
  int fd = -1;  // passed with SCM_RIGHTS (not owned)
};

struct Waiter {
  uint64_t conn = 0;
  uint64_t req = 0;
  uint32_t index = 0;
};

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  std::deque<OutMsg> out;
  size_t out_bytes = 0;
  std::unordered_map<uint32_t, uint32_t> pins;     // cache slot -> READYs not yet released
  std::unordered_set<uint32_t> staging;            // staging slots granted and not yet put
  std::unordered_map<uint64_t, uint32_t> fetches;  // FETCH request -> keys not yet answered
  bool closing = false;
};

// A store completion, queued by a store thread for the loop.
struct Done {
  enum class Kind { kGet, kMatch, kPut } kind = Kind::kGet;
  uint32_t slot = 0;
  uint64_t conn = 0, req = 0;
  std::optional<Result<size_t>> result;  // Get: the length; Match: the hit count
  std::vector<Status> put;
};

// FETCH_KEYS entries gathered during one loop round, sent at its end (one packet per request).
struct Batch {
  std::optional<wire::Writer> w;
  uint32_t n = 0;
  bool done = false;
};

}  // namespace fetcher_detail

using namespace fetcher_detail;  // NOLINT: the Impl below and its two .cc files

class FetcherServer::Impl : public std::enable_shared_from_this<Impl> {
 public:
  explicit Impl(FetcherOptions o) : opt_(std::move(o)) {}
  ~Impl() {
    if (event_fd_ >= 0) ::close(event_fd_);
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }

  Status Init();
  void StartLoop() { loop_ = std::thread([this] { Loop(); }); }
  void Stop();
  FetcherStats Stats() {
    std::lock_guard lock(mu_);
    CheckInvariantsLocked();
    return StatsLocked();
  }
  // After a failed Init: the socket file, if bound, is ours to remove.
  void AbortInit() {
    std::lock_guard lock(mu_);
    CloseListener();
  }

  FetcherOptions opt_;
  size_t stride_ = 0;
  std::unique_ptr<ShmSegment> shm_;
  std::unique_ptr<SlotPool> pool_;
  std::atomic<bool> healthy_{true};

 private:
  void Loop();
  void Round();
  void Wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof one);
  }
  void BeginIo() {
    std::lock_guard lock(done_mu_);
    ++inflight_;
  }
  void Post(Done d);
  void CloseListener();

  // All below run on the loop thread, under mu_.
  void Accept();
  void ReadFrom(Conn& c);
  void Handle(Conn& c, std::span<const uint8_t> packet);
  void HandleFetch(Conn& c, const wire::Header& h, wire::Reader& r);
  void HandlePut(Conn& c, const wire::Header& h, wire::Reader& r);
  void ProcessDone();
  void Answer(Conn& c, uint64_t req, uint32_t index, uint32_t slot, uint32_t len, StatusCode code);
  void FlushBatches();
  void Send(Conn& c, std::string bytes, int fd = -1);
  void SendError(Conn& c, uint64_t req, const Status& s) {
    wire::Writer w(Type::kError, req, 0);
    w.U16(static_cast<uint16_t>(s.code()));
    w.Str(s.message());
    Send(c, w.Take());
  }
  void Flush(Conn& c);
  void Violation(Conn& c, std::string_view why) {
    LADLE_LOG_WARN("kvfetch.protocol_violation client={} why={}", c.id, why);
    c.closing = true;
  }
  void DropConn(uint64_t id);
  // A client still talking to us (not closing).
  Conn* Find(uint64_t id) {
    Conn* c = FindAny(id);
    return c == nullptr || c->closing ? nullptr : c;
  }
  // Also a closing one: it holds pins until DropConn.
  Conn* FindAny(uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
  }
  void CheckInvariantsLocked();
  uint8_t* SlotData(uint32_t slot) const { return shm_->base() + static_cast<size_t>(slot) * stride_; }
  FetcherStats StatsLocked();

  int event_fd_ = -1;
  int listen_fd_ = -1;
  ino_t socket_ino_ = 0;
  std::thread loop_;
  std::atomic<bool> draining_{false}, stop_{false}, stopped_{false};

  std::mutex mu_;  // everything below: the loop, and Stats() from other threads
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_conn_ = 1;
  std::unordered_map<uint32_t, std::vector<Waiter>> loading_;  // loading slot -> who waits for it
  std::map<std::pair<uint64_t, uint64_t>, Batch> batches_;
  FetcherStats stats_;
  std::vector<uint8_t> rbuf_ = std::vector<uint8_t>(wire::kMaxPacket + 1);

  std::mutex done_mu_;  // completions from the store's threads; never held with mu_ into a store call
  std::condition_variable drain_cv_;
  std::vector<Done> done_;
  size_t inflight_ = 0;  // store calls not yet completed
};


}  // namespace ladle::kvcache
