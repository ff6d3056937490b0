// Reads from the persistent block store (EngineConfig::kv_store_read), the recipe's "Block
// KVCache" hit in its three stages: Match (metadata only) says how many of the prompt's next
// blocks the store holds; the blocks are fetched into host memory -- with a fetcher process
// (kvcache::FetcherStore) into its shared-memory pool, where they stay pinned, else by Get into
// host buffers on the store's threads -- and the scheduler names the contiguous prefix that
// arrived in pool blocks, whose bytes the swap-in thread copies into the KV storage while the
// admitting batch's forward runs (SwapIn). The sequence then admits as an ordinary prefix hit
// (hit policy, SWA entry or Encoder SWA Bounded Replay, or the exact replay).
//
// Ordering: an installed block is named in the pool at once and written by a device-ordered
// WriteBlock queued with the batch being scheduled, before its forward; the device is FIFO, so
// the write lands after any earlier forward that still writes the block (a cancelled owner's)
// and before any forward that reads it. A fetch never blocks the scheduler: the sequence waits in
// its own state (Seq::fetch) while the requests behind it are admitted.
#include <algorithm>
#include <chrono>

#include "engine_impl.h"
#include "ladle/core/logging.h"

namespace ladle::engine {

namespace {
using Clock = std::chrono::steady_clock;
}

void EngineImpl::HashPrefix(Seq* s, int64_t blocks) {
  while (static_cast<int64_t>(s->hashes.size()) < blocks) {
    const size_t i = s->hashes.size();
    s->hashes.push_back(SeqBlockHash(s, i));
  }
}

bool EngineImpl::FetchWaits(const std::shared_ptr<Seq>& sp, Batch* b) {
  Seq* s = sp.get();
  if (!config_.kv_store || !config_.kv_store_read || !config_.prefix_cache || kv_->block_bytes() == 0) return false;
  if (!s->fetch) {
    if (s->fetch_tried) return false;
    s->fetch_tried = true;
    // TryAdmit sets s->target; a waiting sequence's prompt is all of its tokens.
    const int64_t len = static_cast<int64_t>(s->tokens.size());
    // A hand-off resume needs every full block of the exported prompt, past the hit cap.
    const int64_t full = s->resume ? s->resume->full_blocks : DecideHit(swa_, len, len, nullptr).block_reused / block_size_;
    if (full <= 0) return false;
    HashPrefix(s, full);
    size_t pool = 0;
    while (pool < static_cast<size_t>(full) && blocks_.IsCached(s->hashes[pool])) ++pool;
    s->pool_prefix = pool;
    if (pool >= static_cast<size_t>(full)) return false;
    StartFetch(s, pool, static_cast<size_t>(full));
    return true;
  }
  bool done;
  {
    std::lock_guard lk(fetch_inbox_->mu);
    done = s->fetch->done;
  }
  if (!done && Clock::now() < s->fetch->deadline) return true;
  InstallFetched(s, b);
  return false;
}

void EngineImpl::StartFetch(Seq* s, size_t first, size_t full) {
  auto f = std::make_shared<Fetch>();
  f->keys.assign(s->hashes.begin() + static_cast<std::ptrdiff_t>(first),
                 s->hashes.begin() + static_cast<std::ptrdiff_t>(full));
  const size_t n = f->keys.size();
  f->started = Clock::now();
  const int64_t ms = std::min(config_.kv_fetch_deadline_max_ms,
                              config_.kv_fetch_deadline_base_ms + config_.kv_fetch_deadline_per_block_ms * static_cast<int64_t>(n));
  f->deadline = f->started + std::chrono::milliseconds(ms);
  f->results.assign(n, Status(StatusCode::kNotFound, "not fetched"));
  s->fetch = f;
  ++fetches_inflight_;
  ++stat_fetches_;
  const size_t bytes = kv_->block_bytes();
  const size_t chunk = std::max<size_t>(1, config_.kv_fetch_chunk_blocks);
  std::shared_ptr<FetchInbox> inbox = fetch_inbox_;
  std::shared_ptr<kvcache::KvStore> store = config_.kv_store;
  auto finish = [inbox, f] {  // caller holds inbox->mu
    f->done = true;
    f->finished = Clock::now();
    if (inbox->wake) inbox->wake();
  };
  // Stage 1, metadata only: how many of these blocks the store holds. Then stage 2: read them
  // in chunks, so that a deadline keeps whatever prefix has arrived.
  std::shared_ptr<kvcache::FetcherStore> fetcher = fetcher_;
  store->Match(f->keys, [f, inbox, store, fetcher, bytes, chunk, finish](Result<size_t> m) {
    const size_t present = m.ok() ? std::min(*m, f->keys.size()) : 0;
    std::unique_lock lk(inbox->mu);
    f->matched = true;
    f->present = present;
    if (present == 0) {
      finish();
      return;
    }
    if (fetcher) {
      f->pinned.assign(present, nullptr);
    } else {
      f->values.assign(present, std::vector<uint8_t>(bytes));
    }
    f->chunk_done.assign((present + chunk - 1) / chunk, 0);
    f->chunks_left = f->chunk_done.size();
    lk.unlock();
    for (size_t c = 0; fetcher && c * chunk < present; ++c) {
      const size_t lo = c * chunk, hi = std::min(present, lo + chunk);
      fetcher->FetchPinned(
          std::span<const BlockHash>(f->keys).subspan(lo, hi - lo),
          [f, inbox, lo](size_t i, Result<kvcache::FetcherStore::Pinned> p) {
            std::lock_guard lk2(inbox->mu);
            if (p.ok()) {
              f->results[lo + i] = (*p)->len;
              f->pinned[lo + i] = std::move(*p);
            } else {
              f->results[lo + i] = p.status();
            }
          },
          [f, inbox, c, finish](Status) {
            std::lock_guard lk2(inbox->mu);
            f->chunk_done[c] = 1;
            if (--f->chunks_left == 0) finish();
          });
    }
    for (size_t c = 0; !fetcher && c * chunk < present; ++c) {
      const size_t lo = c * chunk, hi = std::min(present, lo + chunk);
      std::vector<kvcache::MutableBuffer> bufs;
      for (size_t i = lo; i < hi; ++i) bufs.push_back({f->values[i].data(), f->values[i].size()});
      store->Get(std::span<const BlockHash>(f->keys).subspan(lo, hi - lo), bufs,
                 [f, inbox, c, lo, finish](std::vector<Result<size_t>> r) {
                   std::lock_guard lk2(inbox->mu);
                   for (size_t i = 0; i < r.size(); ++i) f->results[lo + i] = std::move(r[i]);
                   f->chunk_done[c] = 1;
                   if (--f->chunks_left == 0) finish();
                 });
    }
  });
}

void EngineImpl::InstallFetched(Seq* s, Batch* b) {
  std::shared_ptr<Fetch> f = std::move(s->fetch);
  s->fetch.reset();
  --fetches_inflight_;
  const size_t bytes = kv_->block_bytes();
  const size_t chunk = std::max<size_t>(1, config_.kv_fetch_chunk_blocks);
  size_t ok = 0;
  bool timed_out;
  {
    std::lock_guard lk(fetch_inbox_->mu);
    timed_out = !f->done;
    // The contiguous prefix of blocks whose chunk is done and whose value has the model's size.
    // A chunk still in flight is never read: its Get may still be writing those buffers.
    while (ok < f->present && f->chunk_done[ok / chunk] && f->results[ok].ok() && *f->results[ok] == bytes) ++ok;
    stat_fetch_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                          (timed_out ? Clock::now() : f->finished) - f->started)
                          .count();
  }
  if (timed_out) {
    ++stat_fetch_timeouts_;
    LADLE_LOG_WARN("engine.kv_fetch_deadline blocks_asked={} blocks_arrived={}", f->keys.size(), ok);
  }
  // Hold every installed block until all are named, so installing one never evicts another
  // of the same chain; then release them into the LRU (head most recent) for TryAdmit's Match.
  std::vector<int32_t> held;
  size_t installed = 0;
  BlockEvent stored;
  for (size_t i = 0; i < ok; ++i) {
    const BlockHash& h = f->keys[i];
    if (blocks_.IsCached(h)) continue;  // computed meanwhile by another request
    const int32_t blk = blocks_.Allocate();
    if (blk < 0) break;  // the pool is full: the rest recomputes
    blocks_.Register(blk, h);
    if (config_.on_block_event) NoteStored(s, s->pool_prefix + i, &stored);
    held.push_back(blk);
    if (!f->pinned.empty()) {
      // Copied straight from the fetcher's shm; the pin is dropped once the copy is done.
      kvcache::FetcherStore::Pinned p = std::move(f->pinned[i]);
      b->installs.push_back({blk, std::span<const uint8_t>(p->data, p->len), std::const_pointer_cast<kvcache::ShmBlock>(p)});
    } else {
      auto buf = std::make_shared<std::vector<uint8_t>>(std::move(f->values[i]));
      b->installs.push_back({blk, std::span<const uint8_t>(*buf), buf});
    }
    ++installed;
  }
  FlushStored(&stored);
  blocks_.ReleaseAll(&held);
  s->store_blocks = installed;
  stat_fetch_blocks_ += installed;
}

}  // namespace ladle::engine
