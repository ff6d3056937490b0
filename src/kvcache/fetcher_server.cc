// The fetcher's server side: one event-loop thread owns the sockets, the slot pool and every
// client's pins; the store's I/O threads only queue their completions (Post) and wake the loop
// through an eventfd. So the pool needs no lock against the store, and a completion never runs
// protocol code on a store thread.
//
// Lifetime: every store call's completion holds a reference to the Impl, so the shm mapping a
// read is writing into outlives the read even when Stop() gave up waiting for it.
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

namespace {

using wire::Type;

constexpr size_t kMaxClients = 1024;
// A client whose replies pile up past this is not reading: it is dropped, the queue never grows
// without bound.
constexpr size_t kMaxOutBytes = 64u << 20;
// Packets read from one client per loop round, so that one busy client cannot starve the rest.
constexpr int kReadsPerRound = 64;

std::string ErrnoText(int e) { return std::strerror(e); }

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

}  // namespace

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

Status FetcherServer::Impl::Init() {
  const FetcherOptions& o = opt_;
  sockaddr_un addr{};
  if (o.socket_path.empty() || o.socket_path.size() >= sizeof addr.sun_path) {
    return InvalidArgument(fmt::format("kv fetcher: socket path must be 1..{} bytes", sizeof addr.sun_path - 1));
  }
  if (o.block_bytes == 0 || o.block_bytes > UINT32_MAX) return InvalidArgument("kv fetcher: block_bytes must be 1..2^32-1");
  if (o.put_slots > wire::kMaxKeys) {
    return InvalidArgument(fmt::format("kv fetcher: at most {} put slots", wire::kMaxKeys));
  }
  if (!opt_.store) {
    if (o.store_uri.empty()) return InvalidArgument("kv fetcher: a store or a store URI is required");
    auto s = KvStore::Open(o.store_uri, o.store_options);
    if (!s.ok()) return s.status().WithContext("kv fetcher: opening " + o.store_uri);
    opt_.store = std::move(s).value();
  }
  // 4 KiB-aligned slots keep every slot usable as an O_DIRECT buffer.
  stride_ = (o.block_bytes + 4095) / 4096 * 4096;
  size_t cache = std::max<size_t>(1, o.shm_bytes / stride_);
  cache = std::min<size_t>(cache, UINT32_MAX - 1 - o.put_slots);
  ShmSegment::SweepStale();
  auto seg = ShmSegment::Create((cache + o.put_slots) * stride_);
  if (!seg.ok()) return seg.status().WithContext("kv fetcher");
  shm_ = std::move(seg).value();
  pool_ = std::make_unique<SlotPool>(static_cast<uint32_t>(cache), o.put_slots);

  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) return IoError("kv fetcher: eventfd: " + ErrnoText(errno));
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return IoError("kv fetcher: socket: " + ErrnoText(errno));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, o.socket_path.c_str(), o.socket_path.size() + 1);
  struct stat st{};
  if (::lstat(o.socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status(StatusCode::kAlreadyExists, o.socket_path + " exists and is not a socket");
    // A socket file nobody listens on is a dead fetcher's: take its place. A live one is not ours.
    int probe = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const bool live = probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0) ::close(probe);
    if (live) return Status(StatusCode::kAlreadyExists, "a fetcher already listens on " + o.socket_path);
    ::unlink(o.socket_path.c_str());
  }
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return IoError("kv fetcher: bind " + o.socket_path + ": " + ErrnoText(errno));
  }
  if (::lstat(o.socket_path.c_str(), &st) == 0) socket_ino_ = st.st_ino;
  if (::listen(listen_fd_, 128) != 0) return IoError("kv fetcher: listen: " + ErrnoText(errno));
  stats_.slots = cache;
  stats_.put_slots = o.put_slots;
  return Status::Ok();
}

void FetcherServer::Impl::CloseListener() {
  if (listen_fd_ < 0) return;
  ::close(listen_fd_);
  listen_fd_ = -1;
  // Only our own socket file: a successor may already have replaced it.
  struct stat st{};
  if (::lstat(opt_.socket_path.c_str(), &st) == 0 && st.st_ino == socket_ino_) ::unlink(opt_.socket_path.c_str());
}

