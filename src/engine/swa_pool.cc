#include "ladle/engine/swa_pool.h"

#include "ladle/core/logging.h"

namespace ladle::engine {

SwaPool::SwaPool(SwaPoolOptions o) : opt_(o) {}

void SwaPool::EraseLocked(std::unordered_map<kvcache::BlockKey, Entry, kvcache::BlockKeyHash>::iterator it) {
  LADLE_CHECK(stats_.bytes >= it->second.ring->size());
  stats_.bytes -= it->second.ring->size();
  lru_.erase(it->second.lru);
  map_.erase(it);
  stats_.entries = map_.size();
}

bool SwaPool::Put(const kvcache::BlockKey& key, int64_t anchor, std::vector<uint8_t> ring, int64_t now_ms) {
  std::lock_guard lock(mu_);
  if (ring.size() > opt_.capacity_bytes) {
    ++stats_.refused;
    return false;
  }
  if (auto it = map_.find(key); it != map_.end()) EraseLocked(it);
  // Room: expired entries anywhere first, then from the LRU tail.
  if (stats_.bytes + ring.size() > opt_.capacity_bytes) {
    for (auto it = map_.begin(); it != map_.end();) {
      auto next = std::next(it);
      if (it->second.expire_ms <= now_ms) {
        EraseLocked(it);
        ++stats_.expired;
      }
      it = next;
    }
  }
  while (stats_.bytes + ring.size() > opt_.capacity_bytes) {
    LADLE_CHECK(!lru_.empty());
    EraseLocked(map_.find(lru_.back()));
    ++stats_.evicted;
  }
  lru_.push_front(key);
  Entry e;
  stats_.bytes += ring.size();
  e.ring = std::make_shared<const std::vector<uint8_t>>(std::move(ring));
  e.anchor = anchor;
  e.expire_ms = now_ms + opt_.ttl_ms;
  e.lru = lru_.begin();
  map_.emplace(key, std::move(e));
  stats_.entries = map_.size();
  ++stats_.stored;
  LADLE_CHECK(stats_.bytes <= opt_.capacity_bytes && lru_.size() == map_.size());
  return true;
}

std::shared_ptr<const std::vector<uint8_t>> SwaPool::Get(const kvcache::BlockKey& key, int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  if (it->second.expire_ms <= now_ms) {
    EraseLocked(it);
    ++stats_.expired;
    ++stats_.misses;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++stats_.hits;
  return it->second.ring;
}

bool SwaPool::Contains(const kvcache::BlockKey& key, int64_t now_ms) const {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  return it != map_.end() && it->second.expire_ms > now_ms;
}

uint64_t SwaPool::Expire(int64_t now_ms) {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (auto it = map_.begin(); it != map_.end();) {
    auto next = std::next(it);
    if (it->second.expire_ms <= now_ms) {
      EraseLocked(it);
      ++n;
    }
    it = next;
  }
  stats_.expired += n;
  return n;
}

SwaPoolStats SwaPool::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void LocalSwaDirectory::Record(const kvcache::BlockKey& key, const std::string& holder, int64_t expire_ms) {
  std::lock_guard lock(mu_);
  where_[key] = {holder, expire_ms};
}

std::optional<std::string> LocalSwaDirectory::Locate(const kvcache::BlockKey& key, int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = where_.find(key);
  if (it == where_.end()) return std::nullopt;
  if (it->second.second <= now_ms) {
    where_.erase(it);
    return std::nullopt;
  }
  return it->second.first;
}

void LocalSwaDirectory::Forget(const kvcache::BlockKey& key) {
  std::lock_guard lock(mu_);
  where_.erase(key);
}

}  // namespace ladle::engine
