// `ladle engine`: R engine loops (DP ranks, each with its own KV pool) served over gRPC with
// the SGLang model gateway's VllmEngine protocol (src/cluster/proto/vllm_engine.proto), its
// SglangScheduler protocol (sglang_scheduler.proto, src/cluster/sglang_service.cc) and
// Ladle's own LadleEngine service (ladle_cluster.proto) on the same port.
//
//   std::vector<engine::Engine*> ranks = {...};          // CreateEngine, once per DP rank
//   EngineServerOptions o; o.listen = "127.0.0.1:0"; o.info = ...; o.mask_factory = ...;
//   auto srv = EngineServer::Start(std::move(o), ranks);  // serving on (*srv)->port()
//
// A Generate call is one engine request: token ids in, token-id chunks out (GenerateStream-
// Chunk per engine Output when streaming, then one GenerateComplete per sample). A request
// goes to the rank its data_parallel_rank names, else to the rank with the least compute-quota
// load (the recipe's "within a DP group" rule, lb::PickRank). A dropped stream or Abort cancels
// the engine request, which frees its KV at once.
//
// Ladle's per-request data rides in GenerateRequest.kv_transfer_params_json under "ladle"
// (docs/cluster.md): the constraint as data (MaskProvider::Describe), the tokens already
// generated before a re-route (fed to the mask so the grammar resumes where it was), the
// traffic class, the PD hand-off length and SWA entries to fetch from peers first.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/cost_model.h"
#include "ladle/engine/engine.h"
#include "ladle/engine/swa_pool.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::cluster {

class KvEventLog;  // kv_event_log.h

enum class Role : uint8_t { kPrefill, kDecode, kBoth };
std::string_view RoleName(Role r);
Result<Role> ParseRole(std::string_view name);

// A request's constraint as it arrived: Ladle's wire form (structured::ConstraintWire), or one
// of the protocol's standard fields from another gateway (kind "json_schema", "regex",
// "grammar", "json_object"; payload the field's text).
struct RemoteConstraint {
  std::string wire;
  std::string kind, payload;
  int n = 1;
  int max_tokens = 256;
};
using MaskCallback = std::function<void(Result<std::shared_ptr<engine::MaskProvider>>)>;
// Builds the mask provider (compiling with this process's compile service); `done` runs once,
// on any thread, and must not block.
using MaskFactory = std::function<void(RemoteConstraint c, MaskCallback done)>;

// What GetInfo and GetModelInfo report.
struct EngineInfo {
  std::string name;  // unique in the fleet (the SWA holder id)
  Role role = Role::kBoth;
  std::string served_model_name = "ladle";
  int block_size = 128, swa_window = 128, swa_rollback = 6;
  std::vector<kvcache::ExtraKey> key_extras;  // the chain keys' tagged extras, in order
  engine::CostModel cost;
  int64_t max_model_len = 65536;
  int eos_token_id = 1;
  int vocab_size = 0;
};

struct EngineServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  EngineInfo info;
  MaskFactory mask_factory;  // null: constrained requests get FAILED_PRECONDITION
  // The DP ranks' shared SWA pool: served to peers by SwaFetch, filled from peers before a
  // request whose entrypoint named a holder.
  std::shared_ptr<engine::SwaPool> swa_pool;
  int64_t swa_fetch_timeout_ms = 1000;
  int64_t max_prompt_tokens = 1 << 20;
  // The ranks' prefix-cache events (their engines' on_block_event hooks feed it), served by
  // SglangScheduler.SubscribeKvEvents. null: that RPC answers FAILED_PRECONDITION.
  std::shared_ptr<KvEventLog> kv_events;
};

class EngineServer {
 public:
  // `ranks` must outlive the server. Starts serving before it returns.
  static Result<std::unique_ptr<EngineServer>> Start(EngineServerOptions o, std::vector<engine::Engine*> ranks);
  virtual ~EngineServer() = default;
  virtual int port() const = 0;
  // Records an SWA entry this engine's pool now holds (its ranks' SwaDirectory); reported to
  // entrypoints with the next GetQuota so their directory can point decode engines here.
  virtual void RecordSwa(const kvcache::BlockKey& key, int64_t expire_ms) = 0;
  // Stops taking calls, cancels open streams (their engine requests with them) and waits for
  // the gRPC server to finish, at most `deadline_ms`.
  virtual void Shutdown(int64_t deadline_ms = 5000) = 0;
};

// An engine::SwaDirectory that forwards the engine's records to an EngineServer (set after the
// server starts; records before that are dropped, as a pool without a directory would be).
class ForwardingSwaDirectory final : public engine::SwaDirectory {
 public:
  void Attach(EngineServer* s);
  void Record(const kvcache::BlockKey& key, const std::string& holder, int64_t expire_ms) override;
  std::optional<std::string> Locate(const kvcache::BlockKey& key, int64_t now_ms) override { return std::nullopt; }
  void Forget(const kvcache::BlockKey& key) override {}

 private:
  std::atomic<EngineServer*> server_{nullptr};
};

}  // namespace ladle::cluster
