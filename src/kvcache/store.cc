// Store: open, catalog, Match, Put, Delete, Stat. Reads are in store_read.cc, GC/repair/fsck in
// store_maint.cc.
#include "store.h"

#include <bit>
#include <cstring>
#include <random>

#include "ladle/core/logging.h"
#include "object_format.h"

namespace ladle::kvcache {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void RunDone(const char* what, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    LADLE_LOG_ERROR("kvcache.completion_threw op={} what={}", what, e.what());
  } catch (...) {
    LADLE_LOG_ERROR("kvcache.completion_threw op={} what=unknown", what);
  }
}

}  // namespace

Store::Store(unsigned k, unsigned m, StoreOptions options)
    : k_(k),
      m_(m),
      n_(k + m),
      opt_(std::move(options)),
      down_until_(new std::atomic<int64_t>[k + m]),
      last_answer_(new std::atomic<int64_t>[k + m]) {
  for (unsigned d = 0; d < n_; ++d) {
    down_until_[d] = 0;
    last_answer_[d] = 0;
  }
  write_seed_ = (static_cast<uint64_t>(std::random_device()()) << 32) ^ std::random_device()();
  codec_ = std::make_unique<EcCodec>(k, m);
}

bool Store::Entry::MergeChunk(const IndexMeta& m, unsigned d) {
  if (mask != 0 && write_id != m.write_id) {
    if (m.write_ms < write_ms) return false;  // a stale chunk of an older write
    mask = 0;
  }
  value_len = m.value_len;
  write_ms = m.write_ms;
  write_id = m.write_id;
  expire_ms = m.expire_ms;
  last_read_ms = std::max(last_read_ms, m.last_read_ms);
  flushed_read_ms = last_read_ms;
  parent = m.parent;
  has_parent = m.has_parent;
  depth = m.depth;
  cls = m.cls;
  mask |= 1u << d;
  return true;
}

Result<std::unique_ptr<Store>> Store::Open(const std::vector<std::string>& specs, unsigned k, unsigned m,
                                           StoreOptions options) {
  if (k < 1 || k + m > kMaxDomains || specs.size() != k + m) {
    return InvalidArgument("kvcache: want K+M targets with 1 <= K and K+M <= 32");
  }
  if (!(options.low_watermark > 0 && options.low_watermark <= options.high_watermark && options.high_watermark <= 1)) {
    return InvalidArgument("kvcache: want 0 < low_watermark <= high_watermark <= 1");
  }
  std::unique_ptr<Store> store(new Store(k, m, std::move(options)));
  TargetOptions to;
  to.io_depth = store->opt_.io_depth;
  to.write_threads = store->opt_.write_threads;
  to.o_direct = store->opt_.o_direct;
  to.fsync = store->opt_.fsync;
  to.capacity_bytes = store->opt_.capacity_bytes;
  to.ttl_agent_ms = std::chrono::duration_cast<std::chrono::milliseconds>(store->opt_.ttl_agent).count();
  to.ttl_chatbot_ms = std::chrono::duration_cast<std::chrono::milliseconds>(store->opt_.ttl_chatbot).count();
  for (const std::string& spec : specs) {
    LADLE_ASSIGN_OR_RETURN(std::unique_ptr<Target> t, OpenTarget(spec, to));
    store->targets_.push_back(std::move(t));
  }
  // The catalog: a key is stored where its newest write left chunks.
  for (unsigned d = 0; d < store->n_; ++d) {
    store->targets_[d]->index().ForEach(
        [&](const BlockKey& key, const IndexMeta& im) { (void)store->catalog_[key].MergeChunk(im, d); });
  }
  std::vector<BlockKey> partial;
  for (auto& [key, e] : store->catalog_) {
    store->LinkLocked(e, +1);  // no other thread yet
    if (std::popcount(e.mask) < static_cast<int>(store->n_)) partial.push_back(key);
  }
  store->timer_ = std::make_unique<TimerThread>();
  store->maint_ = std::thread([s = store.get()] { s->MaintenanceMain(); });
  // Blocks short of chunks (a domain lost while we were away): repair or drop them in the background.
  for (const BlockKey& key : partial) store->ScheduleRepair(key);
  return store;
}

