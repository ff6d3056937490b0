// The engine's side of the fetcher: one socket, one reader thread, a table of pending requests.
// Only the reader thread answers a registered request (replies, and the failure of all of them
// at EOF), so a request's completions never race each other; a call made when the connection is
// already gone completes on the caller's thread before anything is registered.
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "fetcher_wire.h"
#include "ladle/core/logging.h"
#include "ladle/kvcache/fetcher.h"

namespace ladle::kvcache {

namespace {

using wire::Type;
using Clock = std::chrono::steady_clock;

// A send that cannot go out for this long means the fetcher stopped reading: it is treated as dead.
constexpr int kSendTimeoutMs = 2000;

Status Gone() { return Status(StatusCode::kUnavailable, "kv fetcher: connection lost"); }

// Runs a user completion; what it throws is logged, never lost with the reader thread.
template <typename F, typename... A>
void SafeCall(const char* what, F& fn, A&&... args) {
  if (!fn) return;
  try {
    fn(std::forward<A>(args)...);
  } catch (const std::exception& e) {
    LADLE_LOG_ERROR("kvfetch.completion_threw op={} what={}", what, e.what());
  } catch (...) {
    LADLE_LOG_ERROR("kvfetch.completion_threw op={} what=unknown", what);
  }
}

// A reply's (code, message) as a Status.
Status StatusFrom(uint16_t code, std::string msg) {
  StatusCode c = wire::CodeFrom(code);
  if (c == StatusCode::kOk) return Status::Ok();
  if (msg.empty()) msg = "kv fetcher: " + std::string(StatusCodeName(c));
  return Status(c, std::move(msg));
}

// The state of a blocking call: the reply, or abandoned by a caller whose deadline passed.
template <typename T>
struct Waitable {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<T>> value;
  bool abandoned = false;
  // False when the caller already gave up (the reply is then the handler's to undo).
  bool Set(Result<T> v) {
    std::lock_guard lock(mu);
    if (abandoned) return false;
    value.emplace(std::move(v));
    cv.notify_all();
    return true;
  }
  Result<T> Wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, timeout, [&] { return value.has_value(); })) {
      abandoned = true;
      return Status(StatusCode::kDeadlineExceeded, "kv fetcher: no reply within the deadline");
    }
    return std::move(*value);
  }
};

}  // namespace

class FetcherClient::Impl {
 public:
  struct Pending {
    // One reply packet of this request; true when the request is finished.
    std::function<bool(const wire::Header&, wire::Reader&)> on_msg;
    // The connection ended first.
    std::function<void(const Status&)> on_fail;
  };

  ~Impl() {
    closing_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // the reader's recvmsg returns 0
    if (reader_.joinable()) {
      LADLE_CHECK(std::this_thread::get_id() != reader_.get_id());  // not from a completion
      reader_.join();
    }
    if (fd_ >= 0) ::close(fd_);
    if (base_ != nullptr) ::munmap(base_, map_bytes_);
  }

  Status Open(const std::string& path, std::chrono::milliseconds timeout);
  void StartReader() { reader_ = std::thread([this] { ReaderLoop(); }); }

  // Registers requests all at once, or none when the connection is gone.
  bool Register(std::vector<std::pair<uint64_t, Pending>>& ps) {
    std::lock_guard lock(mu_);
    if (!alive_) return false;
    for (auto& [req, p] : ps) pending_.emplace(req, std::move(p));
    return true;
  }
  bool Register(uint64_t req, Pending& p) {
    std::lock_guard lock(mu_);
    if (!alive_) return false;
    pending_.emplace(req, std::move(p));
    return true;
  }
  uint64_t NextReq() { return next_req_.fetch_add(1); }

