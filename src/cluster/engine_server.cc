// The engine server: VllmEngine + LadleEngine over gRPC's callback API, in front of the DP
// ranks. Threads: gRPC's own callback threads run the handlers; engine outputs arrive on each
// rank's scheduler thread and are queued into the call's reactor (never blocking there).
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "ladle/cluster/engine_server.h"
#include "ladle/core/logging.h"
#include "ladle_cluster.grpc.pb.h"
#include "rpc_convert.h"
#include "sglang_service.h"
#include "vllm_engine.grpc.pb.h"

namespace ladle::cluster {

namespace lrpc = ::ladle::rpc;

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
    case Role::kBoth: return "both";
  }
  return "both";
}

Result<Role> ParseRole(std::string_view name) {
  if (name == "prefill") return Role::kPrefill;
  if (name == "decode") return Role::kDecode;
  if (name == "both") return Role::kBoth;
  return InvalidArgument(fmt::format("role must be prefill, decode or both, not '{}'", name));
}

void ForwardingSwaDirectory::Attach(EngineServer* s) { server_.store(s); }
void ForwardingSwaDirectory::Record(const kvcache::BlockKey& key, const std::string&, int64_t expire_ms) {
  if (EngineServer* s = server_.load()) s->RecordSwa(key, expire_ms);
}

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class EngineServerImpl;

// One Generate call. Shared by the reactor (until OnDone) and the engine sink (until the last
// Output), so whichever ends last frees it.
struct Call {
  EngineServerImpl* srv = nullptr;
  std::string rid;
  std::vector<engine::TokenId> prompt;
  std::vector<engine::PromptImage> images;  // embeddings from the entrypoint's image stage
  engine::SamplingParams sampling;
  LadleExtras extras;
  RemoteConstraint constraint;
  bool has_constraint = false;
  bool stream = true;
  int dp_rank = -1;  // requested; -1 = least quota

  std::mutex mu;
  grpc::ServerWriteReactor<pb::GenerateResponse>* reactor = nullptr;  // null after OnDone
  std::deque<pb::GenerateResponse> queue;
  pb::GenerateResponse inflight;
  bool writing = false, finish_requested = false, finished = false;
  grpc::Status final_status;
  bool cancelled = false, submitted = false, released = false;
  int rank = -1;
  engine::RequestId eid = 0;
  // Per sample: tokens so far (non-streaming answers keep them all, with logprobs).
  std::vector<std::vector<uint32_t>> ids;
  std::vector<pb::OutputLogProbs> logprobs;
  int unfinished = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0;
  bool prefill_done = false;
  double quota_ns = 0;
  int64_t kv_tokens = 0;
  std::shared_ptr<const engine::HandoffState> resume;  // PD: the prefill engine's state
};

class GenerateReactor;