Store::~Store() {
  {
    std::lock_guard lock(maint_mu_);
    stop_ = true;
  }
  maint_cv_.notify_all();
  if (maint_.joinable()) maint_.join();
  if (timer_) timer_->Stop();
  FlushTouches();
  // Closing a target answers what it still holds; those completions need the catalog alive.
  targets_.clear();
}

int64_t Store::NowMs() const {
  if (opt_.now_ms) return opt_.now_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}
int64_t Store::SteadyMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
bool Store::IsDown(unsigned d) const { return down_until_[d].load() > SteadyMs() || !targets_[d]->healthy(); }
uint32_t Store::UpMask() const {
  uint32_t up = 0;
  for (unsigned d = 0; d < n_; ++d) {
    if (!IsDown(d)) up |= 1u << d;
  }
  return up;
}

void Store::MarkDown(unsigned d, const std::string& why) {
  int64_t until = SteadyMs() + opt_.down_for.count();
  int64_t prev = down_until_[d].exchange(until);
  if (prev <= SteadyMs()) {
    LADLE_LOG_WARN("kvcache.domain_down domain={} path={} for_ms={} why={}", d, targets_[d]->path(),
                   opt_.down_for.count(), why);
  }
}

uint32_t Store::Hung(uint32_t late) const {
  uint32_t hung = 0;
  int64_t now = SteadyMs();
  for (unsigned d = 0; d < n_; ++d) {
    if ((late & (1u << d)) && now - last_answer_[d].load() >= opt_.domain_timeout.count()) hung |= 1u << d;
  }
  return hung;
}

bool Store::Present(const Entry& e, int64_t now) const {
  return e.expire_ms > now && std::popcount(e.mask & UpMask()) >= static_cast<int>(k_);
}

IndexMeta Store::MetaOf(const Entry& e) const {
  IndexMeta m;
  m.value_len = e.value_len;
  m.write_ms = e.write_ms;
  m.write_id = e.write_id;
  m.expire_ms = e.expire_ms;
  m.last_read_ms = e.last_read_ms;
  m.parent = e.parent;
  m.has_parent = e.has_parent;
  m.depth = e.depth;
  m.cls = e.cls;
  return m;
}

void Store::TouchLocked(const BlockKey& key, int64_t now) {
  BlockKey cur = key;
  // Bounded: a chain deeper than this is not a chain (a cycle would need a hash collision).
  for (int hops = 0; hops < 1 << 20; ++hops) {
    auto it = catalog_.find(cur);
    if (it == catalog_.end() || it->second.last_read_ms >= now) return;
    it->second.last_read_ms = now;
    it->second.seq = ++change_seq_;
    dirty_.push_back(cur);
    if (!it->second.has_parent) return;
    cur = it->second.parent;
  }
}

void Store::LinkLocked(const Entry& e, int delta) {
  if (!e.has_parent) return;
  if (delta > 0) {
    ++children_[e.parent];
    return;
  }
  auto it = children_.find(e.parent);
  LADLE_CHECK(it != children_.end() && it->second > 0);  // every unlink matches a link
  if (--it->second == 0) children_.erase(it);
}

void Store::SetEntryLocked(const BlockKey& key, const Entry& e) {
  auto [it, inserted] = catalog_.try_emplace(key, e);
  if (!inserted) {
    LinkLocked(it->second, -1);
    it->second = e;
  }
  LinkLocked(e, +1);
}

void Store::EraseEntryLocked(std::unordered_map<BlockKey, Entry, KeyHash>::iterator it) {
  LinkLocked(it->second, -1);
  catalog_.erase(it);
}

void Store::ReleaseLease(const BlockKey& key) {
  std::lock_guard lock(mu_);
  ReleaseLeaseLocked(key);
}

void Store::ReleaseLeaseLocked(const BlockKey& key) {
  auto it = leases_.find(key);
  LADLE_CHECK(it != leases_.end() && it->second > 0);
  if (--it->second == 0) leases_.erase(it);
}

