#include "rpc_convert.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>

#include "ladle/json/json.h"
#include "ladle_cluster.grpc.pb.h"

namespace ladle::cluster {
namespace {

bool ParseHex64(std::string_view s, uint64_t* out) {
  if (s.size() != 16) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

std::string ExtrasToJson(const LadleExtras& e) {
  json::Value::Object l;
  if (!e.constraint.empty()) l.emplace_back("constraint", json::Value::String(e.constraint));
  if (!e.prefix_tokens.empty()) {
    json::Value::Array a;
    for (uint32_t t : e.prefix_tokens) a.push_back(json::Value::Int(t));
    l.emplace_back("prefix_tokens", json::Value::MakeArray(std::move(a)));
  }
  if (e.agent) l.emplace_back("agent", json::Value::Bool(true));
  if (e.swa_anchor_for_len > 0) l.emplace_back("swa_anchor_for_len", json::Value::Int(e.swa_anchor_for_len));
  if (!e.swa_peers.empty()) {
    json::Value::Array a;
    for (const SwaPeer& p : e.swa_peers) {
      json::Value::Object o;
      o.emplace_back("key", json::Value::String(p.key.Hex()));
      o.emplace_back("peer", json::Value::String(p.peer));
      a.push_back(json::Value::MakeObject(std::move(o)));
    }
    l.emplace_back("swa_peers", json::Value::MakeArray(std::move(a)));
  }
  if (e.handoff_export) l.emplace_back("handoff_export", json::Value::Bool(true));
  if (!e.handoff_id.empty()) {
    l.emplace_back("handoff_peer", json::Value::String(e.handoff_peer));
    l.emplace_back("handoff_id", json::Value::String(e.handoff_id));
  }
  json::Value::Object root;
  root.emplace_back("ladle", json::Value::MakeObject(std::move(l)));
  return json::Dump(json::Value::MakeObject(std::move(root)));
}

Result<LadleExtras> ExtrasFromJson(std::string_view text) {
  LadleExtras e;
  if (text.empty()) return e;
  LADLE_ASSIGN_OR_RETURN(json::Value v, json::Parse(text));
  const json::Value* l = v.Find("ladle");
  if (l == nullptr) return e;
  if (!l->is_object()) return InvalidArgument("kv_transfer_params_json: \"ladle\" must be an object");
  if (const json::Value* f = l->Find("constraint")) {
    if (!f->is_string()) return InvalidArgument("ladle.constraint must be a string");
    e.constraint = f->as_string();
  }
  if (const json::Value* f = l->Find("prefix_tokens")) {
    if (!f->is_array()) return InvalidArgument("ladle.prefix_tokens must be an array");
    for (const json::Value& t : f->as_array()) {
      if (!t.is_number()) return InvalidArgument("ladle.prefix_tokens must hold token ids");
      LADLE_ASSIGN_OR_RETURN(int64_t id, t.as_int64());
      if (id < 0 || id > UINT32_MAX) return InvalidArgument("ladle.prefix_tokens: token id out of range");
      e.prefix_tokens.push_back(static_cast<uint32_t>(id));
    }
  }
  if (const json::Value* f = l->Find("agent"); f && f->is_bool()) e.agent = f->as_bool();
  if (const json::Value* f = l->Find("handoff_export"); f && f->is_bool()) e.handoff_export = f->as_bool();
  if (const json::Value* f = l->Find("handoff_id")) {
    const json::Value* peer = l->Find("handoff_peer");
    if (!f->is_string() || peer == nullptr || !peer->is_string()) {
      return InvalidArgument("ladle.handoff_id and ladle.handoff_peer must be strings");
    }
    e.handoff_id = f->as_string();
    e.handoff_peer = peer->as_string();
  }
  if (const json::Value* f = l->Find("swa_anchor_for_len")) {
    if (!f->is_number()) return InvalidArgument("ladle.swa_anchor_for_len must be a number");
    LADLE_ASSIGN_OR_RETURN(e.swa_anchor_for_len, f->as_int64());
    if (e.swa_anchor_for_len < 0) return InvalidArgument("ladle.swa_anchor_for_len must be >= 0");
  }
  if (const json::Value* f = l->Find("swa_peers")) {
    if (!f->is_array()) return InvalidArgument("ladle.swa_peers must be an array");
    for (const json::Value& p : f->as_array()) {
      const json::Value* k = p.Find("key");
      const json::Value* peer = p.Find("peer");
      if (k == nullptr || !k->is_string() || peer == nullptr || !peer->is_string()) {
        return InvalidArgument("ladle.swa_peers[]: needs string key and peer");
      }
      LADLE_ASSIGN_OR_RETURN(kvcache::BlockKey key, kvcache::BlockKey::FromHex(k->as_string()));
      e.swa_peers.push_back({key, peer->as_string()});
    }
  }
  return e;
}

void ToProto(const engine::SamplingParams& s, pb::SamplingParams* out) {
  out->set_temperature(s.temperature);
  out->set_top_p(s.top_p);
  out->set_top_k(static_cast<uint32_t>(std::max(0, s.top_k)));
  out->set_min_p(s.min_p);
  out->set_frequency_penalty(s.frequency_penalty);
  out->set_presence_penalty(s.presence_penalty);
  out->set_max_tokens(static_cast<uint32_t>(std::max(0, s.max_tokens)));
  for (const auto& st : s.stop) out->add_stop(st);
  for (auto id : s.stop_token_ids) out->add_stop_token_ids(id);
  out->set_ignore_eos(s.ignore_eos);
  out->set_n(static_cast<uint32_t>(std::max(1, s.n)));
  if (s.top_logprobs >= 0) out->set_logprobs(s.top_logprobs);
  // The protocol's seed is 32-bit: a wider seed is folded, so the same request still gets the
  // same seed on every engine.
  if (s.seed) out->set_seed(static_cast<int32_t>(static_cast<uint32_t>(*s.seed ^ (*s.seed >> 32))));
  // The entrypoint detokenises; the engine sends ids and must not strip special tokens.
  out->set_skip_special_tokens(false);
}

Result<engine::SamplingParams> FromProto(const pb::SamplingParams& p, int64_t default_max_tokens) {
  engine::SamplingParams s;
  s.temperature = p.has_temperature() ? p.temperature() : 1.0f;
  // proto3 scalars cannot be unset: 0 means "the default" for top_p, as vLLM's servicer reads it.
  s.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  auto finite = [](float v) { return std::isfinite(v); };
  if (!finite(s.temperature) || s.temperature < 0) return InvalidArgument("temperature must be >= 0");
  if (!finite(s.top_p) || s.top_p < 0 || s.top_p > 1) return InvalidArgument("top_p must be in (0, 1]");
  if (p.top_k() > (1u << 20)) return InvalidArgument("top_k too large");
  s.top_k = static_cast<int>(p.top_k());
  if (!finite(p.min_p()) || p.min_p() < 0 || p.min_p() > 1) return InvalidArgument("min_p must be in [0, 1]");
  s.min_p = p.min_p();
  if (!finite(p.frequency_penalty()) || !finite(p.presence_penalty())) return InvalidArgument("penalties must be finite");
  s.frequency_penalty = p.frequency_penalty();
  s.presence_penalty = p.presence_penalty();
  const int64_t max_tokens = p.has_max_tokens() ? int64_t{p.max_tokens()} : default_max_tokens;
  if (max_tokens > (1 << 30)) return InvalidArgument("max_tokens too large");
  s.max_tokens = static_cast<int>(max_tokens);
  s.stop.assign(p.stop().begin(), p.stop().end());
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  if (p.n() > 1024) return InvalidArgument("n too large");
  s.n = p.n() == 0 ? 1 : static_cast<int>(p.n());
  if (p.has_logprobs()) {
    if (p.logprobs() < -1 || p.logprobs() > 1024) return InvalidArgument("logprobs out of range");
    s.top_logprobs = std::max(0, p.logprobs());
  }
  if (p.has_seed()) s.seed = static_cast<uint64_t>(static_cast<uint32_t>(p.seed()));
  if (p.repetition_penalty() != 0.0f && p.repetition_penalty() != 1.0f) {
    return InvalidArgument("repetition_penalty is not supported (use presence/frequency penalties)");
  }
  if (!p.logit_bias().empty()) return InvalidArgument("logit_bias is not supported");
  if (p.min_tokens() > 0) return InvalidArgument("min_tokens is not supported");
  return s;
}

grpc::Status ToGrpc(const Status& s) {
  grpc::StatusCode c = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case StatusCode::kInvalidArgument: c = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kResourceExhausted: c = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kUnavailable: c = grpc::StatusCode::UNAVAILABLE; break;
    case StatusCode::kDeadlineExceeded: c = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case StatusCode::kFailedPrecondition: c = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kCancelled: c = grpc::StatusCode::CANCELLED; break;
    case StatusCode::kNotFound: c = grpc::StatusCode::NOT_FOUND; break;
    default: break;
  }
  return grpc::Status(c, s.message());
}

std::string FinishReasonName(engine::FinishKind k) {
  switch (k) {
    case engine::FinishKind::kEos:
    case engine::FinishKind::kStopString:
    case engine::FinishKind::kStopToken:
      return "stop";
    case engine::FinishKind::kLength:
      return "length";
    case engine::FinishKind::kCancelled:
    case engine::FinishKind::kError:
      return "abort";
  }
  return "abort";
}

engine::FinishKind FinishFromProto(const pb::GenerateComplete& c) {
  if (c.finish_reason() == "length") return engine::FinishKind::kLength;
  if (c.finish_reason() == "stop") {
    if (c.has_matched_stop_str()) return engine::FinishKind::kStopString;
    if (c.has_matched_token_id()) return engine::FinishKind::kStopToken;
    return engine::FinishKind::kEos;
  }
  return engine::FinishKind::kCancelled;
}

void AppendLogprob(const engine::TokenEvent& t, bool top, pb::OutputLogProbs* out) {
  out->add_token_logprobs(t.logprob);
  out->add_token_ids(t.token);
  if (top) {
    pb::TopLogProbs* tl = out->add_top_logprobs();
    for (const auto& [id, lp] : t.top_logprobs) {
      tl->add_token_ids(id);
      tl->add_values(lp);
    }
  }
}

void ReadLogprob(const pb::OutputLogProbs& lp, int i, engine::TokenEvent* t) {
  if (i < lp.token_logprobs_size()) t->logprob = lp.token_logprobs(i);
  if (i < lp.top_logprobs_size()) {
    const pb::TopLogProbs& tl = lp.top_logprobs(i);
    for (int j = 0; j < tl.token_ids_size() && j < tl.values_size(); ++j) {
      t->top_logprobs.emplace_back(tl.token_ids(j), tl.values(j));
    }
  }
}

namespace lrpc_pin = ::ladle::rpc;

// Where the pin lives: a global with external linkage, so the store to it is kept and
// LeakSanitizer finds the pin reachable.
void* g_grpc_callback_queue_pin = nullptr;

void PinGrpcCallbackQueue() {
  // A channel that is never destroyed, after one callback call (to nowhere, already past its
  // deadline): the channel holds the shared queue from that call on.
  struct Pin {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<lrpc_pin::LadleEngine::Stub> stub;
    grpc::ClientContext ctx;
    lrpc_pin::GetInfoRequest req;
    lrpc_pin::GetInfoResponse resp;
  };
  static std::once_flag once;
  std::call_once(once, [] {
    auto* p = new Pin;
    g_grpc_callback_queue_pin = p;
    p->channel = grpc::CreateChannel("unix:/nonexistent/ladle-grpc-pin", grpc::InsecureChannelCredentials());
    p->stub = lrpc_pin::LadleEngine::NewStub(p->channel);
    p->ctx.set_deadline(std::chrono::system_clock::now());
    p->stub->async()->GetInfo(&p->ctx, &p->req, &p->resp, [](grpc::Status) {});
  });
}

void ImagesToProto(const std::vector<engine::PromptImage>& images, pb::MultimodalInputs* out) {
  size_t floats = 0, hidden = 0;
  for (const auto& im : images) {
    floats += im.embeds ? im.embeds->size() : 0;
    if (im.tokens > 0 && im.embeds) hidden = im.embeds->size() / static_cast<size_t>(im.tokens);
  }
  std::string bytes;
  bytes.reserve(floats * 4);
  uint32_t total = 0;
  for (const auto& im : images) {
    auto* ph = out->add_mm_placeholders();
    ph->set_offset(static_cast<uint32_t>(im.pos));
    ph->set_length(static_cast<uint32_t>(im.tokens));
    out->add_mm_hashes(fmt::format("{:016x}{:016x}", im.hash_hi, im.hash_lo));
    total += static_cast<uint32_t>(im.tokens);
    if (!im.embeds) continue;
    for (float f : *im.embeds) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>(u >> (8 * b)));
    }
  }
  pb::TensorData& t = (*out->mutable_model_specific_tensors())["image_embeds"];
  t.add_shape(total);
  t.add_shape(static_cast<uint32_t>(hidden));
  t.set_dtype("float32");
  t.set_inline_(std::move(bytes));
}