void FetcherServer::Impl::Post(Done d) {
  try {
    {
      std::lock_guard lock(done_mu_);
      done_.push_back(std::move(d));
      // After the push: when Stop sees zero in flight, every result is already queued.
      --inflight_;
      drain_cv_.notify_all();
    }
    Wake();
  } catch (const std::exception& e) {
    // A lost completion leaves a slot loading for good: say so loudly and stop taking work.
    LADLE_LOG_ERROR("kvfetch.completion_lost what={}", e.what());
    healthy_ = false;
  }
}

void FetcherServer::Impl::Loop() {
  try {
    while (!stop_) Round();
    std::lock_guard lock(mu_);
    ProcessDone();
    FlushBatches();
    std::vector<uint64_t> ids;
    for (auto& [id, c] : conns_) {
      Flush(*c);  // best effort: the last replies of a drain
      ids.push_back(id);
    }
    for (uint64_t id : ids) DropConn(id);
    CloseListener();
    return;
  } catch (const std::exception& e) {
    LADLE_LOG_ERROR("kvfetch.loop_died what={}", e.what());
  } catch (...) {
    LADLE_LOG_ERROR("kvfetch.loop_died what=unknown");
  }
  // Dead loop: close every socket so that clients see EOF (kUnavailable) instead of waiting.
  healthy_ = false;
  std::lock_guard lock(mu_);
  for (auto& [id, c] : conns_) ::close(c->fd);
  conns_.clear();
  CloseListener();
}

void FetcherServer::Impl::Round() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    if (draining_) CloseListener();
    fds.push_back({event_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(listen_fd_ >= 0 ? POLLIN : 0), 0});
    for (auto& [id, c] : conns_) {
      fds.push_back({c->fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
      ids.push_back(id);
    }
  }
  // The timeout is only a backstop: completions and Stop() write the eventfd.
  if (::poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) {
    throw std::runtime_error("poll: " + ErrnoText(errno));
  }
  if (fds[0].revents & POLLIN) {
    uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(event_fd_, &v, sizeof v);
  }
  std::lock_guard lock(mu_);
  if (fds[1].revents & POLLIN) Accept();
  for (size_t i = 0; i < ids.size(); ++i) {
    Conn* c = Find(ids[i]);
    if (!c) continue;
    const short ev = fds[i + 2].revents;
    if (ev & POLLIN) ReadFrom(*c);
    if ((ev & (POLLHUP | POLLERR)) && !(ev & POLLIN)) c->closing = true;
  }
  ProcessDone();
  FlushBatches();
  std::vector<uint64_t> closing;
  for (auto& [id, c] : conns_) {
    if (!c->closing) Flush(*c);
    if (c->closing) closing.push_back(id);
  }
  for (uint64_t id : closing) DropConn(id);
}

void FetcherServer::Impl::Accept() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) LADLE_LOG_WARN("kvfetch.accept_failed err={}", ErrnoText(errno));
      return;
    }
    if (conns_.size() >= kMaxClients) {
      LADLE_LOG_WARN("kvfetch.client_refused why=too_many clients={}", conns_.size());
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Conn>();
    c->id = next_conn_++;
    c->fd = fd;
    LADLE_LOG_DEBUG("kvfetch.client_connected id={}", c->id);
    conns_.emplace(c->id, std::move(c));
  }
}

void FetcherServer::Impl::ReadFrom(Conn& c) {
  for (int i = 0; i < kReadsPerRound && !c.closing; ++i) {
    iovec iov{rbuf_.data(), rbuf_.size()};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    ssize_t n = ::recvmsg(c.fd, &m, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.closing = true;
      return;
    }
    if (n == 0) {  // EOF: the client closed or died
      c.closing = true;
      return;
    }
    if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return Violation(c, "packet too large");
    Handle(c, std::span<const uint8_t>(rbuf_.data(), static_cast<size_t>(n)));
  }
}