void Store::Match(std::span<const BlockKey> keys, MatchDone done) {
  int64_t now = NowMs();
  uint32_t up = UpMask();
  size_t hit = 0;
  {
    std::lock_guard lock(mu_);
    for (const BlockKey& key : keys) {
      auto it = catalog_.find(key);
      if (it == catalog_.end() || it->second.expire_ms <= now ||
          std::popcount(it->second.mask & up) < static_cast<int>(k_)) {
        break;
      }
      ++hit;
    }
  }
  RunDone("match", [&] { done(hit); });
}

namespace {

struct PutBatch {
  std::mutex mu;
  std::vector<Status> statuses;
  size_t remaining = 0;
  KvStore::PutDone done;
  std::function<void()> release;  // the batch's leases: one chain, released together
  void Finish(size_t i, Status s) {
    bool last;
    {
      std::lock_guard lock(mu);
      statuses[i] = std::move(s);
      last = --remaining == 0;
    }
    if (!last) return;
    if (release) release();
    RunDone("put", [&] { done(std::move(statuses)); });
  }
};

struct PutKey {
  std::mutex mu;
  size_t index = 0;
  BlockKey key;
  Store::Entry entry;
  uint32_t issued = 0, answered = 0, ok = 0;
  Status first_error;
  bool finished = false;
};

}  // namespace

