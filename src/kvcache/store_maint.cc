// The maintenance side of the store: background repair of lost/bad chunks, GC (TTL, then LRU
// between the watermarks) and fsck. One thread runs repairs as reads report them and a GC pass
// every gc_interval (when gc_in_process); RunGcOnce and Fsck run the same code on the caller.
#include <algorithm>
#include <bit>
#include <cstring>

#include "ladle/core/logging.h"
#include "object_format.h"
#include "store.h"

namespace ladle::kvcache {

void Store::ScheduleRepair(const BlockKey& stripe) {
  std::lock_guard lock(maint_mu_);
  if (stop_ || !repair_pending_.insert(stripe).second) return;
  repair_queue_.push_back(stripe);
  maint_cv_.notify_one();
}

void Store::CollectGarbage() {
  std::vector<BlockKey> garbage;
  {
    std::lock_guard lock(mu_);
    garbage.swap(garbage_);
  }
  std::vector<BlockKey> kept;
  for (const BlockKey& stripe : garbage) {
    {
      std::lock_guard lock(mu_);
      auto it = catalog_.find(stripe);
      if (it == catalog_.end() || it->second.live != 0) continue;  // gone, or written again since
    }
    if (!EvictIfIdle(stripe, std::nullopt)) kept.push_back(stripe);  // a read of it is in flight
  }
  std::lock_guard lock(mu_);
  garbage_.insert(garbage_.end(), kept.begin(), kept.end());
}

void Store::MaintenanceMain() {
  auto next_gc = std::chrono::steady_clock::now() + opt_.gc_interval;
  for (;;) {
    std::vector<BlockKey> repairs;
    {
      std::unique_lock lock(maint_mu_);
      maint_cv_.wait_until(lock, next_gc, [&] { return stop_ || !repair_queue_.empty(); });
      if (stop_) return;
      while (!repair_queue_.empty()) {
        repairs.push_back(repair_queue_.front());
        repair_queue_.pop_front();
      }
    }
    // A throwing pass is logged and the loop goes on; the thread itself never dies silently.
    try {
      for (const BlockKey& key : repairs) {
        {
          std::lock_guard lock(maint_mu_);
          repair_pending_.erase(key);
        }
        std::lock_guard gc(gc_mu_);
        uint64_t n = 0;
        RepairKey(key, &n);
      }
      if (std::chrono::steady_clock::now() >= next_gc) {
        {
          // Superseded writes of this process are its own to clean, GC worker or not.
          std::lock_guard gc(gc_mu_);
          CollectGarbage();
        }
        if (opt_.gc_in_process) {
          std::lock_guard gc(gc_mu_);
          GcPass();
        } else {
          FlushTouches();
        }
        next_gc = std::chrono::steady_clock::now() + opt_.gc_interval;
      }
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("kvcache.maintenance_failed what={}", e.what());
    } catch (...) {
      LADLE_LOG_ERROR("kvcache.maintenance_failed what=unknown");
    }
  }
}

void Store::FlushTouches() {
  std::vector<std::vector<std::pair<BlockKey, int64_t>>> per_target(n_);
  std::vector<std::pair<BlockKey, int64_t>> flushed;
  {
    std::lock_guard lock(mu_);
    for (const BlockKey& key : dirty_) {
      auto it = catalog_.find(key);
      if (it == catalog_.end() || it->second.last_read_ms <= it->second.flushed_read_ms) continue;
      for (unsigned d = 0; d < n_; ++d) {
        if (it->second.mask & (1u << d)) per_target[d].emplace_back(key, it->second.last_read_ms);
      }
      flushed.emplace_back(key, it->second.last_read_ms);
      it->second.flushed_read_ms = it->second.last_read_ms;  // provisional; see below
    }
    dirty_.clear();
  }
  bool failed = false;
  for (unsigned d = 0; d < n_; ++d) {
    if (per_target[d].empty() || IsDown(d)) continue;
    Status s = targets_[d]->index().Touch(per_target[d]);
    if (!s.ok()) {
      failed = true;
      LADLE_LOG_WARN("kvcache.touch_failed path={} error={}", targets_[d]->path(), s.ToString());
    }
  }
  if (failed) {
    // Keep the in-memory times marked unflushed, so GC does not act on a stale order.
    std::lock_guard lock(mu_);
    for (auto& [key, ms] : flushed) {
      auto it = catalog_.find(key);
      if (it != catalog_.end()) it->second.flushed_read_ms = 0;
      dirty_.push_back(key);
    }
  }
}

double Store::MaxUsedRatio() const {
  double worst = 0;
  for (unsigned d = 0; d < n_; ++d) {
    uint64_t cap = targets_[d]->capacity_bytes();
    if (cap == 0 || IsDown(d)) continue;
    worst = std::max(worst, static_cast<double>(targets_[d]->used_bytes()) / static_cast<double>(cap));
  }
  return worst;
}

void Store::RemoveEverywhere(const BlockKey& key) {
  for (unsigned d = 0; d < n_; ++d) {
    if (IsDown(d)) continue;  // its copy is dropped on load as an orphan, or by fsck
    Status s = targets_[d]->RemoveSync(key);
    if (!s.ok()) LADLE_LOG_WARN("kvcache.remove_failed key={} path={} error={}", key.Hex(), targets_[d]->path(), s.ToString());
  }
}

std::optional<uint32_t> Store::EvictIfIdle(const BlockKey& stripe, std::optional<int64_t> seen_read_ms,
                                           uint64_t seen_seq) {
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    unsigned left = 0;
  };
  auto pending = std::make_shared<Pending>();
  uint32_t removed = 0;
  {
    std::lock_guard lock(mu_);
    if (leases_.count(stripe) != 0) return std::nullopt;  // its Put is in flight
    auto it = catalog_.find(stripe);
    if (it != catalog_.end()) {
      for (const StripeMember& mb : it->second.members) {
        // A read or put is in flight: never under its feet.
        if (leases_.count(mb.key) != 0) return std::nullopt;
        auto r = blocks_.find(mb.key);
        // Children go first (see children_); a member written again elsewhere is not ours.
        if (r != blocks_.end() && r->second.stripe == stripe && children_.count(mb.key) != 0) return std::nullopt;
      }
      // Read or rewritten since the order GC walks was taken: not the least recently read now.
      if (it->second.seq > seen_seq) return std::nullopt;
      if (seen_read_ms && (it->second.last_read_ms > it->second.flushed_read_ms || it->second.last_read_ms > *seen_read_ms)) {
        return std::nullopt;
      }
      removed = it->second.live;
      EraseEntryLocked(it);
    }
    // Queued under mu_: a Put of this stripe key that starts after us (it leases under mu_)
    // queues its writes behind these removes on each target's writer, so it keeps its new file.
    for (unsigned d = 0; d < n_; ++d) {
      if (IsDown(d)) continue;
      {
        std::lock_guard pl(pending->mu);
        ++pending->left;
      }
      targets_[d]->RemoveAsync(stripe, [pending, this, stripe, d](Status s) {
        if (!s.ok()) LADLE_LOG_WARN("kvcache.remove_failed stripe={} path={} error={}", stripe.Hex(), targets_[d]->path(), s.ToString());
        std::lock_guard pl(pending->mu);
        --pending->left;
        pending->cv.notify_all();
      });
    }
  }
  std::unique_lock pl(pending->mu);
  if (!pending->cv.wait_for(pl, opt_.domain_timeout * 2, [&] { return pending->left == 0; })) {
    LADLE_LOG_WARN("kvcache.evict_slow stripe={} pending_removes={}", stripe.Hex(), pending->left);
  }
  evictions_ += removed;
  return removed;
}