class EngineServerImpl final : public EngineServer,
                               public pb::VllmEngine::CallbackService,
                               public lrpc::LadleEngine::CallbackService {
 public:
  EngineServerImpl(EngineServerOptions o, std::vector<engine::Engine*> ranks)
      : o_(std::move(o)), ranks_(std::move(ranks)), loads_(ranks_.size()) {}
  ~EngineServerImpl() override { Shutdown(); }

  Status Start() {
    grpc::ServerBuilder b;
    b.AddListeningPort(o_.listen, grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(static_cast<pb::VllmEngine::CallbackService*>(this));
    b.RegisterService(static_cast<lrpc::LadleEngine::CallbackService*>(this));
    sglang_ = MakeSglangService(o_, ranks_, [this] { return draining(); });  // sglang_service.cc
    b.RegisterService(sglang_.get());
    b.SetMaxReceiveMessageSize(64 << 20);
    b.SetMaxSendMessageSize(64 << 20);
    server_ = b.BuildAndStart();
    if (!server_ || port_ == 0) return Status(StatusCode::kUnavailable, "engine server: cannot listen on " + o_.listen);
    LADLE_LOG_INFO("engine_server.listening address={} port={} role={} dp={}", o_.listen, port_, RoleName(o_.info.role),
                   ranks_.size());
    return Status::Ok();
  }

  int port() const override { return port_; }

  void RecordSwa(const kvcache::BlockKey& key, int64_t expire_ms) override {
    std::lock_guard lock(swa_mu_);
    swa_log_.push_back({swa_next_++, key, expire_ms});
    while (swa_log_.size() > 4096) swa_log_.pop_front();
  }

  void Shutdown(int64_t deadline_ms = 5000) override {
    std::unique_ptr<grpc::Server> s;
    {
      std::lock_guard lock(mu_);
      if (shutting_down_) return;
      shutting_down_ = true;
      s = std::move(server_);
    }
    if (s) {
      s->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
      s->Wait();
    }
    std::unique_lock lock(peer_rpc_mu_);
    if (!peer_rpc_cv_.wait_for(lock, std::chrono::milliseconds(o_.swa_fetch_timeout_ms + 5000),
                               [&] { return peer_rpcs_ == 0; })) {
      LADLE_LOG_ERROR("engine_server.shutdown peer_rpcs={} (not finished in time)", peer_rpcs_);
    }
  }

  // --- VllmEngine ---------------------------------------------------------------------
  grpc::ServerWriteReactor<pb::GenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                           const pb::GenerateRequest* req) override;

  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* ctx, const pb::HealthCheckRequest*,
                                        pb::HealthCheckResponse* resp) override {
    resp->set_healthy(!draining());
    resp->set_message(draining() ? "draining" : "ok");
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const pb::AbortRequest* req,
                                  pb::AbortResponse*) override {
    for (const std::string& rid : req->request_ids()) CancelByRid(rid);
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* ctx, const pb::EmbedRequest*, pb::EmbedResponse*) override {
    return Done(ctx, grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "embeddings are not served by ladle engine"));
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx, const pb::GetModelInfoRequest*,
                                         pb::GetModelInfoResponse* resp) override {
    resp->set_is_generation(true);
    resp->set_max_context_length(static_cast<uint32_t>(o_.info.max_model_len));
    resp->set_max_req_input_len(static_cast<int32_t>(o_.info.max_model_len));
    resp->set_vocab_size(static_cast<uint32_t>(o_.info.vocab_size));
    resp->set_served_model_name(o_.info.served_model_name);
    resp->set_model_type("ladle-ced");
    resp->add_eos_token_ids(o_.info.eos_token_id);
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const pb::GetServerInfoRequest*,
                                          pb::GetServerInfoResponse* resp) override {
    uint32_t active = 0;
    for (auto* r : ranks_) {
      const engine::Stats st = r->GetStats();
      active += static_cast<uint32_t>(st.running + st.queue_depth);
    }
    resp->set_active_requests(active);
    resp->set_is_paused(draining());
    resp->set_server_type("ladle-grpc");
    resp->set_kv_connector("LadleStore");
    resp->set_kv_role(o_.info.role == Role::kPrefill  ? "kv_producer"
                      : o_.info.role == Role::kDecode ? "kv_consumer"
                                                      : "kv_both");
    resp->set_kv_engine_id(o_.info.name);
    resp->set_data_parallel_size(static_cast<int32_t>(ranks_.size()));
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* GetLoads(grpc::CallbackServerContext* ctx, const pb::GetLoadsRequest* req,
                                     pb::GetLoadsResponse* resp) override {
    resp->set_version("ladle");
    resp->set_dp_rank_count(static_cast<int32_t>(ranks_.size()));
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (req->has_dp_rank() && req->dp_rank() != static_cast<int32_t>(i)) continue;
      const engine::Stats st = ranks_[i]->GetStats();
      pb::SchedulerLoad* l = resp->add_loads();
      l->set_dp_rank(static_cast<int32_t>(i));
      l->set_num_running_reqs(static_cast<int32_t>(st.running));
      l->set_num_waiting_reqs(static_cast<int32_t>(st.queue_depth));
      l->set_num_total_reqs(static_cast<int32_t>(st.running + st.queue_depth));
      l->set_num_used_tokens(static_cast<int32_t>(st.kv_blocks_used * o_.info.block_size));
      l->set_max_total_num_tokens(static_cast<int32_t>(st.kv_blocks_total * o_.info.block_size));
      l->set_token_usage(st.kv_blocks_total ? double(st.kv_blocks_used) / double(st.kv_blocks_total) : 0.0);
      l->set_utilization(1.0 - st.device_idle_fraction);
    }
    return Done(ctx);
  }

  // --- LadleEngine --------------------------------------------------------------------
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const lrpc::GetInfoRequest*,
                                    lrpc::GetInfoResponse* resp) override {
    const EngineInfo& i = o_.info;
    resp->set_name(i.name);
    resp->set_role(std::string(RoleName(i.role)));
    resp->set_dp(static_cast<int32_t>(ranks_.size()));
    resp->set_block_size(i.block_size);
    resp->set_swa_window(i.swa_window);
    resp->set_swa_rollback(i.swa_rollback);
    for (const auto& e : i.key_extras) {
      resp->add_key_extra_tags(static_cast<int32_t>(e.tag));
      resp->add_key_extra_values(e.value);
    }
    resp->set_cost_a(i.cost.a);
    resp->set_cost_b(i.cost.b);
    resp->set_cost_d(i.cost.d);
    resp->set_cost_e(i.cost.e);
    resp->set_cost_f(i.cost.f);
    resp->set_max_model_len(i.max_model_len);
    resp->set_eos_token_id(i.eos_token_id);
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* GetQuota(grpc::CallbackServerContext* ctx, const lrpc::GetQuotaRequest* req,
                                     lrpc::GetQuotaResponse* resp) override {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const engine::Stats st = ranks_[i]->GetStats();
      lrpc::RankQuota* q = resp->add_ranks();
      q->set_dp_rank(static_cast<int32_t>(i));
      q->set_running(static_cast<int32_t>(st.running));
      q->set_waiting(static_cast<int32_t>(st.queue_depth));
      q->set_kv_capacity_tokens(static_cast<int64_t>(st.kv_blocks_total) * o_.info.block_size);
      q->set_kv_blocks_used(static_cast<int64_t>(st.kv_blocks_used));
      q->set_kv_blocks_total(static_cast<int64_t>(st.kv_blocks_total));
      q->set_prefix_hit_tokens(st.prefix_hit_tokens);
      q->set_prefix_hit_tokens_store(st.prefix_hit_tokens_store);
      q->set_swa_hits(st.swa_hits);
      q->set_swa_misses(st.swa_misses);
      q->set_replayed_tokens(st.replayed_tokens);
      q->set_handoff_exports(st.handoff_exports);
      q->set_handoff_imports(st.handoff_imports);
      q->set_handoff_fallbacks(st.handoff_fallbacks);
      q->set_spec_draft_tokens(st.spec_draft_tokens);
      q->set_spec_accepted_tokens(st.spec_accepted_tokens);
      q->set_spec_verify_tokens(st.spec_verify_tokens);
      for (uint64_t n : st.spec_verify_lengths) q->add_spec_verify_lengths(n);
      std::lock_guard lock(load_mu_);
      q->set_kv_tokens(loads_[i].kv_tokens);
      q->set_quota_ns(loads_[i].quota_ns);
    }
    const int64_t now = NowMs();
    std::lock_guard lock(swa_mu_);
    for (const SwaLog& r : swa_log_) {
      if (r.seq < req->swa_since() || r.expire_ms <= now) continue;
      lrpc::SwaRecord* s = resp->add_swa();
      s->set_key_hi(r.key.hi);
      s->set_key_lo(r.key.lo);
      s->set_ttl_ms(r.expire_ms - now);
    }
    resp->set_swa_next(swa_next_);
    resp->set_draining(draining());
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* SwaFetch(grpc::CallbackServerContext* ctx, const lrpc::SwaFetchRequest* req,
                                     lrpc::SwaFetchResponse* resp) override {
    if (o_.swa_pool) {
      kvcache::BlockKey key;
      key.hi = req->key_hi();
      key.lo = req->key_lo();
      if (auto ring = o_.swa_pool->Get(key, NowMs())) {
        resp->set_found(true);
        resp->set_ring(ring->data(), ring->size());
        swa_served_.fetch_add(1);
      }
    }
    return Done(ctx);
  }

  grpc::ServerUnaryReactor* HandoffFetch(grpc::CallbackServerContext* ctx, const lrpc::HandoffFetchRequest* req,
                                         lrpc::HandoffFetchResponse* resp) override {
    std::lock_guard lock(handoff_mu_);
    auto it = handoffs_.find(req->request_id());
    if (it != handoffs_.end()) {
      resp->set_found(true);
      resp->set_state(it->second.first.data(), it->second.first.size());
      handoffs_.erase(it);  // one decode engine takes it
    }
    return Done(ctx);
  }
  // Keeps an exported state for its decode engine: at most 512, for at most a minute.
  void KeepHandoff(const std::string& rid, const engine::HandoffState& h) {
    const int64_t now = NowMs();
    std::lock_guard lock(handoff_mu_);
    std::erase_if(handoffs_, [&](const auto& kv) { return kv.second.second <= now; });
    if (handoffs_.size() >= 512) handoffs_.erase(handoffs_.begin());
    handoffs_[rid] = {engine::EncodeHandoff(h), now + 60'000};
  }

  // --- used by calls ------------------------------------------------------------------
  bool draining() const {
    std::lock_guard lock(mu_);
    return shutting_down_;
  }
  void Prepare(std::shared_ptr<Call> c);
  void Pump(const std::shared_ptr<Call>& c);
  void OnOutput(const std::shared_ptr<Call>& c, const engine::Output& out);
  void FinishCall(const std::shared_ptr<Call>& c, grpc::Status st);
  void Release(Call& c);
  void CancelCall(const std::shared_ptr<Call>& c);
  void CancelByRid(const std::string& rid) {
    std::shared_ptr<Call> c;
    {
      std::lock_guard lock(calls_mu_);
      auto it = calls_.find(rid);
      if (it != calls_.end()) c = it->second.lock();
    }
    if (c) CancelCall(c);
  }
  void Forget(const Call* c) {
    std::lock_guard lock(calls_mu_);
    auto it = calls_.find(c->rid);
    if (it != calls_.end() && it->second.lock().get() == c) calls_.erase(it);
  }

 private:
  struct RankLoad {
    double quota_ns = 0;
    int64_t kv_tokens = 0;
    int requests = 0;
  };
  struct SwaLog {
    uint64_t seq;
    kvcache::BlockKey key;
    int64_t expire_ms;
  };
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, grpc::Status st = grpc::Status::OK) {
    auto* r = ctx->DefaultReactor();
    r->Finish(st);
    return r;
  }
  void FetchSwaThenSubmit(std::shared_ptr<Call> c);
  void BuildMaskThenSubmit(std::shared_ptr<Call> c);
  void Submit(std::shared_ptr<Call> c, std::shared_ptr<engine::MaskProvider> mask);
  int PickRank(int requested);
  lrpc::LadleEngine::Stub* PeerStub(const std::string& addr);

  EngineServerOptions o_;
  std::vector<engine::Engine*> ranks_;
  mutable std::mutex mu_;
  bool shutting_down_ = false;
  std::unique_ptr<grpc::Service> sglang_;  // SglangScheduler, on the same port
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex load_mu_;
  std::vector<RankLoad> loads_;
  std::mutex calls_mu_;
  std::unordered_map<std::string, std::weak_ptr<Call>> calls_;
  std::mutex swa_mu_;
  std::deque<SwaLog> swa_log_;
  uint64_t swa_next_ = 1;
  std::atomic<uint64_t> swa_served_{0};
  std::mutex handoff_mu_;
  std::unordered_map<std::string, std::pair<std::vector<uint8_t>, int64_t>> handoffs_;
  // Peer calls (SWA and hand-off fetches) in flight: each callback holds a token until it has
  // returned, and Shutdown waits for none to be left before the peers' channels go.
  std::shared_ptr<void> PeerRpcToken() {
    {
      std::lock_guard lock(peer_rpc_mu_);
      ++peer_rpcs_;
    }
    return std::shared_ptr<void>(nullptr, [this](void*) {
      std::lock_guard lock(peer_rpc_mu_);
      if (--peer_rpcs_ == 0) peer_rpc_cv_.notify_all();
    });
  }
  std::mutex peer_rpc_mu_;
  std::condition_variable peer_rpc_cv_;
  int peer_rpcs_ = 0;
  std::mutex peers_mu_;
  std::unordered_map<std::string, std::unique_ptr<lrpc::LadleEngine::Stub>> peers_;

  friend class GenerateReactor;
};

