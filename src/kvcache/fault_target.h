// Fault injection for tests: a target spec `fault:NAME:DIR` wraps the fs target at DIR with the
// FaultControl registered under NAME (created on first use). Switches are atomics, flipped by
// the test while the store runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "target.h"

namespace ladle::kvcache {

struct FaultControl {
  std::atomic<int> delay_ms{0};           // slow: every operation answers this much later
  std::atomic<bool> dead{false};          // hangs: async operations never answer (until the target closes)
  std::atomic<bool> corrupt_reads{false}; // flips one payload byte of every chunk read
  std::atomic<bool> enospc{false};        // writes fail with ENOSPC
  std::atomic<bool> eio{false};           // reads fail with EIO
  std::atomic<int> reader_throws{0};      // the fs reader thread throws once per read it queues, this many times
  std::atomic<uint64_t> reads{0}, writes{0};

  // The process-wide control named `name`.
  static std::shared_ptr<FaultControl> Named(const std::string& name);
  void Reset() {
    delay_ms = 0;
    dead = false;
    corrupt_reads = false;
    enospc = false;
    eio = false;
    reader_throws = 0;
  }
};

std::unique_ptr<Target> WrapFaults(std::unique_ptr<Target> inner, std::shared_ptr<FaultControl> control);

}  // namespace ladle::kvcache
