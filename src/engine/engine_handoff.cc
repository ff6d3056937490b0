// PD hand-off (docs/engine.md, "PD hand-off"): a sequence's complete state passed from the
// engine that prefilled it to another engine of the same model, so that the second continues
// exactly as the first would have.
//   - export (SubmitRequest::handoff_export): the forward of the prefill's last chunk is
//     followed, in the same device task, by a read of the slot's rings (KvStorage::ReadSlotState:
//     encoder and decoder rings, including the decoder's Decoder SWA Bounded Replay state, the
//     encoder outputs, the positions they hold) and of the partial last block; the sample task
//     then records the sampler state. Every full block of the prompt is queued to the store,
//     those reused from the pool too, none dropped under back-pressure. Post-processing puts the
//     state on the final Output.
//   - import (SubmitRequest::resume): the full blocks come from the pool, or from the store by
//     the ordinary fetch (the sequence waits in its loading state); admission then names them,
//     allocates the block for position L, queues the partial block (an Install) and the rings
//     (a SlotRestore) as swap-in copies of the admitting batch, and makes the sequence a decoding
//     one at L whose next input is the first token. Anything missing: the ordinary path.
#include <algorithm>
#include <cstring>

#include "engine_impl.h"
#include "ladle/core/logging.h"

namespace ladle::engine {

bool EngineImpl::CheckResume(const Request& r, const HandoffState& h) const {
  const int64_t L = h.position;
  const size_t block_bytes = kv_->block_bytes();
  const std::string& model = key_extras_.front().value;
  const bool ok = h.model == model && L >= 1 && static_cast<int64_t>(r.prompt.size()) == L + 1 &&
                  r.prompt.back() == h.first_token && h.full_blocks == L / block_size_ &&
                  h.partial_tokens == L % block_size_ && kv_->slot_state_bytes() > 0 &&
                  kv_->SlotStateFits(L, h.ring) &&
                  (h.partial_tokens == 0 ? h.partial_block.empty()
                                         : block_bytes > 0 && h.partial_block.size() == block_bytes);
  if (!ok) {
    LADLE_LOG_WARN("engine.handoff_fallback reason=\"the state does not fit this engine or request\" position={}",
                   L);
  }
  return ok;
}

void EngineImpl::QueueHandoffBlocks(Seq* s, const std::vector<int32_t>& blocks) {
  if (!config_.kv_store || kv_->block_bytes() == 0 || blocks.empty()) return;
  PersistPiece piece;
  piece.blocks = blocks;
  piece.keys.assign(s->hashes.begin(), s->hashes.begin() + static_cast<std::ptrdiff_t>(blocks.size()));
  piece.agent = s->req->agent_traffic;
  piece.handoff = s->handoff_persist;
  piece.handoff_first = 0;
  persist_.push_back(std::move(piece));
}

EngineImpl::ResumeAdmit EngineImpl::TryAdmitResume(const std::shared_ptr<Seq>& sp, Batch* b, AdmissionView v) {
  Seq* s = sp.get();
  const HandoffState& h = *s->resume;
  const int64_t L = h.position;
  const auto full = static_cast<size_t>(h.full_blocks);
  if (!config_.prefix_cache) return ResumeAdmit::kFallback;  // no block is findable by its key
  HashPrefix(s, static_cast<int64_t>(full));
  std::vector<int32_t> hit = blocks_.Match(std::span<const BlockHash>(s->hashes).first(full));
  if (hit.size() < full) {
    blocks_.ReleaseAll(&hit);
    LADLE_LOG_WARN("engine.handoff_fallback reason=\"full blocks missing\" have={} need={}", hit.size(), full);
    return ResumeAdmit::kFallback;
  }
  // One more block: the partial one restored, or (L a block multiple) the one position L opens.
  v.available_blocks = blocks_.available_blocks();
  v.blocks_needed = 1;
  if (!admission_->Admit(v)) {
    blocks_.ReleaseAll(&hit);
    return ResumeAdmit::kNotNow;
  }
  const int32_t blk = blocks_.Allocate();
  if (blk < 0) {
    blocks_.ReleaseAll(&hit);
    return ResumeAdmit::kNotNow;
  }
  s->slot = blocks_.AllocateSlot();
  // Both copies run on the swap-in thread during this batch's device task, so before the first
  // decode (the next batch) and after anything earlier that still touched the slot or block.
  b->slot_restores.push_back({s->slot, s->resume});
  if (h.partial_tokens > 0) {
    b->installs.push_back({blk, std::span<const uint8_t>(h.partial_block), std::const_pointer_cast<HandoffState>(s->resume)});
  }
  hit.push_back(blk);
  s->blocks = std::move(hit);
  s->computed = L;  // everything but the first token, which the first decode consumes at L
  s->kv_written = 0;
  s->registered = full;
  s->decoding = true;
  s->swa_anchor = -1;
  s->swa_prefill_cap.reset();
  s->swa_copier.emplace(swa_, L);  // decoding starts at L, as it did in the exporting engine
  s->resume.reset();               // used: a preemption re-prefills as usual
  if (s->req->counted_queued) {
    s->req->counted_queued = false;
    s->req->cached_tokens = L;
    queued_ -= 1;
  }
  stat_prefix_hits_ += static_cast<uint64_t>(L);
  if (s->store_blocks > 0 && full > s->pool_prefix) {
    stat_store_hit_tokens_ += static_cast<uint64_t>(std::min(full - s->pool_prefix, s->store_blocks)) *
                              static_cast<uint64_t>(block_size_);
  }
  ++stat_handoff_imports_;
  return ResumeAdmit::kAdmitted;
}

void EngineImpl::CaptureHandoffRings(const Entry& e) {
  HandoffState& h = *e.handoff;
  const int64_t L = e.start_pos + static_cast<int64_t>(e.tokens.size());
  h.position = L;
  h.full_blocks = L / block_size_;
  h.partial_tokens = L % block_size_;
  h.ring.assign(kv_->slot_state_bytes(), 0);
  bool ok = !h.ring.empty() && kv_->ReadSlotState(e.slot, L, h.ring);
  if (ok && h.partial_tokens > 0) {
    h.partial_block.assign(kv_->block_bytes(), 0);
    ok = !h.partial_block.empty() && kv_->ReadBlock(e.table[static_cast<size_t>(L / block_size_)], h.partial_block);
  }
  if (!ok) h.position = -1;  // not captured: post-processing delivers no state
}

void EngineImpl::CaptureHandoffSampler(const Entry& e) {
  HandoffState& h = *e.handoff;
  const SamplerState& st = e.dev->sampler;
  h.rng = st.rng;
  h.counts.assign(st.counts.begin(), st.counts.end());
  std::sort(h.counts.begin(), h.counts.end());
}

void EngineImpl::FinishHandoffCapture(Seq* s, const Entry& e) {
  if (e.handoff->position < 0) {
    LADLE_LOG_WARN("engine.handoff_export_failed reason=\"the KV storage gave no ring state\" request={}", s->req->id);
    return;
  }
  HandoffState& h = *e.handoff;
  h.model = key_extras_.front().value;
  h.first_token = e.result.token;
  h.blocks_persisted = 0;
  if (s->handoff_persist) {
    const auto& q = s->handoff_persist->queued;
    while (h.blocks_persisted < h.full_blocks && static_cast<size_t>(h.blocks_persisted) < q.size() &&
           q[static_cast<size_t>(h.blocks_persisted)]) {
      ++h.blocks_persisted;
    }
  }
  s->handoff_out = e.handoff;
  ++stat_handoff_exports_;
}

// ---- Encoding: "LDHO", version 1, then the fields in declaration order (little-endian).

namespace {
constexpr uint32_t kMagic = 0x4f48444c;  // "LDHO"
constexpr uint32_t kVersion = 1;

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the engine's platforms are little-endian
  out->insert(out->end(), b, b + sizeof(T));
}
void PutBytes(std::vector<uint8_t>* out, std::span<const uint8_t> b) {
  Put<uint64_t>(out, b.size());
  out->insert(out->end(), b.begin(), b.end());
}

struct Reader {
  std::span<const uint8_t> in;
  size_t at = 0;
  bool ok = true;
  template <typename T>
  T Get() {
    T v{};
    if (!ok || in.size() - at < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::vector<uint8_t> Bytes() {
    const uint64_t n = Get<uint64_t>();
    if (!ok || in.size() - at < n) {
      ok = false;
      return {};
    }
    std::vector<uint8_t> v(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
    return v;
  }
};
}  // namespace

std::vector<uint8_t> EncodeHandoff(const HandoffState& h) {
  std::vector<uint8_t> out;
  out.reserve(128 + h.model.size() + h.ring.size() + h.partial_block.size() + 8 * h.counts.size());
  Put(&out, kMagic);
  Put(&out, kVersion);
  PutBytes(&out, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(h.model.data()), h.model.size()));
  Put<int64_t>(&out, h.position);
  Put<uint32_t>(&out, h.first_token);
  PutBytes(&out, h.ring);
  PutBytes(&out, h.partial_block);
  Put<int64_t>(&out, h.partial_tokens);
  Put<int64_t>(&out, h.full_blocks);
  Put<int64_t>(&out, h.blocks_persisted);
  Put<uint64_t>(&out, h.rng);
  Put<uint64_t>(&out, h.counts.size());
  for (const auto& [t, c] : h.counts) {
    Put<uint32_t>(&out, t);
    Put<int32_t>(&out, c);
  }
  return out;
}

Result<HandoffState> DecodeHandoff(std::span<const uint8_t> bytes) {
  Reader r{bytes};
  if (r.Get<uint32_t>() != kMagic || !r.ok) return InvalidArgument("hand-off state: bad magic");
  if (r.Get<uint32_t>() != kVersion) return InvalidArgument("hand-off state: unknown version");
  HandoffState h;
  const std::vector<uint8_t> model = r.Bytes();
  h.model.assign(model.begin(), model.end());
  h.position = r.Get<int64_t>();
  h.first_token = r.Get<uint32_t>();
  h.ring = r.Bytes();
  h.partial_block = r.Bytes();
  h.partial_tokens = r.Get<int64_t>();
  h.full_blocks = r.Get<int64_t>();
  h.blocks_persisted = r.Get<int64_t>();
  h.rng = r.Get<uint64_t>();
  const uint64_t n = r.Get<uint64_t>();
  if (!r.ok || n > (bytes.size() - r.at) / 8) return InvalidArgument("hand-off state: truncated");
  h.counts.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t t = r.Get<uint32_t>();
    const int32_t c = r.Get<int32_t>();
    h.counts.emplace_back(t, c);
  }
  if (!r.ok) return InvalidArgument("hand-off state: truncated");
  if (r.at != bytes.size()) return InvalidArgument("hand-off state: trailing bytes");
  return h;
}

}  // namespace ladle::engine
