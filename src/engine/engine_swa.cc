// The SWA KVCache host pool in the engine (recipe "SWA KVCache" and "Hit policy"):
//   - admission: the block hit L1 (within L − 134) is an exact hit when the pool holds the SWA
//     entry anchored at L1; its restore is queued as a swap-in copy, and the whole prefix is
//     skipped. Otherwise the hit backs off one window, replayed (Encoder SWA Bounded Replay).
//   - prefill: a snapshot is taken inside the forward when the sequence passes its anchor,
//     (end − 1) rounded down to a block; it is stored only once the last chunk is done.
//   - decode: the copy area takes the window each time the sequence crosses a block boundary
//     (SwaDecodeCopier); the most recent copy is stored at request end.
// Entries are keyed by the chain key of the block that ends at the anchor, so a hit needs the
// same tokens, model and salt as the sequence that stored it.
#include <chrono>
#include <unordered_set>

#include "engine_impl.h"
#include "ladle/core/logging.h"

namespace ladle::engine {

namespace {
int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

HitDecision EngineImpl::DecideWithSwa(Seq* s, int64_t kv_written, std::shared_ptr<const std::vector<uint8_t>>* out) {
  const int64_t now = NowMs();
  std::shared_ptr<const std::vector<uint8_t>> entry;
  auto swa_has = [&](int64_t anchor) {
    if (!swa_pool_ || kv_->swa_bytes() == 0 || anchor < block_size_) return false;
    HashPrefix(s, anchor / block_size_);
    entry = swa_pool_->Get(s->hashes[static_cast<size_t>(anchor / block_size_ - 1)], now);
    return entry != nullptr && entry->size() == kv_->swa_bytes();
  };
  HitDecision hd = DecideHit(swa_, s->target, kv_written, swa_has);
  out->reset();
  if (hd.swa_hit) *out = std::move(entry);
  // The prefill's anchor, past any hit (L1 <= L − ring < (L − 1) rounded down to a block).
  s->swa_anchor = -1;
  if (swa_pool_ && kv_->swa_bytes() > 0) {
    if (auto a = PrefillSwaAnchor(swa_, s->target, /*final_chunk=*/true)) s->swa_anchor = *a;
    if (s->req->swa_anchor_for_len > 0) {
      // PD hand-off: where the decode engine's hit will land (its L1), if this prefill passes it.
      const HitDecision next = DecideHit(swa_, s->req->swa_anchor_for_len, s->target, [](int64_t) { return true; });
      s->swa_anchor = next.block_reused >= block_size_ && next.block_reused > hd.hit && next.block_reused <= s->target
                          ? next.block_reused
                          : -1;
    }
  }
  s->swa_prefill_cap.reset();
  s->swa_copier.reset();
  return hd;
}

void EngineImpl::PlanSwaCapture(Seq* s, Entry* e) {
  if (!swa_pool_ || kv_->swa_bytes() == 0) return;
  const int64_t n = e->decode ? 1 : static_cast<int64_t>(e->tokens.size());
  const int64_t end = e->start_pos + n;
  if (!e->decode) {
    if (s->swa_anchor >= e->start_pos && s->swa_anchor <= end && !s->swa_prefill_cap) {
      e->swa_capture = std::make_shared<SwaCapture>();
      e->swa_capture->anchor = s->swa_anchor;
      s->swa_prefill_cap = e->swa_capture;
    }
    // Speculative decodes' copies are taken on the device (their positions are the device's).
    if (e->sample && !spec_on()) s->swa_copier.emplace(swa_, end);  // decoding starts at the prompt's end
    return;
  }
  if (!s->swa_copier) return;
  Result<std::optional<SwaDecodeCopier::Copy>> c = s->swa_copier->OnStep(end);
  if (!c.ok()) {
    // A step longer than the ring's spare slots: no copy can be taken (never with 1 token).
    LADLE_LOG_WARN("engine.swa_copy_skipped reason=\"{}\"", c.status().ToString());
    s->swa_copier.reset();
    return;
  }
  if (!c->has_value()) return;
  e->swa_capture = std::make_shared<SwaCapture>();
  e->swa_capture->anchor = (*c)->anchor;
}

void EngineImpl::OnSwaDone(Seq* s, const Entry& e) {
  if (e.swa_capture && e.swa_capture->ok && e.decode) s->swa_last_copy = e.swa_capture;
  // A chunked prefill stores only at its final chunk, the snapshot taken wherever it passed.
  if (!e.decode && e.sample && s->swa_prefill_cap) {
    if (s->swa_prefill_cap->ok) StoreSwa(s, *s->swa_prefill_cap);
    s->swa_prefill_cap.reset();
  }
}

void EngineImpl::StoreSwa(Seq* s, const SwaCapture& c) {
  if (!swa_pool_ || c.anchor < block_size_ || static_cast<int64_t>(s->tokens.size()) < c.anchor) return;
  LADLE_CHECK(c.anchor % block_size_ == 0 && c.bytes.size() == kv_->swa_bytes());
  HashPrefix(s, c.anchor / block_size_);
  const kvcache::BlockKey& key = s->hashes[static_cast<size_t>(c.anchor / block_size_ - 1)];
  const int64_t now = NowMs();
  if (swa_pool_->Put(key, c.anchor, c.bytes, now) && config_.swa_directory) {
    config_.swa_directory->Record(key, config_.swa_holder, now + config_.swa_ttl_ms);
  }
}

bool EngineImpl::StartSwapIn(Batch* b, std::vector<SeqStep>* steps) {
  if (b->installs.empty() && b->swa_restores.empty() && b->slot_restores.empty()) return false;
  std::vector<SwapIn::Op> ops;
  const int block_layer = model_->global_kv_first_layer();
  std::unordered_set<int32_t> blocks, slots;
  for (auto& r : b->swa_restores) {
    slots.insert(r.slot);
    ops.push_back({0, [this, r] {
                     // Sized when hit; a failure here is a storage bug, not a miss.
                     LADLE_CHECK(kv_->WriteSwa(r.slot, r.anchor, *r.bytes));
                   }});
  }
  for (auto& r : b->slot_restores) {
    slots.insert(r.slot);
    // Checked when submitted (CheckResume); a failure here is a storage bug.
    ops.push_back({0, [this, r] { LADLE_CHECK(kv_->WriteSlotState(r.slot, r.state->position, r.state->ring)); }});
  }
  for (auto& in : b->installs) {
    blocks.insert(in.block);
    ops.push_back({block_layer, [this, in] { LADLE_CHECK(kv_->WriteBlock(in.block, in.bytes)); }});
  }
  swap_in_->Start(std::move(ops));
  if (!model_->honours_ready_gate()) {
    swap_in_->WaitAll();
    return true;
  }
  for (SeqStep& st : *steps) {
    bool reads = slots.count(st.swa_slot) > 0;
    for (size_t i = 0; !reads && i < st.block_table.size(); ++i) reads = blocks.count(st.block_table[i]) > 0;
    if (reads) st.ready = swap_in_.get();
  }
  return true;
}

}  // namespace ladle::engine
