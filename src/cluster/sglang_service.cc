// SglangScheduler over gRPC's callback API, in front of the engine server's DP ranks. Threads
// as in engine_server.cc: gRPC's callback threads run the handlers, engine Outputs arrive on a
// rank's scheduler thread and are queued into the call's reactor (never blocking there), and
// KV events arrive on the scheduler thread that appends them to the KvEventLog.
#include "sglang_service.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "ladle/cluster/kv_event_log.h"
#include "ladle/core/logging.h"
#include "rpc_convert.h"
#include "sglang_scheduler.grpc.pb.h"

namespace ladle::cluster {
namespace {

namespace sg = ::sglang::grpc::scheduler;
namespace common = ::smg::grpc::common;

constexpr int64_t kDefaultMaxNewTokens = 128;  // SGLang's SamplingParams default

grpc::Status Invalid(std::string msg) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(msg)); }

std::string Iso8601Now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The SGLang sampling fields in the VllmEngine form, so one reader (FromProto) validates both
// protocols' requests the same way.
Result<engine::SamplingParams> SamplingFromSglang(const sg::GenerateRequest& req) {
  const sg::SamplingParams& p = req.sampling_params();
  pb::SamplingParams v;
  if (p.has_temperature()) v.set_temperature(p.temperature());
  if (p.has_top_p()) v.set_top_p(p.top_p());
  if (p.has_top_k()) {
    if (p.top_k() < -1) return InvalidArgument("top_k must be -1 (off) or >= 0");
    v.set_top_k(p.top_k() < 0 ? 0u : static_cast<uint32_t>(p.top_k()));
  }
  if (p.has_min_p()) v.set_min_p(p.min_p());
  if (p.has_frequency_penalty()) v.set_frequency_penalty(p.frequency_penalty());
  if (p.has_presence_penalty()) v.set_presence_penalty(p.presence_penalty());
  if (p.has_repetition_penalty()) v.set_repetition_penalty(p.repetition_penalty());
  if (p.has_max_new_tokens()) v.set_max_tokens(p.max_new_tokens());
  for (const auto& s : p.stop()) v.add_stop(s);
  for (uint32_t t : p.stop_token_ids()) v.add_stop_token_ids(t);
  v.set_ignore_eos(p.ignore_eos());
  v.set_n(p.n());
  v.set_min_tokens(p.min_new_tokens());
  if (!p.logit_bias().empty()) return InvalidArgument("logit_bias is not supported");
  if (req.return_logprob()) {
    if (req.top_logprobs_num() < 0) return InvalidArgument("top_logprobs_num must be >= 0");
    v.set_logprobs(req.top_logprobs_num());
  }
  return FromProto(v, kDefaultMaxNewTokens);
}

void AppendLogprob(const engine::TokenEvent& t, bool top, sg::OutputLogProbs* out) {
  out->add_token_logprobs(t.logprob);
  out->add_token_ids(t.token);
  if (top) {
    sg::TopLogProbs* tl = out->add_top_logprobs();
    for (const auto& [id, lp] : t.top_logprobs) {
      tl->add_token_ids(id);
      tl->add_values(lp);
    }
  }
}

// One Generate call. Shared by its reactor (until OnDone) and its engine sink (until the last
// Output); holds no pointer to the service, so a late Output finds only the call.
struct SgCall {
  std::string rid;
  engine::Engine* eng = nullptr;
  std::vector<engine::TokenId> prompt;
  engine::SamplingParams sampling;
  bool stream = false;

  std::mutex mu;
  grpc::ServerWriteReactor<sg::GenerateResponse>* reactor = nullptr;  // null after OnDone
  std::deque<sg::GenerateResponse> queue;
  sg::GenerateResponse inflight;
  bool writing = false, finish_requested = false, finished = false;
  grpc::Status final_status;
  bool cancelled = false, submitted = false;
  engine::RequestId eid = 0;
  std::vector<std::vector<uint32_t>> ids;
  std::vector<sg::OutputLogProbs> logprobs;
  int unfinished = 0;

