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
  write_salt_ = std::random_device()() & 0xff;
  codec_ = std::make_unique<EcCodec>(k, m);
}

bool Store::Entry::MergeChunk(const IndexMeta& m, unsigned d) {
  if (mask != 0 && write_id != m.write_id) {
    if (m.write_id < write_id) return false;  // a stale chunk of an older write
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
  members = m.members;
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
  // The catalog: a stripe is stored where its newest write left chunks.
  std::unordered_map<BlockKey, Entry, KeyHash> merged;
  // Stripes with a chunk of another write somewhere (a narrower rewrite leaves the old write's
  // chunk on a domain it no longer uses, if a crash came first): repair removes it.
  std::unordered_set<BlockKey, KeyHash> mixed;
  for (unsigned d = 0; d < store->n_; ++d) {
    store->targets_[d]->index().ForEach([&](const BlockKey& key, const IndexMeta& im) {
      if (im.members.empty() || im.members.size() > k || !(StripeKey(im.members[0].key, im.write_id) == key)) return;
      Entry& e = merged[key];
      if (e.mask != 0 && e.write_id != im.write_id) mixed.insert(key);
      (void)e.MergeChunk(im, d);
    });
  }
  std::vector<BlockKey> partial(mixed.begin(), mixed.end());
  for (auto& [key, e] : merged) {
    // No other thread yet; the block index keeps each block's newest stripe.
    store->SetEntryLocked(key, e);
    const Entry& in = store->catalog_.at(key);
    if ((in.mask & store->RealMask(in)) != store->RealMask(in) && !mixed.count(key)) partial.push_back(key);
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

uint32_t Store::VirtualMask(const Entry& e) const {
  uint32_t w = static_cast<uint32_t>(e.members.size());
  uint32_t below_k = k_ == 32 ? ~0u : (1u << k_) - 1;
  uint32_t below_w = w >= 32 ? ~0u : (1u << w) - 1;
  return below_k & ~below_w;
}

uint32_t Store::RealMask(const Entry& e) const {
  uint32_t all = n_ == 32 ? ~0u : (1u << n_) - 1;
  return all & ~VirtualMask(e);
}

bool Store::Decodable(const Entry& e, uint32_t have) const {
  return std::popcount((have & RealMask(e)) | VirtualMask(e)) >= static_cast<int>(k_);
}

uint64_t Store::NextWriteIdLocked(int64_t write_ms) {
  last_write_ = std::max(last_write_ + 1, static_cast<uint64_t>(std::max<int64_t>(write_ms, 0)) << 14);
  return last_write_ << 8 | write_salt_;
}

const Store::Entry* Store::FindBlockLocked(const BlockKey& key, uint32_t* j, BlockKey* stripe) const {
  auto r = blocks_.find(key);
  if (r == blocks_.end()) return nullptr;
  auto it = catalog_.find(r->second.stripe);
  LADLE_CHECK(it != catalog_.end() && r->second.j < it->second.members.size() &&
              it->second.members[r->second.j].key == key);
  *j = r->second.j;
  if (stripe) *stripe = r->second.stripe;
  return &it->second;
}

bool Store::Present(const Entry& e, int64_t now) const { return e.expire_ms > now && Decodable(e, e.mask & UpMask()); }

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
  m.members = e.members;
  return m;
}

void Store::TouchLocked(const BlockKey& key, int64_t now) {
  BlockKey cur = key;
  // Bounded: a chain deeper than this is not a chain (a cycle would need a hash collision).
  for (int hops = 0; hops < 1 << 20; ++hops) {
    auto r = blocks_.find(cur);
    if (r == blocks_.end()) return;
    auto it = catalog_.find(r->second.stripe);
    if (it == catalog_.end() || it->second.last_read_ms >= now) return;
    it->second.last_read_ms = now;
    it->second.seq = ++change_seq_;
    dirty_.push_back(r->second.stripe);
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

void Store::UnrefLocked(const BlockKey& stripe, const Entry& e) {
  for (const StripeMember& mb : e.members) {
    auto r = blocks_.find(mb.key);
    if (r != blocks_.end() && r->second.stripe == stripe) blocks_.erase(r);
  }
}

void Store::RefLocked(const BlockKey& block, const BlockKey& stripe, uint32_t j, Entry& e) {
  auto [r, inserted] = blocks_.try_emplace(block, BlockRef{stripe, j, e.write_id});
  if (inserted) {
    ++e.live;
    return;
  }
  if (r->second.stripe == stripe) {  // the key twice in one stripe: the later copy
    r->second.j = j;
    return;
  }
  if (r->second.write_id > e.write_id) return;  // a newer write of the block is elsewhere
  auto old = catalog_.find(r->second.stripe);
  LADLE_CHECK(old != catalog_.end() && old->second.live > 0);
  if (--old->second.live == 0) garbage_.push_back(old->first);
  r->second = BlockRef{stripe, j, e.write_id};
  ++e.live;
}

void Store::SetEntryLocked(const BlockKey& stripe, const Entry& e) {
  LADLE_CHECK(!e.members.empty() && StripeKey(e.members[0].key, e.write_id) == stripe);
  auto [it, inserted] = catalog_.try_emplace(stripe, e);
  if (!inserted) {
    UnrefLocked(stripe, it->second);
    LinkLocked(it->second, -1);
    it->second = e;
  }
  it->second.live = 0;
  LinkLocked(e, +1);
  for (uint32_t j = 0; j < e.members.size(); ++j) RefLocked(e.members[j].key, stripe, j, it->second);
  if (it->second.live == 0) garbage_.push_back(stripe);
}

void Store::EraseEntryLocked(std::unordered_map<BlockKey, Entry, KeyHash>::iterator it) {
  UnrefLocked(it->first, it->second);
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
      uint32_t j;
      const Entry* e = FindBlockLocked(key, &j);
      if (!e || e->expire_ms <= now || !Decodable(*e, e->mask & up)) break;
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

struct PutStripe {
  std::mutex mu;
  size_t first = 0;  // index of members[0] in the Put
  BlockKey key;      // the stripe's
  Store::Entry entry;
  uint32_t issued = 0, answered = 0, ok = 0;
  Status first_error;
  bool finished = false;
};

}  // namespace

std::vector<std::shared_ptr<const std::vector<uint8_t>>> Store::EncodeStripe(
    const BlockKey& stripe, const Entry& e, const std::vector<std::span<const uint8_t>>& values) {
  const size_t w = e.members.size();
  ChunkHeader h;
  h.key = stripe;
  h.value_len = e.value_len;
  h.write_ms = e.write_ms;
  h.write_id = e.write_id;
  h.has_parent = e.has_parent;
  h.parent = e.has_parent ? e.parent : BlockKey{};
  h.depth = e.depth;
  h.k = static_cast<uint8_t>(k_);
  h.m = static_cast<uint8_t>(m_);
  h.cls = e.cls;
  h.members = e.members;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> chunks(n_);
  // Data chunk j is block j as it is: no padding is stored, a read is one file of one block.
  for (size_t j = 0; j < w; ++j) {
    h.chunk_idx = static_cast<uint8_t>(j);
    h.chunk_len = static_cast<uint32_t>(e.members[j].len);
    chunks[j] = std::make_shared<std::vector<uint8_t>>(EncodeChunk(h, values[j]));
  }
  if (m_ == 0) return chunks;
  // Parity over the blocks zero-padded to the slot; data chunks w..K-1 are zero (shortened code).
  const size_t slot = SlotLen(e.members);
  std::vector<uint8_t> plain(slot * n_, 0);
  std::vector<uint8_t*> ptr(n_);
  for (unsigned d = 0; d < n_; ++d) ptr[d] = plain.data() + d * slot;
  for (size_t j = 0; j < w; ++j) {
    if (!values[j].empty()) std::memcpy(ptr[j], values[j].data(), values[j].size());
  }
  codec_->Encode(slot, ptr.data(), ptr.data() + k_);
  h.chunk_len = static_cast<uint32_t>(slot);
  for (unsigned p = 0; p < m_; ++p) {
    h.chunk_idx = static_cast<uint8_t>(k_ + p);
    chunks[k_ + p] = std::make_shared<std::vector<uint8_t>>(EncodeChunk(h, std::span<const uint8_t>(ptr[k_ + p], slot)));
  }
  return chunks;
}

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
  for (size_t i = 0; i < keys.size(); ++i) {
    if (values[i].size() <= kMaxValueBytes) continue;
    // One chain is written in stripes: a block that cannot be stored breaks it, so none is.
    for (size_t x = 0; x < keys.size(); ++x) {
      batch->statuses[x] = InvalidArgument(x == i ? "kvcache put: value over 1 GiB"
                                                  : "kvcache put: another value of this chain is over 1 GiB");
    }
    return RunDone("put", [&] { batch->done(std::move(batch->statuses)); });
  }
  int64_t now = NowMs();
  int64_t ttl = std::chrono::duration_cast<std::chrono::milliseconds>(
                    cls == TrafficClass::kAgent ? opt_.ttl_agent : opt_.ttl_chatbot).count();
  // The keys of one Put are a chain in order (keys[i-1] is keys[i]'s parent), cut into stripes
  // of K consecutive blocks; the last one may be narrower.
  std::vector<std::shared_ptr<PutStripe>> stripes;
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
    for (size_t first = 0; first < keys.size(); first += k_) {
      auto ps = std::make_shared<PutStripe>();
      ps->first = first;
      Entry& e = ps->entry;
      size_t w = std::min<size_t>(k_, keys.size() - first);
      for (size_t j = 0; j < w; ++j) {
        e.members.push_back(StripeMember{keys[first + j], values[first + j].size()});
        e.value_len += values[first + j].size();
      }
      e.write_ms = now;
      e.write_id = NextWriteIdLocked(now);
      ps->key = StripeKey(keys[first], e.write_id);
      // The stripe key is leased too: GC walks the indexes, which know a stripe before its Put
      // completes and the catalog does, and must not remove its files under it.
      ++leases_[ps->key];
      e.expire_ms = now + ttl;
      e.last_read_ms = now;
      e.cls = cls;
      if (!stripes.empty()) {
        const Entry& prev = stripes.back()->entry;
        e.has_parent = true;
        e.parent = keys[first - 1];
        e.depth = prev.depth + static_cast<uint32_t>(prev.members.size());
        // A child never outlives its parent: after the parent expires it is unreachable anyway.
        e.expire_ms = std::min(e.expire_ms, prev.expire_ms);
      } else if (parent_of_first && !(*parent_of_first == keys[0])) {
        // The caller continues a chain put earlier: link to it, one deeper, expiring no later.
        e.has_parent = true;
        e.parent = *parent_of_first;
        uint32_t pj;
        const Entry* pe = FindBlockLocked(*parent_of_first, &pj);
        e.depth = pe ? pe->depth + pj + 1 : 1;
        if (pe) e.expire_ms = std::min(e.expire_ms, pe->expire_ms);
      } else {
        // Rewriting a known block keeps its link.
        uint32_t oj;
        if (const Entry* old = FindBlockLocked(keys[0], &oj)) {
          if (oj > 0) {
            e.has_parent = true;
            e.parent = old->members[oj - 1].key;
            e.depth = old->depth + oj;
          } else if (old->has_parent) {
            e.has_parent = true;
            e.parent = old->parent;
            e.depth = old->depth;
          }
        }
      }
      stripes.push_back(std::move(ps));
    }
  }
  uint32_t up = UpMask();
  for (const std::shared_ptr<PutStripe>& ps : stripes) {
    const Entry& e = ps->entry;
    const size_t w = e.members.size();
    std::vector<std::span<const uint8_t>> vals(values.begin() + static_cast<ptrdiff_t>(ps->first),
                                               values.begin() + static_cast<ptrdiff_t>(ps->first + w));
    auto chunks = EncodeStripe(ps->key, e, vals);
    auto finish_all = [batch, first = ps->first, w](const Status& s) {
      for (size_t j = 0; j < w; ++j) batch->Finish(first + j, s);
    };
    auto finish = [this](const std::shared_ptr<PutStripe>& p) {
      // Caller holds p->mu and has set p->finished.
      Status s;
      bool stored = Decodable(p->entry, p->ok);
      {
        std::lock_guard lock(mu_);
        ReleaseLeaseLocked(p->key);
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
          puts_ += e.members.size();
        } else if (n_ > 1) {
          // Too few chunks to read back: drop the stripe (what was written would mix with nothing).
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
    auto on_answer = [this, ps, finish, finish_all](unsigned d, Status s) {
      if (s.code() != StatusCode::kDeadlineExceeded) NoteAnswer(d);
      Status out;
      {
        std::lock_guard lock(ps->mu);
        if (ps->finished || (ps->answered & (1u << d))) return;
        ps->answered |= 1u << d;
        if (s.ok()) {
          ps->ok |= 1u << d;
        } else if (ps->first_error.ok()) {
          ps->first_error = s;
        }
        if (ps->answered != ps->issued) return;
        ps->finished = true;
        out = finish(ps);
      }
      finish_all(out);
    };
    {
      std::lock_guard lock(ps->mu);
      ps->issued = up & RealMask(e);
      if (ps->issued == 0) {
        ps->finished = true;
        ReleaseLease(ps->key);
        finish_all(Status(StatusCode::kUnavailable, "kvcache put: every domain is down"));
        continue;
      }
    }
    uint32_t stale = 0;
    {
      std::lock_guard lock(mu_);
      if (auto it = catalog_.find(ps->key); it != catalog_.end()) stale = it->second.mask & ~RealMask(e) & up;
    }
    for (unsigned d = 0; d < n_; ++d) {
      // A wider earlier write of this stripe key left a chunk where this one writes none: it
      // would outlive the write it belongs to. Queued on the key's writer, so it stays ordered.
      if (stale & (1u << d)) targets_[d]->RemoveAsync(ps->key, [](Status) {});
    }
    IndexMeta meta = MetaOf(e);
    for (unsigned d = 0; d < n_; ++d) {
      if (!(ps->issued & (1u << d))) continue;
      targets_[d]->WriteAsync(ChunkWrite{ps->key, chunks[d], meta}, [on_answer, d](Status s) { on_answer(d, std::move(s)); });
    }
    // Every wait has a deadline: a domain silent for domain_timeout is down for this write.
    // The timer's closure owns `check`; re-arming takes it from the weak handle while it runs.
    auto check = std::make_shared<std::function<void()>>();
    std::weak_ptr<PutStripe> weak = ps;
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
  // A block is removed with every stripe that lists it (up to K consecutive blocks of one chain
  // each): a stripe's files are its parity's inputs, so a block is never taken out of one alone,
  // and an older stripe still listing it would bring it back at the next open. Deletes are rare
  // (the CLI, tests), so one pass over the catalog is fine.
  std::unordered_map<BlockKey, size_t, KeyHash> wanted;
  for (size_t i = 0; i < keys.size(); ++i) wanted.emplace(keys[i], i);
  std::vector<std::pair<size_t, BlockKey>> stripes;
  {
    std::lock_guard lock(mu_);
    for (auto it = catalog_.begin(); it != catalog_.end();) {
      size_t hit = SIZE_MAX;
      for (const StripeMember& mb : it->second.members) {
        if (auto w = wanted.find(mb.key); w != wanted.end()) hit = std::min(hit, w->second);
      }
      if (hit == SIZE_MAX) {
        ++it;
        continue;
      }
      stripes.emplace_back(hit, it->first);
      auto next = std::next(it);
      EraseEntryLocked(it);
      it = next;
    }
  }
  // Unlinks are quick metadata operations; doing them here keeps Delete's completion ordered
  // after the files are gone (a Delete then Match never sees the block).
  uint32_t up = UpMask();
  for (const auto& [i, stripe] : stripes) {
    for (unsigned d = 0; d < n_; ++d) {
      if (!(up & (1u << d))) continue;
      Status s = targets_[d]->RemoveSync(stripe);
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
