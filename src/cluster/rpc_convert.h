// Conversions between the engine's types and the wire messages, shared by the engine server
// and the routed engine of the entrypoint. Internal to the cluster module.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include "ladle/core/result.h"
#include "ladle/engine/engine.h"
#include "ladle/kvcache/kv_store.h"
#include "vllm_engine.pb.h"

namespace ladle::cluster {

namespace pb = ::vllm::grpc::engine;

// An SWA entry a peer engine holds, to be fetched before the request runs.
struct SwaPeer {
  kvcache::BlockKey key;
  std::string peer;  // host:port of the holder's engine server
};

// Ladle's per-request data in GenerateRequest.kv_transfer_params_json ("ladle" key).
struct LadleExtras {
  std::string constraint;              // structured::ConstraintWire
  std::vector<uint32_t> prefix_tokens;  // generated before a re-route: fed to the mask first
  bool agent = false;
  int64_t swa_anchor_for_len = 0;
  std::vector<SwaPeer> swa_peers;
  // PD hand-off: the prefill exports its state (request side), which the decode engine takes
  // from handoff_peer under handoff_id (decode side).
  bool handoff_export = false;
  std::string handoff_peer, handoff_id;
};
std::string ExtrasToJson(const LadleExtras& e);
// Absent or without a "ladle" object: empty extras. Malformed: InvalidArgument.
Result<LadleExtras> ExtrasFromJson(std::string_view text);

// A prompt's images ↔ the protocol's MultimodalInputs, as precomputed embeddings (the
// entrypoint runs the image stage; an engine never decodes pixels): mm_placeholders are the
// runs (offset, length), mm_hashes their content hashes (32 hex digits: hi then lo), and
// model_specific_tensors["image_embeds"] every run's rows in order, float32 little-endian,
// shape [placeholders, hidden].
void ImagesToProto(const std::vector<engine::PromptImage>& images, pb::MultimodalInputs* out);
// kInvalidArgument for pixel_values (not taken), mismatched lists, a bad hash, or rows that
// do not divide into the placeholders.
Result<std::vector<engine::PromptImage>> ImagesFromProto(const pb::MultimodalInputs& mm);

// engine::SamplingParams → the protocol's SamplingParams (stop strings included: the engine
// owns them; docs/cluster.md, "One owner for stops").
void ToProto(const engine::SamplingParams& s, pb::SamplingParams* out);
// And back, as the engine server reads a request; InvalidArgument on values out of range.
Result<engine::SamplingParams> FromProto(const pb::SamplingParams& p, int64_t default_max_tokens);

// A Status as the gRPC status a call ends with (same code where gRPC has one, else INTERNAL).
grpc::Status ToGrpc(const Status& s);

// One DP rank's core load in SMG's SchedulerLoad, which VllmEngine and SglangScheduler both
// carry with the same fields (GetLoads in engine_server_impl.h and sglang_service.cc).
template <typename Load>
void FillSchedulerLoad(const engine::Stats& st, int rank, int block_size, Load* l) {
  l->set_dp_rank(static_cast<int32_t>(rank));
  l->set_num_running_reqs(static_cast<int32_t>(st.running));
  l->set_num_waiting_reqs(static_cast<int32_t>(st.queue_depth));
  l->set_num_total_reqs(static_cast<int32_t>(st.running + st.queue_depth));
  l->set_num_used_tokens(static_cast<int32_t>(st.kv_blocks_used * static_cast<size_t>(block_size)));
  l->set_max_total_num_tokens(static_cast<int32_t>(st.kv_blocks_total * static_cast<size_t>(block_size)));
  l->set_token_usage(st.kv_blocks_total ? double(st.kv_blocks_used) / double(st.kv_blocks_total) : 0.0);
  l->set_utilization(1.0 - st.device_idle_fraction);
}

// The protocol's finish_reason and matched_stop for an engine finish, and back.
std::string FinishReasonName(engine::FinishKind k);
engine::FinishKind FinishFromProto(const pb::GenerateComplete& c);

// Logprobs of one token into the protocol's parallel arrays, and back.
void AppendLogprob(const engine::TokenEvent& t, bool top, pb::OutputLogProbs* out);
void ReadLogprob(const pb::OutputLogProbs& lp, int i, engine::TokenEvent* t);

// gRPC 1.51 (Debian 12) runs callback RPCs on one shared completion queue with its own
// threads, created when its first user (a server or a channel's first callback call) appears and
// destroyed when the last one goes. Destroyed and created again, a thread of the old queue can
// still be inside it: the process aborts in grpc_cq_internal_unref (seen when a test stops its
// last engine and starts another). Once per process this takes a reference that is never
// released, so the queue lives as long as the process. Called before any server or channel.
void PinGrpcCallbackQueue();

// A channel to a peer that fails fast when the peer dies (short reconnect backoff, keepalive
// pings every 2 s), so a caller re-routes instead of waiting on a reconnect.
std::shared_ptr<grpc::Channel> FailFastChannel(const std::string& address);
extern void* g_grpc_callback_queue_pin;  // PinGrpcCallbackQueue's, reachable for LeakSanitizer

}  // namespace ladle::cluster