  static void Submit(const std::shared_ptr<SgCall>& c, std::shared_ptr<engine::MaskProvider> mask);
  void OnOutput(const std::shared_ptr<SgCall>& self, const engine::Output& out);
  void Finish(grpc::Status st);
  void Cancel();
  void Pump();
};

void SgCall::Submit(const std::shared_ptr<SgCall>& c, std::shared_ptr<engine::MaskProvider> mask) {
  {
    std::lock_guard lock(c->mu);
    if (c->cancelled || c->finish_requested) {
      if (!c->finish_requested) c->final_status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      c->finish_requested = true;
    }
    c->ids.assign(static_cast<size_t>(c->sampling.n), {});
    c->logprobs.assign(static_cast<size_t>(c->sampling.n), {});
    c->unfinished = c->sampling.n;
  }
  c->Pump();
  {
    std::lock_guard lock(c->mu);
    if (c->finish_requested) return;
  }
  engine::SubmitRequest r;
  r.prompt = c->prompt;
  r.sampling = c->sampling;
  r.mask = std::move(mask);
  auto id = c->eng->Submit(std::move(r), [c](const engine::Output& out) { c->OnOutput(c, out); });
  if (!id.ok()) return c->Finish(ToGrpc(id.status()));
  bool cancel_now = false;
  {
    std::lock_guard lock(c->mu);
    c->eid = *id;
    c->submitted = true;
    cancel_now = c->cancelled;
  }
  if (cancel_now) c->eng->Cancel(*id);
}

void SgCall::OnOutput(const std::shared_ptr<SgCall>& self, const engine::Output& out) {
  bool error = false;
  {
    std::lock_guard lock(mu);
    const bool top = sampling.top_logprobs > 0, lp = sampling.top_logprobs >= 0;
    std::vector<sg::GenerateStreamChunk*> chunks(ids.size(), nullptr);
    std::vector<sg::GenerateResponse> msgs;
    msgs.reserve(ids.size());  // the chunk pointers stay valid
    for (const engine::TokenEvent& t : out.tokens) {
      const size_t i = static_cast<size_t>(t.index);
      if (i >= ids.size()) continue;
      ids[i].push_back(t.token);
      if (stream) {
        if (chunks[i] == nullptr) {
          msgs.emplace_back();
          msgs.back().set_request_id(rid);
          chunks[i] = msgs.back().mutable_chunk();
          chunks[i]->set_index(static_cast<uint32_t>(i));
        }
        chunks[i]->add_token_ids(t.token);
        if (lp) AppendLogprob(t, top, chunks[i]->mutable_output_logprobs());
      } else if (lp) {
        AppendLogprob(t, top, &logprobs[i]);
      }
    }
    for (sg::GenerateResponse& m : msgs) {
      sg::GenerateStreamChunk* ch = m.mutable_chunk();
      ch->set_prompt_tokens(static_cast<uint32_t>(out.prompt_tokens));
      ch->set_cached_tokens(static_cast<uint32_t>(out.cached_tokens));
      ch->set_completion_tokens(static_cast<uint32_t>(ids[ch->index()].size()));
      if (!finish_requested) queue.push_back(std::move(m));
    }
    if (out.finished) {
      const size_t i = static_cast<size_t>(out.finished_index);
      if (out.finish == engine::FinishKind::kError && !finish_requested) {
        finish_requested = true;
        final_status = grpc::Status(grpc::StatusCode::INTERNAL, out.error.empty() ? "engine error" : out.error);
      }
      if (i < ids.size() && !finish_requested) {
        sg::GenerateResponse m;
        m.set_request_id(rid);
        sg::GenerateComplete* done = m.mutable_complete();
        done->set_index(static_cast<uint32_t>(i));
        done->set_finish_reason(FinishReasonName(out.finish));
        done->set_prompt_tokens(static_cast<uint32_t>(out.prompt_tokens));
        done->set_cached_tokens(static_cast<uint32_t>(out.cached_tokens));
        done->set_completion_tokens(static_cast<uint32_t>(ids[i].size()));
        if (out.finish == engine::FinishKind::kStopString) done->set_matched_stop_str(out.stop_matched);
        if ((out.finish == engine::FinishKind::kStopToken || out.finish == engine::FinishKind::kEos) && !ids[i].empty()) {
          done->set_matched_token_id(ids[i].back());
        }
        if (!stream) {
          for (uint32_t t : ids[i]) done->add_output_ids(t);
          if (lp) *done->mutable_output_logprobs() = logprobs[i];
        }
        queue.push_back(std::move(m));
      }
      if (--unfinished <= 0) finish_requested = true;  // OK: an abort is said in the completes
    }
    error = out.finished && out.finish == engine::FinishKind::kError;
  }
  if (error) Cancel();  // the other samples stop too
  Pump();
  (void)self;
}

