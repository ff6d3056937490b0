// The fetcher's shm segment and slot bookkeeping (see shm_pool.h).
#include "shm_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "ladle/core/logging.h"

namespace ladle::kvcache {

namespace {

constexpr const char* kPrefix = "ladle-fetch-";

std::string ErrnoText(int e) { return std::string(std::strerror(e)); }

uint64_t RandomWord() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
  // No entropy yet (early boot): the name only has to differ from a sibling's, and O_EXCL
  // catches the rest.
  v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return v * 0x9e3779b97f4a7c15ULL ^ reinterpret_cast<uintptr_t>(&v);
}

}  // namespace

Result<std::unique_ptr<ShmSegment>> ShmSegment::Create(size_t bytes) {
  if (bytes == 0) return InvalidArgument("shm segment of 0 bytes");
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    seg->name_ = fmt::format("/{}{}-{:016x}", kPrefix, ::getpid(), RandomWord());
    fd = ::shm_open(seg->name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return IoError("shm_open " + seg->name_ + ": " + ErrnoText(errno));
  }
  if (fd < 0) return IoError("shm_open: no free name after 8 tries");
  seg->fd_ = fd;
  seg->linked_ = true;
  seg->size_ = bytes;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return IoError("ftruncate " + seg->name_ + ": " + ErrnoText(errno));
  }
  if (int e = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
    Status s(e == ENOSPC ? StatusCode::kResourceExhausted : StatusCode::kIoError,
             fmt::format("reserving {} bytes of shm for {}: {}", bytes, seg->name_, ErrnoText(e)));
    return s;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return IoError("mmap " + seg->name_ + ": " + ErrnoText(errno));
  seg->base_ = static_cast<uint8_t*>(p);
  return seg;
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
  Unlink();
}

void ShmSegment::Unlink() {
  if (!linked_) return;
  linked_ = false;
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    LADLE_LOG_WARN("kvfetch.shm_unlink_failed name={} err={}", name_, ErrnoText(errno));
  }
}

size_t ShmSegment::SweepStale() {
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return 0;
  size_t removed = 0;
  const size_t plen = std::strlen(kPrefix);
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, kPrefix, plen) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(e->d_name + plen, &end, 10);
    if (end == e->d_name + plen || *end != '-' || pid <= 0) continue;
    // EPERM means the pid lives (another user's): only ESRCH says its owner is gone.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::string name = std::string("/") + e->d_name;
    if (::shm_unlink(name.c_str()) == 0) {
      ++removed;
      LADLE_LOG_INFO("kvfetch.shm_stale_removed name={} pid={}", name, pid);
    }
  }
  ::closedir(d);
  return removed;
}

SlotPool::SlotPool(uint32_t cache_slots, uint32_t put_slots)
    : cache_slots_(cache_slots), put_slots_(put_slots), slots_(cache_slots), put_used_(put_slots, false) {
  LADLE_CHECK(cache_slots > 0);
  free_.reserve(cache_slots);
  // Pushed in reverse so that the first slots taken are 0, 1, 2, ...
  for (uint32_t i = cache_slots; i-- > 0;) free_.push_back(i);
  for (uint32_t i = put_slots; i-- > 0;) put_free_.push_back(cache_slots + i);
  counts_.free = cache_slots;
  counts_.put_free = put_slots;
}

void SlotPool::LruPush(uint32_t s) {
  Slot& sl = slots_[s];
  LADLE_CHECK(!sl.in_lru && sl.pins == 0 && sl.state == State::kReady);
  sl.prev = lru_tail_;
  sl.next = kNil;
  if (lru_tail_ != kNil) slots_[lru_tail_].next = s;
  else lru_head_ = s;
  lru_tail_ = s;
  sl.in_lru = true;
  ++counts_.lru;
}

void SlotPool::LruRemove(uint32_t s) {
  Slot& sl = slots_[s];
  LADLE_CHECK(sl.in_lru);
  if (sl.prev != kNil) slots_[sl.prev].next = sl.next;
  else lru_head_ = sl.next;
  if (sl.next != kNil) slots_[sl.next].prev = sl.prev;
  else lru_tail_ = sl.prev;
  sl.prev = sl.next = kNil;
  sl.in_lru = false;
  --counts_.lru;
}

void SlotPool::AddPin(uint32_t s) {
  Slot& sl = slots_[s];
  if (sl.in_lru) LruRemove(s);
  if (sl.pins++ == 0) ++counts_.pinned;
}

SlotPool::Acquired SlotPool::Pin(const BlockKey& key) {
  if (auto it = table_.find(key); it != table_.end()) {
    const uint32_t s = it->second;
    const bool ready = slots_[s].state == State::kReady;
    AddPin(s);
    return {ready ? Got::kHit : Got::kJoined, s};
  }
  uint32_t s;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
    --counts_.free;
  } else if (lru_head_ != kNil) {
    s = lru_head_;
    LruRemove(s);
    Slot& old = slots_[s];
    LADLE_CHECK(old.pins == 0 && old.state == State::kReady);
    LADLE_CHECK(table_.erase(old.key) == 1);
    --counts_.ready;
    ++counts_.evictions;
  } else {
    return {Got::kExhausted, 0};
  }
  Slot& sl = slots_[s];
  sl.key = key;
  sl.state = State::kLoading;
  sl.len = 0;
  ++counts_.loading;
  table_.emplace(key, s);
  AddPin(s);
  return {Got::kLoad, s};
}