void FetcherServer::Impl::Handle(Conn& c, std::span<const uint8_t> packet) {
  wire::Reader r(packet);
  wire::Header h;
  if (!r.ReadHeader(&h)) return Violation(c, "bad header or version");
  if (h.count > wire::kMaxKeys && h.type != Type::kHello && h.type != Type::kStat) {
    return Violation(c, "count over the per-message limit");
  }
  switch (h.type) {
    case Type::kHello: {
      wire::Writer w(Type::kHelloReply, h.req, 0);
      w.U64(stride_);
      w.U64(opt_.block_bytes);
      w.U32(pool_->cache_slots());
      w.U32(pool_->cache_slots());
      w.U32(pool_->put_slots());
      w.Str(shm_->name());
      return Send(c, w.Take(), shm_->fd());
    }
    case Type::kMatch: {
      std::vector<BlockKey> keys(h.count);
      for (auto& k : keys) k = r.Key();
      if (!r.ok()) return Violation(c, "short MATCH");
      if (draining_) return SendError(c, h.req, Status(StatusCode::kUnavailable, "kv fetcher stopping"));
      BeginIo();
      opt_.store->Match(keys, [self = shared_from_this(), conn = c.id, req = h.req](Result<size_t> n) {
        Done d;
        d.kind = Done::Kind::kMatch;
        d.conn = conn;
        d.req = req;
        d.result = std::move(n);
        self->Post(std::move(d));
      });
      return;
    }
    case Type::kFetch:
      return HandleFetch(c, h, r);
    case Type::kRelease: {
      for (uint32_t i = 0; i < h.count; ++i) {
        uint32_t s = r.U32();
        if (!r.ok()) return Violation(c, "short RELEASE");
        auto it = c.pins.find(s);
        if (it == c.pins.end()) {
          // A client bug, not a reason to corrupt the pool: ignored.
          LADLE_LOG_WARN("kvfetch.release_unpinned client={} slot={}", c.id, s);
          continue;
        }
        if (--it->second == 0) c.pins.erase(it);
        pool_->Unpin(s);
      }
      return;
    }
    case Type::kPutAlloc: {
      std::vector<uint32_t> got;
      if (!draining_) got = pool_->AllocPut(h.count);
      stats_.put_drops += h.count - got.size();
      wire::Writer w(Type::kPutAllocReply, h.req, static_cast<uint32_t>(got.size()));
      for (uint32_t s : got) {
        c.staging.insert(s);
        w.U32(s);
      }
      return Send(c, w.Take());
    }
    case Type::kPutFree: {
      for (uint32_t i = 0; i < h.count; ++i) {
        uint32_t s = r.U32();
        if (!r.ok()) return Violation(c, "short PUT_FREE");
        if (c.staging.erase(s)) pool_->FreePut(s);
      }
      return;
    }
    case Type::kPut:
      return HandlePut(c, h, r);
    case Type::kStat: {
      wire::Writer w(Type::kStatReply, h.req, static_cast<uint32_t>(wire::kStatFields));
      wire::EncodeStats(StatsLocked(), &w);
      return Send(c, w.Take());
    }
    default:
      return Violation(c, fmt::format("unexpected message type {}", static_cast<int>(h.type)));
  }
}

void FetcherServer::Impl::HandleFetch(Conn& c, const wire::Header& h, wire::Reader& r) {
  std::vector<BlockKey> keys(h.count);
  for (auto& k : keys) k = r.Key();
  if (!r.ok()) return Violation(c, "short FETCH");
  if (c.fetches.count(h.req)) return Violation(c, "FETCH request id in use");
  if (draining_) return SendError(c, h.req, Status(StatusCode::kUnavailable, "kv fetcher stopping"));
  ++stats_.fetches;
  stats_.keys_fetched += keys.size();
  if (keys.empty()) {
    batches_[{c.id, h.req}].done = true;
    return;
  }
  c.fetches[h.req] = static_cast<uint32_t>(keys.size());
  std::vector<std::pair<uint32_t, uint32_t>> loads;  // (index, slot)
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const SlotPool::Acquired a = pool_->Pin(keys[i]);
    switch (a.got) {
      case SlotPool::Got::kHit:
        ++stats_.shm_hits;
        ++c.pins[a.slot];
        Answer(c, h.req, i, a.slot, static_cast<uint32_t>(pool_->len(a.slot)), StatusCode::kOk);
        break;
      case SlotPool::Got::kJoined:
        ++stats_.joined;
        loading_[a.slot].push_back({c.id, h.req, i});
        break;
      case SlotPool::Got::kLoad:
        ++stats_.store_reads;
        loading_[a.slot].push_back({c.id, h.req, i});
        loads.emplace_back(i, a.slot);
        break;
      case SlotPool::Got::kExhausted:
        ++stats_.exhausted;
        Answer(c, h.req, i, 0, 0, StatusCode::kResourceExhausted);
        break;
    }
  }
  for (const auto& load : loads) {
    // Named copies: a lambda may not capture a structured binding (clang 14).
    const auto i = load.first;
    const auto slot = load.second;
    BeginIo();
    // Straight into the slot: the store copies the block once, into the memory the engine reads.
    MutableBuffer buf{SlotData(slot), opt_.block_bytes};
    opt_.store->Get(std::span(&keys[i], 1), std::span(&buf, 1),
                    [self = shared_from_this(), slot](std::vector<Result<size_t>> rs) {
                      Done d;
                      d.kind = Done::Kind::kGet;
                      d.slot = slot;
                      d.result = rs.size() == 1 ? std::move(rs[0]) : Result<size_t>(Internal("get: no result"));
                      self->Post(std::move(d));
                    });
  }
}