uint64_t Store::GcPass() {
  FlushTouches();
  CollectGarbage();
  int64_t now = NowMs();
  uint64_t evicted = 0;
  int primary = -1;
  for (unsigned d = 0; d < n_; ++d) {
    if (!IsDown(d)) {
      primary = static_cast<int>(d);
      break;
    }
  }
  if (primary < 0) return 0;
  Index& index = targets_[primary]->index();
  // TTL: the expiry order's head, until a batch removes nothing (leased keys stay until next pass).
  for (;;) {
    std::vector<BlockKey> batch = index.Expired(now, 256);
    {
      // Deepest first: a parent expires with its children (their expiry is capped by its own)
      // and is only evicted once they are gone.
      std::lock_guard lock(mu_);
      auto depth = [&](const BlockKey& k) {
        auto it = catalog_.find(k);
        return it == catalog_.end() ? 0u : it->second.depth;
      };
      std::stable_sort(batch.begin(), batch.end(), [&](const BlockKey& a, const BlockKey& b) { return depth(a) > depth(b); });
    }
    uint64_t removed = 0;
    for (const BlockKey& key : batch) {
      if (auto n = EvictIfIdle(key, std::nullopt)) {
        ++removed;
        evicted += *n;
      }
    }
    if (removed == 0 || batch.size() < 256) break;
  }
  // LRU between the watermarks. Walking the "l" order costs what it evicts plus what it skips.
  if (MaxUsedRatio() > opt_.high_watermark) {
    std::string cursor;
    while (MaxUsedRatio() > opt_.low_watermark) {
      uint64_t seen_seq;
      {
        std::lock_guard lock(mu_);
        seen_seq = change_seq_;
      }
      auto batch = index.Lru(&cursor, 256);
      if (batch.empty()) break;
      for (const auto& [key, read_ms] : batch) {
        if (MaxUsedRatio() <= opt_.low_watermark) break;
        // A skipped block (leased, just read, or with children) keeps its ancestors by itself:
        // each of them still has a child in the catalog (children_).
        if (auto n = EvictIfIdle(key, read_ms, seen_seq)) evicted += *n;
      }
    }
    LADLE_LOG_INFO("kvcache.gc_pass evicted={} used_ratio={:.3f}", evicted, MaxUsedRatio());
  }
  return evicted;
}

