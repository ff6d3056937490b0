// The entrypoint's engine: an engine::Engine (so the HTTP server drives it exactly as it
// drives the in-process engine) whose requests run on `ladle engine` processes, or on any
// worker that speaks SMG's VllmEngine protocol, over gRPC.
//
//   RoutedEngineOptions o; o.engines = {"127.0.0.1:7001", "127.0.0.1:7002"};
//   auto eng = RoutedEngine::Create(o);   // polls every engine's load and health from now on
//   server::Server::Create(config, eng->get(), tokenizer);
//
// Routing (docs/cluster.md): with prefill and decode engines alive, a request is prefilled on a
// prefill engine (the Prefill Load Balancer: lowest compute-quota rank of the request's length
// bucket), which stores its KV through the shared store and its SWA snapshot at the decode's
// hit anchor; then it continues on a decode engine (the Decode Load Balancer: DualPath's rule
// over every DP rank), which fetches the blocks from the store and the SWA entry from the
// prefill engine. With only `both` engines, a request runs on one (the decode balancer).
// Load is counted at dispatch, on every path.
//
// Faults: an engine whose stream breaks or whose load report is missing for dead_after_ms is
// dead; its requests resume elsewhere with the prompt plus the tokens generated so far, so the
// client's stream goes on with nothing lost or repeated. A dead engine that answers again
// rejoins; a retired one (RemoveEngine: it left the fleet) does not until it is added again.
// Submit answers kUnavailable only when no engine of a needed role is alive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/engine.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::cluster {

struct RoutedEngineOptions {
  std::vector<std::string> engines;  // host:port, optionally grpc://host:port
  std::string name = "entrypoint";   // this entrypoint's id (request ids are "<name>-<n>")
  int64_t poll_ms = 100;             // load reports and health checks
  int64_t dead_after_ms = 1000;      // no answer for this long: dead
  int64_t rpc_deadline_ms = 1000;    // unary calls (load, info)
  int max_reroutes = 4;              // per request
  // The shared block store in CHECK role (metadata only): the PD hand-off waits (at most
  // handoff_wait_ms) until the prefill's blocks are visible before the decode starts.
  std::shared_ptr<kvcache::KvStore> store;
  int64_t handoff_wait_ms = 3000;
  // Decode Load Balancer: ranks above high_factor × the candidates' mean KV tokens are "high".
  double decode_high_factor = 1.05;
  // Naive routing for comparisons: "balanced" (the recipe's balancers), "round-robin" or
  // "least-requests".
  std::string policy = "balanced";
  // The SWA directory, sharded by key over the live entrypoints (docs/cluster.md, "SWA
  // directory"). With directory_listen (host:port; port 0: any) this entrypoint serves its
  // shard there as member directory_advertise (default: the listen host and bound port) and
  // shares keys with directory_peers (the other entrypoints' member ids, which are their
  // directory addresses; AddDirectoryPeer adds more). Without it the directory is this
  // entrypoint's alone. A lookup asks every owner in parallel within directory_lookup_ms.
  std::string directory_listen, directory_advertise;
  std::vector<std::string> directory_peers;
  int64_t directory_lookup_ms = 50;
  // Prefill Load Balancer: the compute-quota (ns of prefill, the engines' cost(q, c)) a prefill
  // rank may hold before it pulls no more (an idle rank always takes the queue's head), and the
  // round after which the length buckets are re-split by the last round's demand.
  double prefill_rank_quota_ns = 500e6;
  int64_t prefill_round_ms = 2000;
};

struct ClusterStats {
  struct Engine {
    std::string address, name, role;
    bool alive = false;
    bool retired = false;  // removed (RemoveEngine): never chosen, not polled
    int dp = 0;
    uint64_t dispatched = 0;
    int in_flight = 0;
  };
  std::vector<Engine> engines;
  uint64_t reroutes = 0, handoffs = 0, handoff_store_waits_timed_out = 0;
  uint64_t swa_directory_entries = 0;  // this entrypoint's shard
  std::vector<std::string> directory_members;  // the ring: the live entrypoints, this one included
  uint64_t directory_remote_lookups = 0, directory_remote_failures = 0, directory_remote_found = 0;
  std::vector<double> handoff_ms;  // recent hand-off latencies (prefill done → first decode token)
};

class RoutedEngine : public engine::Engine {
 public:
  // Connects lazily: engines that are down now are retried by the poller, and join when they
  // answer. Waits up to `wait_ms` for at least one engine to be alive (0: no wait).
  static Result<std::unique_ptr<RoutedEngine>> Create(RoutedEngineOptions o, int64_t wait_ms = 0);
  virtual ClusterStats GetClusterStats() const = 0;
  // Adds an engine at run time (discovery); a known address is a no-op, a retired one is
  // brought back (asked its role again, alive once it answers).
  virtual void AddEngine(const std::string& address) = 0;
  // Retires an engine that left the fleet (its registration was revoked or expired): it is
  // dead at once (its requests move exactly as when an engine dies), never chosen and not
  // polled back to life until AddEngine names it again. An unknown address is a no-op.
  virtual void RemoveEngine(const std::string& address) = 0;
  // The SWA directory's other entrypoints (discovery): a peer joins the ring once it answers,
  // and leaves it when removed or silent. directory_member() is this entrypoint's own id.
  virtual void AddDirectoryPeer(const std::string& member) = 0;
  virtual void RemoveDirectoryPeer(const std::string& member) = 0;
  virtual std::string directory_member() const = 0;
};

}  // namespace ladle::cluster
