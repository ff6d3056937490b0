// The fetcher's protocol on the loop thread: a client's packets (FETCH, RELEASE, PUT, ...), the
// store's completions, and the answers batched per round. The socket loop and lifecycle are in
// fetcher_server.cc.
#include "fetcher_server_impl.h"

namespace ladle::kvcache {

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


}  // namespace ladle::kvcache