  // A send that fails ends the connection (shutdown): the reader then fails what is pending.
  void Send(const std::string& bytes) {
    std::lock_guard lock(send_mu_);
    for (;;) {
      if (::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) >= 0) return;
      if (errno == EINTR) continue;
      LADLE_LOG_WARN("kvfetch.send_failed err={}", std::strerror(errno));
      ::shutdown(fd_, SHUT_RDWR);
      return;
    }
  }
  bool OnReaderThread() const { return std::this_thread::get_id() == reader_.get_id(); }

  void MatchPart(std::shared_ptr<std::vector<BlockKey>> keys, size_t offset, size_t hits,
                 std::shared_ptr<std::function<void(Result<size_t>)>> done);
  void FreeStaging(std::span<const uint32_t> slots);

  bool IsCacheSlot(uint32_t s) const { return s < cache_slots_; }
  bool IsPutSlot(uint32_t s) const { return s >= put_first_ && s - put_first_ < put_count_; }
  uint8_t* SlotData(uint32_t s) const { return base_ + static_cast<size_t>(s) * stride_; }

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t map_bytes_ = 0, stride_ = 0, block_bytes_ = 0;
  uint32_t cache_slots_ = 0, put_first_ = 0, put_count_ = 0;
  std::string shm_name_;
  std::atomic<bool> alive_flag_{true};
  std::atomic<uint64_t> put_drops_{0};

 private:
  void ReaderLoop();
  void Dispatch(std::span<const uint8_t> packet);
  void FailAll(const Status& why);

  std::thread reader_;
  std::atomic<bool> closing_{false};
  std::atomic<uint64_t> next_req_{1};
  std::mutex send_mu_;
  std::mutex mu_;  // alive_, pending_
  bool alive_ = true;
  std::unordered_map<uint64_t, Pending> pending_;
};

Status FetcherClient::Impl::Open(const std::string& path, std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) return InvalidArgument("kv fetcher: bad socket path");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const auto deadline = Clock::now() + timeout;
  auto left_ms = [&] {
    return static_cast<int>(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  };
  for (;;) {
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return IoError(std::string("kv fetcher: socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      fd_ = fd;
      break;
    }
    const int e = errno;
    ::close(fd);
    // Not there yet (the fetcher is starting) or its backlog is full: retry until the deadline.
    const bool retry = e == ENOENT || e == ECONNREFUSED || e == EAGAIN || e == EINTR;
    if (!retry || left_ms() == 0) {
      return Status(StatusCode::kUnavailable, fmt::format("kv fetcher: connect {}: {}", path, std::strerror(e)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10, left_ms())));
  }
  timeval tv{kSendTimeoutMs / 1000, (kSendTimeoutMs % 1000) * 1000};
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

  wire::Writer hello(Type::kHello, 0, 0);
  std::string bytes = hello.Take();
  if (::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {
    return Status(StatusCode::kUnavailable, std::string("kv fetcher: HELLO: ") + std::strerror(errno));
  }
  pollfd p{fd_, POLLIN, 0};
  int pr;
  while ((pr = ::poll(&p, 1, left_ms())) < 0 && errno == EINTR) {
  }
  if (pr == 0) return Status(StatusCode::kDeadlineExceeded, "kv fetcher: no HELLO reply within the deadline");
  std::vector<uint8_t> buf(wire::kMaxPacket);
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  ssize_t n = ::recvmsg(fd_, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n <= 0) return Status(StatusCode::kUnavailable, "kv fetcher: connection closed during HELLO");
  int shm_fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&shm_fd, CMSG_DATA(c), sizeof(int));
  }
  wire::Reader r(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
  wire::Header h;
  const bool ok = r.ReadHeader(&h) && h.type == Type::kHelloReply;
  stride_ = r.U64();
  block_bytes_ = r.U64();
  cache_slots_ = r.U32();
  put_first_ = r.U32();
  put_count_ = r.U32();
  shm_name_ = r.Str();
  if (!ok || !r.ok() || shm_fd < 0 || stride_ < block_bytes_ || block_bytes_ == 0) {
    if (shm_fd >= 0) ::close(shm_fd);
    return Internal("kv fetcher: bad HELLO reply");
  }
  map_bytes_ = (static_cast<size_t>(put_first_) + put_count_) * stride_;
  struct stat st{};
  if (::fstat(shm_fd, &st) != 0 || static_cast<size_t>(st.st_size) < map_bytes_ || put_first_ < cache_slots_) {
    ::close(shm_fd);
    return Internal("kv fetcher: the shm segment is smaller than its slots");
  }
  // Read-write: the client fills staging slots itself.
  void* base = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0);
  ::close(shm_fd);  // the mapping keeps the segment
  if (base == MAP_FAILED) return IoError(std::string("kv fetcher: mmap: ") + std::strerror(errno));
  base_ = static_cast<uint8_t*>(base);
  return Status::Ok();
}