void FetcherServer::Impl::HandlePut(Conn& c, const wire::Header& h, wire::Reader& r) {
  const uint8_t cls = r.U8();
  const bool has_parent = r.U8() != 0;
  const BlockKey parent = r.Key();
  std::vector<BlockKey> keys(h.count);
  std::vector<uint32_t> slots(h.count);
  std::vector<std::span<const uint8_t>> values(h.count);
  Status bad;
  std::unordered_set<uint32_t> seen;
  for (uint32_t i = 0; i < h.count; ++i) {
    keys[i] = r.Key();
    slots[i] = r.U32();
    const uint32_t len = r.U32();
    if (!r.ok()) return Violation(c, "short PUT");
    if (!c.staging.count(slots[i]) || !seen.insert(slots[i]).second) {
      bad = InvalidArgument(fmt::format("put: slot {} is not a staging slot held by this client", slots[i]));
    } else if (len > opt_.block_bytes) {
      bad = InvalidArgument(fmt::format("put: {} bytes in a slot of {}", len, opt_.block_bytes));
    } else {
      values[i] = std::span<const uint8_t>(SlotData(slots[i]), len);
    }
  }
  if (cls > static_cast<uint8_t>(TrafficClass::kChatbot)) bad = InvalidArgument("put: unknown traffic class");
  if (bad.ok() && draining_) bad = Status(StatusCode::kUnavailable, "kv fetcher stopping");
  auto free_slots = [&] {
    for (uint32_t s : slots) {
      if (c.staging.erase(s)) pool_->FreePut(s);
    }
  };
  if (!bad.ok() || keys.empty()) {
    free_slots();
    wire::Writer w(Type::kPutReply, h.req, h.count);
    for (uint32_t i = 0; i < h.count; ++i) w.U16(static_cast<uint16_t>(bad.code()));
    w.Str(bad.message());
    return Send(c, w.Take());
  }
  BeginIo();
  stats_.puts += keys.size();
  opt_.store->Put(
      keys, values, static_cast<TrafficClass>(cls),
      [self = shared_from_this(), conn = c.id, req = h.req](std::vector<Status> st) {
        Done d;
        d.kind = Done::Kind::kPut;
        d.conn = conn;
        d.req = req;
        d.put = std::move(st);
        self->Post(std::move(d));
      },
      has_parent ? std::optional<BlockKey>(parent) : std::nullopt);
  // KvStore::Put copied the values before returning: the staging slots are free again now.
  free_slots();
}

