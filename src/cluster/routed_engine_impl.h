// RoutedEngine's internals: the endpoints it knows, the requests it routes, and the client
// reactor of one Generate stream. Internal to the cluster module.
#pragma once

#include <grpcpp/grpcpp.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "ladle/cluster/routed_engine.h"
#include "ladle/engine/cost_model.h"
#include "ladle/lb/prefill_lb.h"
#include "ladle_cluster.grpc.pb.h"
#include "rpc_convert.h"
#include "swa_directory.h"
#include "sglang_bridge.h"
#include "vllm_engine.grpc.pb.h"

namespace ladle::cluster {

namespace lrpc = ::ladle::rpc;

enum class EpRole : uint8_t { kPrefill, kDecode, kBoth };

struct RankView {
  // Counted here at dispatch (this entrypoint's own view, exact for its requests).
  int requests = 0;
  int64_t kv_tokens = 0;
  double quota_ns = 0;
  double quota_ns_total = 0;  // every compute-quota ever charged here (monotonic)
  // From the engine's last report.
  int reported_running = 0, reported_waiting = 0;
  int64_t kv_capacity = 0;
  engine::Stats reported;  // the counters of its last report (LadleEngine engines)
};

struct Endpoint {
  std::string address;
  std::shared_ptr<SglangBridge> bridge;  // sglang:// workers: the translating channel's server
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::VllmEngine::Stub> vllm;
  std::unique_ptr<lrpc::LadleEngine::Stub> ladle;
  // Known after GetInfo (Ladle engines) or GetServerInfo (other workers).
  bool known = false, ladle_engine = false;
  std::string name;
  EpRole role = EpRole::kBoth;
  int dp = 1;
  int block_size = 128, swa_window = 128, swa_rollback = 6;
  std::vector<kvcache::ExtraKey> key_extras;
  engine::CostModel cost;
  bool alive = false;
  bool retired = false;  // left the fleet (RemoveEngine): not chosen, not polled, until added again
  int64_t last_ok_ms = 0;
  bool polling = false;  // a poll is in flight
  uint64_t swa_cursor = 1;
  std::vector<RankView> ranks;
  uint64_t dispatched = 0;
  int rr = 0;  // round-robin cursor over its ranks
};

class StreamCall;

enum class Stage : uint8_t { kSingle, kPrefill, kDecode };

struct Routed {
  // Held while computing and delivering a request's outputs (before mu_), so its sink sees
  // them in order whichever gRPC thread produced them. Recursive: a sink may call Cancel.
  std::recursive_mutex sink_mu;
  engine::RequestId id = 0;
  std::string rid;
  std::vector<engine::TokenId> prompt;  // as submitted
  std::vector<engine::PromptImage> images;  // sent with every stage (prefill, decode, re-routes)
  engine::SamplingParams sampling;
  std::string constraint;
  bool agent = false;
  engine::OutputSink sink;
  // Per sample: the tokens delivered to the sink so far.
  std::vector<std::vector<uint32_t>> generated;
  std::vector<bool> sample_done;
  int unfinished = 0;
  int64_t cached_tokens = 0;
  bool cached_known = false;
  Stage stage = Stage::kSingle;
  bool pd = false;
  int attempts = 0;
  bool cancelled = false, done = false;
  std::shared_ptr<StreamCall> call;  // the stream in flight, if any (under RoutedEngineImpl::mu_)
  int ep = -1, rank = -1;
  int64_t charged_tokens = 0;
  double charged_quota = 0;
  // PD hand-off.
  int prefill_ep = -1;
  int64_t prefill_done_us = 0;  // steady clock
  bool awaiting_first_decode = false;
  bool in_prefill_router = false;
  std::string handoff_id;  // the prefill's exported state, to be taken by the decode engine
  // The SWA entry at the decode's hit anchor, on the prefill engine (named to the decode
  // whoever owns the key in the directory).
  kvcache::BlockKey anchor_key;
  int anchor_ep = -1;
  // The directory's answer for this request's prefix: the keys it knows a holder of (an engine
  // address), longest prefix first; asked before each dispatch, written and read under
  // RoutedEngineImpl::mu_.
  std::vector<SwaPeer> swa_holders;
};

class RoutedEngineImpl;

// One Generate stream. Owned by gRPC until OnDone, which reports to the engine and deletes it.
class StreamCall final : public grpc::ClientReadReactor<pb::GenerateResponse>,
                         public std::enable_shared_from_this<StreamCall> {
 public:
  StreamCall(RoutedEngineImpl* eng, std::shared_ptr<Routed> r, int ep, int rank, Stage stage);
  ~StreamCall() override;
  grpc::ClientContext ctx;
  pb::GenerateRequest req;
  void Begin();
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& s) override;
  int ep() const { return ep_; }
  Stage stage() const { return stage_; }
  // Set when this entrypoint decided the engine is dead (the cancel is ours, not the client's).
  std::atomic<bool> engine_dead{false};

 private:
  RoutedEngineImpl* eng_;
  std::shared_ptr<Routed> r_;
  int ep_, rank_;
  Stage stage_;
  pb::GenerateResponse resp_;
  std::shared_ptr<StreamCall> self_;  // gRPC's reference, from Begin to OnDone
};

class RoutedEngineImpl final : public RoutedEngine {
 public:
  explicit RoutedEngineImpl(RoutedEngineOptions o);
  ~RoutedEngineImpl() override;
  Status Init(int64_t wait_ms);