class GenerateReactor final : public grpc::ServerWriteReactor<pb::GenerateResponse> {
 public:
  explicit GenerateReactor(std::shared_ptr<Call> c) : call_(std::move(c)) {}
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
    if (!ok) call_->srv->CancelCall(call_);
    call_->srv->Pump(call_);
  }
  void OnCancel() override { call_->srv->CancelCall(call_); }
  void OnDone() override {
    {
      std::lock_guard lock(call_->mu);
      call_->reactor = nullptr;
    }
    call_->srv->Forget(call_.get());
    delete this;
  }

 private:
  std::shared_ptr<Call> call_;
};

grpc::ServerWriteReactor<pb::GenerateResponse>* EngineServerImpl::Generate(grpc::CallbackServerContext* ctx,
                                                                           const pb::GenerateRequest* req) {
  auto c = std::make_shared<Call>();
  c->srv = this;
  auto* reactor = new GenerateReactor(c);
  c->reactor = reactor;
  auto fail = [&](grpc::Status st) {
    c->finished = true;
    reactor->Finish(std::move(st));
    return reactor;
  };
  if (draining()) return fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, "engine is shutting down"));
  if (req->request_id().empty()) return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request_id is required"));
  if (!req->has_tokenized()) {
    return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "ladle engine takes tokenized input only"));
  }
  if (req->has_mm_inputs()) {
    auto images = ImagesFromProto(req->mm_inputs());
    if (!images.ok()) return fail(ToGrpc(images.status()));
    c->images = std::move(images).value();
  }
  const auto& ids = req->tokenized().input_ids();
  if (ids.empty()) return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty prompt"));
  if (ids.size() > static_cast<size_t>(o_.max_prompt_tokens)) {
    return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prompt too long"));
  }
  c->rid = req->request_id();
  c->prompt.assign(ids.begin(), ids.end());
  auto sampling = FromProto(req->sampling_params(), 256);
  if (!sampling.ok()) return fail(ToGrpc(sampling.status()));
  c->sampling = std::move(sampling).value();
  auto extras = ExtrasFromJson(req->has_kv_transfer_params_json() ? req->kv_transfer_params_json() : "");
  if (!extras.ok()) return fail(ToGrpc(extras.status()));
  c->extras = std::move(extras).value();
  c->stream = req->stream();
  c->dp_rank = req->has_data_parallel_rank() ? req->data_parallel_rank() : -1;
  if (c->dp_rank >= static_cast<int>(ranks_.size())) {
    return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "data_parallel_rank out of range"));
  }
  const pb::SamplingParams& sp = req->sampling_params();
  c->constraint.n = c->sampling.n;
  c->constraint.max_tokens = c->sampling.max_tokens;
  if (!c->extras.constraint.empty()) {
    c->constraint.wire = c->extras.constraint;
    c->has_constraint = true;
  } else if (sp.constraint_case() != pb::SamplingParams::CONSTRAINT_NOT_SET) {
    c->has_constraint = true;
    switch (sp.constraint_case()) {
      case pb::SamplingParams::kJsonSchema: c->constraint.kind = "json_schema", c->constraint.payload = sp.json_schema(); break;
      case pb::SamplingParams::kRegex: c->constraint.kind = "regex", c->constraint.payload = sp.regex(); break;
      case pb::SamplingParams::kGrammar: c->constraint.kind = "grammar", c->constraint.payload = sp.grammar(); break;
      case pb::SamplingParams::kJsonObject: c->constraint.kind = "json_object"; break;
      default:
        return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "structural_tag and choice are not supported"));
    }
  }
  {
    std::lock_guard lock(calls_mu_);
    if (!calls_.emplace(c->rid, c).second) {
      return fail(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "request_id " + c->rid + " is already running"));
    }
  }
  (void)ctx;
  Prepare(c);
  return reactor;
}

