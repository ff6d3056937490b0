// The recipe's prefix-hit policy and SWA KVCache anchor rules, as pure functions of token
// positions: no I/O, no clock, no engine state. The scheduler calls them before a request is
// placed; the cluster's entrypoint and the fleet simulator call the same code.
//
// Positions count tokens: a sequence "at pos" has KV for tokens [0, pos).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "ladle/core/result.h"

namespace ladle::engine {

// Block size, SWA window and speculative-rollback slots (the recipe: 128, 128, 6; the ring of
// the first layers is window + rollback = 134 tokens).
struct SwaGeometry {
  int64_t block = 128;
  int64_t window = 128;
  int64_t rollback = 6;
  int64_t ring() const { return window + rollback; }
  // block, window >= 1; rollback >= 1 (a step emits at most `rollback` tokens).
  Status Validate() const;
};

struct HitDecision {
  int64_t cap = 0;           // L - ring (YOCO truncation), floored at 0: the most that may be reused
  int64_t block_reused = 0;  // L1: leading tokens whose Block KV is reused as is (a multiple of block)
  int64_t hit = 0;           // tokens skipped: L1 on an SWA hit, L1 - window on a miss
  bool swa_hit = false;      // the SWA entry at L1 exists and restores the ring exactly
  // On an SWA miss with L1 > 0: Encoder SWA Bounded Replay recomputes [replay_from, L1) with the
  // uncached suffix, to rebuild only the ring; the Block KV of that span is neither recomputed
  // nor rewritten. -1 when there is nothing to replay.
  int64_t replay_from = -1;
  int64_t replayed() const { return replay_from < 0 ? 0 : block_reused - replay_from; }
};

// For input length `input_len` (L) and `block_hit` leading tokens present in the Block KVCache
// (pool or store), the recipe's decision: cap = L - ring; L1 = block_hit within the cap, rounded
// down to a block; if SWA KVCache exists for (L1 - window, L1] -- the entry anchored at L1,
// since entries are stored only at block multiples -- the hit is L1, else L1 - window with that
// window replayed. `swa_has(anchor)` says whether an entry exists; it is asked about L1 only.
HitDecision DecideHit(const SwaGeometry& g, int64_t input_len, int64_t block_hit,
                      const std::function<bool(int64_t anchor)>& swa_has);

// After a prefill leaves the sequence at `seq_end`: the SWA anchor to store, (seq_end - 1)
// rounded down to a block; nothing under one block, and nothing for a chunk that is not the
// prompt's last (a chunked prefill stores only at its final chunk).
std::optional<int64_t> PrefillSwaAnchor(const SwaGeometry& g, int64_t seq_end, bool final_chunk);

// Whether a ring whose newest position is `ring_end` - 1 (the sequence is at ring_end) still
// holds the whole window that ends at `anchor`, i.e. [anchor - window, anchor).
bool RingHoldsWindow(const SwaGeometry& g, int64_t ring_end, int64_t anchor);

// The decode-time copy area of one request: a copy of the current window is taken each time
// the sequence crosses a block boundary. A step emits at most `rollback` tokens (speculative
// decoding), so a copy lands at most rollback - 1 tokens past its boundary, and the ring's
// rollback extra slots still hold the boundary's window. At request end the most recent
// completed copy is stored at its boundary.
class SwaDecodeCopier {
 public:
  // `start` is the position after prefill.
  SwaDecodeCopier(SwaGeometry g, int64_t start);

  struct Copy {
    int64_t anchor = 0;     // the block boundary the copy is for
    int64_t taken_at = 0;   // the sequence position when copied (anchor + overshoot)
    int64_t overshoot() const { return taken_at - anchor; }
  };
  // The sequence advanced to `pos` (monotone; the step emitted pos - previous tokens). Returns
  // the copy to take now, if this step crossed a boundary. A step of more than `rollback`
  // tokens is an InvalidArgument (the ring could not hold the boundary's window any more).
  Result<std::optional<Copy>> OnStep(int64_t pos);
  // What to store at request end: the most recent copy taken, if any.
  std::optional<Copy> Final() const { return last_; }

 private:
  SwaGeometry g_;
  int64_t pos_;
  std::optional<Copy> last_;
};

}  // namespace ladle::engine
