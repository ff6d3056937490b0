// The KV fetcher (the recipe's prefix-hit path): a separate process owns the KvStore (its
// RocksDB index admits one opener) and moves blocks between the store and a POSIX shared-memory
// pool; the engine process talks to it over a Unix socket and copies hit blocks from shm into
// device KV on its own thread. The engine never waits on storage I/O.
//
//   // fetcher process (`ladle kv-fetcher`), or in-process for tests:
//   auto srv = FetcherServer::Start({.store_uri = "fs:/data/kv", .socket_path = "/run/ladle/kvf.sock",
//                                    .block_bytes = 112 << 10});
//   // engine process:
//   auto c = FetcherClient::Connect("/run/ladle/kvf.sock", std::chrono::seconds(5));
//   c.value()->Fetch(keys, [&](size_t i, Result<ShmBlock> b) { /* copy b->data to device */ },
//                    [&](Status s) { /* every key answered */ });
//   c.value()->Release(slots);                        // once per READY, after the copy
//
// Pool: `slots` fixed slots of block_bytes (rounded up to 4 KiB) in one segment, with an LRU of
// cached unpinned blocks; a fetch that finds no free or evictable slot answers kResourceExhausted
// for those keys at once (the engine recomputes). Writes go through a separate reserve of
// put_slots staging slots. Details and the wire protocol: docs/kvcache.md, "The fetcher process".
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::kvcache {

struct FetcherOptions {
  // An open store, or (when null) `store_uri` opened with `store_options` by Start.
  std::shared_ptr<KvStore> store;
  std::string store_uri;
  StoreOptions store_options;
  // The listening SOCK_SEQPACKET socket. A stale socket file is replaced; a live one is an error.
  std::string socket_path;
  // Slot size: the largest block value, in bytes (required).
  size_t block_bytes = 0;
  // The cache pool: shm_bytes / block_bytes slots, at least one.
  size_t shm_bytes = 256u << 20;
  // Staging slots for puts, on top of the pool (at most wire::kMaxKeys).
  uint32_t put_slots = 16;
  // Stop() waits this long for store reads and writes in flight before closing.
  std::chrono::milliseconds drain_timeout{10000};
};

// Counters of one fetcher (STAT). Pool figures are a snapshot.
struct FetcherStats {
  uint64_t fetches = 0;       // FETCH requests
  uint64_t keys_fetched = 0;  // keys asked for by FETCH
  uint64_t shm_hits = 0;      // keys served from the pool, no store read
  uint64_t joined = 0;        // keys that joined a store read already in flight for the same key
  uint64_t store_reads = 0;   // KvStore::Get calls (one key each)
  uint64_t misses = 0;        // store reads answered kNotFound
  uint64_t exhausted = 0;     // keys answered kResourceExhausted (no free or evictable slot)
  uint64_t evictions = 0;     // cached blocks evicted from the pool for another key
  uint64_t puts = 0;          // blocks handed to KvStore::Put
  uint64_t put_drops = 0;     // staging slots asked for and not granted (back-pressure)
  uint64_t store_errors = 0;  // Get/Put failures other than misses
  uint64_t slots = 0, slots_used = 0, slots_pinned = 0, slots_free = 0, slots_loading = 0;
  uint64_t put_slots = 0, put_slots_free = 0;
  uint64_t clients = 0;
  uint64_t store_hits = 0, store_misses = 0;  // the KvStore's own StoreStat
  bool store_healthy = true;
};

class FetcherServer {
 public:
  // Opens the store if needed, creates the shm segment (/ladle-fetch-<pid>-<random>) and the
  // socket, and starts the event-loop thread.
  static Result<std::unique_ptr<FetcherServer>> Start(FetcherOptions options);
  ~FetcherServer();  // Stop()
  FetcherServer(const FetcherServer&) = delete;
  FetcherServer& operator=(const FetcherServer&) = delete;

  // Refuses new requests, waits up to drain_timeout for store I/O in flight (puts finish), then
  // disconnects every client and unlinks the socket and the shm name. Idempotent.
  void Stop();

  const std::string& socket_path() const;
  const std::string& shm_name() const;
  uint32_t slots() const;
  uint32_t put_slots() const;
  // False once the event loop died (it logs why and drops every client, who see kUnavailable).
  bool healthy() const;
  // In-process STAT; also checks every pool invariant (LADLE_CHECK).
  FetcherStats Stats() const;

  class Impl;

 private:
  explicit FetcherServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// A fetched block inside the client's mapping; valid until Release(slot) (and while the client
// lives, even after the fetcher died).
struct ShmBlock {
  const uint8_t* data = nullptr;
  size_t len = 0;
  uint32_t slot = 0;
};

// A staging slot for a put: write up to `capacity` bytes at `data` and set `len` (defaults to
// capacity), then hand it to Put (or CancelPut).
struct PutSlot {
  uint8_t* data = nullptr;
  uint32_t slot = 0;
  size_t capacity = 0;
  size_t len = 0;
};

// Thread-safety: every method may be called from any thread. Completions run on the client's
// reader thread and must not block (no blocking call from a completion: those answer
// kFailedPrecondition there); an exception thrown by one is caught and logged. When the fetcher
// is already gone, a call completes at once on the calling thread with kUnavailable.
class FetcherClient {
 public:
  // Connects (retrying while the socket is absent or refusing, until `timeout`), says HELLO and
  // maps the segment it is given.
  static Result<std::unique_ptr<FetcherClient>> Connect(const std::string& socket_path,
                                                        std::chrono::milliseconds timeout);
  // Disconnects: the fetcher releases this client's pins and staging slots. Pending completions
  // are called with kCancelled. Must not run on the reader thread (from a completion).
  ~FetcherClient();
  FetcherClient(const FetcherClient&) = delete;
  FetcherClient& operator=(const FetcherClient&) = delete;

  // The number of leading keys present in the store (metadata only).
  void Match(std::span<const BlockKey> keys, std::function<void(Result<size_t>)> done);

  // Every key gets exactly one on_key call, as its block arrives (shm hits first, then store
  // reads in completion order: the caller tracks its contiguous prefix), then on_done once.
  // A READY block's slot is pinned for this client until Release. Per-key errors: kNotFound
  // (a miss), kResourceExhausted (no slot: recompute), kUnavailable (the fetcher died).
  using KeyDone = std::function<void(size_t index, Result<ShmBlock>)>;
  void Fetch(std::span<const BlockKey> keys, KeyDone on_key, std::function<void(Status)> on_done);

  // Unpins, once per READY received; the blocks stay cached for later shm hits.
  void Release(std::span<const uint32_t> slots);

  // Up to n staging slots; fewer (or none) under back-pressure: the caller drops what it cannot
  // stage (counted in put_drops), it never queues.
  Result<std::vector<PutSlot>> AllocPut(size_t n, std::chrono::milliseconds timeout);
  // Gives staging slots back unused.
  void CancelPut(std::span<const PutSlot> slots);
  // KvStore::Put of each slot's bytes under its key (a chain, as KvStore::Put takes it). The
  // staging slots are the fetcher's again once Put is called; `done` gets per-key statuses.
  void Put(std::span<const BlockKey> keys, std::span<const PutSlot> slots, TrafficClass cls,
           std::optional<BlockKey> parent, std::function<void(std::vector<Status>)> done);

  Result<FetcherStats> Stat(std::chrono::milliseconds timeout);

  // False once the socket hit EOF or an error: every later call fails at once with kUnavailable.
  bool alive() const;
  size_t block_bytes() const;
  uint32_t slots() const;
  const std::string& shm_name() const;
  // Staging slots this client asked for and did not get.
  uint64_t put_drops() const;

  class Impl;

 private:
  explicit FetcherClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ladle::kvcache
