// Conversions between the engine's types and the wire messages, shared by the engine server
// and the routed engine of the entrypoint. Internal to the cluster module.
#pragma once

#include <string>
#include <vector>

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
};
std::string ExtrasToJson(const LadleExtras& e);
// Absent or without a "ladle" object: empty extras. Malformed: InvalidArgument.
Result<LadleExtras> ExtrasFromJson(std::string_view text);

// engine::SamplingParams → the protocol's SamplingParams (stop strings included: the engine
// owns them; docs/cluster.md, "One owner for stops").
void ToProto(const engine::SamplingParams& s, pb::SamplingParams* out);
// And back, as the engine server reads a request; InvalidArgument on values out of range.
Result<engine::SamplingParams> FromProto(const pb::SamplingParams& p, int64_t default_max_tokens);

// The protocol's finish_reason and matched_stop for an engine finish, and back.
std::string FinishReasonName(engine::FinishKind k);
engine::FinishKind FinishFromProto(const pb::GenerateComplete& c);

// Logprobs of one token into the protocol's parallel arrays, and back.
void AppendLogprob(const engine::TokenEvent& t, bool top, pb::OutputLogProbs* out);
void ReadLogprob(const pb::OutputLogProbs& lp, int i, engine::TokenEvent* t);

}  // namespace ladle::cluster
