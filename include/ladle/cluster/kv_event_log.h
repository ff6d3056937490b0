// The prefix-cache events of an engine's DP ranks, kept for SGLang KV-event subscribers
// (SglangScheduler.SubscribeKvEvents, docs/cluster.md "Wire protocol"). Made before the
// engines: each rank's EngineConfig::on_block_event is Hook(rank), and the same log goes to
// EngineServerOptions::kv_events.
//
// Per rank: a bounded log of batches numbered 1, 2, ... (one engine event each; batch 1 says
// the rank's cache is empty, as it is before its engine starts). Past the bound (entries or
// tokens) the oldest go. Appending is a lock, a move and a wake of that rank's watchers: cheap
// enough for the engine's scheduler thread, which calls it once per run of blocks named and
// once per eviction.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ladle/engine/engine_config.h"

namespace ladle::cluster {

class KvEventLog {
 public:
  struct Entry {
    uint64_t seq = 0;
    double timestamp = 0;  // seconds since the Unix epoch
    engine::BlockEvent event;
  };
  explicit KvEventLog(int ranks, size_t max_entries = 16384, size_t max_tokens = size_t{1} << 22);

  int ranks() const { return static_cast<int>(ranks_.size()); }
  // For rank r's EngineConfig::on_block_event (holds the log).
  static std::function<void(engine::BlockEvent)> Hook(std::shared_ptr<KvEventLog> log, int rank);
  void Append(int rank, engine::BlockEvent e);

  // The oldest sequence number kept and the next to be assigned.
  std::pair<uint64_t, uint64_t> Range(int rank) const;
  // The first entry at or after `seq`, if any.
  std::optional<Entry> At(int rank, uint64_t seq) const;

  // `wake` runs (on the appending thread, without the log's locks) after each append to rank
  // r, until Unwatch(id).
  uint64_t Watch(int rank, std::function<void()> wake);
  void Unwatch(uint64_t id);

 private:
  struct Rank {
    std::deque<Entry> log;
    uint64_t next = 1;
    size_t tokens = 0;
  };
  size_t max_entries_, max_tokens_;
  mutable std::mutex mu_;
  std::vector<Rank> ranks_;
  std::mutex watch_mu_;
  uint64_t next_watch_ = 1;
  std::vector<std::pair<uint64_t, std::pair<int, std::shared_ptr<std::function<void()>>>>> watchers_;
};

}  // namespace ladle::cluster
