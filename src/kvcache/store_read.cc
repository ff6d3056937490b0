// Get: one read of the block's own data chunk, hedged. A healthy read is one file of one block
// (its data chunk holds it whole). When that chunk fails, is corrupt, or has not answered after
// hedge_after, the stripe's other chunks are asked and the block is rebuilt from the first K
// valid ones (a narrow stripe's absent data chunks count as zeros). A domain silent for
// domain_timeout is marked down. Too few valid chunks = a miss.
#include <bit>
#include <cstring>

#include "ladle/core/logging.h"
#include "object_format.h"
#include "store.h"

namespace ladle::kvcache {

struct Store::GetBatch {
  std::mutex mu;
  std::vector<Result<size_t>> results;
  size_t remaining = 0;
  GetDone done;
  static constexpr size_t kNone = SIZE_MAX;  // just drops the start-up reference
  void Finish(size_t i, Result<size_t> r) {
    bool last;
    {
      std::lock_guard lock(mu);
      if (i != kNone) results[i] = std::move(r);
      last = --remaining == 0;
    }
    if (!last) return;
    try {
      done(std::move(results));
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("kvcache.completion_threw op=get what={}", e.what());
    } catch (...) {
      LADLE_LOG_ERROR("kvcache.completion_threw op=get what=unknown");
    }
  }
};

struct Store::GetKey {
  std::mutex mu;
  std::shared_ptr<GetBatch> batch;
  size_t index = 0;
  BlockKey key;     // the block
  BlockKey stripe;  // the stripe holding it, and its place there
  uint32_t j = 0;
  Entry entry;
  MutableBuffer buf;
  uint32_t candidates = 0, asked = 0, answered = 0, valid = 0, bad = 0;
  std::vector<std::vector<uint8_t>> chunks;
  bool finished = false;
};

namespace {
Status Miss() { return NotFound("kvcache: block absent, expired, lost or corrupt"); }
}  // namespace

void Store::Get(std::span<const BlockKey> keys, std::span<const MutableBuffer> buffers, GetDone done) {
  auto batch = std::make_shared<GetBatch>();
  batch->done = std::move(done);
  batch->results.assign(keys.size(), Result<size_t>(Miss()));
  batch->remaining = keys.size() + 1;  // +1 until every read is started
  if (keys.size() != buffers.size()) {
    for (auto& r : batch->results) r = InvalidArgument("kvcache get: keys and buffers differ in count");
    batch->remaining = 1;
    batch->Finish(GetBatch::kNone, Miss());
    return;
  }
  int64_t now = NowMs();
  uint32_t up = UpMask();
  std::vector<std::shared_ptr<GetKey>> reads;
  std::vector<std::pair<size_t, Result<size_t>>> immediate;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      uint32_t j;
      BlockKey stripe;
      const Entry* e = FindBlockLocked(keys[i], &j, &stripe);
      if (!e || e->expire_ms <= now || !Decodable(*e, e->mask & up)) {
        immediate.emplace_back(i, Miss());
        continue;
      }
      uint64_t len = e->members[j].len;
      if (buffers[i].capacity < len) {
        immediate.emplace_back(i, OutOfRange("kvcache get: buffer of " + std::to_string(buffers[i].capacity) +
                                             " bytes for a block of " + std::to_string(len)));
        continue;
      }
      auto g = std::make_shared<GetKey>();
      g->batch = batch;
      g->index = i;
      g->key = keys[i];
      g->stripe = stripe;
      g->j = j;
      g->entry = *e;
      g->buf = buffers[i];
      g->candidates = e->mask & up & RealMask(*e);
      g->chunks.resize(n_);
      ++leases_[keys[i]];  // GC will not evict it until FinishRead
      TouchLocked(keys[i], now);
      reads.push_back(std::move(g));
    }
  }
  for (auto& [i, r] : immediate) {
    if (r.status().code() == StatusCode::kNotFound) ++misses_;
    batch->Finish(i, std::move(r));
  }
  for (auto& g : reads) StartRead(g);
  batch->Finish(GetBatch::kNone, Miss());
}