void Store::Put(std::span<const BlockKey> keys, std::span<const std::span<const uint8_t>> values, TrafficClass cls,
                PutDone done, std::optional<BlockKey> parent_of_first) {
  auto batch = std::make_shared<PutBatch>();
  batch->statuses.resize(keys.size());
  batch->remaining = keys.size();
  batch->done = std::move(done);
  if (keys.size() != values.size()) {
    for (auto& s : batch->statuses) s = InvalidArgument("kvcache put: keys and values differ in count");
    return RunDone("put", [&] { batch->done(std::move(batch->statuses)); });
  }
  if (keys.empty()) return RunDone("put", [&] { batch->done({}); });
  int64_t now = NowMs();
  int64_t ttl = std::chrono::duration_cast<std::chrono::milliseconds>(
                    cls == TrafficClass::kAgent ? opt_.ttl_agent : opt_.ttl_chatbot).count();
  // The keys of one Put are a chain in order: keys[i-1] is keys[i]'s parent (GC order).
  std::vector<Entry> entries(keys.size());
  {
    std::lock_guard lock(mu_);
    // A Put leases its keys until it completes: GC must not evict a parent whose child is
    // being written (the child would land orphaned).
    for (const BlockKey& key : keys) ++leases_[key];
    // Released when the whole batch is done: a parent written first must not be evicted while
    // its children are still in flight (they are not in the catalog yet to protect it).
    batch->release = [this, leased = std::vector<BlockKey>(keys.begin(), keys.end())] {
      std::lock_guard lock(mu_);
      for (const BlockKey& key : leased) ReleaseLeaseLocked(key);
    };
    for (size_t i = 0; i < keys.size(); ++i) {
      Entry& e = entries[i];
      e.value_len = values[i].size();
      e.write_ms = now;
      e.write_id = SplitMix(write_seed_ ^ write_seq_++);
      e.expire_ms = now + ttl;
      e.last_read_ms = now;
      e.cls = cls;
      if (i > 0) {
        e.has_parent = true;
        e.parent = keys[i - 1];
        e.depth = entries[i - 1].depth + 1;
        // A child never outlives its parent: after the parent expires it is unreachable anyway.
        e.expire_ms = std::min(e.expire_ms, entries[i - 1].expire_ms);
      } else if (parent_of_first && !(*parent_of_first == keys[0])) {
        // The caller continues a chain put earlier: link to it, one deeper, expiring no later.
        e.has_parent = true;
        e.parent = *parent_of_first;
        auto pit = catalog_.find(*parent_of_first);
        e.depth = pit == catalog_.end() ? 1 : pit->second.depth + 1;
        if (pit != catalog_.end()) e.expire_ms = std::min(e.expire_ms, pit->second.expire_ms);
      } else if (auto it = catalog_.find(keys[0]); it != catalog_.end() && it->second.has_parent) {
        // Rewriting a known block keeps its link.
        e.has_parent = true;
        e.parent = it->second.parent;
        e.depth = it->second.depth;
      }
    }
  }
  uint32_t up = UpMask();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (values[i].size() > kMaxValueBytes) {
      batch->Finish(i, InvalidArgument("kvcache put: value over 1 GiB"));
      continue;
    }
    auto pk = std::make_shared<PutKey>();
    pk->index = i;
    pk->key = keys[i];
    pk->entry = entries[i];
    const Entry& e = entries[i];
    ChunkHeader h;
    h.key = keys[i];
    h.value_len = e.value_len;
    h.write_ms = e.write_ms;
    h.write_id = e.write_id;
    h.has_parent = e.has_parent;
    h.parent = e.has_parent ? e.parent : BlockKey{};
    h.chunk_len = ChunkLenFor(e.value_len, k_);
    h.depth = e.depth;
    h.k = static_cast<uint8_t>(k_);
    h.m = static_cast<uint8_t>(m_);
    h.cls = cls;
    std::vector<std::shared_ptr<const std::vector<uint8_t>>> chunks(n_);
    if (k_ == 1 && m_ == 0) {
      h.chunk_idx = 0;
      chunks[0] = std::make_shared<std::vector<uint8_t>>(EncodeChunk(h, values[i]));
    } else {
      // Data chunks are the value cut in K, the last one zero-padded; parity from ISA-L.
      size_t cl = h.chunk_len;
      std::vector<uint8_t> plain(cl * n_, 0);
      if (!values[i].empty()) std::memcpy(plain.data(), values[i].data(), values[i].size());
      std::vector<uint8_t*> ptr(n_);
      for (unsigned d = 0; d < n_; ++d) ptr[d] = plain.data() + d * cl;
      codec_->Encode(cl, ptr.data(), ptr.data() + k_);
      for (unsigned d = 0; d < n_; ++d) {
        h.chunk_idx = static_cast<uint8_t>(d);
        chunks[d] = std::make_shared<std::vector<uint8_t>>(EncodeChunk(h, std::span<const uint8_t>(ptr[d], cl)));
      }
    }
    auto finish = [this, batch](const std::shared_ptr<PutKey>& p) {
      // Caller holds p->mu and has set p->finished.
      Status s;
      bool stored = std::popcount(p->ok) >= static_cast<int>(k_);
      {
        std::lock_guard lock(mu_);
        if (stored) {
          Entry e = p->entry;
          e.mask = p->ok;
          e.flushed_read_ms = e.last_read_ms;  // what the targets' index upserts wrote
          e.seq = ++change_seq_;
          // A rewrite never lowers the last-read time (reads during the Put raised it and its
          // ancestors'): lowering it would put a child behind its parent in GC order.
          auto old = catalog_.find(p->key);
          if (old != catalog_.end() && old->second.last_read_ms > e.last_read_ms) {
            e.last_read_ms = old->second.last_read_ms;
            dirty_.push_back(p->key);
          }
          SetEntryLocked(p->key, e);
          if (e.has_parent) TouchLocked(e.parent, e.last_read_ms);
          ++puts_;
        } else if (n_ > 1) {
          // Too few chunks to read back: drop the block (what was written would mix with nothing).
          if (auto it = catalog_.find(p->key); it != catalog_.end()) EraseEntryLocked(it);
        }
      }
      if (!stored) {
        s = p->first_error.ok() ? Status(StatusCode::kUnavailable, "kvcache put: too few domains up") : p->first_error;
        if (n_ > 1) {
          for (unsigned d = 0; d < n_; ++d) {
            if (p->ok & (1u << d)) targets_[d]->RemoveAsync(p->key, [](Status) {});
          }
        }
      }
      return s;
    };
    auto on_answer = [this, pk, batch, finish](unsigned d, Status s) {
      if (s.code() != StatusCode::kDeadlineExceeded) NoteAnswer(d);
      Status out;
      {
        std::lock_guard lock(pk->mu);
        if (pk->finished || (pk->answered & (1u << d))) return;
        pk->answered |= 1u << d;
        if (s.ok()) {
          pk->ok |= 1u << d;
        } else if (pk->first_error.ok()) {
          pk->first_error = s;
        }
        if (pk->answered != pk->issued) return;
        pk->finished = true;
        out = finish(pk);
      }
      batch->Finish(pk->index, std::move(out));
    };
    {
      std::lock_guard lock(pk->mu);
      for (unsigned d = 0; d < n_; ++d) {
        if (up & (1u << d)) pk->issued |= 1u << d;
      }
      if (pk->issued == 0) {
        pk->finished = true;
        batch->Finish(i, Status(StatusCode::kUnavailable, "kvcache put: every domain is down"));
        continue;
      }
    }
    IndexMeta meta = MetaOf(e);
    for (unsigned d = 0; d < n_; ++d) {
      if (!(pk->issued & (1u << d))) continue;
      targets_[d]->WriteAsync(ChunkWrite{keys[i], chunks[d], meta}, [on_answer, d](Status s) { on_answer(d, std::move(s)); });
    }
    // Every wait has a deadline: a domain silent for domain_timeout is down for this write.
    // The timer's closure owns `check`; re-arming takes it from the weak handle while it runs.
    auto check = std::make_shared<std::function<void()>>();
    std::weak_ptr<PutKey> weak = pk;
    std::weak_ptr<std::function<void()>> weak_check = check;
    *check = [this, weak, weak_check, on_answer] {
      auto p = weak.lock();
      if (!p) return;
      uint32_t late;
      {
        std::lock_guard lock(p->mu);
        if (p->finished) return;
        late = p->issued & ~p->answered;
      }
      uint32_t hung = Hung(late);
      for (unsigned d = 0; d < n_; ++d) {
        if (hung & (1u << d)) {
          MarkDown(d, "write timed out");
          on_answer(d, Status(StatusCode::kDeadlineExceeded, "kvcache put: domain timed out"));
        }
      }
      if (late & ~hung) {
        if (auto c = weak_check.lock()) timer_->After(opt_.domain_timeout, [c] { (*c)(); });
      }
    };
    timer_->After(opt_.domain_timeout, [check] { (*check)(); });
  }
}