void EngineServerImpl::Prepare(std::shared_ptr<Call> c) { FetchSwaThenSubmit(std::move(c)); }

lrpc::LadleEngine::Stub* EngineServerImpl::PeerStub(const std::string& addr) {
  std::lock_guard lock(peers_mu_);
  auto& s = peers_[addr];
  if (!s) s = lrpc::LadleEngine::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  return s.get();
}

// SWA entries the entrypoint says a peer holds and this pool lacks are fetched first, so the
// hit policy finds them (recipe "SWA KVCache": on a hit with no local copy it's fetched
// cross-machine). A fetch that fails or times out leaves a miss: the window is replayed.
void EngineServerImpl::FetchSwaThenSubmit(std::shared_ptr<Call> c) {
  if (!c->extras.handoff_id.empty() && !c->resume) {
    // PD: the prefill engine's exported state, engine to engine. Without it (gone, late, a
    // different model) the request takes the ordinary hit path below.
    auto ctx = std::make_shared<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.swa_fetch_timeout_ms));
    auto req = std::make_shared<lrpc::HandoffFetchRequest>();
    auto resp = std::make_shared<lrpc::HandoffFetchResponse>();
    req->set_request_id(c->extras.handoff_id);
    PeerStub(c->extras.handoff_peer)
        ->async()
        ->HandoffFetch(ctx.get(), req.get(), resp.get(), [this, c, ctx, req, resp, tok = PeerRpcToken()](grpc::Status st) {
          if (st.ok() && resp->found()) {
            auto h = engine::DecodeHandoff(
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(resp->state().data()), resp->state().size()));
            if (h.ok()) {
              c->resume = std::make_shared<const engine::HandoffState>(std::move(h).value());
            } else {
              LADLE_LOG_WARN("engine_server.handoff_bad error=\"{}\"", h.status().ToString());
            }
          } else {
            LADLE_LOG_WARN("engine_server.handoff_missing peer={} found={} error=\"{}\"", c->extras.handoff_peer,
                           resp->found(), st.error_message());
          }
          c->extras.handoff_id.clear();
          FetchSwaThenSubmit(c);
        });
    return;
  }
  std::vector<SwaPeer> want;
  if (o_.swa_pool) {
    const int64_t now = NowMs();
    for (const SwaPeer& p : c->extras.swa_peers) {
      if (!o_.swa_pool->Contains(p.key, now)) want.push_back(p);
    }
  }
  if (want.empty()) return BuildMaskThenSubmit(std::move(c));
  struct Pending {
    std::mutex mu;
    int left = 0;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = static_cast<int>(want.size());
  for (const SwaPeer& p : want) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.swa_fetch_timeout_ms));
    auto req = std::make_shared<lrpc::SwaFetchRequest>();
    auto resp = std::make_shared<lrpc::SwaFetchResponse>();
    req->set_key_hi(p.key.hi);
    req->set_key_lo(p.key.lo);
    PeerStub(p.peer)->async()->SwaFetch(ctx.get(), req.get(), resp.get(),
                                        [this, c, pending, ctx, req, resp, key = p.key, peer = p.peer,
                                         tok = PeerRpcToken()](grpc::Status st) {
                                          if (st.ok() && resp->found()) {
                                            std::vector<uint8_t> ring(resp->ring().begin(), resp->ring().end());
                                            o_.swa_pool->Put(key, resp->anchor(), std::move(ring), NowMs());
                                          } else {
                                            LADLE_LOG_INFO("engine_server.swa_fetch_miss peer={} found={} error=\"{}\"", peer,
                                                           resp->found(), st.error_message());
                                          }
                                          bool last = false;
                                          {
                                            std::lock_guard lock(pending->mu);
                                            last = --pending->left == 0;
                                          }
                                          if (last) BuildMaskThenSubmit(c);
                                        });
  }
}