void FetcherClient::Impl::ReaderLoop() {
  Status why = Gone();
  try {
    std::vector<uint8_t> buf(wire::kMaxPacket + 1);
    for (;;) {
      iovec iov{buf.data(), buf.size()};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      ssize_t n = ::recvmsg(fd_, &m, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        why = Status(StatusCode::kUnavailable, std::string("kv fetcher: ") + std::strerror(errno));
        break;
      }
      if (n == 0) break;  // EOF: the fetcher exited or died (or we shut down)
      if (m.msg_flags & MSG_TRUNC) {
        why = Status(StatusCode::kUnavailable, "kv fetcher: oversized reply");
        break;
      }
      Dispatch(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
    }
  } catch (const std::exception& e) {
    LADLE_LOG_ERROR("kvfetch.reader_died what={}", e.what());
    why = Status(StatusCode::kUnavailable, std::string("kv fetcher: reader failed: ") + e.what());
  } catch (...) {
    LADLE_LOG_ERROR("kvfetch.reader_died what=unknown");
  }
  if (closing_) {
    why = Status(StatusCode::kCancelled, "kv fetcher: client closed");
  } else {
    LADLE_LOG_WARN("kvfetch.connection_lost why={}", why.message());
  }
  ::shutdown(fd_, SHUT_RDWR);
  FailAll(why);
}

void FetcherClient::Impl::Dispatch(std::span<const uint8_t> packet) {
  wire::Reader r(packet);
  wire::Header h;
  if (!r.ReadHeader(&h)) {
    LADLE_LOG_WARN("kvfetch.bad_reply bytes={}", packet.size());
    return;
  }
  Pending* p = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(h.req);
    // Node pointers are stable, and only this thread erases: p stays valid unlocked.
    if (it != pending_.end()) p = &it->second;
  }
  if (p == nullptr) {
    LADLE_LOG_DEBUG("kvfetch.reply_unknown req={} type={}", h.req, static_cast<int>(h.type));
    return;
  }
  if (p->on_msg(h, r)) {
    std::lock_guard lock(mu_);
    pending_.erase(h.req);
  }
}

void FetcherClient::Impl::FailAll(const Status& why) {
  std::unordered_map<uint64_t, Pending> pending;
  {
    std::lock_guard lock(mu_);
    alive_ = false;
    alive_flag_ = false;
    pending.swap(pending_);
  }
  for (auto& [req, p] : pending) SafeCall("fail", p.on_fail, why);
}

void FetcherClient::Impl::FreeStaging(std::span<const uint32_t> slots) {
  for (size_t off = 0; off < slots.size(); off += wire::kMaxKeys) {
    const size_t n = std::min(wire::kMaxKeys, slots.size() - off);
    wire::Writer w(Type::kPutFree, 0, static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) w.U32(slots[off + i]);
    Send(w.Take());
  }
}

// One MATCH packet of at most kMaxKeys keys; a part wholly present asks for the next.
void FetcherClient::Impl::MatchPart(std::shared_ptr<std::vector<BlockKey>> keys, size_t offset, size_t hits,
                                    std::shared_ptr<std::function<void(Result<size_t>)>> done) {
  const size_t n = std::min(wire::kMaxKeys, keys->size() - offset);
  const uint64_t req = NextReq();
  Pending p;
  p.on_msg = [this, keys, offset, hits, n, done](const wire::Header& h, wire::Reader& r) {
    Status st;
    size_t got = 0;
    if (h.type == Type::kMatchReply || h.type == Type::kError) {
      const uint16_t code = r.U16();
      got = h.type == Type::kMatchReply ? r.U64() : 0;
      st = StatusFrom(code, r.Str());
    } else {
      st = Internal("kv fetcher: unexpected reply to MATCH");
    }
    if (!st.ok()) {
      SafeCall("match", *done, Result<size_t>(st));
    } else if (got == n && offset + n < keys->size()) {
      MatchPart(keys, offset + n, hits + n, done);  // from the reader thread: alive, registers
    } else {
      SafeCall("match", *done, Result<size_t>(hits + std::min(got, n)));
    }
    return true;
  };
  p.on_fail = [done](const Status& s) { SafeCall("match", *done, Result<size_t>(s)); };
  if (!Register(req, p)) return SafeCall("match", *done, Result<size_t>(Gone()));
  wire::Writer w(Type::kMatch, req, static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) w.Key((*keys)[offset + i]);
  Send(w.Take());
}

