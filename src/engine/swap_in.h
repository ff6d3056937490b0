// The swap-in thread (recipe "Block KVCache", stage 3): copies a batch's fetched blocks and SWA
// entries into the model's KV storage while that batch's forward already runs. Copies are
// ordered by the first forward layer that reads them; the model calls WaitLayer(l) (through
// SeqStep::ready) before layer l, and returns at once when the copies it needs have landed.
//
// Ordering with the device: the device thread calls Start() at the beginning of batch N's
// device task, after every earlier forward finished (the device is FIFO), and WaitAll() before
// that task ends, so a copy never races a forward of another batch, and nothing announces a
// block as ready before its copy finished.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ladle/engine/model.h"

namespace ladle::engine {

class SwapIn final : public KvReadyGate {
 public:
  struct Op {
    int layer = 0;                // the first forward layer that reads what this copies
    std::function<void()> copy;   // must not throw
  };
  SwapIn();
  ~SwapIn() override;
  SwapIn(const SwapIn&) = delete;
  SwapIn& operator=(const SwapIn&) = delete;

  // Hands a batch's copies to the thread (sorted by layer here); the previous batch's must be
  // done (WaitAll). Returns at once.
  void Start(std::vector<Op> ops);
  // Blocks until every copy with layer <= `layer` has run. Thread-safe (a batch's sequences run
  // in parallel).
  void WaitLayer(int layer) override;
  // Blocks until every copy of the batch has run.
  void WaitAll();

  // Copy time, the part of it some forward was waiting through (not hidden), and copies run.
  struct Totals {
    int64_t copy_ns = 0, exposed_ns = 0;
    uint64_t copies = 0;
  };
  Totals totals() const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;       // new work / stop
  std::condition_variable done_cv_;  // progress
  std::vector<Op> ops_;
  size_t next_ = 0;        // ops_[next_] is the next to copy
  size_t done_ = 0;        // ops_[0, done_) have landed
  int waiters_ = 0;        // callers blocked in WaitLayer / WaitAll
  bool stop_ = false;
  Totals totals_;
  std::thread thread_;
};

}  // namespace ladle::engine