void SlotPool::Unpin(uint32_t s) {
  LADLE_CHECK(s < cache_slots_);
  Slot& sl = slots_[s];
  LADLE_CHECK(sl.pins > 0 && sl.state != State::kFree);
  if (--sl.pins > 0) return;
  --counts_.pinned;
  if (sl.state == State::kReady) LruPush(s);
}

void SlotPool::LoadDone(uint32_t s, size_t len) {
  LADLE_CHECK(s < cache_slots_);
  Slot& sl = slots_[s];
  LADLE_CHECK(sl.state == State::kLoading && !sl.in_lru);
  sl.state = State::kReady;
  sl.len = static_cast<uint32_t>(len);
  --counts_.loading;
  ++counts_.ready;
  // Every waiter went away while it loaded: the block is still worth keeping for a later hit.
  if (sl.pins == 0) LruPush(s);
}

void SlotPool::LoadFailed(uint32_t s, uint32_t pins) {
  LADLE_CHECK(s < cache_slots_);
  Slot& sl = slots_[s];
  LADLE_CHECK(sl.state == State::kLoading && !sl.in_lru);
  LADLE_CHECK(sl.pins == pins);
  LADLE_CHECK(table_.erase(sl.key) == 1);
  if (sl.pins > 0) --counts_.pinned;
  sl.pins = 0;
  sl.len = 0;
  sl.state = State::kFree;
  --counts_.loading;
  ++counts_.free;
  free_.push_back(s);
}

std::vector<uint32_t> SlotPool::AllocPut(size_t n) {
  std::vector<uint32_t> out;
  while (out.size() < n && !put_free_.empty()) {
    uint32_t s = put_free_.back();
    put_free_.pop_back();
    LADLE_CHECK(!put_used_[s - cache_slots_]);
    put_used_[s - cache_slots_] = true;
    out.push_back(s);
  }
  counts_.put_free = static_cast<uint32_t>(put_free_.size());
  return out;
}

void SlotPool::FreePut(uint32_t s) {
  LADLE_CHECK(IsPutAllocated(s));
  put_used_[s - cache_slots_] = false;
  put_free_.push_back(s);
  counts_.put_free = static_cast<uint32_t>(put_free_.size());
}

void SlotPool::CheckInvariants() const {
  Counts seen;
  for (uint32_t s = 0; s < cache_slots_; ++s) {
    const Slot& sl = slots_[s];
    switch (sl.state) {
      case State::kFree:
        ++seen.free;
        LADLE_CHECK(sl.pins == 0 && !sl.in_lru);
        break;
      case State::kLoading:
        ++seen.loading;
        LADLE_CHECK(!sl.in_lru);
        break;
      case State::kReady:
        ++seen.ready;
        // The LRU holds exactly the ready, unpinned slots: a pinned slot is never evictable.
        LADLE_CHECK(sl.in_lru == (sl.pins == 0));
        break;
    }
    if (sl.pins > 0) ++seen.pinned;
    if (sl.state != State::kFree) {
      auto it = table_.find(sl.key);
      LADLE_CHECK(it != table_.end() && it->second == s);  // one key per slot, and the table agrees
    }
  }
  LADLE_CHECK(table_.size() == seen.loading + seen.ready);
  for (const auto& [key, s] : table_) LADLE_CHECK(s < cache_slots_ && slots_[s].state != State::kFree && slots_[s].key == key);
  uint32_t prev = kNil;
  for (uint32_t s = lru_head_; s != kNil; s = slots_[s].next) {
    LADLE_CHECK(slots_[s].in_lru && slots_[s].prev == prev && slots_[s].pins == 0);
    ++seen.lru;
    LADLE_CHECK(seen.lru <= cache_slots_);  // no cycle
    prev = s;
  }
  LADLE_CHECK(prev == lru_tail_);
  LADLE_CHECK(free_.size() == seen.free);
  for (uint32_t s : free_) LADLE_CHECK(s < cache_slots_ && slots_[s].state == State::kFree);
  LADLE_CHECK(seen.free + seen.loading + seen.ready == cache_slots_);
  LADLE_CHECK(seen.free == counts_.free && seen.loading == counts_.loading && seen.ready == counts_.ready);
  LADLE_CHECK(seen.pinned == counts_.pinned && seen.lru == counts_.lru);
  uint32_t used = 0;
  for (bool u : put_used_) used += u ? 1 : 0;
  LADLE_CHECK(used + put_free_.size() == put_slots_ && counts_.put_free == put_free_.size());
  for (uint32_t s : put_free_) LADLE_CHECK(IsPutSlot(s) && !put_used_[s - cache_slots_]);
}

}  // namespace ladle::kvcache
