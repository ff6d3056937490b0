// The fetcher's server side: one event-loop thread owns the sockets, the slot pool and every
// client's pins; the store's I/O threads only queue their completions (Post) and wake the loop
// through an eventfd. So the pool needs no lock against the store, and a completion never runs
// protocol code on a store thread.
//
// Lifetime: every store call's completion holds a reference to the Impl, so the shm mapping a
// read is writing into outlives the read even when Stop() gave up waiting for it.
#include "fetcher_server_impl.h"

namespace ladle::kvcache {

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

