// The fetcher's shared-memory pool: one POSIX shm segment of fixed-size slots (ShmSegment) and
// the bookkeeping of which block lives in which slot (SlotPool). Slots [0, cache_slots) cache
// fetched blocks; [cache_slots, cache_slots + put_slots) are staging slots for writes, kept apart
// so that a burst of puts can never evict what readers are about to copy, and the reverse.
//
// A cache slot is free, loading (a store read into it is in flight), or ready (its bytes are
// the block's). Any non-free slot may be pinned (pins > 0): a pinned slot is never evicted or
// reused. Ready and unpinned slots sit in an LRU, least recently released first; a new key takes
// a free slot, else evicts the LRU head, else is refused (kResourceExhausted): the pool never
// blocks and never grows.
//
// Not thread-safe: the fetcher's event loop owns it (under its mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::kvcache {

class ShmSegment {
 public:
  // Creates and maps `bytes` read-write under a fresh name /ladle-fetch-<pid>-<random>. The
  // space is reserved with posix_fallocate: on a full tmpfs a page touched later would SIGBUS
  // the fetcher (or, worse, the engine), so a segment that does not fit fails here instead.
  static Result<std::unique_ptr<ShmSegment>> Create(size_t bytes);
  // Unmaps, closes and unlinks (if not yet).
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void Unlink();
  const std::string& name() const { return name_; }
  int fd() const { return fd_; }
  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }

  // Unlinks the segments of fetchers that died without cleaning up (kill -9): /dev/shm entries
  // ladle-fetch-<pid>-* whose pid no longer exists. Best effort; returns how many went.
  static size_t SweepStale();

 private:
  ShmSegment() = default;
  std::string name_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool linked_ = false;
};

class SlotPool {
 public:
  SlotPool(uint32_t cache_slots, uint32_t put_slots);

  enum class Got {
    kHit,        // ready in the pool: pinned, no store read
    kJoined,     // loading for another request: pinned, answered when that read completes
    kLoad,       // a fresh slot (free or evicted) now loading the key: pinned; the caller reads it
    kExhausted,  // every slot is pinned or loading: nothing changed
  };
  struct Acquired {
    Got got = Got::kExhausted;
    uint32_t slot = 0;
  };
  // Pins `key`'s slot, giving it one first when it has none.
  Acquired Pin(const BlockKey& key);
  // Drops one pin (a RELEASE, or a waiter gone). A ready slot whose last pin goes joins the LRU.
  void Unpin(uint32_t slot);
  // The read into a loading slot finished with `len` bytes: the slot is ready.
  void LoadDone(uint32_t slot, size_t len);
  // The read failed: the key leaves the table and the slot is free. `pins` is the number of pins
  // still held by waiters of that read (the caller answers them with the error); it must equal
  // the slot's count.
  void LoadFailed(uint32_t slot, uint32_t pins);

  size_t len(uint32_t slot) const { return slots_[slot].len; }
  uint32_t pins(uint32_t slot) const { return slots_[slot].pins; }
  bool IsCacheSlot(uint32_t slot) const { return slot < cache_slots_; }
  bool IsReady(uint32_t slot) const { return IsCacheSlot(slot) && slots_[slot].state == State::kReady; }

  // Up to n staging slots (fewer when the reserve runs short).
  std::vector<uint32_t> AllocPut(size_t n);
  void FreePut(uint32_t slot);
  bool IsPutSlot(uint32_t slot) const { return slot >= cache_slots_ && slot < cache_slots_ + put_slots_; }
  bool IsPutAllocated(uint32_t slot) const { return IsPutSlot(slot) && put_used_[slot - cache_slots_]; }

  uint32_t cache_slots() const { return cache_slots_; }
  uint32_t put_slots() const { return put_slots_; }
  struct Counts {
    uint32_t free = 0, loading = 0, ready = 0, pinned = 0, lru = 0, put_free = 0;
    uint64_t evictions = 0;
  };
  Counts counts() const { return counts_; }

  // Walks every slot, the table and the LRU: a slot has at most one key and the table agrees,
  // pins only on non-free slots, the LRU holds exactly the ready unpinned slots, the free list
  // exactly the free ones, and the counts add up. LADLE_CHECK on any violation.
  void CheckInvariants() const;

 private:
  enum class State : uint8_t { kFree, kLoading, kReady };
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Slot {
    BlockKey key;
    uint32_t pins = 0;
    uint32_t len = 0;
    uint32_t prev = kNil, next = kNil;  // LRU links
    State state = State::kFree;
    bool in_lru = false;
  };
  void LruPush(uint32_t slot);  // at the most recent end
  void LruRemove(uint32_t slot);
  void AddPin(uint32_t slot);

  uint32_t cache_slots_, put_slots_;
  std::vector<Slot> slots_;
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> table_;
  std::vector<uint32_t> free_;  // free cache slots (a stack)
  uint32_t lru_head_ = kNil, lru_tail_ = kNil;
  std::vector<uint32_t> put_free_;
  std::vector<bool> put_used_;
  Counts counts_;
};

}  // namespace ladle::kvcache
