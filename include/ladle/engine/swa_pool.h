// The SWA KVCache host pool: snapshots of a request's sliding-window ring, kept in this
// process's memory for minutes (the recipe: TTL about 180 s, reused within a session), keyed by
// the chain key of the block that ends at the snapshot's anchor. Bounded in bytes; expired or
// least recently used entries go first. Time is passed in (now_ms), never read here, so the
// fleet simulator can drive the same class.
//
// SwaDirectory says which process holds an entry. LocalSwaDirectory is the one-process
// implementation; the cluster shards the same interface across entrypoints.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ladle/kvcache/kv_store.h"

namespace ladle::engine {

struct SwaPoolOptions {
  uint64_t capacity_bytes = 256ull << 20;
  int64_t ttl_ms = 180'000;
};

struct SwaPoolStats {
  uint64_t entries = 0, bytes = 0;
  uint64_t hits = 0, misses = 0, expired = 0, evicted = 0, stored = 0, refused = 0;
};

class SwaPool {
 public:
  explicit SwaPool(SwaPoolOptions o = {});

  // Stores (or replaces) the snapshot for `key` (the chain key at `anchor`). An entry larger
  // than the whole pool is refused (false); otherwise expired, then least recently used,
  // entries make room.
  bool Put(const kvcache::BlockKey& key, int64_t anchor, std::vector<uint8_t> ring, int64_t now_ms);
  // The snapshot, if present and not expired (a read refreshes its LRU place, not its TTL:
  // an entry lives ttl_ms from its write, as the recipe's pool turns over).
  std::shared_ptr<const std::vector<uint8_t>> Get(const kvcache::BlockKey& key, int64_t now_ms);
  bool Contains(const kvcache::BlockKey& key, int64_t now_ms) const;
  // Drops expired entries; returns how many.
  uint64_t Expire(int64_t now_ms);
  SwaPoolStats Stats() const;

 private:
  struct Entry {
    std::shared_ptr<const std::vector<uint8_t>> ring;
    int64_t anchor = 0;
    int64_t expire_ms = 0;
    std::list<kvcache::BlockKey>::iterator lru;  // position in lru_ (front = most recent)
  };
  void EraseLocked(std::unordered_map<kvcache::BlockKey, Entry, kvcache::BlockKeyHash>::iterator it);

  SwaPoolOptions opt_;
  mutable std::mutex mu_;
  std::unordered_map<kvcache::BlockKey, Entry, kvcache::BlockKeyHash> map_;
  std::list<kvcache::BlockKey> lru_;
  mutable SwaPoolStats stats_;
};

// Where an SWA entry lives: a holder id (a process or engine name), or nothing.
class SwaDirectory {
 public:
  virtual ~SwaDirectory() = default;
  virtual void Record(const kvcache::BlockKey& key, const std::string& holder, int64_t expire_ms) = 0;
  virtual std::optional<std::string> Locate(const kvcache::BlockKey& key, int64_t now_ms) = 0;
  virtual void Forget(const kvcache::BlockKey& key) = 0;
};

class LocalSwaDirectory final : public SwaDirectory {
 public:
  void Record(const kvcache::BlockKey& key, const std::string& holder, int64_t expire_ms) override;
  std::optional<std::string> Locate(const kvcache::BlockKey& key, int64_t now_ms) override;
  void Forget(const kvcache::BlockKey& key) override;

 private:
  std::mutex mu_;
  std::unordered_map<kvcache::BlockKey, std::pair<std::string, int64_t>, kvcache::BlockKeyHash> where_;
};

}  // namespace ladle::engine
