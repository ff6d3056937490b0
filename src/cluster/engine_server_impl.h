// EngineServer's internals, shared by engine_server.cc (the services, a Generate call's
// admission, start-up) and engine_server_calls.cc (a call's path: the SWA fetch from a peer, the
// mask, the submit to a rank, the outputs relayed to its stream, finish and cancel). Internal
// to the cluster module; the threads are described at the top of engine_server.cc.
#pragma once

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

namespace engine_server_detail {

inline int64_t NowMs() {
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
      FillSchedulerLoad(ranks_[i]->GetStats(), static_cast<int>(i), o_.info.block_size, resp->add_loads());
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

}  // namespace engine_server_detail

}  // namespace ladle::cluster