  Result<engine::RequestId> Submit(engine::SubmitRequest request, engine::OutputSink sink) override;
  void Cancel(engine::RequestId id) override;
  engine::Stats GetStats() const override;
  void Shutdown() override;
  ClusterStats GetClusterStats() const override;
  void AddEngine(const std::string& address) override;
  void RemoveEngine(const std::string& address) override;
  void AddDirectoryPeer(const std::string& member) override { dir_->AddPeer(member); }
  void RemoveDirectoryPeer(const std::string& member) override { dir_->RemovePeer(member); }
  std::string directory_member() const override { return dir_->self(); }

  pb::VllmEngine::Stub* Stub(int ep) {
    std::lock_guard lock(mu_);
    return eps_[static_cast<size_t>(ep)]->vllm.get();
  }
  // From StreamCall (gRPC threads).
  void OnResponse(const std::shared_ptr<Routed>& r, StreamCall* call, const pb::GenerateResponse& m);
  void OnCallDone(const std::shared_ptr<Routed>& r, StreamCall* call, const grpc::Status& s);
  // Every asynchronous RPC (poll or stream) from its start until its last callback has returned
  // and dropped its state: Shutdown waits for none to be left, because a callback still to come
  // would run on a destroyed engine, and gRPC's shared callback queue must not be released (the
  // channels destroyed) while a call can still complete into it.
  // AddEngine's parts (routed_engine.cc): the endpoint, and the SGLang probe of a plain address.
  void AddEndpoint(const std::string& a, std::shared_ptr<grpc::Channel>* probe);
  void ProbeSglang(const std::string& a, std::shared_ptr<grpc::Channel> ch);
  void RpcBegin();
  void RpcEnd();

 private:
  // routed_engine_route.cc: the balancers over the current snapshot (under mu_).
  bool HasRole(EpRole want) const;
  // The (endpoint, rank) for a stage, or {-1, -1}; `avoid` is skipped when another exists.
  std::pair<int, int> Choose(Stage stage, const Routed& r, int avoid) const;
  void Charge(Routed& r, int ep, int rank, Stage stage);
  // The SWA directory's holders of r's prefix keys (takes mu_ briefly, then asks the owners).
  std::vector<SwaPeer> LookupSwa(const Routed& r);
  void Uncharge(Routed& r);

  // routed_engine_prefill.cc: the Prefill Load Balancer (lb::PrefillRouter) over the prefill
  // engines: requests queue per length bucket, engines pull by remaining compute-quota.
  bool PrefillRouterReady();  // under mu_; builds the router once prefill engines are known
  void EnqueuePrefill(const std::shared_ptr<Routed>& r, int64_t cached_tokens);  // under mu_
  void LeavePrefill(Routed& r);  // under mu_: off the router, wherever it is
  // Hands queued prefills to engines with quota left; starts their streams (takes mu_).
  void PumpPrefill();
  std::vector<std::shared_ptr<StreamCall>> PullLocked();
  void PrefillRoundTick();

  // routed_engine.cc: the request flow.
  void Dispatch(const std::shared_ptr<Routed>& r, Stage stage, int avoid);
  std::shared_ptr<StreamCall> PrepareCall(Routed& r, Stage stage, int ep, int rank);
  void StartHandoff(const std::shared_ptr<Routed>& r);
  void FailRequest(const std::shared_ptr<Routed>& r, engine::FinishKind kind, const std::string& msg);
  void DeliverLocked(const std::shared_ptr<Routed>& r, engine::Output out, std::vector<std::function<void()>>* later);
  std::vector<kvcache::BlockKey> KeysFor(const Endpoint& e, const std::vector<engine::TokenId>& tokens) const;

  // routed_engine_poll.cc: health and load reports; the hand-off waits.
  void PollLoop();
  void PollOne(int ep);
  void MarkDead(int ep, const std::string& why);
  void HandoffLoop();

  RoutedEngineOptions o_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Endpoint>> eps_;
  std::unordered_map<engine::RequestId, std::shared_ptr<Routed>> reqs_;
  engine::RequestId next_id_ = 1;
  bool shutdown_ = false;
  uint64_t rr_ = 0;
  // The SWA directory (this entrypoint's shard, and its peers'): swa_directory.h.
  std::unique_ptr<SwaDirectory> dir_;
  uint64_t reroutes_ = 0, handoffs_ = 0, handoff_timeouts_ = 0, generated_ = 0;
  std::deque<double> handoff_ms_;
  // The hand-off latency histogram (engine::kHandoffLatencyBoundsS, then +Inf) and its sum.
  std::array<uint64_t, std::size(engine::kHandoffLatencyBoundsS) + 1> handoff_buckets_{};
  double handoff_seconds_ = 0;
  // Hand-offs waiting for the store to show the prefill's blocks.
  struct Handoff {
    std::shared_ptr<Routed> r;
    std::vector<kvcache::BlockKey> keys;  // the blocks the decode engine will hit
    int64_t deadline_ms;
  };
  std::deque<Handoff> handoffs_waiting_;
  std::condition_variable cv_;
  // RpcBegin/RpcEnd: a lock of their own, as calls are made and dropped under mu_.
  std::mutex rpc_mu_;
  std::condition_variable rpc_cv_;
  int rpcs_in_flight_ = 0;
  std::thread poller_, handoff_thread_;
  std::unique_ptr<lb::PrefillRouter> prefill_router_;
  std::vector<int> prefill_eps_;  // router engine index -> endpoint index
  std::unordered_map<engine::RequestId, std::shared_ptr<Routed>> prefill_queued_;  // submitted, not pulled
  int64_t last_round_ms_ = 0;
};

int64_t SteadyMs();
int64_t SteadyUs();

}  // namespace ladle::cluster