void Store::Delete(std::span<const BlockKey> keys, DeleteDone done) {
  std::vector<Status> out(keys.size());
  {
    std::lock_guard lock(mu_);
    for (const BlockKey& key : keys) {
      if (auto it = catalog_.find(key); it != catalog_.end()) EraseEntryLocked(it);
    }
  }
  // Unlinks are quick metadata operations; doing them here keeps Delete's completion ordered
  // after the files are gone (a Delete then Match never sees the block).
  uint32_t up = UpMask();
  for (size_t i = 0; i < keys.size(); ++i) {
    for (unsigned d = 0; d < n_; ++d) {
      if (!(up & (1u << d))) continue;
      Status s = targets_[d]->RemoveSync(keys[i]);
      if (!s.ok() && out[i].ok()) out[i] = s;
    }
  }
  RunDone("delete", [&] { done(std::move(out)); });
}

StoreStat Store::Stat() {
  StoreStat s;
  for (unsigned d = 0; d < n_; ++d) {
    TargetStat t;
    t.path = targets_[d]->path();
    t.used_bytes = targets_[d]->used_bytes();
    t.capacity_bytes = targets_[d]->capacity_bytes();
    t.objects = targets_[d]->objects();
    t.down = IsDown(d);
    s.targets.push_back(std::move(t));
    if (!targets_[d]->healthy()) s.healthy = false;
  }
  s.hits = hits_;
  s.misses = misses_;
  s.puts = puts_;
  s.evictions = evictions_;
  s.repairs = repairs_;
  s.corrupt = corrupt_;
  if (!maint_healthy_) s.healthy = false;
  return s;
}

}  // namespace ladle::kvcache