Result<uint64_t> Store::RunGcOnce() {
  std::lock_guard gc(gc_mu_);
  return GcPass();
}

Store::RepairResult Store::RepairKey(const BlockKey& key, uint64_t* rewritten) {
  Entry e;
  {
    std::lock_guard lock(mu_);
    auto it = catalog_.find(key);
    if (it == catalog_.end()) return RepairResult::kGone;
    e = it->second;
  }
  std::vector<std::vector<uint8_t>> chunks(n_);
  std::vector<ChunkHeader> headers(n_);
  uint32_t decoded = 0, down = 0;
  for (unsigned d = 0; d < n_; ++d) {
    if (IsDown(d)) {
      down |= 1u << d;
      continue;
    }
    auto r = targets_[d]->ReadSync(key);
    if (!r.ok()) continue;
    auto dec = DecodeChunk(*r);
    if (!dec.ok()) {
      ++corrupt_;
      continue;
    }
    const ChunkHeader& h = dec->header;
    if (h.key == key && h.chunk_idx == d && h.k == k_ && h.m == m_) {
      headers[d] = h;
      chunks[d] = std::move(*r);
      decoded |= 1u << d;
    }
  }
  auto write_mask = [&](uint64_t write_id, const std::vector<StripeMember>& members) {
    uint32_t mask = 0;
    for (unsigned d = 0; d < n_; ++d) {
      if ((decoded & (1u << d)) && headers[d].write_id == write_id && headers[d].members == members) mask |= 1u << d;
    }
    return mask;
  };
  uint32_t valid = write_mask(e.write_id, e.members);
  // A newer complete write than the index knows (killed between rename and index update):
  // the files are the truth, adopt it.
  for (unsigned d = 0; d < n_; ++d) {
    if (!(decoded & (1u << d)) || headers[d].write_id <= e.write_id) continue;
    const ChunkHeader& h = headers[d];
    uint32_t mask = write_mask(h.write_id, h.members);
    Entry ne;
    ne.members = h.members;
    if (!Decodable(ne, mask)) continue;
    int64_t ttl = std::chrono::duration_cast<std::chrono::milliseconds>(
                      h.cls == TrafficClass::kAgent ? opt_.ttl_agent : opt_.ttl_chatbot).count();
    e.value_len = h.value_len;
    e.write_ms = h.write_ms;
    e.write_id = h.write_id;
    e.expire_ms = h.write_ms + ttl;
    e.has_parent = h.has_parent;
    e.parent = h.parent;
    e.depth = h.depth;
    e.cls = h.cls;
    e.members = h.members;
    e.mask = mask;
    for (unsigned x = 0; x < n_; ++x) {
      if (!(mask & (1u << x))) continue;
      IndexMeta meta = MetaOf(e);
      meta.file_bytes = chunks[x].size();
      (void)targets_[x]->Adopt(key, meta);
    }
    {
      std::lock_guard lock(mu_);
      auto it = catalog_.find(key);
      if (it != catalog_.end()) {
        e.last_read_ms = it->second.last_read_ms;
        e.flushed_read_ms = it->second.flushed_read_ms;
        SetEntryLocked(key, e);
      }
    }
    LADLE_LOG_INFO("kvcache.adopted_newer_write stripe={} chunks={}", key.Hex(), std::popcount(mask));
    valid = mask;
    break;
  }
  for (unsigned d = 0; d < n_; ++d) {
    if (!((decoded & ~valid) & (1u << d))) continue;
    chunks[d].clear();  // another write's chunk: rewritten below, or removed where this write has none
    if (!(RealMask(e) & (1u << d))) {
      Status s = targets_[d]->RemoveSync(key);
      if (!s.ok()) LADLE_LOG_WARN("kvcache.remove_failed stripe={} domain={} error={}", key.Hex(), d, s.ToString());
    }
  }
  auto set_mask = [&](uint32_t mask) {
    std::lock_guard lock(mu_);
    auto it = catalog_.find(key);
    if (it != catalog_.end() && it->second.write_id == e.write_id) it->second.mask = mask;
  };
  if (!Decodable(e, valid)) {
    if (down != 0) return RepairResult::kSkipped;  // a down domain may still hold what we lack
    LADLE_LOG_WARN("kvcache.stripe_unrecoverable stripe={} blocks={} valid_chunks={} k={}", key.Hex(), e.members.size(),
                   std::popcount(valid), k_);
    {
      std::lock_guard lock(mu_);
      auto it = catalog_.find(key);
      if (it != catalog_.end() && it->second.write_id == e.write_id) EraseEntryLocked(it);
    }
    RemoveEverywhere(key);
    return RepairResult::kUnrecoverable;
  }
  uint32_t want = RealMask(e) & ~down;
  if ((valid & want) == want) {
    set_mask(valid);
    return RepairResult::kOk;
  }
  // Rebuild the blocks, re-encode the stripe, rewrite the missing chunks.
  std::vector<std::vector<uint8_t>> slots;
  if (!RebuildSlots(e, valid, chunks, &slots)) return RepairResult::kSkipped;
  std::vector<std::span<const uint8_t>> values;
  for (size_t j = 0; j < e.members.size(); ++j) values.emplace_back(slots[j].data(), e.members[j].len);
  auto encoded = EncodeStripe(key, e, values);
  uint32_t now_valid = valid;
  IndexMeta meta = MetaOf(e);
  for (unsigned d = 0; d < n_; ++d) {
    if (!(want & (1u << d)) || (valid & (1u << d))) continue;
    Status s = targets_[d]->WriteSync(ChunkWrite{key, encoded[d], meta});
    if (s.ok()) {
      now_valid |= 1u << d;
      ++*rewritten;
      ++repairs_;
    } else {
      LADLE_LOG_WARN("kvcache.repair_write_failed stripe={} domain={} error={}", key.Hex(), d, s.ToString());
    }
  }
  set_mask(now_valid);
  LADLE_LOG_INFO("kvcache.repaired stripe={} chunks={}", key.Hex(), std::popcount(now_valid & ~valid));
  return RepairResult::kRepaired;
}