void SgCall::Finish(grpc::Status st) {
  {
    std::lock_guard lock(mu);
    if (!finish_requested) {
      finish_requested = true;
      final_status = std::move(st);
    }
  }
  Pump();
}

void SgCall::Cancel() {
  engine::RequestId id = 0;
  bool engine_side = false;
  {
    std::lock_guard lock(mu);
    if (cancelled) return;
    cancelled = true;
    engine_side = submitted;
    id = eid;
  }
  if (engine_side) {
    eng->Cancel(id);  // its kCancelled finish ends the call
  } else {
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));  // Submit sees the flag
  }
}

// The next write, or the Finish once the queue is empty; decided under the lock, done outside
// it (a reactor may run a reaction inline).
void SgCall::Pump() {
  grpc::ServerWriteReactor<sg::GenerateResponse>* r = nullptr;
  bool write = false, finish = false;
  grpc::Status st;
  {
    std::lock_guard lock(mu);
    if (reactor == nullptr || finished || writing) return;
    r = reactor;
    if (!queue.empty()) {
      inflight = std::move(queue.front());
      queue.pop_front();
      writing = write = true;
    } else if (finish_requested) {
      finished = finish = true;
      st = final_status;
    }
  }
  if (write) r->StartWrite(&inflight);
  if (finish) r->Finish(st);
}

class SglangService;

class SgGenerateReactor final : public grpc::ServerWriteReactor<sg::GenerateResponse> {
 public:
  SgGenerateReactor(SglangService* svc, std::shared_ptr<SgCall> c) : svc_(svc), call_(std::move(c)) {}
  void OnWriteDone(bool ok) override {
    {
      std::lock_guard lock(call_->mu);
      call_->writing = false;
      if (!ok && !call_->finish_requested) {
        call_->finish_requested = true;
        call_->final_status = grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed");
        call_->queue.clear();
      }
    }
    if (!ok) call_->Cancel();
    call_->Pump();
  }
  void OnCancel() override { call_->Cancel(); }
  void OnDone() override;

 private:
  SglangService* svc_;
  std::shared_ptr<SgCall> call_;
};

// One SubscribeKvEvents stream: the batches of one rank's log from `next` on, as they come.
struct KvSub {
  std::shared_ptr<KvEventLog> log;
  int rank = 0;
  uint64_t next = 1;
  uint64_t watch = 0;
  std::mutex mu;
  grpc::ServerWriteReactor<common::KvEventBatch>* reactor = nullptr;  // null after OnDone
  common::KvEventBatch inflight;
  bool writing = false, finished = false;
  bool finish_requested = false;  // the stream is cancelled: Finish once no write is pending
  grpc::Status final_status;

  void Pump();
};

std::string KeyBytes(const kvcache::BlockKey& k) {
  std::string out(16, '\0');
  for (int i = 0; i < 8; ++i) {
    out[static_cast<size_t>(i)] = static_cast<char>(k.hi >> (56 - 8 * i));
    out[static_cast<size_t>(8 + i)] = static_cast<char>(k.lo >> (56 - 8 * i));
  }
  return out;
}
int64_t KeyInt64(const kvcache::BlockKey& k) { return static_cast<int64_t>(k.hi); }

