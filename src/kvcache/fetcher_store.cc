// FetcherStore: the KvStore interface over a FetcherClient, with reconnects and a bounded write
// queue drained by one writer thread (AllocPut blocks, so it never runs on the caller's thread).
#include "ladle/kvcache/fetcher_store.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "ladle/core/logging.h"

namespace ladle::kvcache {

namespace {
using Clock = std::chrono::steady_clock;
Status Gone() { return Status(StatusCode::kUnavailable, "kv fetcher: not connected"); }
}  // namespace

class FetcherStore::Impl {
 public:
  Impl(Connect connect, FetcherStoreOptions o) : connect_(std::move(connect)), opt_(o) {}

  // The live client, or null while there is none: a dead one is replaced on the writer thread
  // (Reconnect), never on the caller's, which may be an engine's scheduler.
  std::shared_ptr<FetcherClient> Client() {
    {
      std::lock_guard lk(mu_);
      if (client_ && client_->alive()) return client_;
    }
    {
      std::lock_guard lk(qmu_);
      want_reconnect_ = true;
    }
    qcv_.notify_one();
    return nullptr;
  }

  // Connects through connect_ (which may restart the fetcher). Writer thread, or Create.
  bool Reconnect() {
    auto c = connect_();
    if (!c.ok()) {
      LADLE_LOG_WARN("kvfetch.reconnect_failed error='{}'", c.status().ToString());
      return false;
    }
    std::lock_guard lk(mu_);
    // A dead client can still be referenced by pins or callbacks: kept until this store goes,
    // so its mapping outlives them and it is never destroyed on its own reader thread.
    if (client_) {
      graveyard_.push_back(std::move(client_));
      ++stats_.reconnects;
      LADLE_LOG_INFO("kvfetch.reconnected shm={}", (*c)->shm_name());
    }
    client_ = std::shared_ptr<FetcherClient>(std::move(c).value());
    return true;
  }

  void StartWriter(const std::shared_ptr<Impl>& self) {
    writer_ = std::thread([self] { self->WriterLoop(); });
  }

  void StopWriter() {
    {
      std::lock_guard lk(qmu_);
      stop_ = true;
    }
    qcv_.notify_all();
    if (writer_.joinable()) writer_.join();
  }

  struct PutJob {
    std::vector<BlockKey> keys;
    std::vector<std::vector<uint8_t>> values;
    TrafficClass cls;
    PutDone done;
    std::optional<BlockKey> parent;
    size_t bytes = 0;
  };

  void Enqueue(PutJob job) {
    {
      std::lock_guard lk(qmu_);
      if (!stop_ && queued_bytes_ + job.bytes <= opt_.max_put_queue_bytes) {
        queued_bytes_ += job.bytes;
        queue_.push_back(std::move(job));
        qcv_.notify_one();
        return;
      }
      std::lock_guard lk2(mu_);
      stats_.put_queue_drops += job.keys.size();
    }
    Fail(job, Status(StatusCode::kResourceExhausted, "kv fetcher: write queue full"));
  }

  static void Fail(PutJob& job, const Status& why) {
    if (job.done) job.done(std::vector<Status>(job.keys.size(), why));
  }

  void WriterLoop() {
    Clock::time_point last_attempt{};
    for (;;) {
      PutJob job;
      bool reconnect = false;
      {
        std::unique_lock lk(qmu_);
        for (;;) {
          if (stop_ && queue_.empty()) return;
          if (!queue_.empty()) break;
          if (Clock::now() >= next_stat_) break;  // refresh the cached fetcher counters
          if (want_reconnect_) {
            const auto next = last_attempt + opt_.reconnect_every;
            if (Clock::now() >= next) {
              want_reconnect_ = false;
              reconnect = true;
              break;
            }
            qcv_.wait_until(lk, std::min(next, next_stat_));
            continue;
          }
          qcv_.wait_until(lk, next_stat_);
        }
        if (!reconnect && queue_.empty()) {
          lk.unlock();
          RefreshStats();
          continue;
        }
        if (!reconnect) {
          job = std::move(queue_.front());
          queue_.pop_front();
          queued_bytes_ -= job.bytes;
        }
      }
      if (reconnect) {
        last_attempt = Clock::now();
        {
          std::lock_guard lk(mu_);
          if (client_ && client_->alive()) continue;  // someone's stale request
        }
        if (!Reconnect()) {
          std::lock_guard lk(qmu_);
          want_reconnect_ = true;  // try again after reconnect_every
        }
        continue;
      }
      try {
        Write(job);
      } catch (const std::exception& e) {  // never lose the writer thread
        LADLE_LOG_ERROR("kvfetch.writer_threw what={}", e.what());
        Fail(job, Internal(std::string("kv fetcher writer: ") + e.what()));
      }
    }
  }