Result<std::unique_ptr<FetcherClient>> FetcherClient::Connect(const std::string& socket_path,
                                                              std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  LADLE_RETURN_IF_ERROR(impl->Open(socket_path, timeout));
  try {
    impl->StartReader();
  } catch (const std::exception& e) {
    return Internal(std::string("kv fetcher: starting the reader thread: ") + e.what());
  }
  return std::unique_ptr<FetcherClient>(new FetcherClient(std::move(impl)));
}

FetcherClient::FetcherClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FetcherClient::~FetcherClient() = default;

void FetcherClient::Match(std::span<const BlockKey> keys, std::function<void(Result<size_t>)> done) {
  auto d = std::make_shared<std::function<void(Result<size_t>)>>(std::move(done));
  if (keys.empty()) return SafeCall("match", *d, Result<size_t>(size_t{0}));
  impl_->MatchPart(std::make_shared<std::vector<BlockKey>>(keys.begin(), keys.end()), 0, 0, d);
}

namespace {
// One Fetch call, split into requests of at most kMaxKeys keys (parts).
struct FetchOp {
  FetcherClient::KeyDone on_key;
  std::function<void(Status)> on_done;
  size_t parts_left = 0;
  Status first_error;
  void PartDone(const Status& s) {
    if (!s.ok() && first_error.ok()) first_error = s;
    if (--parts_left == 0) SafeCall("fetch_done", on_done, first_error);
  }
};
}  // namespace

void FetcherClient::Fetch(std::span<const BlockKey> keys, KeyDone on_key, std::function<void(Status)> on_done) {
  Impl& im = *impl_;
  auto op = std::make_shared<FetchOp>();
  op->on_key = std::move(on_key);
  op->on_done = std::move(on_done);
  const size_t parts = (keys.size() + wire::kMaxKeys - 1) / wire::kMaxKeys;
  if (parts == 0) return SafeCall("fetch_done", op->on_done, Status::Ok());
  op->parts_left = parts;
  std::vector<std::pair<uint64_t, Impl::Pending>> pend;
  std::vector<std::string> packets;
  for (size_t part = 0; part < parts; ++part) {
    const size_t base = part * wire::kMaxKeys;
    const size_t n = std::min(wire::kMaxKeys, keys.size() - base);
    auto answered = std::make_shared<std::vector<bool>>(n, false);
    // Answers every key of the part not answered yet with `s` (an OK `s`: the fetcher's bug, a
    // FETCH_DONE before every key's entry), then closes the part.
    auto finish = [op, answered, base](const Status& s) {
      Status part = s;
      for (size_t i = 0; i < answered->size(); ++i) {
        if ((*answered)[i]) continue;
        if (part.ok()) part = Internal("kv fetcher: key left unanswered");
        SafeCall("fetch_key", op->on_key, base + i, Result<ShmBlock>(part));
      }
      op->PartDone(part);
    };
    Impl::Pending p;
    p.on_msg = [&im, op, answered, base, finish](const wire::Header& h, wire::Reader& r) {
      if (h.type == Type::kFetchKeys) {
        for (uint32_t e = 0; e < h.count; ++e) {
          const uint32_t idx = r.U32(), slot = r.U32(), len = r.U32();
          const uint16_t code = r.U16();
          r.U16();
          if (!r.ok() || idx >= answered->size() || (*answered)[idx]) {
            LADLE_LOG_WARN("kvfetch.bad_fetch_entry index={}", idx);
            continue;
          }
          (*answered)[idx] = true;
          if (code != 0) {
            SafeCall("fetch_key", op->on_key, base + idx, Result<ShmBlock>(StatusFrom(code, "")));
          } else if (!im.IsCacheSlot(slot) || len > im.block_bytes_) {
            SafeCall("fetch_key", op->on_key, base + idx, Result<ShmBlock>(Internal("kv fetcher: bad slot in reply")));
          } else {
            SafeCall("fetch_key", op->on_key, base + idx, Result<ShmBlock>(ShmBlock{im.SlotData(slot), len, slot}));
          }
        }
        return false;
      }
      Status st = Internal("kv fetcher: unexpected reply to FETCH");
      if (h.type == Type::kFetchDone || h.type == Type::kError) {
        const uint16_t code = r.U16();
        st = StatusFrom(code, r.Str());
      }
      finish(st);
      return true;
    };
    // finish() on a part whose keys are all answered only closes it (the message is unused).
    p.on_fail = finish;
    const uint64_t req = im.NextReq();
    wire::Writer w(Type::kFetch, req, static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) w.Key(keys[base + i]);
    packets.push_back(w.Take());
    pend.emplace_back(req, std::move(p));
  }
  if (!im.Register(pend)) {
    for (auto& [req, p] : pend) p.on_fail(Gone());
    return;
  }
  for (const std::string& pk : packets) im.Send(pk);
}

