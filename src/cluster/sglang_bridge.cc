// VllmEngine → SglangScheduler, in process (sglang_bridge.h). Each VllmEngine call becomes the
// matching SglangScheduler call on the worker; Generate is relayed message by message (one in
// flight each way), and a cancelled VllmEngine stream cancels the worker's.
#include "sglang_bridge.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <mutex>

#include "ladle/core/logging.h"
#include "rpc_convert.h"
#include "sglang_scheduler.grpc.pb.h"
#include "vllm_engine.grpc.pb.h"

namespace ladle::cluster {
namespace {

namespace sg = ::sglang::grpc::scheduler;

std::chrono::system_clock::time_point Deadline(grpc::CallbackServerContext* ctx, int64_t ms = 10'000) {
  const auto mine = std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
  return std::min(mine, ctx->deadline());
}

// The request in SGLang's form; INVALID_ARGUMENT for what SGLang's protocol cannot carry.
grpc::Status ToSglang(const pb::GenerateRequest& v, sg::GenerateRequest* s) {
  if (!v.has_tokenized()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "SGLang workers take token ids only");
  if (v.has_mm_inputs() && v.mm_inputs().mm_placeholders_size() > 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "images are not sent to SGLang workers");
  }
  s->set_request_id(v.request_id());
  *s->mutable_tokenized()->mutable_input_ids() = v.tokenized().input_ids();
  s->set_stream(v.stream());
  if (v.has_data_parallel_rank()) s->set_data_parallel_rank(v.data_parallel_rank());
  const pb::SamplingParams& p = v.sampling_params();
  sg::SamplingParams* q = s->mutable_sampling_params();
  if (p.has_temperature()) q->set_temperature(p.temperature());
  if (p.top_p() != 0) q->set_top_p(p.top_p());  // VllmEngine's 0 is "unset"
  q->set_top_k(p.top_k() == 0 ? -1 : static_cast<int32_t>(p.top_k()));
  if (p.min_p() != 0) q->set_min_p(p.min_p());
  if (p.frequency_penalty() != 0) q->set_frequency_penalty(p.frequency_penalty());
  if (p.presence_penalty() != 0) q->set_presence_penalty(p.presence_penalty());
  if (p.repetition_penalty() != 0) q->set_repetition_penalty(p.repetition_penalty());
  if (p.has_max_tokens()) q->set_max_new_tokens(p.max_tokens());
  q->set_min_new_tokens(p.min_tokens());
  *q->mutable_stop() = p.stop();
  *q->mutable_stop_token_ids() = p.stop_token_ids();
  q->set_skip_special_tokens(p.skip_special_tokens());
  q->set_spaces_between_special_tokens(p.spaces_between_special_tokens());
  q->set_ignore_eos(p.ignore_eos());
  q->set_n(p.n());
  for (const auto& [id, bias] : p.logit_bias()) (*q->mutable_logit_bias())[std::to_string(id)] = bias;
  switch (p.constraint_case()) {
    case pb::SamplingParams::kJsonSchema: q->set_json_schema(p.json_schema()); break;
    case pb::SamplingParams::kRegex: q->set_regex(p.regex()); break;
    case pb::SamplingParams::kGrammar: q->set_ebnf_grammar(p.grammar()); break;
    case pb::SamplingParams::kStructuralTag: q->set_structural_tag(p.structural_tag()); break;
    case pb::SamplingParams::kJsonObject: q->set_json_schema(R"({"type":"object"})"); break;
    case pb::SamplingParams::kChoice:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "choice constraints are not sent to SGLang workers");
    default: break;
  }
  if (p.has_logprobs()) {
    s->set_return_logprob(true);
    s->set_top_logprobs_num(std::max(0, p.logprobs()));
  }
  s->set_logprob_start_len(-1);
  return grpc::Status::OK;
}

// Same field numbers and types on both sides.
template <typename To, typename From>
void Same(const From& f, To* t) {
  t->ParseFromString(f.SerializeAsString());
}

void FromSglang(const sg::GenerateResponse& s, pb::GenerateResponse* v) {
  v->Clear();
  if (s.has_chunk()) {
    const sg::GenerateStreamChunk& c = s.chunk();
    pb::GenerateStreamChunk* o = v->mutable_chunk();
    *o->mutable_token_ids() = c.token_ids();
    o->set_prompt_tokens(c.prompt_tokens());
    o->set_completion_tokens(c.completion_tokens());
    o->set_cached_tokens(c.cached_tokens());
    if (c.has_output_logprobs()) Same(c.output_logprobs(), o->mutable_output_logprobs());
    if (c.has_input_logprobs()) Same(c.input_logprobs(), o->mutable_input_logprobs());
    o->set_index(c.index());
  } else if (s.has_complete()) {
    const sg::GenerateComplete& c = s.complete();
    pb::GenerateComplete* o = v->mutable_complete();
    *o->mutable_output_ids() = c.output_ids();
    o->set_finish_reason(c.finish_reason());
    o->set_prompt_tokens(c.prompt_tokens());
    o->set_completion_tokens(c.completion_tokens());
    o->set_cached_tokens(c.cached_tokens());
    if (c.has_output_logprobs()) Same(c.output_logprobs(), o->mutable_output_logprobs());
    if (c.has_input_logprobs()) Same(c.input_logprobs(), o->mutable_input_logprobs());
    o->set_index(c.index());
    if (c.has_matched_token_id()) o->set_matched_token_id(c.matched_token_id());
    if (c.has_matched_stop_str()) o->set_matched_stop_str(c.matched_stop_str());
  }
}