  void Write(PutJob& job) {
    std::shared_ptr<FetcherClient> c = Client();
    if (!c) {
      CountStageDrops(job.keys.size());
      return Fail(job, Gone());
    }
    auto slots = c->AllocPut(job.keys.size(), opt_.put_slot_timeout);
    if (!slots.ok() || slots->empty()) {
      CountStageDrops(job.keys.size());
      return Fail(job, slots.ok() ? Status(StatusCode::kResourceExhausted, "kv fetcher: no staging slot") : slots.status());
    }
    // A chain's prefix is staged when not every slot was granted; the rest is dropped.
    const size_t n = slots->size();
    for (size_t i = 0; i < n; ++i) {
      PutSlot& s = (*slots)[i];
      if (job.values[i].size() > s.capacity) {
        c->CancelPut(std::span<const PutSlot>(*slots).subspan(i));
        CountStageDrops(job.keys.size() - i);
        slots->resize(i);
        break;
      }
      std::memcpy(s.data, job.values[i].data(), job.values[i].size());
      s.len = job.values[i].size();
    }
    const size_t staged = slots->size();
    if (staged < job.keys.size()) CountStageDrops(job.keys.size() - staged);
    if (staged == 0) return Fail(job, Status(StatusCode::kResourceExhausted, "kv fetcher: block larger than a slot"));
    auto done = std::make_shared<PutDone>(std::move(job.done));
    const size_t total = job.keys.size();
    c->Put(std::span<const BlockKey>(job.keys).first(staged), *slots, job.cls, job.parent,
           [done, total](std::vector<Status> st) {
             st.resize(total, Status(StatusCode::kResourceExhausted, "kv fetcher: not staged"));
             if (*done) (*done)(std::move(st));
           });
  }

  // Writer thread: the fetcher's STAT, kept for stats() (a blocking call, so never a caller's).
  void RefreshStats() {
    next_stat_ = Clock::now() + std::chrono::seconds(1);
    std::shared_ptr<FetcherClient> c;
    {
      std::lock_guard lk(mu_);
      if (client_ && client_->alive()) c = client_;
    }
    if (!c) return;
    auto st = c->Stat(std::chrono::milliseconds(500));
    if (!st.ok()) return;
    std::lock_guard lk(mu_);
    stats_.fetcher = *st;
    stats_.fetcher_valid = true;
  }

  void CountStageDrops(size_t n) {
    std::lock_guard lk(mu_);
    stats_.put_stage_drops += n;
  }

  FetcherStoreStats Stats() {
    std::lock_guard lk(mu_);
    FetcherStoreStats s = stats_;
    s.connected = client_ && client_->alive();
    return s;
  }