void FetcherClient::Release(std::span<const uint32_t> slots) {
  if (!impl_->alive_flag_) return;  // the fetcher is gone, and the pins with it
  for (size_t off = 0; off < slots.size(); off += wire::kMaxKeys) {
    const size_t n = std::min(wire::kMaxKeys, slots.size() - off);
    wire::Writer w(Type::kRelease, 0, static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) w.U32(slots[off + i]);
    impl_->Send(w.Take());
  }
}

Result<std::vector<PutSlot>> FetcherClient::AllocPut(size_t n, std::chrono::milliseconds timeout) {
  Impl& im = *impl_;
  if (im.OnReaderThread()) return Status(StatusCode::kFailedPrecondition, "kv fetcher: AllocPut from a completion");
  if (n == 0) return std::vector<PutSlot>{};
  const uint32_t ask = static_cast<uint32_t>(std::min<size_t>(n, wire::kMaxKeys));
  auto w8 = std::make_shared<Waitable<std::vector<uint32_t>>>();
  Impl::Pending p;
  p.on_msg = [&im, w8](const wire::Header& h, wire::Reader& r) {
    if (h.type != Type::kPutAllocReply) {
      const uint16_t code = r.U16();
      Status st = StatusFrom(code, r.Str());
      w8->Set(st.ok() ? Status(Internal("kv fetcher: unexpected reply to PUT_ALLOC")) : st);
      return true;
    }
    std::vector<uint32_t> slots;
    for (uint32_t i = 0; i < h.count && r.ok(); ++i) slots.push_back(r.U32());
    // Granted after the caller's deadline: give them straight back.
    if (!w8->Set(slots)) im.FreeStaging(slots);
    return true;
  };
  p.on_fail = [w8](const Status& s) { w8->Set(s); };
  const uint64_t req = im.NextReq();
  if (!im.Register(req, p)) return Gone();
  im.Send(wire::Writer(Type::kPutAlloc, req, ask).Take());
  auto got = w8->Wait(timeout);
  if (!got.ok()) return got.status();
  std::vector<PutSlot> out;
  std::vector<uint32_t> bad;
  for (uint32_t s : *got) {
    if (im.IsPutSlot(s)) out.push_back(PutSlot{im.SlotData(s), s, im.block_bytes_, im.block_bytes_});
    else bad.push_back(s);
  }
  if (!bad.empty()) im.FreeStaging(bad);
  im.put_drops_ += n - out.size();
  return out;
}

void FetcherClient::CancelPut(std::span<const PutSlot> slots) {
  if (!impl_->alive_flag_) return;
  std::vector<uint32_t> s;
  for (const PutSlot& p : slots) s.push_back(p.slot);
  impl_->FreeStaging(s);
}