void FetcherServer::Impl::ProcessDone() {
  std::vector<Done> done;
  {
    std::lock_guard lock(done_mu_);
    done.swap(done_);
  }
  for (Done& d : done) {
    switch (d.kind) {
      case Done::Kind::kGet: {
        auto node = loading_.extract(d.slot);
        std::vector<Waiter> waiters = node.empty() ? std::vector<Waiter>{} : std::move(node.mapped());
        const Result<size_t>& r = *d.result;
        if (r.ok()) {
          // Ready only now: the bytes the READY announces are all in the slot.
          pool_->LoadDone(d.slot, *r);
        } else {
          if (r.status().code() == StatusCode::kNotFound) ++stats_.misses;
          else ++stats_.store_errors;
          pool_->LoadFailed(d.slot, static_cast<uint32_t>(waiters.size()));
        }
        for (const Waiter& w : waiters) {
          Conn* c = FindAny(w.conn);
          LADLE_CHECK(c != nullptr);  // DropConn removes a client's waiters
          if (r.ok()) {
            ++c->pins[d.slot];
            Answer(*c, w.req, w.index, d.slot, static_cast<uint32_t>(*r), StatusCode::kOk);
          } else {
            Answer(*c, w.req, w.index, 0, 0, r.status().code());
          }
        }
        break;
      }
      case Done::Kind::kMatch: {
        Conn* c = Find(d.conn);
        if (!c) break;
        const Result<size_t>& r = *d.result;
        wire::Writer w(Type::kMatchReply, d.req, 0);
        w.U16(static_cast<uint16_t>(r.status().code()));
        w.U64(r.ok() ? *r : 0);
        w.Str(r.status().message());
        Send(*c, w.Take());
        break;
      }
      case Done::Kind::kPut: {
        Status first;
        for (const Status& s : d.put) {
          if (s.ok()) continue;
          ++stats_.store_errors;
          if (first.ok()) first = s;
        }
        Conn* c = Find(d.conn);
        if (!c) break;
        wire::Writer w(Type::kPutReply, d.req, static_cast<uint32_t>(d.put.size()));
        for (const Status& s : d.put) w.U16(static_cast<uint16_t>(s.code()));
        w.Str(first.message());
        Send(*c, w.Take());
        break;
      }
    }
  }
}

void FetcherServer::Impl::Answer(Conn& c, uint64_t req, uint32_t index, uint32_t slot, uint32_t len,
                                 StatusCode code) {
  Batch& b = batches_[{c.id, req}];
  if (!b.w) b.w.emplace(Type::kFetchKeys, req, 0);
  b.w->U32(index);
  b.w->U32(slot);
  b.w->U32(len);
  b.w->U16(static_cast<uint16_t>(code));
  b.w->U16(0);
  ++b.n;
  auto it = c.fetches.find(req);
  LADLE_CHECK(it != c.fetches.end() && it->second > 0);
  if (--it->second == 0) {
    c.fetches.erase(it);
    b.done = true;
  }
}

void FetcherServer::Impl::FlushBatches() {
  for (auto& [key, b] : batches_) {
    Conn* c = Find(key.first);
    if (!c) continue;
    if (b.n > 0) {
      b.w->SetCount(b.n);
      Send(*c, b.w->Take());
    }
    if (b.done) {
      wire::Writer w(Type::kFetchDone, key.second, 0);
      w.U16(0);
      w.Str("");
      Send(*c, w.Take());
    }
  }
  batches_.clear();
}

void FetcherServer::Impl::Send(Conn& c, std::string bytes, int fd) {
  if (c.closing) return;
  c.out_bytes += bytes.size();
  c.out.push_back({std::move(bytes), fd});
  if (c.out_bytes > kMaxOutBytes) {
    LADLE_LOG_WARN("kvfetch.client_dropped id={} why=not_reading queued_bytes={}", c.id, c.out_bytes);
    c.closing = true;
  }
}

void FetcherServer::Impl::Flush(Conn& c) {
  while (!c.out.empty() && !c.closing) {
    OutMsg& m = c.out.front();
    iovec iov{m.bytes.data(), m.bytes.size()};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    if (m.fd >= 0) {
      h.msg_control = ctl;
      h.msg_controllen = sizeof ctl;
      cmsghdr* cm = CMSG_FIRSTHDR(&h);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &m.fd, sizeof(int));
    }
    ssize_t n = ::sendmsg(c.fd, &h, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // POLLOUT next round
      c.closing = true;
      return;
    }
    c.out_bytes -= m.bytes.size();
    c.out.pop_front();
  }
}

void FetcherServer::Impl::DropConn(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  // A client that left (or died) gives back everything it held.
  uint64_t pins = 0;
  for (auto [slot, n] : c.pins) {
    for (uint32_t i = 0; i < n; ++i) pool_->Unpin(slot);
    pins += n;
  }
  for (uint32_t s : c.staging) pool_->FreePut(s);
  for (auto& entry : loading_) {
    const auto slot = entry.first;
    std::erase_if(entry.second, [&](const Waiter& w) {
      if (w.conn != id) return false;
      pool_->Unpin(slot);
      return true;
    });
  }
  LADLE_LOG_DEBUG("kvfetch.client_gone id={} pins={} staging={}", id, pins, c.staging.size());
  ::close(c.fd);
  conns_.erase(it);
}

