// The EC layout comparison (layout.cc): in-block coding (the store's layout) against striping
// across 10 consecutive blocks, on the same 12 fs targets.
#pragma once

#include <string>

#include "bench_util.h"
#include "ladle/core/result.h"

namespace ladle::bench {

struct LayoutFigures {
  size_t blocks = 0;
  unsigned depth = 0, stripe_depth = 0;  // blocks in flight; stripes in flight (depth / 10)
  RunResult inblock_write, striped_write;
  RunResult inblock_read, striped_read;            // at `depth`, no domain down
  RunResult inblock_read_down, striped_read_down;  // domain 0 down (a data domain)
  RunResult inblock_read_qd1, striped_read_qd1, inblock_read_down_qd1, striped_read_down_qd1;
};

// Writes `n` 112 KiB blocks (rounded down to whole stripes) both ways under `dir` (removed and
// recreated, then removed), then reads them back at `depth` and at 1, with 0 and 1 domains down.
Result<LayoutFigures> MeasureLayouts(const std::string& dir, size_t n, unsigned depth);

}  // namespace ladle::bench