void ToBatch(const KvEventLog::Entry& e, int rank, common::KvEventBatch* b) {
  b->Clear();
  b->set_sequence_number(e.seq);
  b->set_timestamp(e.timestamp);
  b->set_dp_rank(rank);
  b->set_group_events_enabled(true);
  common::KvCacheEvent* ev = b->add_events();
  ev->set_event_id(e.seq);
  common::KvGroupEvent* g = b->add_group_events();
  const engine::BlockEvent& be = e.event;
  switch (be.kind) {
    case engine::BlockEvent::Kind::kStored: {
      common::KvBlocksStored* st = ev->mutable_stored();
      if (be.parent) st->set_parent_block_hash(KeyInt64(*be.parent));
      g->set_operation(common::KvGroupEvent::STORE);
      if (be.parent) g->set_parent_block_hash(KeyBytes(*be.parent));
      g->set_block_size(static_cast<uint32_t>(be.block_size));
      g->mutable_token_ids()->Add(be.tokens.begin(), be.tokens.end());
      for (size_t i = 0; i < be.keys.size(); ++i) {
        common::KvBlock* blk = st->add_blocks();
        blk->set_block_hash(KeyInt64(be.keys[i]));
        blk->set_block_size(be.block_size);
        const size_t lo = i * static_cast<size_t>(be.block_size), hi = lo + static_cast<size_t>(be.block_size);
        if (hi <= be.tokens.size()) {
          blk->mutable_token_ids()->Add(be.tokens.begin() + static_cast<std::ptrdiff_t>(lo),
                                        be.tokens.begin() + static_cast<std::ptrdiff_t>(hi));
        }
        g->add_block_hashes(KeyBytes(be.keys[i]));
      }
      break;
    }
    case engine::BlockEvent::Kind::kRemoved: {
      common::KvBlocksRemoved* rm = ev->mutable_removed();
      g->set_operation(common::KvGroupEvent::REMOVE);
      g->set_block_size(static_cast<uint32_t>(be.block_size));
      for (const auto& k : be.keys) {
        rm->add_block_hashes(KeyInt64(k));
        g->add_block_hashes(KeyBytes(k));
      }
      break;
    }
    case engine::BlockEvent::Kind::kCleared:
      ev->mutable_cleared();
      g->set_operation(common::KvGroupEvent::CLEAR);
      break;
  }
  g->set_group_id(0);
  g->set_kind("full_attention");
  g->set_tokens_matchable(true);
}

void KvSub::Pump() {
  grpc::ServerWriteReactor<common::KvEventBatch>* r = nullptr;
  grpc::Status st;
  bool finish = false;
  {
    std::lock_guard lock(mu);
    if (reactor == nullptr || finished || writing) return;
    r = reactor;
    if (finish_requested) {
      finish = finished = true;
      st = final_status;
    } else {
      auto e = log->At(rank, next);
      if (!e) return;  // a later append wakes it
      ToBatch(*e, rank, &inflight);
      next = e->seq + 1;
      writing = true;
    }
  }
  if (finish) return r->Finish(st);
  r->StartWrite(&inflight);
}

class KvSubReactor final : public grpc::ServerWriteReactor<common::KvEventBatch> {
 public:
  explicit KvSubReactor(std::shared_ptr<KvSub> s) : sub_(std::move(s)) {}
  void Start() {
    std::weak_ptr<KvSub> w = sub_;
    sub_->watch = sub_->log->Watch(sub_->rank, [w] {
      if (auto s = w.lock()) s->Pump();
    });
    sub_->Pump();
  }
  void OnWriteDone(bool ok) override {
    {
      std::lock_guard lock(sub_->mu);
      sub_->writing = false;
      if (!ok) Stop("stream write failed");
    }
    sub_->Pump();
  }
  void OnCancel() override {
    {
      std::lock_guard lock(sub_->mu);
      Stop("cancelled");
    }
    sub_->Pump();
  }
  void OnDone() override {
    if (sub_->log) sub_->log->Unwatch(sub_->watch);
    {
      std::lock_guard lock(sub_->mu);
      sub_->reactor = nullptr;
    }
    delete this;
  }

