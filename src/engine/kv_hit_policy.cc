#include "ladle/engine/kv_hit_policy.h"

#include <algorithm>

#include "ladle/core/logging.h"

namespace ladle::engine {

Status SwaGeometry::Validate() const {
  if (block < 1 || window < 1 || rollback < 1) {
    return InvalidArgument("swa geometry: block, window and rollback must be at least 1");
  }
  return Status::Ok();
}

HitDecision DecideHit(const SwaGeometry& g, int64_t input_len, int64_t block_hit,
                      const std::function<bool(int64_t)>& swa_has) {
  HitDecision d;
  d.cap = std::max<int64_t>(0, input_len - g.ring());
  const int64_t within = std::clamp<int64_t>(block_hit, 0, d.cap);
  d.block_reused = within / g.block * g.block;
  if (d.block_reused == 0) return d;
  if (swa_has && swa_has(d.block_reused)) {
    d.swa_hit = true;
    d.hit = d.block_reused;
    return d;
  }
  // Back off one window: those tokens are replayed (bounded), the rest of the prefix reused.
  d.hit = std::max<int64_t>(0, d.block_reused - g.window);
  d.replay_from = d.hit;
  LADLE_CHECK(d.hit <= d.block_reused && d.block_reused <= d.cap);
  return d;
}

std::optional<int64_t> PrefillSwaAnchor(const SwaGeometry& g, int64_t seq_end, bool final_chunk) {
  if (!final_chunk || seq_end < 1) return std::nullopt;
  const int64_t anchor = (seq_end - 1) / g.block * g.block;
  if (anchor < g.block) return std::nullopt;  // under one block: nothing is stored
  return anchor;
}

bool RingHoldsWindow(const SwaGeometry& g, int64_t ring_end, int64_t anchor) {
  // The ring holds positions [ring_end - ring, ring_end); the window is [anchor - window, anchor).
  return anchor <= ring_end && ring_end - g.ring() <= anchor - g.window;
}

SwaDecodeCopier::SwaDecodeCopier(SwaGeometry g, int64_t start) : g_(g), pos_(start) {}

Result<std::optional<SwaDecodeCopier::Copy>> SwaDecodeCopier::OnStep(int64_t pos) {
  if (pos < pos_) return InvalidArgument("swa copier: the sequence went backwards");
  if (pos - pos_ > g_.rollback) {
    return InvalidArgument("swa copier: a step of more tokens than the ring's rollback slots");
  }
  const int64_t before = pos_;
  pos_ = pos;
  // The last boundary at or below pos, crossed by this step when it lies in (before, pos].
  const int64_t boundary = pos / g_.block * g_.block;
  if (boundary <= before || boundary < g_.block) return std::optional<Copy>();
  Copy c{boundary, pos};
  // A step of at most `rollback` tokens from before < boundary lands at most rollback - 1 past it.
  LADLE_CHECK(c.overshoot() <= g_.rollback - 1 && RingHoldsWindow(g_, pos, boundary));
  last_ = c;
  return std::optional<Copy>(c);
}

}  // namespace ladle::engine
