// The engine server: VllmEngine + LadleEngine over gRPC's callback API, in front of the DP
// ranks. Threads: gRPC's own callback threads run the handlers; engine outputs arrive on each
// rank's scheduler thread and are queued into the call's reactor (never blocking there).
#include "engine_server_impl.h"

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


namespace engine_server_detail {


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


}  // namespace engine_server_detail

using engine_server_detail::EngineServerImpl;

Result<std::unique_ptr<EngineServer>> EngineServer::Start(EngineServerOptions o, std::vector<engine::Engine*> ranks) {
  PinGrpcCallbackQueue();
  if (ranks.empty()) return InvalidArgument("engine server: no DP ranks");
  auto s = std::make_unique<EngineServerImpl>(std::move(o), std::move(ranks));
  LADLE_RETURN_IF_ERROR(s->Start());
  return std::unique_ptr<EngineServer>(std::move(s));
}

}  // namespace ladle::cluster

