// The engine's threads. The scheduler thread runs the recipe's zero-overhead loop:
//   schedule(N+1) → launch_forward(N+1) → post-process(N−1) → launch_sample(N+1)
// while the device thread runs forward(N) → sample(N). With async scheduling off the same
// code waits for each step before scheduling the next (schedule → forward → sample →
// post-process). Either way the sampled tokens are the same: sampler state lives with the
// device and is advanced in launch order, and a decode's input token is read on the device.
#include "engine_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "ladle/core/logging.h"
#include "ladle/core/thread_pool.h"

namespace ladle::engine {

using Clock = std::chrono::steady_clock;

namespace {
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

EngineImpl::EngineImpl(EngineConfig config, std::unique_ptr<Model> model, std::unique_ptr<KvStorage> kv,
                       tokenizer::Tokenizer tok, std::unique_ptr<ChunkPolicy> chunk,
                       std::unique_ptr<AdmissionPolicy> admission, std::unique_ptr<PreemptionPolicy> preemption,
                       std::optional<CostModel> cost, std::unique_ptr<SpecPolicy> spec)
    : config_(std::move(config)),
      model_(std::move(model)),
      kv_(std::move(kv)),
      tok_(std::move(tok)),
      chunk_(std::move(chunk)),
      admission_(std::move(admission)),
      preemption_(std::move(preemption)),
      cost_(cost),
      blocks_(config_.num_blocks, config_.max_running, model_->config().block_size),
      seed_state_(config_.seed) {
  vocab_ = static_cast<size_t>(model_->config().vocab_size);
  valid_vocab_ = std::min(vocab_, tok_.VocabSize());
  block_size_ = model_->config().block_size;
  swa_ = SwaGeometry{block_size_, model_->config().window, model_->config().swa_ring - model_->config().window};
  key_extras_.push_back({kvcache::ExtraTag::kModel,
                         config_.model_fingerprint.empty() ? ModelFingerprint(model_->config()) : config_.model_fingerprint});
  if (config_.cache_salt != 0) key_extras_.push_back({kvcache::ExtraTag::kCacheSalt, std::to_string(config_.cache_salt)});
  // The SWA pool serves prefix hits only: without the prefix cache nothing would read it.
  if (config_.prefix_cache) {
    swa_pool_ = config_.swa_pool;
    if (!swa_pool_ && config_.swa_pool_bytes > 0) {
      swa_pool_ = std::make_shared<SwaPool>(SwaPoolOptions{config_.swa_pool_bytes, config_.swa_ttl_ms});
    }
  }
  if (config_.on_block_event) {
    blocks_.on_evict = [this](const BlockHash& h) {
      BlockEvent e;
      e.kind = BlockEvent::Kind::kRemoved;
      e.block_size = block_size_;
      e.keys.push_back(h);
      config_.on_block_event(std::move(e));
    };
  }
  fetcher_ = std::dynamic_pointer_cast<kvcache::FetcherStore>(config_.kv_store);
  spec_ = std::move(spec);
  if (spec_) {
    drafter_ = config_.drafter;
    gamma_ = spec_->draft_tokens();
  }
  device_ = std::make_unique<Device>();
  fetch_inbox_->wake = [this] {
    {
      std::lock_guard lk(mu_);
      fetch_ready_ = true;
    }
    cv_.notify_one();
  };
  thread_ = std::thread([this] { Loop(); });
}

EngineImpl::~EngineImpl() { Shutdown(); }

Result<RequestId> EngineImpl::Submit(SubmitRequest request, OutputSink sink) {
  const auto& p = request.sampling;
  if (request.prompt.empty()) return InvalidArgument("prompt is empty");
  for (TokenId t : request.prompt)
    if (t >= vocab_) return InvalidArgument(fmt::format("token id {} is outside the vocabulary", t));
  if (p.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  if (p.n < 1 || p.n > config_.max_running)
    return InvalidArgument(fmt::format("n must be between 1 and {}", config_.max_running));
  if (p.temperature < 0 || p.top_p <= 0 || p.top_p > 1 || p.top_k < 0 || p.min_p < 0 || p.min_p > 1)
    return InvalidArgument("sampling parameters out of range");
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + p.max_tokens;
  if (total > config_.max_model_len)
    return InvalidArgument(fmt::format("prompt ({}) + max_tokens ({}) exceeds the model length {}",
                                       request.prompt.size(), p.max_tokens, config_.max_model_len));
  if (request.handoff_export && (p.n != 1 || p.max_tokens != 1 || request.resume))
    return InvalidArgument("a hand-off export needs n = 1 and max_tokens = 1, and no resume state");
  if (request.resume && p.n != 1) return InvalidArgument("a hand-off resume needs n = 1");
  // The prompt alone must fit the pool, or it could never be admitted.
  if (static_cast<int64_t>(request.prompt.size()) + 1 > static_cast<int64_t>(config_.num_blocks) * block_size_)
    return InvalidArgument("prompt does not fit in the KV block pool");
  auto r = std::make_shared<Request>();
  LADLE_RETURN_IF_ERROR(CheckImages(request));
  r->prompt = std::move(request.prompt);
  r->images = std::move(request.images);
  r->params = p;
  r->mask = std::move(request.mask);
  r->agent_traffic = request.agent_traffic;
  r->swa_anchor_for_len = request.swa_anchor_for_len;
  r->handoff_export = request.handoff_export;
  r->resume = std::move(request.resume);
  r->sink = std::move(sink);
  {
    std::lock_guard lk(mu_);
    if (stopping_) return Status(StatusCode::kUnavailable, "engine is shutting down");
    if (queued_.load() >= config_.max_queue) return ResourceExhausted("request queue is full");
    r->id = next_id_++;
    queued_ += 1;
    inbox_.push_back(r);
  }
  cv_.notify_one();
  return r->id;
}

void EngineImpl::Cancel(RequestId id) {
  {
    std::lock_guard lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

Stats EngineImpl::GetStats() const {
  Stats s;
  s.queue_depth = static_cast<size_t>(std::max<int64_t>(0, queued_.load()));
  s.running = stat_running_.load();
  s.kv_blocks_used = stat_blocks_used_.load();
  s.kv_blocks_total = static_cast<size_t>(config_.num_blocks);
  s.prefix_hit_tokens = stat_prefix_hits_.load();
  s.generated_tokens = stat_generated_.load();
  s.kv_store_writes = store_counters_->writes.load();
  s.kv_store_write_drops = store_counters_->drops.load();
  s.kv_store_write_errors = store_counters_->errors.load();
  s.kv_store_writes_agent = store_counters_->agent.load();
  s.kv_store_writes_chatbot = store_counters_->chatbot.load();
  s.device_idle_fraction = device_ ? device_->idle_fraction() : 0.0;
  s.prefix_hit_tokens_store = stat_store_hit_tokens_.load();
  s.kv_store_fetches = stat_fetches_.load();
  s.kv_store_fetch_blocks = stat_fetch_blocks_.load();
  s.kv_store_fetch_timeouts = stat_fetch_timeouts_.load();
  s.kv_store_fetch_seconds_total = static_cast<double>(stat_fetch_ns_.load()) / 1e9;
  s.kv_loading = stat_loading_.load();
  if (fetcher_) {
    const kvcache::FetcherStoreStats f = fetcher_->stats();
    s.kv_fetcher = true;
    s.kv_fetcher_connected = f.connected;
    s.kv_fetcher_reconnects = f.reconnects;
    s.kv_fetcher_shm_hit_blocks = f.fetcher.shm_hits;
    s.kv_fetcher_store_read_blocks = f.fetcher.store_reads;
    s.kv_fetcher_slots = f.fetcher.slots;
    s.kv_fetcher_slots_used = f.fetcher.slots_used;
    s.kv_fetcher_slots_pinned = f.fetcher.slots_pinned;
    s.kv_fetcher_write_drops = f.put_queue_drops + f.put_stage_drops;
  }
  s.swa_hits = stat_swa_hits_.load();
  s.swa_misses = stat_swa_misses_.load();
  s.replayed_tokens = stat_replayed_.load();
  if (swa_pool_) {
    const SwaPoolStats p = swa_pool_->Stats();
    s.swa_pool_entries = p.entries;
    s.swa_pool_bytes = p.bytes;
    s.swa_pool_stored = p.stored;
    s.swa_pool_expired = p.expired;
    s.swa_pool_evicted = p.evicted;
  }
  const SwapIn::Totals t = swap_in_->totals();
  s.swap_in_copy_seconds_total = static_cast<double>(t.copy_ns) / 1e9;
  s.swap_in_exposed_seconds_total = static_cast<double>(t.exposed_ns) / 1e9;
  s.swap_in_copies = t.copies;
  s.handoff_exports = stat_handoff_exports_.load();
  s.handoff_imports = stat_handoff_imports_.load();
  s.handoff_fallbacks = stat_handoff_fallbacks_.load();
  s.expert_parallel = model_->GetExpertParallelStats(&s.ep);
  if (spec_) {
    s.spec_draft_tokens = stat_spec_drafts_.load();
    s.spec_accepted_tokens = stat_spec_accepted_.load();
    s.spec_verify_tokens = stat_spec_verify_.load();
    for (int l = 0; l <= gamma_; ++l) s.spec_verify_lengths.push_back(stat_spec_lengths_[static_cast<size_t>(l)].load());
  }
  return s;
}

void EngineImpl::Shutdown() {
  {
    std::lock_guard lk(mu_);
    if (shutdown_done_) return;
    shutdown_done_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  device_.reset();  // runs anything still queued, then joins
  std::lock_guard lk(fetch_inbox_->mu);
  fetch_inbox_->wake = nullptr;  // a late store completion finds no engine to wake
}

void EngineImpl::AddRequest(std::shared_ptr<Request> r) {
  r->arrival = ++arrivals_;
  const uint64_t base = r->params.seed ? *r->params.seed : Mix(seed_state_ += 0x2545F4914F6CDD1Dull);
  const int n = r->params.n;
  r->unfinished = n;
  const int64_t len = static_cast<int64_t>(r->prompt.size());
  // n > 1: the samples share the prompt's full blocks up to the last block boundary before
  // the prompt's end; each then prefills the tail (≤ 128 tokens) into a block of its own,
  // since decode writes into that last block and samples diverge there.
  const int64_t fork_at = n > 1 ? (len - 1) / block_size_ * block_size_ : 0;
  // A hand-off's sampler state is carried even when its KV cannot be (a fallback recomputes the
  // KV, but the draws and penalty counts still continue the exporting engine's).
  const std::shared_ptr<const HandoffState> given = std::move(r->resume);
  if (given && CheckResume(*r, *given)) r->resume = given;
  if (given && !r->resume) ++stat_handoff_fallbacks_;
  auto& seqs = requests_[r->id];
  for (int i = 0; i < n; ++i) {
    auto s = std::make_shared<Seq>();
    s->req = r;
    s->index = i;
    s->tokens = r->prompt;
    s->dev = std::make_shared<DevSeq>();
    s->dev->params = r->params;
    s->dev->mask = r->mask;
    s->dev->index = i;
    s->dev->sampler = SamplerState(Mix(base + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull));
    if (!r->params.stop.empty()) s->stop = std::make_unique<StopChecker>(tok_, r->params.stop);
    if (given) {
      // Continue where the exporting engine's sampler stood after the first token; that token
      // is the first decode's input.
      s->resume = r->resume;
      s->dev->sampler.rng = given->rng;
      s->dev->sampler.counts.insert(given->counts.begin(), given->counts.end());
      s->dev->last_token = given->first_token;
      s->dev->pos = given->position;
    }
    seqs.push_back(s);
  }
  r->resume.reset();  // the sequence holds it until admitted
  if (fork_at > 0) {
    seqs[0]->pending_forks = n - 1;
    seqs[0]->fork_at = fork_at;
    for (int i = 1; i < n; ++i) {
      seqs[i]->fork_parent = seqs[0].get();
      seqs[i]->fork_at = fork_at;
    }
  }
  for (auto& s : seqs) waiting_.push_back(s);
}

void EngineImpl::DrainInbox() {
  std::vector<std::shared_ptr<Request>> in;
  std::vector<RequestId> cancels;
  {
    std::lock_guard lk(mu_);
    in.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& r : in) AddRequest(std::move(r));
  for (RequestId id : cancels) CancelRequest(id);
}

void EngineImpl::CancelRequest(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  auto seqs = it->second;  // FinishSeq may erase the map entry
  for (auto& s : seqs)
    if (s->state != Seq::State::kFinished) FinishSeq(s.get(), FinishKind::kCancelled, nullptr, "", "");
}

void EngineImpl::FinishSeq(Seq* s, FinishKind kind, TokenEvent* last, std::string matched, std::string error) {
  if (s->state == Seq::State::kFinished) return;
  // The decode copy area's most recent copy outlives the request (the next turn hits it).
  if (s->swa_last_copy && kind != FinishKind::kError) StoreSwa(s, *s->swa_last_copy);
  s->swa_last_copy.reset();
  // Free at once: launched work that still touches these blocks runs before any later
  // owner's (the device is FIFO), so reuse is safe immediately.
  blocks_.ReleaseAll(&s->blocks);
  if (s->slot >= 0) blocks_.FreeSlot(s->slot);
  s->slot = -1;
  s->state = Seq::State::kFinished;
  if (s->fetch) {  // cancelled while loading: a late completion only fills the dropped buffers
    s->fetch.reset();
    --fetches_inflight_;
  }
  std::erase_if(running_, [&](const auto& p) { return p.get() == s; });
  auto& req = *s->req;
  if (req.counted_queued) {
    req.counted_queued = false;
    queued_ -= 1;
  }
  // Samples still waiting to fork from this one prefill on their own instead.
  if (s->pending_forks > 0) {
    for (auto& o : requests_[req.id]) {
      if (o->fork_parent == s) {
        o->fork_parent = nullptr;
        o->fork_at = 0;
      }
    }
    s->pending_forks = 0;
  }
  Output out;
  out.id = req.id;
  if (last) out.tokens.push_back(std::move(*last));
  out.finished = true;
  out.finished_index = s->index;
  out.finish = kind;
  out.stop_matched = std::move(matched);
  out.prompt_tokens = static_cast<int64_t>(req.prompt.size());
  out.cached_tokens = req.cached_tokens;
  out.error = std::move(error);
  if (s->handoff_out && kind != FinishKind::kError && kind != FinishKind::kCancelled) out.handoff = s->handoff_out;
  s->handoff_out.reset();
  PublishStats();  // a client that sees the finish sees the freed blocks too
  if (req.sink) req.sink(out);
  if (--req.unfinished == 0) requests_.erase(req.id);
}

void EngineImpl::AcceptToken(Seq* s, const Sampled& r) {
  const auto& p = s->req->params;
  s->tokens.push_back(r.token);
  s->generated += 1;
  stat_generated_ += 1;
  TokenEvent ev;
  ev.index = s->index;
  ev.token = r.token;
  ev.logprob = r.logprob;
  if (p.top_logprobs > 0) ev.top_logprobs = r.top_logprobs;
  if (std::isinf(r.logprob) && r.logprob < 0) {
    // The mask allowed no token at all: there is nothing valid to emit.
    std::string why = s->req->mask ? s->req->mask->Failure(s->index) : std::string();
    FinishSeq(s, FinishKind::kError, nullptr, "", why.empty() ? "no token allowed by the mask" : why);
    return;
  }
  const bool eos = r.token == config_.eos_id && !p.ignore_eos;
  const bool stop_tok = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), r.token) != p.stop_token_ids.end();
  if (eos || stop_tok) {
    // The stop token is reported (usage, logprobs) but its text is not part of the output.
    FinishSeq(s, eos ? FinishKind::kEos : FinishKind::kStopToken, &ev, "", "");
    return;
  }
  if (s->stop) {
    // The engine decides when a stop string ends the sample; the text is the server's.
    Result<std::string> matched = s->stop->Push(r.token);
    if (!matched.ok()) {
      FinishSeq(s, FinishKind::kError, &ev, "", matched.status().ToString());
      return;
    }
    if (!matched->empty()) {
      FinishSeq(s, FinishKind::kStopString, &ev, std::move(matched).value(), "");
      return;
    }
  }
  if (s->generated >= p.max_tokens) {
    FinishSeq(s, FinishKind::kLength, &ev, "", "");
    return;
  }
  Output out;
  out.id = s->req->id;
  out.tokens.push_back(std::move(ev));
  out.prompt_tokens = static_cast<int64_t>(s->req->prompt.size());
  out.cached_tokens = s->req->cached_tokens;
  if (s->req->sink) s->req->sink(out);
}

void MaskWork::Drain() {
  for (size_t i = next.fetch_add(1); i < seqs.size(); i = next.fetch_add(1)) {
    DevSeq& d = *seqs[i];
    d.mask_bits.assign((vocab + 63) / 64, 0);
    d.mask->FillMask(d.index, d.mask_bits.data(), vocab);
    if (done.fetch_add(1) + 1 == seqs.size()) {
      std::lock_guard lk(mu);
      cv.notify_all();
    }
  }
}

void MaskWork::Finish() {
  Drain();
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return done.load() == seqs.size(); });
}

void EngineImpl::StartMasks(const std::shared_ptr<Batch>& b) {
  // Every sample of step N-1 (and so every Accept) ran before this forward on the device
  // thread, so each matcher is already in the state this step's mask needs.
  auto w = std::make_shared<MaskWork>();
  w->vocab = vocab_;
  for (auto& e : b->entries) {
    if (e.sample && e.dev->mask) w->seqs.push_back(e.dev.get());
  }
  if (w->seqs.empty()) return;
  b->masks = w;
  if (!config_.overlap_masks) return;
  ThreadPool& pool = SharedPool();
  const size_t helpers = std::min(w->seqs.size(), pool.size());
  for (size_t k = 0; k < helpers; ++k) pool.Submit([w] { w->Drain(); });
}

Status EngineImpl::CheckImages(const SubmitRequest& request) const {
  const size_t hidden = static_cast<size_t>(model_->config().hidden);
  int64_t end = 0;
  for (const PromptImage& im : request.images) {
    if (im.pos < end || im.tokens <= 0 || im.pos + im.tokens > static_cast<int64_t>(request.prompt.size())) {
      return InvalidArgument("image placeholders must be increasing, non-overlapping runs within the prompt");
    }
    if (!im.embeds || im.embeds->size() != static_cast<size_t>(im.tokens) * hidden) {
      return InvalidArgument(fmt::format("an image of {} placeholders needs {} × {} embedding floats", im.tokens,
                                         im.tokens, hidden));
    }
    end = im.pos + im.tokens;
  }
  return Status::Ok();
}

BlockHash EngineImpl::SeqBlockHash(const Seq* s, size_t i) const {
  const BlockHash* parent = i == 0 ? nullptr : &s->hashes[i - 1];
  const auto tokens = std::span<const TokenId>(s->tokens).subspan(i * block_size_, block_size_);
  const auto& images = s->req->images;
  if (images.empty()) return HashBlock(parent, tokens, key_extras_);
  // Every image whose placeholders the block covers joins its key: the placeholder ids are the
  // same for every image, the embeddings that replace them are not.
  std::vector<kvcache::ExtraKey> extras = key_extras_;
  const int64_t lo = static_cast<int64_t>(i) * block_size_, hi = lo + block_size_;
  for (const PromptImage& im : images) {
    if (im.pos >= hi || im.pos + im.tokens <= lo) continue;
    std::string v(16, '\0');
    for (int b = 0; b < 8; ++b) {
      v[b] = static_cast<char>(im.hash_hi >> (8 * b));
      v[8 + b] = static_cast<char>(im.hash_lo >> (8 * b));
    }
    extras.push_back({kvcache::ExtraTag::kImage, std::move(v)});
  }
  return HashBlock(parent, tokens, extras);
}

void EngineImpl::ImageRows(const Entry& e, std::vector<EmbedRow>* rows) {
  rows->clear();
  if (e.decode) return;
  const int64_t lo = e.start_pos, hi = e.start_pos + static_cast<int64_t>(e.tokens.size());
  const size_t hidden = static_cast<size_t>(model_->config().hidden);
  for (const PromptImage& im : e.seq->req->images) {
    for (int64_t p = std::max(lo, im.pos); p < std::min(hi, im.pos + im.tokens); ++p) {
      rows->push_back({static_cast<int32_t>(p - lo), im.embeds->data() + static_cast<size_t>(p - im.pos) * hidden});
    }
  }
}

void EngineImpl::LaunchForward(const std::shared_ptr<Batch>& b, bool after_gap) {
  device_->Launch(
      [this, b] {
        const auto t0 = Clock::now();
        StartMasks(b);
        if (spec_) PrepareSpecSteps(b.get());
        for (int32_t slot : b->resets) kv_->ResetSlot(slot);
        for (auto [from, to] : b->copies) kv_->CopySlot(from, to);
        std::vector<SeqStep> steps;
        steps.reserve(b->entries.size());
        std::vector<std::vector<EmbedRow>> embeds(b->entries.size());
        const size_t hidden = static_cast<size_t>(model_->config().hidden);
        for (auto& e : b->entries) {
          if (e.spec && e.verify < 0) continue;  // nothing left to sample (engine_spec.cc)
          if (e.decode && !e.spec) e.tokens.assign(1, e.dev->last_token);  // sampled by an earlier step
          SeqStep st;
          st.tokens = e.tokens;
          st.start_pos = e.start_pos;
          st.kv_written = e.kv_written;
          st.block_table = e.table;
          st.swa_slot = e.slot;
          st.prefill = !e.decode;
          st.want_logits = e.sample;
          st.swa_capture = e.swa_capture.get();
          if (!e.seq->req->images.empty()) {
            std::vector<EmbedRow>& rows = embeds[static_cast<size_t>(&e - b->entries.data())];
            ImageRows(e, &rows);
            st.embeds = rows;
          }
          if (e.spec) {
            st.logits_count = e.verify + 1;
            st.hidden_out = e.hidden.data();
          } else if (spec_ && e.sample) {
            e.hidden.assign(hidden, 0.0f);  // the drafter conditions on it
            st.hidden_out = e.hidden.data();
          }
          steps.push_back(st);
        }
        // Fetched blocks and SWA entries are copied in while the forward runs; the steps that
        // read them wait per layer (SeqStep::ready), and the task waits for every copy before
        // it ends, so the next batch never sees a copy in flight.
        const bool swapping = StartSwapIn(b.get(), &steps);
        if (!steps.empty()) b->status = model_->Forward(steps, *kv_, &b->logits);
        if (swapping) swap_in_->WaitAll();
        // A hand-off export's state at the prompt's end, before any later step moves it.
        for (auto& e : b->entries)
          if (e.handoff && b->status.ok()) CaptureHandoffRings(e);
        b->record.forward_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      },
      after_gap);
}

void EngineImpl::FlushPersists() {
  if (persist_.empty()) return;
  auto pieces = std::make_shared<std::vector<PersistPiece>>(std::move(persist_));
  persist_.clear();
  device_->Launch(
      [this, pieces] {
        const size_t bytes = kv_->block_bytes();
        std::shared_ptr<StoreCounters> counters = store_counters_;
        for (PersistPiece& piece : *pieces) {
          const int64_t need = static_cast<int64_t>(bytes * piece.blocks.size());
          // A hand-off's blocks are bounded by its prompt and the resuming engine needs them:
          // they pass the back-pressure limit.
          if (!piece.handoff && counters->inflight_bytes.load() + need > config_.kv_store_max_inflight_bytes) {
            counters->drops += piece.blocks.size();  // back-pressure: never queue without bound
            continue;
          }
          std::vector<std::vector<uint8_t>> values(piece.blocks.size(), std::vector<uint8_t>(bytes));
          std::vector<std::span<const uint8_t>> spans;
          bool ok = true;
          for (size_t i = 0; i < piece.blocks.size(); ++i) {
            ok = ok && kv_->ReadBlock(piece.blocks[i], values[i]);
            spans.emplace_back(values[i]);
          }
          if (!ok) {
            counters->errors += piece.blocks.size();
            continue;
          }
          counters->inflight_bytes += need;
          if (piece.handoff) {
            auto& q = piece.handoff->queued;
            for (size_t i = 0; i < piece.blocks.size() && piece.handoff_first + i < q.size(); ++i)
              q[piece.handoff_first + i] = 1;
          }
          const bool agent = piece.agent;
          // Put copies the values before it returns; the completion only counts.
          config_.kv_store->Put(
              piece.keys, spans, agent ? kvcache::TrafficClass::kAgent : kvcache::TrafficClass::kChatbot,
              [counters, need, agent](std::vector<Status> st) {
                for (const Status& x : st) {
                  if (x.ok()) {
                    ++counters->writes;
                    ++(agent ? counters->agent : counters->chatbot);
                  } else {
                    ++counters->errors;
                  }
                }
                counters->inflight_bytes -= need;
              },
              piece.parent);
        }
      },
      false);
}

void EngineImpl::LaunchSample(const std::shared_ptr<Batch>& b) {
  device_->Launch(
      [this, b] {
        const auto t0 = Clock::now();
        if (b->masks) b->masks->Finish();
        if (b->status.ok()) {
          size_t row = 0;
          for (auto& e : b->entries) {
            if (!e.sample) continue;
            if (e.spec) {
              if (e.verify >= 0) SampleSpec(b.get(), e, &row);
              continue;
            }
            DevSeq& d = *e.dev;
            e.result = SampleRow(d, std::span<float>(b->logits.data() + row * vocab_, vocab_));
            ++row;
            d.pos = e.start_pos + (e.decode ? 1 : static_cast<int64_t>(e.tokens.size()));
            d.emitted += 1;
            if (!e.decode) d.swa_copier.reset();  // decoding (re)starts here: spec copies count from d.pos
            if (e.handoff) CaptureHandoffSampler(e);
          }
          if (spec_) DraftAfterSample(b.get());
        }
        b->record.forward_ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
        {
          std::lock_guard lk(b->mu);
          b->done = true;
        }
        b->cv.notify_all();
      },
      false);
}

Sampled EngineImpl::SampleRow(DevSeq& d, std::span<float> logits) {
  const uint64_t* mask = d.mask ? d.mask_bits.data() : nullptr;
  if (config_.eos_logit_bias != 0.0f && !d.params.ignore_eos && config_.eos_id < logits.size()) {
    logits[config_.eos_id] += config_.eos_logit_bias;
  }
  Sampled r = SampleToken(logits, d.params, &d.sampler, mask, valid_vocab_);
  if (d.mask) d.mask->Accept(d.index, r.token);
  d.last_token = r.token;
  return r;
}

void EngineImpl::PostProcess(const std::shared_ptr<Batch>& b) {
  {
    std::unique_lock lk(b->mu);
    b->cv.wait(lk, [&] { return b->done; });
  }
  for (auto& e : b->entries) {
    Seq* s = e.seq.get();
    s->inflight -= 1;
    if (s->state == Seq::State::kFinished) continue;  // finished meanwhile: the token is discarded
    if (!b->status.ok()) {
      FinishSeq(s, FinishKind::kError, nullptr, "", b->status.ToString());
      continue;
    }
    OnSwaDone(s, e);  // before AcceptToken, which may finish (and store) the sequence
    if (e.handoff && e.sample) FinishHandoffCapture(s, e);  // delivered by AcceptToken's finish
    if (spec_ && !e.conf.empty()) s->spec_conf = e.conf;
    if (e.spec) {
      PostProcessSpec(s, e);
    } else if (e.sample) {
      AcceptToken(s, e.result);
    }
    RegisterBlocks(s);
  }
  // A sequence that finished here frees its blocks for the next schedule: their copy-out must
  // be queued before the forward that may reuse them.
  FlushPersists();
  if (config_.on_step) config_.on_step(b->record);
}

void EngineImpl::PublishStats() {
  stat_running_ = running_.size();
  stat_blocks_used_ = static_cast<size_t>(blocks_.used_blocks());
  stat_loading_ = fetches_inflight_;
}

void EngineImpl::Loop() {
  bool after_gap = true;
  std::optional<Clock::time_point> deadline;
  for (;;) {
    DrainInbox();
    bool stopping;
    {
      std::lock_guard lk(mu_);
      stopping = stopping_;
    }
    if (stopping) {
      if (!deadline) deadline = Clock::now() + std::chrono::milliseconds(config_.shutdown_deadline_ms);
      if (Clock::now() >= *deadline) {
        std::vector<RequestId> ids;
        for (auto& [id, _] : requests_) ids.push_back(id);
        for (RequestId id : ids) CancelRequest(id);
      }
      if (requests_.empty() && inflight_.empty()) break;
    }
    auto batch = Schedule();
    PublishStats();  // admissions and preemptions are visible before any of their outputs
    if (batch) {
      LaunchForward(batch, after_gap);
      after_gap = false;
      inflight_.push_back(batch);
    }
    FlushPersists();  // after the forward that computed them, before any later one
    if (config_.async_scheduling) {
      // post-process(N−1) while the device runs N; then launch_sample(N+1).
      while (inflight_.size() > 2) {
        auto front = inflight_.front();
        inflight_.pop_front();
        PostProcess(front);
      }
      if (batch) LaunchSample(batch);
    } else if (batch) {
      LaunchSample(batch);
    }
    if (!config_.async_scheduling || !batch) {
      // Synchronous, or nothing new to launch: wait for the oldest step.
      if (!inflight_.empty()) {
        auto front = inflight_.front();
        inflight_.pop_front();
        PostProcess(front);
      }
    }
    PublishStats();
    if (!batch && inflight_.empty()) {
      std::unique_lock lk(mu_);
      if (inbox_.empty() && cancels_.empty() && !fetch_ready_) {
        // Nothing runnable; sleep until a submit, cancel or store completion (or poll the
        // shutdown deadline, or a fetch's deadline).
        cv_.wait_for(lk, std::chrono::milliseconds(stopping_ || fetches_inflight_ > 0 ? 5 : 100));
        after_gap = true;
      }
      fetch_ready_ = false;
    }
  }
  PublishStats();
}

Result<std::unique_ptr<Engine>> CreateEngine(const EngineConfig& config, std::unique_ptr<Model> model,
                                             tokenizer::Tokenizer tokenizer) {
  if (!model) return InvalidArgument("CreateEngine: no model");
  if (config.num_blocks < 1 || config.max_running < 1 || config.max_queue < 1)
    return InvalidArgument("num_blocks, max_running and max_queue must be positive");
  LADLE_ASSIGN_OR_RETURN(auto admission, MakeAdmissionPolicy(config.admission_policy));
  LADLE_ASSIGN_OR_RETURN(auto preemption, MakePreemptionPolicy(config.preemption_policy));
  auto kv = model->NewKvStorage(config.num_blocks, config.max_running);
  if (!kv) return Internal("model returned no KV storage");
  std::unique_ptr<ChunkPolicy> chunk;
  std::optional<CostModel> cost;
  if (config.chunk_policy == "fixed") {
    if (config.chunk_tokens < 1) return InvalidArgument("chunk_tokens must be positive");
    chunk = std::make_unique<FixedChunk>(config.chunk_tokens);
  } else if (config.chunk_policy == "time") {
    if (config.step_budget_ns <= 0) return InvalidArgument("step_budget_ns must be positive");
    if (!config.cost_model_path.empty() && std::ifstream(config.cost_model_path).good()) {
      LADLE_ASSIGN_OR_RETURN(cost, CostModel::Load(config.cost_model_path));
    } else {
      const auto t0 = Clock::now();
      LADLE_ASSIGN_OR_RETURN(auto samples, ProfileModel(*model, *kv, config.profile_max_q, config.profile_repeats));
      LADLE_ASSIGN_OR_RETURN(cost, CostModel::Fit(samples));
      LADLE_LOG_INFO("engine.cost_model a={:.1f} b={:.4f} d={:.4f} e={:.0f} f={:.2f} g={:.0f} h={:.2f} samples={} ms={:.0f}",
                     cost->a, cost->b, cost->d, cost->e, cost->f, cost->g, cost->h, samples.size(),
                     std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!config.cost_model_path.empty()) LADLE_RETURN_IF_ERROR(cost->Save(config.cost_model_path));
    }
    chunk = std::make_unique<TimeBudgetChunk>(*cost, static_cast<double>(config.step_budget_ns),
                                              config.min_chunk_tokens, config.chunk_tokens);
  } else {
    return InvalidArgument("unknown chunk policy: " + config.chunk_policy);
  }
  LADLE_ASSIGN_OR_RETURN(std::unique_ptr<SpecPolicy> spec, MakeEngineSpecPolicy(config, *model, *kv));
  return std::unique_ptr<Engine>(new EngineImpl(config, std::move(model), std::move(kv), std::move(tokenizer),
                                                std::move(chunk), std::move(admission), std::move(preemption),
                                                cost, std::move(spec)));
}

}  // namespace ladle::engine
