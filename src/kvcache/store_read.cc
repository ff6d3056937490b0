// Get: hedged any-K-of-(K+1) reads. A read asks the first K+1 domains holding the block (data
// chunks first, so a healthy read needs no decode), decodes from the first K valid answers,
// asks the remaining domains when an answer fails or is corrupt or after hedge_after, and
// gives up on a domain after domain_timeout (marking it down). Too few valid chunks = a miss.
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
  BlockKey key;
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
      auto it = catalog_.find(keys[i]);
      if (it == catalog_.end() || it->second.expire_ms <= now ||
          std::popcount(it->second.mask & up) < static_cast<int>(k_)) {
        immediate.emplace_back(i, Miss());
        continue;
      }
      if (buffers[i].capacity < it->second.value_len) {
        immediate.emplace_back(i, OutOfRange("kvcache get: buffer of " + std::to_string(buffers[i].capacity) +
                                             " bytes for a block of " + std::to_string(it->second.value_len)));
        continue;
      }
      auto g = std::make_shared<GetKey>();
      g->batch = batch;
      g->index = i;
      g->key = keys[i];
      g->entry = it->second;
      g->buf = buffers[i];
      g->candidates = it->second.mask & up;
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
  {
    std::lock_guard lock(g->mu);
    // Domains in index order: data chunks come first, so a read with no loss copies, never decodes.
    for (unsigned d = 0; d < n_ && ask.size() < k_ + 1; ++d) {
      if (g->candidates & (1u << d)) ask.push_back(d);
    }
    for (unsigned d : ask) g->asked |= 1u << d;
  }
  if (std::popcount(g->candidates) > static_cast<int>(ask.size())) {
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
    targets_[d]->ReadAsync(g->key, [this, g, d](Result<std::vector<uint8_t>> r) { OnChunk(g, d, std::move(r)); });
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
      LADLE_LOG_WARN("kvcache.chunk_corrupt key={} domain={} why={}", g->key.Hex(), d, dec.status().message());
    } else {
      const ChunkHeader& h = dec->header;
      // A valid chunk of another write of this key (a stale copy) is not this block.
      good = h.key == g->key && h.chunk_idx == d && h.k == k_ && h.m == m_ && h.write_id == g->entry.write_id &&
             h.value_len == g->entry.value_len;
    }
  } else {
    StatusCode c = r.status().code();
    if (c != StatusCode::kNotFound && c != StatusCode::kDataLoss && c != StatusCode::kDeadlineExceeded) {
      MarkDown(d, r.status().ToString());
    }
    if (c == StatusCode::kDataLoss) ++corrupt_;
  }
  std::vector<unsigned> ask;
  bool decode = false, miss = false;
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
    int valid = std::popcount(g->valid);
    int outstanding = std::popcount(g->asked & ~g->answered);
    uint32_t unasked = g->candidates & ~g->asked;
    if (valid >= static_cast<int>(k_)) {
      decode = true;
      g->finished = true;
    } else if (valid + outstanding + std::popcount(unasked) < static_cast<int>(k_)) {
      miss = true;
      g->finished = true;
    } else if (!good) {
      int need = static_cast<int>(k_) - valid - outstanding;
      for (unsigned e = 0; e < n_ && need > 0; ++e) {
        if (unasked & (1u << e)) {
          ask.push_back(e);
          g->asked |= 1u << e;
          --need;
        }
      }
    }
  }
  if (decode) {
    // Only this thread touches the chunks now: finished is set.
    uint32_t chunk_len = ChunkLenFor(g->entry.value_len, k_);
    bool ok = Reassemble(g->entry.value_len, chunk_len, g->valid, g->chunks, static_cast<uint8_t*>(g->buf.data));
    g->chunks.clear();
    FinishRead(g, ok ? Result<size_t>(g->entry.value_len) : Result<size_t>(Miss()), g->bad != 0 || !ok);
  } else if (miss) {
    g->chunks.clear();
    FinishRead(g, Miss(), true);
  } else {
    Ask(g, std::move(ask));
  }
}

bool Store::Reassemble(uint64_t value_len, uint32_t chunk_len, uint32_t have, std::vector<std::vector<uint8_t>>& chunks,
                       uint8_t* dst) {
  LADLE_CHECK(std::popcount(have) >= static_cast<int>(k_));
  uint32_t sources = 0;
  for (unsigned d = 0; d < n_ && std::popcount(sources) < static_cast<int>(k_); ++d) {
    if (have & (1u << d)) sources |= 1u << d;
  }
  std::vector<std::vector<uint8_t>> rebuilt(k_);
  std::vector<const uint8_t*> data(k_);
  uint32_t data_mask = (k_ == 32) ? ~0u : ((1u << k_) - 1);
  if ((sources & data_mask) != data_mask) {
    std::vector<uint8_t*> src, out(k_, nullptr);
    for (unsigned d = 0; d < n_; ++d) {
      if (sources & (1u << d)) src.push_back(chunks[d].data() + kChunkHeaderBytes);
    }
    for (unsigned j = 0; j < k_; ++j) {
      if (!(sources & (1u << j))) {
        rebuilt[j].resize(chunk_len);
        out[j] = rebuilt[j].data();
      }
    }
    if (!codec_->Decode(chunk_len, sources, src.data(), out.data())) return false;
  }
  for (unsigned j = 0; j < k_; ++j) {
    data[j] = (sources & (1u << j)) ? chunks[j].data() + kChunkHeaderBytes : rebuilt[j].data();
  }
  for (unsigned j = 0; j < k_; ++j) {
    uint64_t off = static_cast<uint64_t>(j) * chunk_len;
    if (off >= value_len) break;
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_len, value_len - off));
    std::memcpy(dst + off, data[j], n);
  }
  return true;
}

void Store::FinishRead(const std::shared_ptr<GetKey>& g, Result<size_t> r, bool repair) {
  ReleaseLease(g->key);
  if (r.ok()) {
    ++hits_;
  } else {
    ++misses_;
  }
  if (repair) ScheduleRepair(g->key);
  g->batch->Finish(g->index, std::move(r));
}

}  // namespace ladle::kvcache