 private:
  void Stop(const char* why) {  // under sub_->mu
    if (sub_->finish_requested) return;
    sub_->finish_requested = true;
    sub_->final_status = grpc::Status(grpc::StatusCode::CANCELLED, why);
  }
  std::shared_ptr<KvSub> sub_;
};

class SglangService final : public sg::SglangScheduler::CallbackService {
 public:
  SglangService(const EngineServerOptions& o, std::vector<engine::Engine*> ranks, std::function<bool()> draining)
      : info_(o.info),
        mask_factory_(o.mask_factory),
        kv_events_(o.kv_events),
        max_prompt_tokens_(o.max_prompt_tokens),
        ranks_(std::move(ranks)),
        draining_(std::move(draining)),
        started_(std::chrono::system_clock::now()) {}

  void Forget(const SgCall* c) {
    std::lock_guard lock(calls_mu_);
    auto it = calls_.find(c->rid);
    if (it != calls_.end() && it->second.lock().get() == c) calls_.erase(it);
  }

  grpc::ServerWriteReactor<sg::GenerateResponse>* Generate(grpc::CallbackServerContext*,
                                                           const sg::GenerateRequest* req) override {
    auto c = std::make_shared<SgCall>();
    auto* reactor = new SgGenerateReactor(this, c);
    c->reactor = reactor;
    c->rid = req->request_id();
    auto fail = [&](grpc::Status st) {
      c->finished = true;
      reactor->Finish(std::move(st));
      return reactor;
    };
    if (draining_()) return fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, "engine is shutting down"));
    if (req->request_id().empty()) return fail(Invalid("request_id is required"));
    if (!req->has_tokenized() || req->tokenized().input_ids().empty()) {
      return fail(Invalid("tokenized.input_ids is required (ladle engine takes token ids only)"));
    }
    if (req->tokenized().input_ids_size() > max_prompt_tokens_) return fail(Invalid("prompt too long"));
    if (req->has_mm_inputs() && req->mm_inputs().ByteSizeLong() > 0) {
      return fail(Invalid("multimodal inputs are not served over SglangScheduler (use VllmEngine's image embeddings)"));
    }
    if (!req->input_embeds().empty()) return fail(Invalid("input_embeds are not supported"));
    if (!req->lora_id().empty()) return fail(Invalid("LoRA adapters are not supported"));
    if (!req->custom_logit_processor().empty()) return fail(Invalid("custom logit processors are not supported"));
    if (req->return_hidden_states()) return fail(Invalid("hidden states are not returned by ladle engine"));
    if (!req->token_ids_logprob().empty()) return fail(Invalid("token_ids_logprob is not supported"));
    if (req->return_logprob() && req->logprob_start_len() >= 0 &&
        req->logprob_start_len() < req->tokenized().input_ids_size()) {
      return fail(Invalid("input (prompt) logprobs are not supported: set logprob_start_len to -1"));
    }
    if (!req->disaggregated_params().bootstrap_host().empty()) {
      return fail(Invalid("bootstrap (SGLang PD) hand-off is not supported; ladle engines hand off through LadleEngine"));
    }
    if (req->data_parallel_rank() < 0 || req->data_parallel_rank() >= static_cast<int>(ranks_.size())) {
      return fail(Invalid(fmt::format("data_parallel_rank {} out of range (0..{})", req->data_parallel_rank(),
                                      ranks_.size() - 1)));
    }
    auto sampling = SamplingFromSglang(*req);
    if (!sampling.ok()) return fail(ToGrpc(sampling.status()));
    c->sampling = std::move(sampling).value();
    c->prompt.assign(req->tokenized().input_ids().begin(), req->tokenized().input_ids().end());
    c->stream = req->stream();
    c->eng = ranks_[static_cast<size_t>(PickRank(req->data_parallel_rank()))];
    RemoteConstraint rc;
    rc.n = c->sampling.n;
    rc.max_tokens = c->sampling.max_tokens;
    const sg::SamplingParams& sp = req->sampling_params();
    switch (sp.constraint_case()) {
      case sg::SamplingParams::kRegex: rc.kind = "regex", rc.payload = sp.regex(); break;
      case sg::SamplingParams::kJsonSchema: rc.kind = "json_schema", rc.payload = sp.json_schema(); break;
      case sg::SamplingParams::kEbnfGrammar: rc.kind = "grammar", rc.payload = sp.ebnf_grammar(); break;
      case sg::SamplingParams::kStructuralTag: return fail(Invalid("structural_tag is not supported"));
      default: break;
    }
    if (!rc.kind.empty() && !mask_factory_) {
      return fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "structured output is not available"));
    }
    {
      std::lock_guard lock(calls_mu_);
      if (!calls_.emplace(c->rid, c).second) {
        return fail(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "request_id " + c->rid + " is already running"));
      }
    }
    if (rc.kind.empty()) {
      SgCall::Submit(c, nullptr);
    } else {
      mask_factory_(std::move(rc), [c](Result<std::shared_ptr<engine::MaskProvider>> m) {
        if (!m.ok()) return c->Finish(ToGrpc(m.status()));
        SgCall::Submit(c, std::move(m).value());
      });
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* ctx, const sg::EmbedRequest*, sg::EmbedResponse*) override {
    return Done(ctx, Unimplemented("embeddings"));
  }

  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* ctx, const sg::HealthCheckRequest*,
                                        sg::HealthCheckResponse* resp) override {
    const bool d = draining_();
    resp->set_healthy(!d);
    resp->set_message(d ? "draining" : "ok");
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const sg::AbortRequest* req,
                                  sg::AbortResponse* resp) override {
    std::shared_ptr<SgCall> c;
    {
      std::lock_guard lock(calls_mu_);
      auto it = calls_.find(req->request_id());
      if (it != calls_.end()) c = it->second.lock();
    }
    if (c) c->Cancel();
    resp->set_success(c != nullptr);
    resp->set_message(c ? "aborted" : "no running request " + req->request_id());
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx, const sg::GetModelInfoRequest*,
                                         sg::GetModelInfoResponse* resp) override {
    resp->set_model_path(info_.served_model_name);
    resp->set_served_model_name(info_.served_model_name);
    resp->set_is_generation(true);
    resp->set_max_context_length(static_cast<int32_t>(info_.max_model_len));
    resp->set_max_req_input_len(static_cast<int32_t>(info_.max_model_len));
    resp->set_vocab_size(info_.vocab_size);
    resp->set_model_type("ladle-ced");
    resp->add_eos_token_ids(info_.eos_token_id);
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const sg::GetServerInfoRequest*,
                                          sg::GetServerInfoResponse* resp) override {
    int64_t active = 0, capacity = 0;
    for (auto* r : ranks_) {
      const engine::Stats st = r->GetStats();
      active += static_cast<int64_t>(st.running + st.queue_depth);
      capacity += static_cast<int64_t>(st.kv_blocks_total) * info_.block_size;
    }
    resp->set_active_requests(static_cast<int32_t>(active));
    resp->set_is_paused(draining_());
    resp->set_uptime_seconds(std::chrono::duration<double>(std::chrono::system_clock::now() - started_).count());
    resp->set_sglang_version("ladle");
    resp->set_server_type("grpc");
    resp->set_max_total_num_tokens(static_cast<int32_t>(std::min<int64_t>(capacity, INT32_MAX)));
    const auto since = started_.time_since_epoch();
    resp->mutable_start_time()->set_seconds(std::chrono::duration_cast<std::chrono::seconds>(since).count());
    auto& args = *resp->mutable_server_args()->mutable_fields();
    args["served_model_name"].set_string_value(info_.served_model_name);
    args["dp_size"].set_number_value(static_cast<double>(ranks_.size()));
    args["page_size"].set_number_value(info_.block_size);
    args["context_length"].set_number_value(static_cast<double>(info_.max_model_len));
    args["disaggregation_mode"].set_string_value(info_.role == Role::kPrefill  ? "prefill"
                                                 : info_.role == Role::kDecode ? "decode"
                                                                               : "null");
    auto& sched = *resp->mutable_scheduler_info()->mutable_fields();
    sched["max_total_num_tokens"].set_number_value(static_cast<double>(capacity));
    sched["engine_name"].set_string_value(info_.name);
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* GetLoads(grpc::CallbackServerContext* ctx, const sg::GetLoadsRequest* req,
                                     sg::GetLoadsResponse* resp) override {
    if (req->has_dp_rank() && (req->dp_rank() < 0 || req->dp_rank() >= static_cast<int>(ranks_.size()))) {
      return Done(ctx, Invalid(fmt::format("dp_rank {} out of range (0..{})", req->dp_rank(), ranks_.size() - 1)));
    }
    bool memory = false, queues = false;
    for (const auto& s : req->include()) {
      memory |= s == "memory" || s == "all";
      queues |= s == "queues" || s == "all";
    }
    resp->set_timestamp(Iso8601Now());
    resp->set_version("ladle");
    resp->set_dp_rank_count(static_cast<int32_t>(ranks_.size()));
    sg::AggregateMetrics* agg = resp->mutable_aggregate();
    double usage = 0, util = 0;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (req->has_dp_rank() && req->dp_rank() != static_cast<int32_t>(i)) continue;
      sg::SchedulerLoad* l = resp->add_loads();
      FillSchedulerLoad(ranks_[i]->GetStats(), static_cast<int>(i), info_.block_size, l);
      if (memory) l->mutable_memory()->set_token_capacity(l->max_total_num_tokens());
      if (queues) l->mutable_queues()->set_waiting(l->num_waiting_reqs());
      agg->set_total_running_reqs(agg->total_running_reqs() + l->num_running_reqs());
      agg->set_total_waiting_reqs(agg->total_waiting_reqs() + l->num_waiting_reqs());
      agg->set_total_reqs(agg->total_reqs() + l->num_total_reqs());
      usage += l->token_usage();
      util += l->utilization();
    }
    if (resp->loads_size() > 0) {
      agg->set_avg_token_usage(usage / resp->loads_size());
      agg->set_avg_utilization(util / resp->loads_size());
    }
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* FlushCache(grpc::CallbackServerContext* ctx, const common::FlushCacheRequest*,
                                       common::FlushCacheResponse*) override {
    return Done(ctx, Unimplemented("flushing the KV cache"));
  }
  grpc::ServerUnaryReactor* StartProfile(grpc::CallbackServerContext* ctx, const common::StartProfileRequest*,
                                         common::ProfileResponse*) override {
    return Done(ctx, Unimplemented("profiling"));
  }
  grpc::ServerUnaryReactor* StopProfile(grpc::CallbackServerContext* ctx, const common::StopProfileRequest*,
                                        common::ProfileResponse*) override {
    return Done(ctx, Unimplemented("profiling"));
  }
  grpc::ServerWriteReactor<common::GetTokenizerChunk>* GetTokenizer(grpc::CallbackServerContext*,
                                                                    const common::GetTokenizerRequest*) override {
    class Refuse final : public grpc::ServerWriteReactor<common::GetTokenizerChunk> {
     public:
      Refuse() { Finish(Unimplemented("tokenizer artifacts")); }
      void OnDone() override { delete this; }
    };
    return new Refuse;
  }
  grpc::ServerUnaryReactor* LoadLoRAAdapter(grpc::CallbackServerContext* ctx, const sg::LoadLoRAAdapterRequest*,
                                            sg::LoadLoRAAdapterResponse*) override {
    return Done(ctx, Unimplemented("LoRA adapters"));
  }
  grpc::ServerUnaryReactor* UnloadLoRAAdapter(grpc::CallbackServerContext* ctx, const sg::UnloadLoRAAdapterRequest*,
                                              sg::UnloadLoRAAdapterResponse*) override {
    return Done(ctx, Unimplemented("LoRA adapters"));
  }
  grpc::ServerUnaryReactor* ListLoadedLoRAAdapters(grpc::CallbackServerContext* ctx, const sg::ListLoadedLoRAAdaptersRequest*,
                                                   sg::ListLoadedLoRAAdaptersResponse*) override {
    return Done(ctx);  // none: adapters are not supported
  }

  // Resume semantics (docs/cluster.md, "Wire protocol"): 0 replays everything the rank's log
  // holds; S > 0 replays from S (a subscriber passes the last batch it applied). DATA_LOSS when
  // batches after S are no longer kept (S + 1 < the oldest kept): resubscribe with 0.
  // OUT_OF_RANGE when S is past the next number (an engine that restarted numbers anew).
  grpc::ServerWriteReactor<common::KvEventBatch>* SubscribeKvEvents(grpc::CallbackServerContext*,
                                                                    const common::SubscribeKvEventsRequest* req) override {
    auto sub = std::make_shared<KvSub>();
    auto* reactor = new KvSubReactor(sub);
    auto fail = [&](grpc::Status st) {
      sub->finished = true;
      reactor->Finish(std::move(st));
      return reactor;
    };
    if (!kv_events_) return fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this engine publishes no KV events"));
    const int rank = req->has_dp_rank() ? static_cast<int>(req->dp_rank()) : 0;
    if (rank >= kv_events_->ranks()) {
      return fail(Invalid(fmt::format("dp_rank {} out of range (0..{})", rank, kv_events_->ranks() - 1)));
    }
    const auto [oldest, next] = kv_events_->Range(rank);
    const uint64_t s = req->start_sequence_number();
    if (s > next) {
      return fail(grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                               fmt::format("start_sequence_number {} is past this engine's next batch {} (it restarted?); "
                                           "resubscribe with 0",
                                           s, next)));
    }
    if (s != 0 && s + 1 < oldest) {
      return fail(grpc::Status(grpc::StatusCode::DATA_LOSS,
                               fmt::format("KV events after {} are gone (the oldest kept is {}); resubscribe with 0", s, oldest)));
    }
    sub->log = kv_events_;
    sub->rank = rank;
    sub->next = s == 0 ? oldest : std::max(s, oldest);
    sub->reactor = reactor;
    reactor->Start();
    return reactor;
  }

 private:
  static grpc::Status Unimplemented(const std::string& what) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, what + " are not served by ladle engine");
  }
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, grpc::Status st = grpc::Status::OK) {
    auto* r = ctx->DefaultReactor();
    r->Finish(std::move(st));
    return r;
  }
  // 0: the rank with the fewest requests; k > 0: rank k.
  int PickRank(int requested) const {
    if (requested > 0 || ranks_.size() == 1) return requested;
    int best = 0;
    size_t best_load = SIZE_MAX;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const engine::Stats st = ranks_[i]->GetStats();
      if (st.running + st.queue_depth < best_load) best = static_cast<int>(i), best_load = st.running + st.queue_depth;
    }
    return best;
  }

  EngineInfo info_;
  MaskFactory mask_factory_;
  std::shared_ptr<KvEventLog> kv_events_;
  int64_t max_prompt_tokens_;
  std::vector<engine::Engine*> ranks_;
  std::function<bool()> draining_;
  std::chrono::system_clock::time_point started_;
  std::mutex calls_mu_;
  std::unordered_map<std::string, std::weak_ptr<SgCall>> calls_;
};

void SgGenerateReactor::OnDone() {
  {
    std::lock_guard lock(call_->mu);
    call_->reactor = nullptr;
  }
  svc_->Forget(call_.get());
  delete this;
}

}  // namespace

std::unique_ptr<grpc::Service> MakeSglangService(const EngineServerOptions& o, std::vector<engine::Engine*> ranks,
                                                 std::function<bool()> draining) {
  return std::make_unique<SglangService>(o, std::move(ranks), std::move(draining));
}

}  // namespace ladle::cluster
