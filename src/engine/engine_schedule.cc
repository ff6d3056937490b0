// schedule(N): the batch of one step. Decodes first (one token each), then prompts that are
// part-way through prefill, then admissions from the FIFO queue, each prefill taking the
// chunk the ChunkPolicy allows. Blocks are taken here; under pressure the PreemptionPolicy
// names a sequence to free and requeue (recompute), so nothing is ever truncated.
#include <algorithm>

#include "engine_impl.h"
#include "ladle/core/logging.h"

namespace ladle::engine {

namespace {
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool Contains(const std::vector<Seq*>& v, const Seq* s) { return std::find(v.begin(), v.end(), s) != v.end(); }
}  // namespace

bool EngineImpl::GrowBlocks(Seq* s, int64_t positions) {
  const int64_t need = CeilDiv(positions, block_size_);
  while (static_cast<int64_t>(s->blocks.size()) < need) {
    const int32_t b = blocks_.Allocate();
    if (b < 0) return false;
    s->blocks.push_back(b);
  }
  return true;
}

void EngineImpl::Preempt(Seq* s) {
  // Recompute-style: drop every block and the ring, requeue at the front. Launched work of
  // this sequence still runs first on the device, and its tokens are still accepted; it is
  // re-admitted only once none is in flight, with everything it has generated re-prefilled.
  blocks_.ReleaseAll(&s->blocks);
  if (s->slot >= 0) blocks_.FreeSlot(s->slot);
  s->slot = -1;
  s->state = Seq::State::kWaiting;
  s->decoding = false;
  s->computed = 0;
  s->kv_written = 0;
  s->registered = 0;
  s->swa_prefill_cap.reset();  // re-prefilled from 0: a new anchor and copy area
  s->swa_copier.reset();
  std::erase_if(running_, [&](const auto& p) { return p.get() == s; });
  for (auto& sp : requests_[s->req->id])
    if (sp.get() == s) waiting_.push_front(sp);
}

void EngineImpl::RegisterBlocks(Seq* s) {
  if (!config_.prefix_cache || s->state != Seq::State::kRunning) return;
  // A block is shareable once its tokens are known here and its forward is launched.
  const size_t full = static_cast<size_t>(std::min<int64_t>(s->computed, s->tokens.size()) / block_size_);
  while (s->hashes.size() < full) {
    s->hashes.push_back(SeqBlockHash(s, s->hashes.size()));
  }
  PersistPiece piece;
  BlockEvent stored;
  for (; s->registered < full && s->registered < s->blocks.size(); ++s->registered) {
    const BlockHash& key = s->hashes[s->registered];
    // A key the pool already had was computed (and written) by someone else: the duplicate
    // stays private and is not written again.
    const bool fresh = !blocks_.IsCached(key);
    if (blocks_.Register(s->blocks[s->registered], key) && config_.on_block_event) NoteStored(s, s->registered, &stored);
    // A hand-off export writes its duplicates too: the resuming engine must find every block.
    if (!config_.kv_store || (!fresh && !s->handoff_persist)) continue;
    if (kv_->block_bytes() == 0) {
      if (!warned_no_block_bytes_) LADLE_LOG_WARN("engine.kv_store_unused reason=\"the model's KV storage has no byte access\"");
      warned_no_block_bytes_ = true;
      continue;
    }
    if (piece.blocks.empty() && s->registered > 0) piece.parent = s->hashes[s->registered - 1];
    if (!piece.blocks.empty() && !(piece.keys.back() == s->hashes[s->registered - 1])) {
      persist_.push_back(std::move(piece));  // a gap (a duplicate between): a new piece
      piece = PersistPiece{};
      piece.parent = s->hashes[s->registered - 1];
    }
    if (piece.blocks.empty()) {
      piece.handoff = s->handoff_persist;
      piece.handoff_first = s->registered;
    }
    piece.blocks.push_back(s->blocks[s->registered]);
    piece.keys.push_back(key);
    piece.agent = s->req->agent_traffic;
  }
  if (!piece.blocks.empty()) persist_.push_back(std::move(piece));
  FlushStored(&stored);
}

void EngineImpl::NoteStored(const Seq* s, size_t i, BlockEvent* ev) {
  if (!ev->keys.empty() && !(i > 0 && ev->keys.back() == s->hashes[i - 1])) FlushStored(ev);
  if (ev->keys.empty()) {
    ev->kind = BlockEvent::Kind::kStored;
    ev->block_size = block_size_;
    ev->parent = i > 0 ? std::optional<BlockHash>(s->hashes[i - 1]) : std::nullopt;
  }
  ev->keys.push_back(s->hashes[i]);
  const auto first = s->tokens.begin() + static_cast<std::ptrdiff_t>(i) * block_size_;
  ev->tokens.insert(ev->tokens.end(), first, first + block_size_);
}

void EngineImpl::FlushStored(BlockEvent* ev) {
  if (ev->keys.empty() || !config_.on_block_event) return;
  config_.on_block_event(std::move(*ev));
  *ev = BlockEvent{};
}

bool EngineImpl::ScheduleDecode(const std::shared_ptr<Seq>& sp, Batch* b, std::vector<Seq*>* in_batch) {
  Seq* s = sp.get();
  // A spec decode may write γ + 1 positions (engine_spec.cc); computed is then an upper bound.
  const int64_t span = spec_on() ? gamma_ + 1 : 1;
  // But no step writes past the request's last position (prompt + max_tokens - 1 positions: a
  // verify span is cut to the tokens left, and a step scheduled after the last token verifies
  // nothing), so a request that fits without speculation fits with it, async included (where
  // computed counts γ + 1 for every step in flight).
  const int64_t last = static_cast<int64_t>(s->req->prompt.size()) + s->req->params.max_tokens - 1;
  while (!GrowBlocks(s, std::min(s->computed + span, last))) {
    // Victims are running sequences not yet in this batch (their blocks could otherwise be
    // handed to a batch mate and written twice in one forward); `s` itself qualifies.
    std::vector<Seq*> cands;
    std::vector<VictimView> views;
    for (auto& r : running_) {
      if (Contains(*in_batch, r.get())) continue;
      cands.push_back(r.get());
      views.push_back({r->req->arrival, r->index, static_cast<int>(r->blocks.size())});
    }
    Seq* victim = cands[preemption_->PickVictim(views)];
    if (victim == s && cands.size() == 1 && in_batch->empty()) {
      // Alone and still out of memory: the pool is too small for this sequence. Finishing
      // with an error says so; truncating silently would not.
      FinishSeq(s, FinishKind::kError, nullptr, "", "KV cache exhausted: sequence does not fit in the block pool");
      return false;
    }
    Preempt(victim);
    if (victim == s) return false;
  }
  Entry e;
  e.seq = sp;
  e.dev = s->dev;
  e.decode = true;
  e.start_pos = s->computed;
  e.table = s->blocks;
  e.slot = s->slot;
  e.sample = true;
  e.spec = spec_on();
  // A spec decode's position is the device's: the device takes its decode SWA copy
  // (EngineImpl::SpecSwaCopy).
  if (!e.spec) PlanSwaCapture(s, &e);
  b->entries.push_back(std::move(e));
  s->computed += span;
  s->sampled += 1;
  s->inflight += 1;
  s->last_step = b->step;
  in_batch->push_back(s);
  return true;
}

void EngineImpl::AddPrefillChunk(const std::shared_ptr<Seq>& sp, int64_t q, Batch* b) {
  Seq* s = sp.get();
  Entry e;
  e.seq = sp;
  e.dev = s->dev;
  e.tokens.assign(s->tokens.begin() + s->computed, s->tokens.begin() + s->computed + q);
  e.start_pos = s->computed;
  // A prefix hit starts one block before the KV it already has (the replayed block). A chunk
  // smaller than that block (time budget, min_chunk, small fixed chunk) ends before
  // s->kv_written; the model requires kv_written ≤ end, and everything up to end is already
  // in the blocks, so the step writes nothing there.
  e.kv_written = std::min(s->kv_written, s->computed + q);
  e.table = s->blocks;
  e.slot = s->slot;
  s->computed += q;
  e.sample = s->computed == s->target;
  if (e.sample) {
    s->decoding = true;
    s->sampled += 1;
    if (s->req->handoff_export) e.handoff = std::make_shared<HandoffState>();
  }
  PlanSwaCapture(s, &e);
  b->entries.push_back(std::move(e));
  b->record.prefills += 1;
  b->record.prefill_tokens += q;
  s->inflight += 1;
  s->last_step = b->step;
}

bool EngineImpl::TryAdmit(const std::shared_ptr<Seq>& sp, Batch* b, StepBudget* budget,
                          std::vector<Seq*>* in_batch) {
  Seq* s = sp.get();
  AdmissionView v;
  v.running = static_cast<int>(running_.size());
  v.max_running = config_.max_running;
  v.free_slots = blocks_.free_slots();
  v.reserve_blocks = config_.reserve_blocks;
  s->target = static_cast<int64_t>(s->tokens.size());

  if (s->fork_parent) {
    // Fork: share the parent's full prompt blocks, copy its ring on the device just before
    // this batch runs (its chunk up to fork_at was launched in an earlier batch).
    Seq* p = s->fork_parent;
    v.available_blocks = blocks_.available_blocks();
    v.blocks_needed = 0;
    if (!admission_->Admit(v)) return false;
    s->slot = blocks_.AllocateSlot();
    const int64_t nb = s->fork_at / block_size_;
    for (int64_t i = 0; i < nb; ++i) {
      blocks_.Ref(p->blocks[i]);
      s->blocks.push_back(p->blocks[i]);
    }
    b->copies.emplace_back(p->slot, s->slot);
    s->computed = s->fork_at;
    s->kv_written = 0;
    s->fork_parent = nullptr;
    p->pending_forks -= 1;
  } else {
    if (s->resume) {
      // PD hand-off: straight into decode at L when every full block is here.
      const ResumeAdmit ra = TryAdmitResume(sp, b, v);
      if (ra == ResumeAdmit::kNotNow) return false;
      if (ra == ResumeAdmit::kAdmitted) {
        s->state = Seq::State::kRunning;
        running_.push_back(sp);
        return true;
      }
      s->resume.reset();  // kFallback: the ordinary path below (hit policy, recompute)
      ++stat_handoff_fallbacks_;
    }
    std::vector<int32_t> hit;
    if (config_.prefix_cache) {
      // Recipe "Hit policy" (DecideHit): at most L − 134 (window + rollback) tokens can hit,
      // in whole blocks.
      const int64_t full = DecideHit(swa_, s->target, s->target, nullptr).block_reused / block_size_;
      HashPrefix(s, full);
      hit = blocks_.Match(std::span<const BlockHash>(s->hashes).first(full));
    }
    const int64_t kv_written = static_cast<int64_t>(hit.size()) * block_size_;
    // Recipe "Hit policy": with the SWA entry at L1 in the host pool the whole prefix is
    // skipped exactly (its ring restored by a swap-in copy); without, the hit backs off one
    // window, whose tokens are recomputed only to rebuild the ring, reading the shared blocks'
    // global KV without rewriting it (Encoder SWA Bounded Replay).
    std::shared_ptr<const std::vector<uint8_t>> swa_entry;
    const HitDecision hd = DecideWithSwa(s, kv_written, &swa_entry);
    LADLE_CHECK(hd.block_reused == kv_written);
    // Exact replay recomputes the whole prefix through the encoder on an SWA miss (the ring
    // then matches a cold run's); the blocks' global KV is reused either way.
    const bool replay_all = config_.exact_replay && !hd.swa_hit;
    const int64_t cached = replay_all ? 0 : hd.hit;
    StepBudget trial = *budget;
    const int64_t q = chunk_->Take(s->target - cached, cached, &trial);
    v.available_blocks = blocks_.available_blocks();
    v.blocks_needed = static_cast<int>(std::max<int64_t>(0, CeilDiv(cached + q, block_size_) - static_cast<int64_t>(hit.size())));
    if (q <= 0 || !admission_->Admit(v)) {
      blocks_.ReleaseAll(&hit);
      return false;
    }
    s->slot = blocks_.AllocateSlot();
    b->resets.push_back(s->slot);  // a new owner must not see the previous one's window
    if (swa_entry) b->swa_restores.push_back({s->slot, hd.hit, std::move(swa_entry)});
    if (hd.block_reused > 0) {
      ++(hd.swa_hit ? stat_swa_hits_ : stat_swa_misses_);
      stat_replayed_ += static_cast<uint64_t>(replay_all ? kv_written : hd.replayed());
    }
    s->blocks = std::move(hit);
    s->computed = cached;
    s->kv_written = kv_written;
    s->registered = s->blocks.size();
    if (s->req->handoff_export) {
      // Every full block of the prompt goes to the store for the resuming engine: the reused
      // ones now (after this batch's forward and swap-in), the computed ones as they register.
      s->handoff_persist = std::make_shared<HandoffPersist>();
      s->handoff_persist->queued.assign(static_cast<size_t>(s->target / block_size_), 0);
      QueueHandoffBlocks(s, s->blocks);
    }
    // Reported as cached: prompt tokens not recomputed, or with exact replay those whose KV
    // was reused.
    const int64_t reused = replay_all ? kv_written : cached;
    if (s->req->counted_queued) {
      s->req->counted_queued = false;
      s->req->cached_tokens = reused;
      queued_ -= 1;
    }
    stat_prefix_hits_ += static_cast<uint64_t>(reused);
    if (s->store_blocks > 0 && s->blocks.size() > s->pool_prefix) {
      const size_t from_store = std::min(s->blocks.size() - s->pool_prefix, s->store_blocks);
      stat_store_hit_tokens_ += static_cast<uint64_t>(from_store) * static_cast<uint64_t>(block_size_);
    }
  }
  s->state = Seq::State::kRunning;
  running_.push_back(sp);
  return true;
}

std::shared_ptr<Batch> EngineImpl::Schedule() {
  auto b = std::make_shared<Batch>();
  b->step = ++step_;
  std::vector<Seq*> in_batch;

  // 1. Decodes: every running sequence past its prompt, up to max_tokens launched.
  std::vector<std::shared_ptr<Seq>> snapshot = running_;
  for (auto& s : snapshot) {
    if (s->state != Seq::State::kRunning || !s->decoding) continue;
    if (s->sampled >= s->req->params.max_tokens) continue;  // its last token is in flight
    ScheduleDecode(s, b.get(), &in_batch);
  }
  std::vector<int64_t> contexts;
  for (const auto& e : b->entries) contexts.push_back(e.start_pos);
  StepBudget budget = chunk_->Begin(contexts);
  b->record.decodes = static_cast<int>(b->entries.size());
  if (spec_on()) PlanSpecCapacity(b.get());
  if (cost_) {
    b->record.predicted_ns = cost_->e;
    for (int64_t c : contexts) b->record.predicted_ns += cost_->DecodeCost(c);
  }

  auto take_chunk = [&](const std::shared_ptr<Seq>& s) -> int64_t {
    int64_t limit = s->target - s->computed;
    if (s->pending_forks > 0) limit = std::min(limit, s->fork_at - s->computed);  // stop at the fork point
    if (limit <= 0) return 0;
    StepBudget trial = budget;
    int64_t q = chunk_->Take(limit, s->computed, &trial);
    if (q <= 0) return 0;
    // Only as many tokens as there are blocks for; prefill never preempts others.
    const int64_t room = (static_cast<int64_t>(s->blocks.size()) + blocks_.available_blocks()) * block_size_ - s->computed;
    if (room <= 0) return 0;
    if (q > room) {
      q = room;
      trial = budget;
      chunk_->Take(q, s->computed, &trial);
    }
    const int64_t want = limit;
    GrowBlocks(s.get(), s->computed + q);
    if (cost_) b->record.predicted_ns += cost_->TokenCost(q, s->computed);
    if (q < want && q < config_.chunk_tokens && config_.chunk_policy == "time") b->record.budget_bound = true;
    budget = trial;
    return q;
  };

  // 2. Prompts part-way through prefill, in arrival order.
  snapshot = running_;
  for (auto& s : snapshot) {
    if (s->state != Seq::State::kRunning || s->decoding || Contains(in_batch, s.get())) continue;
    const int64_t q = take_chunk(s);
    if (q > 0) {
      AddPrefillChunk(s, q, b.get());
      in_batch.push_back(s.get());
    }
  }

  // 3. Admissions, strict FIFO: the head must start (or be unready) before anyone behind it,
  //    except that a request loading its prefix from the store waits in its own state and
  //    lets the ones behind it pass.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    auto s = *it;
    if (s->state != Seq::State::kWaiting) {
      it = waiting_.erase(it);
      continue;
    }
    if (s->inflight > 0) break;  // preempted with launched work outstanding: next step
    if (s->fork_parent) {
      Seq* p = s->fork_parent;
      const bool ready = p->state == Seq::State::kRunning && p->computed == s->fork_at && p->last_step < b->step;
      if (!ready) break;
    } else if (FetchWaits(s, b.get())) {
      ++it;
      continue;
    }
    if (!TryAdmit(s, b.get(), &budget, &in_batch)) break;
    it = waiting_.erase(it);
    const int64_t q = s->decoding ? 0 : take_chunk(s);  // a resumed hand-off decodes next step
    if (q > 0) {
      AddPrefillChunk(s, q, b.get());
      in_batch.push_back(s.get());
    }
  }
  b->record.step = b->step;
  if (config_.chunk_policy == "time") b->record.budget_ns = static_cast<double>(config_.step_budget_ns);
  for (auto& r : running_) RegisterBlocks(r.get());
  if (b->entries.empty() && b->copies.empty() && b->resets.empty() && b->installs.empty() && b->swa_restores.empty() &&
      b->slot_restores.empty()) {
    if (inflight_.empty() && running_.size() > 1) {
      // Nothing could run and nothing is in flight: every running sequence is a prompt
      // waiting for blocks that the others hold (admission only reserves a first chunk).
      // Preempt one so the rest can finish; the oldest prompt goes first (step 2 order).
      std::vector<VictimView> views;
      for (auto& r : running_) views.push_back({r->req->arrival, r->index, static_cast<int>(r->blocks.size())});
      Preempt(running_[preemption_->PickVictim(views)].get());
    }
    return nullptr;
  }
  return b;
}

}  // namespace ladle::engine