 private:
  Connect connect_;
  FetcherStoreOptions opt_;
  std::mutex mu_;
  std::shared_ptr<FetcherClient> client_;
  std::vector<std::shared_ptr<FetcherClient>> graveyard_;
  FetcherStoreStats stats_;
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<PutJob> queue_;
  size_t queued_bytes_ = 0;
  bool stop_ = false;
  bool want_reconnect_ = false;
  Clock::time_point next_stat_{};  // writer thread (read under qmu_ for its waits)
  std::thread writer_;
};

Result<std::shared_ptr<FetcherStore>> FetcherStore::Create(Connect connect, FetcherStoreOptions options) {
  auto impl = std::make_shared<Impl>(std::move(connect), options);
  if (!impl->Reconnect()) return Status(StatusCode::kUnavailable, "kv fetcher: cannot connect");
  impl->StartWriter(impl);
  return std::shared_ptr<FetcherStore>(new FetcherStore(std::move(impl)));
}

FetcherStore::FetcherStore(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

FetcherStore::~FetcherStore() { impl_->StopWriter(); }

void FetcherStore::Match(std::span<const BlockKey> keys, MatchDone done) {
  auto c = impl_->Client();
  if (!c) return done(Gone());
  c->Match(keys, std::move(done));
}

void FetcherStore::FetchPinned(std::span<const BlockKey> keys, std::function<void(size_t, Result<Pinned>)> on_key,
                               std::function<void(Status)> done) {
  auto c = impl_->Client();
  if (!c) {
    for (size_t i = 0; i < keys.size(); ++i) on_key(i, Gone());
    return done(Gone());
  }
  std::weak_ptr<FetcherClient> weak = c;
  c->Fetch(
      keys,
      [on_key, weak](size_t i, Result<ShmBlock> b) {
        if (!b.ok()) return on_key(i, b.status());
        // The pin's handle keeps the client (and so its mapping) alive; the last copy releases.
        std::shared_ptr<FetcherClient> keep = weak.lock();
        if (!keep) return on_key(i, Gone());
        Pinned p(new ShmBlock(*b), [keep](const ShmBlock* s) {
          const uint32_t slot = s->slot;
          keep->Release(std::span<const uint32_t>(&slot, 1));
          delete s;
        });
        on_key(i, std::move(p));
      },
      std::move(done));
}

void FetcherStore::Get(std::span<const BlockKey> keys, std::span<const MutableBuffer> buffers, GetDone done) {
  struct State {
    std::vector<Result<size_t>> results;
    std::vector<MutableBuffer> buffers;
  };
  auto st = std::make_shared<State>();
  st->results.assign(keys.size(), Status(StatusCode::kNotFound, "not fetched"));
  st->buffers.assign(buffers.begin(), buffers.end());
  FetchPinned(
      keys,
      [st](size_t i, Result<Pinned> p) {
        if (!p.ok()) {
          st->results[i] = p.status();
          return;
        }
        const ShmBlock& b = **p;
        if (b.len > st->buffers[i].capacity) {
          st->results[i] = Status(StatusCode::kOutOfRange, "buffer too small");
          return;
        }
        std::memcpy(st->buffers[i].data, b.data, b.len);
        st->results[i] = b.len;
      },
      [st, done = std::move(done)](Status) { done(std::move(st->results)); });
}

void FetcherStore::Put(std::span<const BlockKey> keys, std::span<const std::span<const uint8_t>> values,
                       TrafficClass cls, PutDone done, std::optional<BlockKey> parent_of_first) {
  Impl::PutJob job;
  job.keys.assign(keys.begin(), keys.end());
  for (auto v : values) {
    job.values.emplace_back(v.begin(), v.end());  // Put copies the values before it returns
    job.bytes += v.size();
  }
  job.cls = cls;
  job.done = std::move(done);
  job.parent = parent_of_first;
  impl_->Enqueue(std::move(job));
}

void FetcherStore::Delete(std::span<const BlockKey> keys, DeleteDone done) {
  done(std::vector<Status>(keys.size(), Status(StatusCode::kUnsupported, "kv fetcher: delete through `ladle kv`")));
}

StoreStat FetcherStore::Stat() {
  StoreStat s;
  auto c = impl_->Client();
  if (!c) {
    s.healthy = false;
    return s;
  }
  auto f = c->Stat(std::chrono::milliseconds(1000));
  if (!f.ok()) {
    s.healthy = false;
    return s;
  }
  s.hits = f->store_hits;
  s.misses = f->store_misses;
  s.puts = f->puts;
  s.healthy = f->store_healthy;
  return s;
}

Result<uint64_t> FetcherStore::RunGcOnce() { return Status(StatusCode::kUnsupported, "kv fetcher: the fetcher runs GC"); }

Result<KvStore::FsckReport> FetcherStore::Fsck() {
  return Status(StatusCode::kUnsupported, "kv fetcher: fsck with `ladle kv fsck` against the store");
}

Result<FetcherStats> FetcherStore::FetcherStat(std::chrono::milliseconds timeout) {
  auto c = impl_->Client();
  if (!c) return Gone();
  return c->Stat(timeout);
}

FetcherStoreStats FetcherStore::stats() const { return impl_->Stats(); }

}  // namespace ladle::kvcache
