// A KvStore whose reads and writes go through a `ladle kv-fetcher` process (fetcher.h): what an
// engine uses when the store is owned by the fetcher. Reads land in the fetcher's shared-memory
// pool; FetchPinned hands them out in place (zero copy: the engine's swap-in thread copies them
// from shm into device KV), Get copies them into the caller's buffers. Writes are queued to one
// writer thread that stages them in shm and hands them to the fetcher: Put never blocks, and
// past max_put_queue_bytes blocks are dropped and counted, never queued without bound.
//
// When the fetcher dies, everything in flight completes with kUnavailable (reads: misses; the
// caller recomputes) and calls fail at once until the writer thread has reconnected through
// `connect` (tried every reconnect_every; `connect` may wait for a restarted process). No
// caller ever waits for a connection. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "ladle/kvcache/fetcher.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::kvcache {

struct FetcherStoreOptions {
  size_t max_put_queue_bytes = 256u << 20;
  std::chrono::milliseconds reconnect_every{500};
  std::chrono::milliseconds put_slot_timeout{1000};  // AllocPut's deadline on the writer thread
};

struct FetcherStoreStats {
  uint64_t reconnects = 0;        // connections made after the first
  uint64_t put_queue_drops = 0;   // blocks dropped: the write queue was full
  uint64_t put_stage_drops = 0;   // blocks dropped: no staging slot, or no fetcher
  bool connected = false;
  // The fetcher's own counters (shm hits, store reads, pool use), refreshed by the writer
  // thread about once a second, so reading them never waits on the fetcher.
  FetcherStats fetcher;
  bool fetcher_valid = false;
};

class FetcherStore final : public KvStore {
 public:
  using Connect = std::function<Result<std::unique_ptr<FetcherClient>>()>;
  // Connects once now; a failure is returned (the caller may run without a store).
  static Result<std::shared_ptr<FetcherStore>> Create(Connect connect, FetcherStoreOptions options = {});
  ~FetcherStore() override;

  void Match(std::span<const BlockKey> keys, MatchDone done) override;
  void Get(std::span<const BlockKey> keys, std::span<const MutableBuffer> buffers, GetDone done) override;
  void Put(std::span<const BlockKey> keys, std::span<const std::span<const uint8_t>> values, TrafficClass cls,
           PutDone done, std::optional<BlockKey> parent_of_first = std::nullopt) override;
  // Not through the fetcher: kUnsupported (run `ladle kv` against the store).
  void Delete(std::span<const BlockKey> keys, DeleteDone done) override;
  StoreStat Stat() override;
  Result<uint64_t> RunGcOnce() override;
  Result<FsckReport> Fsck() override;

  // A fetched block in the fetcher's shm, pinned until the last copy of the handle is dropped.
  using Pinned = std::shared_ptr<const ShmBlock>;
  // Per key, as it arrives (any order): the pinned block or its error; then `done` once.
  void FetchPinned(std::span<const BlockKey> keys, std::function<void(size_t, Result<Pinned>)> on_key,
                   std::function<void(Status)> done);

  Result<FetcherStats> FetcherStat(std::chrono::milliseconds timeout);
  FetcherStoreStats stats() const;

  class Impl;

 private:
  explicit FetcherStore(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace ladle::kvcache