void FetcherClient::Put(std::span<const BlockKey> keys, std::span<const PutSlot> slots, TrafficClass cls,
                        std::optional<BlockKey> parent, std::function<void(std::vector<Status>)> done) {
  Impl& im = *impl_;
  auto all = [n = keys.size()](const Status& s) { return std::vector<Status>(n, s); };
  Status bad;
  if (keys.size() != slots.size()) bad = InvalidArgument("kv fetcher put: keys and slots differ in count");
  if (keys.size() > wire::kMaxKeys) bad = InvalidArgument("kv fetcher put: too many keys in one call");
  for (const PutSlot& s : slots) {
    if (!im.IsPutSlot(s.slot) || s.len > im.block_bytes_) bad = InvalidArgument("kv fetcher put: bad slot or length");
  }
  if (!bad.ok()) {
    std::vector<uint32_t> give_back;
    for (const PutSlot& s : slots) {
      if (im.IsPutSlot(s.slot)) give_back.push_back(s.slot);
    }
    if (im.alive_flag_) im.FreeStaging(give_back);
    return SafeCall("put", done, all(bad));
  }
  auto d = std::make_shared<std::function<void(std::vector<Status>)>>(std::move(done));
  Impl::Pending p;
  p.on_msg = [d, all, n = keys.size()](const wire::Header& h, wire::Reader& r) {
    std::vector<Status> st;
    if (h.type == Type::kPutReply) {
      std::vector<uint16_t> codes;
      for (uint32_t i = 0; i < h.count; ++i) codes.push_back(r.U16());
      // The message is the first failure's; others of another code get a generic one.
      const std::string msg = r.Str();
      uint16_t first = 0;
      for (uint16_t c : codes) {
        if (first == 0) first = c;
        st.push_back(StatusFrom(c, c == first ? msg : ""));
      }
      st.resize(n, Internal("kv fetcher: no status for this key"));
    } else {
      const uint16_t code = r.U16();
      Status s = StatusFrom(code, r.Str());
      st = all(s.ok() ? Status(Internal("kv fetcher: unexpected reply to PUT")) : s);
    }
    SafeCall("put", *d, std::move(st));
    return true;
  };
  p.on_fail = [d, all](const Status& s) { SafeCall("put", *d, all(s)); };
  const uint64_t req = im.NextReq();
  if (!im.Register(req, p)) return SafeCall("put", *d, all(Gone()));
  wire::Writer w(Type::kPut, req, static_cast<uint32_t>(keys.size()));
  w.U8(static_cast<uint8_t>(cls));
  w.U8(parent ? 1 : 0);
  w.Key(parent.value_or(BlockKey{}));
  for (size_t i = 0; i < keys.size(); ++i) {
    w.Key(keys[i]);
    w.U32(slots[i].slot);
    w.U32(static_cast<uint32_t>(slots[i].len));
  }
  im.Send(w.Take());
}

Result<FetcherStats> FetcherClient::Stat(std::chrono::milliseconds timeout) {
  Impl& im = *impl_;
  if (im.OnReaderThread()) return Status(StatusCode::kFailedPrecondition, "kv fetcher: Stat from a completion");
  auto w8 = std::make_shared<Waitable<FetcherStats>>();
  Impl::Pending p;
  p.on_msg = [w8](const wire::Header& h, wire::Reader& r) {
    if (h.type == Type::kStatReply) {
      FetcherStats s = wire::DecodeStats(h.count, &r);
      w8->Set(r.ok() ? Result<FetcherStats>(s) : Result<FetcherStats>(Internal("kv fetcher: short STAT reply")));
    } else {
      w8->Set(Internal("kv fetcher: unexpected reply to STAT"));
    }
    return true;
  };
  p.on_fail = [w8](const Status& s) { w8->Set(s); };
  const uint64_t req = im.NextReq();
  if (!im.Register(req, p)) return Gone();
  im.Send(wire::Writer(Type::kStat, req, 0).Take());
  return w8->Wait(timeout);
}

bool FetcherClient::alive() const { return impl_->alive_flag_; }
size_t FetcherClient::block_bytes() const { return impl_->block_bytes_; }
uint32_t FetcherClient::slots() const { return impl_->cache_slots_; }
const std::string& FetcherClient::shm_name() const { return impl_->shm_name_; }
uint64_t FetcherClient::put_drops() const { return impl_->put_drops_; }

}  // namespace ladle::kvcache