void FetcherServer::Impl::CheckInvariantsLocked() {
  pool_->CheckInvariants();
  // Every pin in the pool belongs to exactly one holder: a client's READY or a waiter.
  std::vector<uint64_t> held(pool_->cache_slots(), 0);
  for (const auto& [id, c] : conns_) {
    for (auto [slot, n] : c->pins) {
      LADLE_CHECK(pool_->IsReady(slot) && n > 0);
      held[slot] += n;
    }
    for (uint32_t s : c->staging) LADLE_CHECK(pool_->IsPutAllocated(s));
  }
  for (const auto& [slot, waiters] : loading_) {
    LADLE_CHECK(!pool_->IsReady(slot));
    held[slot] += waiters.size();
  }
  for (uint32_t s = 0; s < pool_->cache_slots(); ++s) LADLE_CHECK(held[s] == pool_->pins(s));
}

FetcherStats FetcherServer::Impl::StatsLocked() {
  FetcherStats s = stats_;
  const SlotPool::Counts n = pool_->counts();
  s.evictions = n.evictions;
  s.slots = pool_->cache_slots();
  s.slots_free = n.free;
  s.slots_loading = n.loading;
  s.slots_used = n.loading + n.ready;
  s.slots_pinned = n.pinned;
  s.put_slots = pool_->put_slots();
  s.put_slots_free = n.put_free;
  s.clients = conns_.size();
  if (opt_.store) {
    StoreStat st = opt_.store->Stat();
    s.store_hits = st.hits;
    s.store_misses = st.misses;
    s.store_healthy = st.healthy;
  }
  return s;
}

void FetcherServer::Impl::Stop() {
  if (stopped_.exchange(true)) return;
  draining_ = true;
  Wake();
  size_t left;
  {
    std::unique_lock lock(done_mu_);
    drain_cv_.wait_for(lock, opt_.drain_timeout, [&] { return inflight_ == 0; });
    left = inflight_;
  }
  if (left > 0) {
    LADLE_LOG_WARN("kvfetch.stop_with_io_in_flight n={} (the mapping stays until they complete)", left);
  }
  stop_ = true;
  Wake();
  if (loop_.joinable()) loop_.join();
  shm_->Unlink();
  std::shared_ptr<KvStore> store;
  {
    std::lock_guard lock(mu_);
    store = std::move(opt_.store);
  }
  // Dropped here, on the caller's thread: if this was the last reference, the store's
  // destructor must not run on one of its own threads (from a completion holding the Impl).
  store.reset();
  LADLE_LOG_INFO("kvfetch.stopped socket={} shm={}", opt_.socket_path, shm_->name());
}

Result<std::unique_ptr<FetcherServer>> FetcherServer::Start(FetcherOptions options) {
  auto impl = std::make_shared<Impl>(std::move(options));
  if (Status s = impl->Init(); !s.ok()) {
    impl->AbortInit();
    return s;
  }
  try {
    impl->StartLoop();
  } catch (const std::exception& e) {
    return Internal(std::string("kv fetcher: starting the loop thread: ") + e.what());
  }
  LADLE_LOG_INFO("kvfetch.started socket={} shm={} slots={} put_slots={} block_bytes={} stride={} shm_bytes={}",
                 impl->opt_.socket_path, impl->shm_->name(), impl->pool_->cache_slots(), impl->pool_->put_slots(),
                 impl->opt_.block_bytes, impl->stride_, impl->shm_->size());
  return std::unique_ptr<FetcherServer>(new FetcherServer(std::move(impl)));
}

FetcherServer::FetcherServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
FetcherServer::~FetcherServer() { Stop(); }
void FetcherServer::Stop() { impl_->Stop(); }
const std::string& FetcherServer::socket_path() const { return impl_->opt_.socket_path; }
const std::string& FetcherServer::shm_name() const { return impl_->shm_->name(); }
uint32_t FetcherServer::slots() const { return impl_->pool_->cache_slots(); }
uint32_t FetcherServer::put_slots() const { return impl_->pool_->put_slots(); }
bool FetcherServer::healthy() const { return impl_->healthy_; }
FetcherStats FetcherServer::Stats() const { return impl_->Stats(); }

}  // namespace ladle::kvcache