// One relayed Generate: the VllmEngine stream to the entrypoint (server side) and the
// SglangScheduler stream to the worker (client side). Deleted once both are done.
class Relay final : public grpc::ServerWriteReactor<pb::GenerateResponse>,
                    public grpc::ClientReadReactor<sg::GenerateResponse> {
 public:
  Relay(sg::SglangScheduler::Stub* stub, const pb::GenerateRequest& req) {
    grpc::Status st = ToSglang(req, &out_req_);
    if (!st.ok()) {
      client_done_ = true;
      Finish(st);
      return;
    }
    stub->async()->Generate(&cctx_, &out_req_, this);
    // Between a read and the next (while its message is written to the entrypoint) no read is
    // outstanding, and without a hold gRPC may end the client call then: the next StartRead
    // would touch a finished call. The hold goes when reading stops (the stream's end, or a
    // failed write), exactly once; only then can the client side's OnDone come, with no write
    // of ours in flight when it finishes the server side.
    AddHold();
    StartRead(&in_);
    StartCall();
  }
  // Client side.
  void OnReadDone(bool ok) override {
    if (!ok) {
      RemoveHold();  // OnDone(status) follows
      return;
    }
    FromSglang(in_, &out_);
    StartWrite(&out_);
  }
  void OnDone(const grpc::Status& s) override {
    bool finish = false, last = false;
    {
      std::lock_guard lock(mu_);
      client_done_ = true;
      finish = !finished_;
      finished_ = true;
      last = server_done_;
    }
    if (finish) Finish(s);
    if (last) delete this;
  }
  // Server side.
  void OnWriteDone(bool ok) override {
    if (ok) {
      StartRead(&in_);
    } else {
      cctx_.TryCancel();
      RemoveHold();  // no read follows
    }
  }
  void OnCancel() override { cctx_.TryCancel(); }
  void OnDone() override {
    bool last = false;
    {
      std::lock_guard lock(mu_);
      server_done_ = true;
      last = client_done_;
    }
    if (last) delete this;
  }

 private:
  grpc::ClientContext cctx_;
  sg::GenerateRequest out_req_;
  sg::GenerateResponse in_;
  pb::GenerateResponse out_;
  std::mutex mu_;
  bool client_done_ = false, server_done_ = false, finished_ = false;
};