void Store::StartRead(std::shared_ptr<GetKey> g) {
  std::vector<unsigned> ask;
  bool hedge = false;
  {
    std::lock_guard lock(g->mu);
    if (g->candidates & (1u << g->j)) {
      // The block's own chunk: one read, no decode. The rest of the stripe only if it is late.
      ask.push_back(g->j);
      hedge = g->candidates != (1u << g->j);
    } else {
      for (unsigned d = 0; d < n_; ++d) {
        if (g->candidates & (1u << d)) ask.push_back(d);
      }
    }
    for (unsigned d : ask) g->asked |= 1u << d;
  }
  if (hedge) {
    std::weak_ptr<GetKey> weak = g;
    timer_->After(opt_.hedge_after, [this, weak] {
      if (auto p = weak.lock()) OnHedge(p);
    });
  }
  Ask(g, std::move(ask));
}

void Store::Ask(const std::shared_ptr<GetKey>& g, std::vector<unsigned> domains) {
  if (domains.empty()) return;
  std::weak_ptr<GetKey> weak = g;
  timer_->After(opt_.domain_timeout, [this, weak] {
    if (auto p = weak.lock()) OnTimeout(p);
  });
  for (unsigned d : domains) {
    targets_[d]->ReadAsync(g->stripe, [this, g, d](Result<std::vector<uint8_t>> r) { OnChunk(g, d, std::move(r)); });
  }
}

void Store::OnHedge(const std::shared_ptr<GetKey>& g) {
  std::vector<unsigned> ask;
  {
    std::lock_guard lock(g->mu);
    if (g->finished) return;
    uint32_t more = g->candidates & ~g->asked;
    for (unsigned d = 0; d < n_; ++d) {
      if (more & (1u << d)) ask.push_back(d);
    }
    g->asked |= more;
  }
  Ask(g, std::move(ask));
}

void Store::OnTimeout(const std::shared_ptr<GetKey>& g) {
  uint32_t late;
  {
    std::lock_guard lock(g->mu);
    if (g->finished) return;
    late = g->asked & ~g->answered;
  }
  uint32_t hung = Hung(late);
  for (unsigned d = 0; d < n_; ++d) {
    if (!(hung & (1u << d))) continue;
    MarkDown(d, "read timed out");
    OnChunk(g, d, Status(StatusCode::kDeadlineExceeded, "kvcache get: domain timed out"));
  }
  if (late & ~hung) {
    // Busy, not hung (a deep queue): look again later.
    std::weak_ptr<GetKey> weak = g;
    timer_->After(opt_.domain_timeout, [this, weak] {
      if (auto p = weak.lock()) OnTimeout(p);
    });
  }
}

