// The SWA directory, sharded by key across the entrypoints (recipe "SWA KVCache": "a logically
// unified directory, sharded by key across Entrypoints"; docs/cluster.md, "SWA directory").
//
// Every entrypoint polls every engine, so every entrypoint sees every engine's new SWA entries
// (GetQuota's records); each keeps only the keys it owns under consistent hashing over the
// live entrypoints (lb::HashRing; the member id is an entrypoint's directory address). A
// lookup answers its own keys from memory and asks each other owner once (LadleDirectory's
// SwaLookup), in parallel, within a deadline. An owner that does not answer, or one that left,
// costs only misses: the engine replays the window (Encoder SWA Bounded Replay), never an
// error. Peers are probed; one silent for dead_after_ms leaves the ring until it answers again.
// Internal to the cluster module.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ladle/kvcache/kv_store.h"
#include "ladle/lb/hash_ring.h"
#include "ladle_cluster.grpc.pb.h"

namespace ladle::cluster {

struct SwaDirectoryOptions {
  int64_t lookup_timeout_ms = 50;  // one lookup, all owners in parallel
  int64_t probe_ms = 250;          // peer liveness probes
  int64_t dead_after_ms = 1500;    // a peer silent this long leaves the ring
  size_t max_entries = 1 << 20;    // this shard's bound (expired entries go first)
};

struct SwaDirectoryStats {
  std::vector<std::string> members;  // the ring now (this entrypoint included)
  size_t entries = 0;                // this shard's
  uint64_t remote_lookups = 0, remote_failures = 0, remote_keys_found = 0;
};

class SwaDirectory {
 public:
  explicit SwaDirectory(SwaDirectoryOptions o);
  ~SwaDirectory();  // stops the prober and the server

  // Serves LadleDirectory on `listen` (host:port, port 0 for any); the member id is
  // `advertise`, else the listen host with the bound port. Without Serve the directory is one
  // entrypoint's alone: it owns every key.
  Status Serve(const std::string& listen, const std::string& advertise);
  const std::string& self() const { return self_; }
  int port() const { return port_; }

  // Other entrypoints (their member ids = directory addresses). They join the ring once they
  // answer a probe.
  void AddPeer(const std::string& member);
  void RemovePeer(const std::string& member);

  // `holder` (an engine address) has the SWA entry for `key` until `expire_ms` (steady clock).
  // Kept only when this entrypoint owns the key.
  void Record(const kvcache::BlockKey& key, const std::string& holder, int64_t expire_ms);
  // The holders of `keys` ("" where none is known), asking the owners; bounded by the lookup
  // timeout. Never blocks on a dead owner for longer.
  std::vector<std::string> Lookup(const std::vector<kvcache::BlockKey>& keys);
  // This shard's answer (what a peer's SwaLookup gets).
  std::vector<std::string> LookupLocal(const std::vector<kvcache::BlockKey>& keys);

  SwaDirectoryStats GetStats() const;

 private:
  struct Peer {
    std::string member;
    std::shared_ptr<grpc::Channel> channel;
    bool in_ring = false;
    int64_t last_ok_ms = 0;
  };
  struct Entry {
    std::string holder;
    int64_t expire_ms = 0;
  };
  class Service;

  void ProbeLoop();
  void RebuildRingLocked();
  bool OwnsLocked(const kvcache::BlockKey& key) const;

  const SwaDirectoryOptions o_;
  std::string self_ = "self";
  int port_ = 0;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::unique_ptr<Peer>> peers_;
  lb::HashRing ring_;
  std::unordered_map<kvcache::BlockKey, Entry, kvcache::BlockKeyHash> shard_;
  uint64_t remote_lookups_ = 0, remote_failures_ = 0, remote_found_ = 0;
  std::thread prober_;
};

}  // namespace ladle::cluster
