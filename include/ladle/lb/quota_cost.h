// Compute-quota: the recipe's fitted attention-cost measure that drives every layer of the
// Prefill Load Balancer,
//   cost(q, c) = a·q + b·q·c + d·q² + f·c + e   (ns; q uncached tokens, c cached prefix)
// It is engine::CostModel's prefill form, copied here as plain coefficients so that lb depends
// on core only: the cluster copies a fitted model in (QuotaCost{m.a, m.b, m.d, m.e, m.f}), a
// simulator writes its own.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ladle::lb {

struct QuotaCost {
  double a = 1, b = 0, d = 0, e = 0, f = 0;  // the default counts uncached tokens

  // The whole prefill of q tokens after c cached ones, fixed cost e included.
  double Cost(int64_t q, int64_t c) const {
    const double qd = static_cast<double>(q), cd = static_cast<double>(c);
    return a * qd + b * qd * cd + d * qd * qd + f * cd + e;
  }
  // A request of `input` prompt tokens whose first `cached` are a prefix hit: cached is clamped
  // to [0, input] so a report that overstates the hit cannot make the quota negative.
  double RequestCost(int64_t input, int64_t cached) const {
    const int64_t c = std::clamp<int64_t>(cached, 0, std::max<int64_t>(input, 0));
    return Cost(std::max<int64_t>(input, 0) - c, c);
  }
};

}  // namespace ladle::lb