void Store::OnChunk(const std::shared_ptr<GetKey>& g, unsigned d, Result<std::vector<uint8_t>> r) {
  if (r.ok() || r.status().code() != StatusCode::kDeadlineExceeded) NoteAnswer(d);
  bool good = false;
  if (r.ok()) {
    auto dec = DecodeChunk(*r);
    if (!dec.ok()) {
      ++corrupt_;
      LADLE_LOG_WARN("kvcache.chunk_corrupt stripe={} domain={} why={}", g->stripe.Hex(), d, dec.status().message());
    } else {
      const ChunkHeader& h = dec->header;
      // A valid chunk of another write of this stripe key (a stale copy) is not this block.
      good = h.key == g->stripe && h.chunk_idx == d && h.k == k_ && h.m == m_ && h.write_id == g->entry.write_id &&
             h.members == g->entry.members;
    }
  } else {
    StatusCode c = r.status().code();
    if (c != StatusCode::kNotFound && c != StatusCode::kDataLoss && c != StatusCode::kDeadlineExceeded) {
      MarkDown(d, r.status().ToString());
    }
    if (c == StatusCode::kDataLoss) ++corrupt_;
  }
  std::vector<unsigned> ask;
  bool direct = false, decode = false, miss = false;
  {
    std::lock_guard lock(g->mu);
    if (g->finished || (g->answered & (1u << d))) return;
    g->answered |= 1u << d;
    if (good) {
      g->chunks[d] = std::move(*r);
      g->valid |= 1u << d;
    } else {
      g->bad |= 1u << d;
    }
    uint32_t outstanding = g->asked & ~g->answered;
    uint32_t unasked = g->candidates & ~g->asked;
    uint32_t own = 1u << g->j;
    if (good && d == g->j) {
      direct = true;
    } else if (Decodable(g->entry, g->valid)) {
      decode = true;
    } else if (!((outstanding | unasked) & own) && !Decodable(g->entry, g->valid | outstanding | unasked)) {
      miss = true;
    } else if (!good) {
      // Degraded: the rest of the stripe, all at once.
      for (unsigned e = 0; e < n_; ++e) {
        if (unasked & (1u << e)) ask.push_back(e);
      }
      g->asked |= unasked;
    }
    g->finished = direct || decode || miss;
  }
  // Only this thread touches the chunks once finished is set.
  const uint64_t len = g->entry.members[g->j].len;
  if (direct) {
    if (len > 0) std::memcpy(g->buf.data, g->chunks[d].data() + HeaderBytes(g->entry.members.size()), len);
    g->chunks.clear();
    FinishRead(g, Result<size_t>(len), g->bad != 0);
  } else if (decode) {
    std::vector<std::vector<uint8_t>> slots;
    bool ok = RebuildSlots(g->entry, g->valid, g->chunks, &slots);
    if (ok && len > 0) std::memcpy(g->buf.data, slots[g->j].data(), len);
    g->chunks.clear();
    FinishRead(g, ok ? Result<size_t>(len) : Result<size_t>(Miss()), true);
  } else if (miss) {
    g->chunks.clear();
    FinishRead(g, Miss(), true);
  } else {
    Ask(g, std::move(ask));
  }
}

bool Store::RebuildSlots(const Entry& e, uint32_t valid, const std::vector<std::vector<uint8_t>>& chunks,
                         std::vector<std::vector<uint8_t>>* slots) {
  LADLE_CHECK(Decodable(e, valid));
  const size_t w = e.members.size(), slot = SlotLen(e.members), hdr = HeaderBytes(w);
  slots->assign(k_, std::vector<uint8_t>(slot, 0));
  // Data chunks first: a data chunk is its slot as it is, and a narrow stripe's zeros are free.
  uint32_t have = (valid & RealMask(e)) | VirtualMask(e), sources = 0;
  for (unsigned d = 0; d < n_ && std::popcount(sources) < static_cast<int>(k_); ++d) {
    if (have & (1u << d)) sources |= 1u << d;
  }
  for (unsigned j = 0; j < w; ++j) {
    if ((sources & (1u << j)) && e.members[j].len > 0) {
      std::memcpy((*slots)[j].data(), chunks[j].data() + hdr, e.members[j].len);
    }
  }
  uint32_t data_mask = k_ == 32 ? ~0u : (1u << k_) - 1;
  if ((sources & data_mask) == data_mask) return true;
  std::vector<uint8_t*> src, out(k_, nullptr);
  for (unsigned d = 0; d < n_; ++d) {
    if (!(sources & (1u << d))) continue;
    src.push_back(d < k_ ? (*slots)[d].data() : const_cast<uint8_t*>(chunks[d].data() + hdr));
  }
  for (unsigned j = 0; j < k_; ++j) {
    if (!(sources & (1u << j))) out[j] = (*slots)[j].data();
  }
  return codec_->Decode(slot, sources, src.data(), out.data());
}

void Store::FinishRead(const std::shared_ptr<GetKey>& g, Result<size_t> r, bool repair) {
  ReleaseLease(g->key);
  if (r.ok()) {
    ++hits_;
  } else {
    ++misses_;
  }
  if (repair) ScheduleRepair(g->stripe);
  g->batch->Finish(g->index, std::move(r));
}

}  // namespace ladle::kvcache