void EngineServerImpl::BuildMaskThenSubmit(std::shared_ptr<Call> c) {
  if (!c->has_constraint) return Submit(std::move(c), nullptr);
  if (!o_.mask_factory) {
    return FinishCall(c, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "structured output is not available"));
  }
  o_.mask_factory(c->constraint, [this, c](Result<std::shared_ptr<engine::MaskProvider>> m) {
    if (!m.ok()) return FinishCall(c, ToGrpc(m.status()));
    // A re-routed request resumes its grammar where the first engine left it.
    for (uint32_t t : c->extras.prefix_tokens) (*m)->Accept(0, t);
    Submit(c, std::move(m).value());
  });
}

int EngineServerImpl::PickRank(int requested) {
  if (requested >= 0) return requested;
  std::lock_guard lock(load_mu_);
  int best = 0;
  for (int i = 1; i < static_cast<int>(loads_.size()); ++i) {
    const RankLoad& a = loads_[static_cast<size_t>(i)];
    const RankLoad& b = loads_[static_cast<size_t>(best)];
    if (a.quota_ns < b.quota_ns || (a.quota_ns == b.quota_ns && a.requests < b.requests)) best = i;
  }
  return best;
}

void EngineServerImpl::Submit(std::shared_ptr<Call> c, std::shared_ptr<engine::MaskProvider> mask) {
  {
    std::lock_guard lock(c->mu);
    if (c->cancelled || c->finish_requested) {
      c->finish_requested = true;
      if (c->final_status.ok()) c->final_status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
  }
  Pump(c);
  {
    std::lock_guard lock(c->mu);
    if (c->finish_requested) return;
  }
  const int rank = PickRank(c->dp_rank);
  engine::SubmitRequest r;
  r.prompt = c->prompt;
  r.images = c->images;
  r.sampling = c->sampling;
  r.mask = std::move(mask);
  r.agent_traffic = c->extras.agent;
  r.swa_anchor_for_len = c->extras.swa_anchor_for_len;
  r.handoff_export = c->extras.handoff_export && c->sampling.n == 1 && c->sampling.max_tokens == 1;
  if (c->sampling.n == 1) r.resume = c->resume;
  c->ids.assign(static_cast<size_t>(c->sampling.n), {});
  c->logprobs.assign(static_cast<size_t>(c->sampling.n), {});
  c->unfinished = c->sampling.n;
  c->prompt_tokens = static_cast<int64_t>(c->prompt.size());
  c->quota_ns = o_.info.cost.Cost(static_cast<int64_t>(c->prompt.size()), 0);
  c->kv_tokens = static_cast<int64_t>(c->prompt.size());
  c->rank = rank;
  {
    std::lock_guard lock(load_mu_);
    RankLoad& l = loads_[static_cast<size_t>(rank)];
    l.quota_ns += c->quota_ns;
    l.kv_tokens += c->kv_tokens;
    l.requests += 1;
  }
  auto id = ranks_[static_cast<size_t>(rank)]->Submit(std::move(r), [this, c](const engine::Output& out) { OnOutput(c, out); });
  if (!id.ok()) {
    {
      std::lock_guard lock(c->mu);
      Release(*c);
    }
    return FinishCall(c, ToGrpc(id.status()));
  }
  bool cancel_now = false;
  {
    std::lock_guard lock(c->mu);
    c->eid = *id;
    c->submitted = true;
    cancel_now = c->cancelled;
  }
  if (cancel_now) ranks_[static_cast<size_t>(rank)]->Cancel(*id);
}

// Load bookkeeping of the rank; under c.mu, once.
void EngineServerImpl::Release(Call& c) {
  if (c.released || c.rank < 0) return;
  c.released = true;
  std::lock_guard lock(load_mu_);
  RankLoad& l = loads_[static_cast<size_t>(c.rank)];
  if (!c.prefill_done) l.quota_ns -= c.quota_ns;
  l.kv_tokens -= c.kv_tokens;
  l.requests -= 1;
  if (l.requests == 0) l.quota_ns = 0, l.kv_tokens = 0;  // no drift from float sums
}

void EngineServerImpl::OnOutput(const std::shared_ptr<Call>& c, const engine::Output& out) {
  bool error = false;
  {
    std::lock_guard lock(c->mu);
    if (!c->prefill_done) {
      // The prompt's prefill is done once anything comes back: its quota leaves the rank.
      c->prefill_done = true;
      std::lock_guard l2(load_mu_);
      if (!c->released) loads_[static_cast<size_t>(c->rank)].quota_ns -= c->quota_ns;
    }
    c->cached_tokens = out.cached_tokens;
    const bool top = c->sampling.top_logprobs > 0;
    const bool lp = c->sampling.top_logprobs >= 0;
    // One chunk per sample index present in this Output.
    std::vector<pb::GenerateStreamChunk*> chunks(c->ids.size(), nullptr);
    std::vector<pb::GenerateResponse> msgs;
    int64_t added = 0;
    for (const engine::TokenEvent& t : out.tokens) {
      const size_t i = static_cast<size_t>(t.index);
      if (i >= c->ids.size()) continue;
      c->ids[i].push_back(t.token);
      ++added;
      if (c->stream) {
        if (chunks[i] == nullptr) {
          msgs.emplace_back();
          chunks[i] = msgs.back().mutable_chunk();
          chunks[i]->set_index(static_cast<uint32_t>(i));
        }
        chunks[i]->add_token_ids(t.token);
        if (lp) AppendLogprob(t, top, chunks[i]->mutable_output_logprobs());
      } else if (lp) {
        AppendLogprob(t, top, &c->logprobs[i]);
      }
    }
    c->kv_tokens += added;
    {
      std::lock_guard l2(load_mu_);
      if (!c->released) loads_[static_cast<size_t>(c->rank)].kv_tokens += added;
    }
    for (pb::GenerateResponse& m : msgs) {
      pb::GenerateStreamChunk* ch = m.mutable_chunk();
      ch->set_prompt_tokens(static_cast<uint32_t>(out.prompt_tokens));
      ch->set_cached_tokens(static_cast<uint32_t>(out.cached_tokens));
      ch->set_completion_tokens(static_cast<uint32_t>(c->ids[ch->index()].size()));
      if (!c->finish_requested) c->queue.push_back(std::move(m));
    }
    if (out.finished) {
      const size_t i = static_cast<size_t>(out.finished_index);
      if (out.finish == engine::FinishKind::kError && !c->finish_requested) {
        c->finish_requested = true;
        c->final_status = grpc::Status(grpc::StatusCode::INTERNAL, out.error.empty() ? "engine error" : out.error);
      }
      if (i < c->ids.size() && !c->finish_requested) {
        pb::GenerateResponse m;
        pb::GenerateComplete* done = m.mutable_complete();
        done->set_index(static_cast<uint32_t>(i));
        done->set_finish_reason(FinishReasonName(out.finish));
        done->set_prompt_tokens(static_cast<uint32_t>(out.prompt_tokens));
        done->set_cached_tokens(static_cast<uint32_t>(out.cached_tokens));
        done->set_completion_tokens(static_cast<uint32_t>(c->ids[i].size()));
        if (out.finish == engine::FinishKind::kStopString) done->set_matched_stop_str(out.stop_matched);
        if (out.finish == engine::FinishKind::kStopToken && !c->ids[i].empty()) done->set_matched_token_id(c->ids[i].back());
        if (out.handoff) {
          KeepHandoff(c->rid, *out.handoff);
          LadleExtras x;
          x.handoff_id = c->rid;
          x.handoff_peer = "";  // this engine: the caller knows its address
          done->set_kv_transfer_params_json(ExtrasToJson(x));
        }
        if (!c->stream) {
          for (uint32_t t : c->ids[i]) done->add_output_ids(t);
          if (lp) *done->mutable_output_logprobs() = c->logprobs[i];
        }
        c->queue.push_back(std::move(m));
      }
      if (--c->unfinished <= 0) {
        Release(*c);
        if (!c->finish_requested) c->finish_requested = true;  // OK: an abort is said in the completes
      }
    }
    error = out.finished && out.finish == engine::FinishKind::kError;
  }
  if (error) CancelCall(c);  // the other samples stop too
  Pump(c);
}

void EngineServerImpl::FinishCall(const std::shared_ptr<Call>& c, grpc::Status st) {
  {
    std::lock_guard lock(c->mu);
    if (!c->finish_requested) {
      c->finish_requested = true;
      c->final_status = std::move(st);
    }
  }
  Pump(c);
}

void EngineServerImpl::CancelCall(const std::shared_ptr<Call>& c) {
  int rank = -1;
  engine::RequestId eid = 0;
  bool not_yet = false;
  {
    std::lock_guard lock(c->mu);
    if (c->cancelled) return;
    c->cancelled = true;
    if (c->submitted) {
      rank = c->rank;
      eid = c->eid;
    } else {
      not_yet = true;  // Submit sees the flag
    }
  }
  if (rank >= 0) ranks_[static_cast<size_t>(rank)]->Cancel(eid);  // its kCancelled finish ends the call
  if (not_yet) FinishCall(c, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
}

// Starts the next write, or the Finish once the queue is empty. Decided under the call's lock,
// done outside it: a reactor may run a reaction inline.
void EngineServerImpl::Pump(const std::shared_ptr<Call>& c) {
  grpc::ServerWriteReactor<pb::GenerateResponse>* r = nullptr;
  bool write = false, finish = false;
  grpc::Status st;
  {
    std::lock_guard lock(c->mu);
    if (c->reactor == nullptr || c->finished || c->writing) return;
    r = c->reactor;
    if (!c->queue.empty()) {
      c->inflight = std::move(c->queue.front());
      c->queue.pop_front();
      c->writing = true;
      write = true;
    } else if (c->finish_requested) {
      c->finished = true;
      finish = true;
      st = c->final_status;
    }
  }
  if (write) r->StartWrite(&c->inflight);
  if (finish) r->Finish(st);
}

}  // namespace

Result<std::unique_ptr<EngineServer>> EngineServer::Start(EngineServerOptions o, std::vector<engine::Engine*> ranks) {
  PinGrpcCallbackQueue();
  if (ranks.empty()) return InvalidArgument("engine server: no DP ranks");
  auto s = std::make_unique<EngineServerImpl>(std::move(o), std::move(ranks));
  LADLE_RETURN_IF_ERROR(s->Start());
  return std::unique_ptr<EngineServer>(std::move(s));
}

}  // namespace ladle::cluster