Result<KvStore::FsckReport> Store::Fsck() {
  std::lock_guard gc(gc_mu_);
  FlushTouches();
  // Adopt chunk files the indexes lack (a crash between rename and index update).
  for (unsigned d = 0; d < n_; ++d) {
    if (IsDown(d)) continue;
    targets_[d]->Scan([&](const BlockKey& key) {
      if (targets_[d]->index().Get(key)) return;
      auto r = targets_[d]->ReadSync(key);
      if (!r.ok()) return;
      auto dec = DecodeChunk(*r);
      if (!dec.ok() || !(dec->header.key == key) || dec->header.chunk_idx != d || dec->header.k != k_ ||
          dec->header.m != m_) {
        (void)targets_[d]->RemoveSync(key);  // garbage under a chunk's name (or an older format)
        return;
      }
      const ChunkHeader& h = dec->header;
      int64_t ttl = std::chrono::duration_cast<std::chrono::milliseconds>(
                        h.cls == TrafficClass::kAgent ? opt_.ttl_agent : opt_.ttl_chatbot).count();
      IndexMeta m;
      m.value_len = h.value_len;
      m.write_ms = h.write_ms;
      m.write_id = h.write_id;
      m.expire_ms = h.write_ms + ttl;
      m.last_read_ms = h.write_ms;
      m.parent = h.parent;
      m.has_parent = h.has_parent;
      m.depth = h.depth;
      m.cls = h.cls;
      m.members = h.members;
      m.file_bytes = r->size();
      if (!targets_[d]->Adopt(key, m).ok()) return;
      std::lock_guard lock(mu_);
      auto it = catalog_.find(key);
      Entry e = it == catalog_.end() ? Entry{} : it->second;
      if (!e.MergeChunk(m, d)) return;
      SetEntryLocked(key, e);
    });
  }
  std::vector<BlockKey> keys;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, e] : catalog_) keys.push_back(key);
  }
  FsckReport report;
  for (const BlockKey& key : keys) {
    uint64_t rewritten = 0;
    switch (RepairKey(key, &rewritten)) {
      case RepairResult::kGone: continue;
      case RepairResult::kOk: ++report.ok; break;
      case RepairResult::kRepaired: ++report.repaired; break;
      case RepairResult::kUnrecoverable: ++report.unrecoverable; break;
      case RepairResult::kSkipped: ++report.unrecoverable; break;
    }
    ++report.objects;
  }
  return report;
}

}  // namespace ladle::kvcache