Result<std::vector<engine::PromptImage>> ImagesFromProto(const pb::MultimodalInputs& mm) {
  if (mm.has_pixel_values()) {
    return InvalidArgument("this engine takes image embeddings (model_specific_tensors[\"image_embeds\"]), not pixels");
  }
  if (mm.mm_placeholders_size() != mm.mm_hashes_size()) {
    return InvalidArgument("mm_placeholders and mm_hashes differ in length");
  }
  auto it = mm.model_specific_tensors().find("image_embeds");
  if (mm.mm_placeholders_size() == 0) return std::vector<engine::PromptImage>{};
  if (it == mm.model_specific_tensors().end()) return InvalidArgument("image placeholders without image_embeds");
  const pb::TensorData& t = it->second;
  if (t.dtype() != "float32" || t.shape_size() != 2) return InvalidArgument("image_embeds must be float32 [tokens, hidden]");
  const uint64_t rows = t.shape(0), hidden = t.shape(1);
  if (hidden == 0 || t.inline_().size() != rows * hidden * 4) {
    return InvalidArgument("image_embeds' bytes do not match its shape");
  }
  std::vector<engine::PromptImage> out;
  uint64_t row = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(t.inline_().data());
  for (int i = 0; i < mm.mm_placeholders_size(); ++i) {
    const auto& ph = mm.mm_placeholders(i);
    const std::string& h = mm.mm_hashes(i);
    engine::PromptImage im;
    im.pos = ph.offset();
    im.tokens = static_cast<int32_t>(ph.length());
    if (h.size() != 32 || !ParseHex64(std::string_view(h).substr(0, 16), &im.hash_hi) ||
        !ParseHex64(std::string_view(h).substr(16), &im.hash_lo)) {
      return InvalidArgument("mm_hashes must be 32 hex digits");
    }
    if (ph.length() == 0 || row + ph.length() > rows) return InvalidArgument("image placeholders exceed image_embeds");
    auto rows_of = std::make_shared<std::vector<float>>(static_cast<size_t>(ph.length() * hidden));
    for (size_t k = 0; k < rows_of->size(); ++k) {
      const unsigned char* q = p + (row * hidden + k) * 4;
      const uint32_t u = q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<uint32_t>(q[3]) << 24);
      std::memcpy(&(*rows_of)[k], &u, 4);
    }
    row += ph.length();
    im.embeds = std::move(rows_of);
    out.push_back(std::move(im));
  }
  if (row != rows) return InvalidArgument("image_embeds has rows no placeholder takes");
  return out;
}

std::shared_ptr<grpc::Channel> FailFastChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace ladle::cluster