class Bridge final : public SglangBridge, public pb::VllmEngine::CallbackService {
 public:
  explicit Bridge(const std::string& address)
      : address_(address), stub_(sg::SglangScheduler::NewStub(FailFastChannel(address))) {}
  ~Bridge() override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
  }
  Status Start() {
    grpc::ServerBuilder b;
    b.RegisterService(this);
    b.SetMaxReceiveMessageSize(64 << 20);
    b.SetMaxSendMessageSize(64 << 20);
    server_ = b.BuildAndStart();
    if (!server_) return Status(StatusCode::kInternal, "sglang bridge: cannot start");
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    channel_ = server_->InProcessChannel(args);
    return Status::Ok();
  }
  std::shared_ptr<grpc::Channel> channel() override { return channel_; }

  grpc::ServerWriteReactor<pb::GenerateResponse>* Generate(grpc::CallbackServerContext*,
                                                           const pb::GenerateRequest* req) override {
    return new Relay(stub_.get(), *req);
  }

  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* ctx, const pb::EmbedRequest*, pb::EmbedResponse*) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "embeddings are not relayed to SGLang workers"));
    return r;
  }

  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* ctx, const pb::HealthCheckRequest*,
                                        pb::HealthCheckResponse* resp) override {
    return Unary<sg::HealthCheckRequest, sg::HealthCheckResponse>(
        ctx, {}, [this](grpc::ClientContext* c, auto* q, auto* a, std::function<void(grpc::Status)> cb) { stub_->async()->HealthCheck(c, q, a, std::move(cb)); }, [resp](const sg::HealthCheckResponse& s) {
          resp->set_healthy(s.healthy());
          resp->set_message(s.message());
        });
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const pb::AbortRequest* req, pb::AbortResponse*) override {
    // One SGLang Abort per id, fire and forget: an abort's answer changes nothing here.
    for (const std::string& id : req->request_ids()) {
      auto c = std::make_shared<grpc::ClientContext>();
      c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      auto q = std::make_shared<sg::AbortRequest>();
      auto a = std::make_shared<sg::AbortResponse>();
      q->set_request_id(id);
      q->set_reason("aborted by the entrypoint");
      stub_->async()->Abort(c.get(), q.get(), a.get(), [c, q, a](grpc::Status) {});
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx, const pb::GetModelInfoRequest*,
                                         pb::GetModelInfoResponse* resp) override {
    return Unary<sg::GetModelInfoRequest, sg::GetModelInfoResponse>(
        ctx, {}, [this](grpc::ClientContext* c, auto* q, auto* a, std::function<void(grpc::Status)> cb) { stub_->async()->GetModelInfo(c, q, a, std::move(cb)); }, [resp](const sg::GetModelInfoResponse& s) {
          resp->set_model_path(s.model_path());
          resp->set_is_generation(s.is_generation());
          resp->set_max_context_length(static_cast<uint32_t>(std::max(0, s.max_context_length())));
          resp->set_vocab_size(static_cast<uint32_t>(std::max(0, s.vocab_size())));
          resp->set_supports_vision(s.supports_vision());
          resp->set_served_model_name(s.served_model_name());
          resp->set_tokenizer_path(s.tokenizer_path());
          resp->set_model_type(s.model_type());
          *resp->mutable_architectures() = s.architectures();
          *resp->mutable_eos_token_ids() = s.eos_token_ids();
          resp->set_pad_token_id(s.pad_token_id());
          resp->set_bos_token_id(s.bos_token_id());
          resp->set_max_req_input_len(s.max_req_input_len());
          resp->set_default_sampling_params_json(s.default_sampling_params_json());
        });
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const pb::GetServerInfoRequest*,
                                          pb::GetServerInfoResponse* resp) override {
    return Unary<sg::GetServerInfoRequest, sg::GetServerInfoResponse>(
        ctx, {}, [this](grpc::ClientContext* c, auto* q, auto* a, std::function<void(grpc::Status)> cb) { stub_->async()->GetServerInfo(c, q, a, std::move(cb)); }, [resp](const sg::GetServerInfoResponse& s) {
          resp->set_active_requests(static_cast<uint32_t>(std::max(0, s.active_requests())));
          resp->set_is_paused(s.is_paused());
          resp->set_last_receive_timestamp(s.last_receive_timestamp());
          resp->set_uptime_seconds(s.uptime_seconds());
          resp->set_server_type("sglang-" + s.server_type());
          const auto& args = s.server_args().fields();
          std::string mode;
          if (auto it = args.find("disaggregation_mode"); it != args.end()) mode = it->second.string_value();
          resp->set_kv_role(mode == "prefill" ? "kv_producer" : mode == "decode" ? "kv_consumer" : "kv_both");
          int dp = 1;
          if (auto it = args.find("dp_size"); it != args.end() && it->second.number_value() >= 1) {
            dp = static_cast<int>(it->second.number_value());
          }
          resp->set_data_parallel_size(dp);
        });
  }

  grpc::ServerUnaryReactor* GetLoads(grpc::CallbackServerContext* ctx, const pb::GetLoadsRequest* req,
                                     pb::GetLoadsResponse* resp) override {
    sg::GetLoadsRequest q;
    if (req->has_dp_rank()) q.set_dp_rank(req->dp_rank());
    *q.mutable_include() = req->include();
    // Fields 1-4 of the response and 1-11 of each load are the same on both sides.
    return Unary<sg::GetLoadsRequest, sg::GetLoadsResponse>(ctx, q, [this](grpc::ClientContext* c, auto* q, auto* a, std::function<void(grpc::Status)> cb) { stub_->async()->GetLoads(c, q, a, std::move(cb)); },
                                                            [resp](const sg::GetLoadsResponse& s) { Same(s, resp); });
  }

 private:
  // One unary SglangScheduler call for one VllmEngine call; `fill` reads the answer.
  template <typename Req, typename Resp, typename Method, typename Fill>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, Req req, Method method, Fill fill) {
    auto* r = ctx->DefaultReactor();
    struct State {
      grpc::ClientContext c;
      Req req;
      Resp resp;
    };
    auto st = std::make_shared<State>();
    st->req = std::move(req);
    st->c.set_deadline(Deadline(ctx));
    method(&st->c, &st->req, &st->resp, [r, st, fill](grpc::Status s) {
      if (s.ok()) fill(st->resp);
      r->Finish(s);
    });
    return r;
  }

  std::string address_;
  std::unique_ptr<sg::SglangScheduler::Stub> stub_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace

std::shared_ptr<SglangBridge> SglangBridge::Start(const std::string& address) {
  auto b = std::make_shared<Bridge>(address);
  if (Status s = b->Start(); !s.ok()) {
    LADLE_LOG_ERROR("sglang_bridge.failed address={} error=\"{}\"", address, s.ToString());
    return nullptr;
  }
  return b;
}

}  // namespace ladle::cluster
