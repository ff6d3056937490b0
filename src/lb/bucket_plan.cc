// Length buckets and the per-round engine split: see include/ladle/lb/bucket_plan.h.
#include "ladle/lb/bucket_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ladle/core/logging.h"

namespace ladle::lb {

Result<Buckets> Buckets::Create(std::vector<int64_t> upper) {
  for (size_t i = 0; i < upper.size(); ++i) {
    if (upper[i] <= 0 || (i > 0 && upper[i] <= upper[i - 1])) {
      return InvalidArgument(fmt::format("bucket bounds must be positive and increasing (bound {} is {})", i, upper[i]));
    }
  }
  Buckets b;
  b.upper_ = std::move(upper);
  return b;
}

Buckets Buckets::Recipe() { return *Create({16 * 1024, 64 * 1024, 256 * 1024}); }

uint32_t Buckets::Of(int64_t input_tokens) const {
  return static_cast<uint32_t>(std::upper_bound(upper_.begin(), upper_.end(), input_tokens) - upper_.begin());
}

std::vector<uint32_t> ApportionEngines(std::span<const double> demand, uint32_t engines) {
  const size_t n = demand.size();
  std::vector<uint32_t> count(n, 0);
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = demand[i] > 0 && std::isfinite(demand[i]) ? demand[i] : 0.0;
  const double total = std::accumulate(d.begin(), d.end(), 0.0);
  if (total <= 0 || engines == 0) return count;

  std::vector<double> exact(n), frac(n);
  uint32_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    exact[i] = engines * d[i] / total;  // multiply first: integral demands give exact shares
    const double fl = std::floor(exact[i]);
    count[i] = static_cast<uint32_t>(fl);
    frac[i] = exact[i] - fl;
    given += count[i];
  }
  // Rounding can leave given one over engines in pathological float cases; never hand out more.
  while (given > engines) {
    const auto it = std::max_element(count.begin(), count.end());
    --*it, --given;
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (frac[x] != frac[y]) return frac[x] > frac[y];
    return d[x] > d[y];  // stable: then lower index
  });
  for (size_t k = 0; given < engines; k = (k + 1) % n) {
    if (d[order[k]] > 0) ++count[order[k]], ++given;
  }

  // At least one engine per bucket with demand, when there are enough engines for that.
  const auto with_demand = static_cast<uint32_t>(std::count_if(d.begin(), d.end(), [](double x) { return x > 0; }));
  if (engines < with_demand) return count;
  std::vector<size_t> starved;
  for (size_t i = 0; i < n; ++i) {
    if (d[i] > 0 && count[i] == 0) starved.push_back(i);
  }
  std::stable_sort(starved.begin(), starved.end(), [&](size_t x, size_t y) { return d[x] > d[y]; });
  for (size_t s : starved) {
    size_t donor = n;
    for (size_t j = 0; j < n; ++j) {
      if (count[j] < 2) continue;
      if (donor == n) {
        donor = j;
        continue;
      }
      const double over_j = count[j] - exact[j], over_b = count[donor] - exact[donor];
      // Ties: larger count, then higher index (j > donor always here).
      if (over_j > over_b || (over_j == over_b && count[j] >= count[donor])) donor = j;
    }
    LADLE_CHECK(donor < n);  // pigeonhole: engines >= with_demand and s holds none
    --count[donor];
    ++count[s];
  }
  return count;
}

std::vector<uint32_t> ReassignEngines(std::span<const uint32_t> current, std::span<const uint32_t> counts,
                                      const std::vector<bool>& available) {
  const size_t engines = current.size(), buckets = counts.size();
  LADLE_CHECK(available.size() == engines);
  const auto up = static_cast<uint32_t>(std::count(available.begin(), available.end(), true));
  LADLE_CHECK(std::accumulate(counts.begin(), counts.end(), 0u) == up);

  std::vector<uint32_t> out(engines, kNoBucket), kept(buckets, 0);
  std::vector<uint32_t> pool;
  // Engines in index order: a bucket keeps its lowest-index members up to its count.
  for (size_t e = 0; e < engines; ++e) {
    if (!available[e]) continue;
    const uint32_t b = current[e];
    if (b < buckets && kept[b] < counts[b]) {
      out[e] = b;
      ++kept[b];
    } else {
      pool.push_back(static_cast<uint32_t>(e));
    }
  }
  size_t next = 0;
  for (size_t b = 0; b < buckets; ++b) {
    for (; kept[b] < counts[b]; ++kept[b]) out[pool[next++]] = static_cast<uint32_t>(b);
  }
  LADLE_CHECK(next == pool.size());
  return out;
}

BucketPlan::BucketPlan(Buckets buckets, uint32_t engines, std::span<const double> initial_demand)
    : buckets_(std::move(buckets)), bucket_of_(engines, kNoBucket), available_(engines, true) {
  std::vector<double> demand(buckets_.size(), 0.0);
  if (initial_demand.empty()) {
    demand[0] = 1;
  } else {
    LADLE_CHECK(initial_demand.size() == buckets_.size());
    demand.assign(initial_demand.begin(), initial_demand.end());
  }
  if (std::accumulate(demand.begin(), demand.end(), 0.0) <= 0) demand[0] = 1;
  Apply(demand);
}

std::vector<uint32_t> BucketPlan::Counts() const {
  std::vector<uint32_t> c(buckets_.size(), 0);
  for (size_t e = 0; e < bucket_of_.size(); ++e) {
    if (available_[e] && bucket_of_[e] != kNoBucket) ++c[bucket_of_[e]];
  }
  return c;
}

uint32_t BucketPlan::Apply(std::span<const double> demand) {
  last_demand_.assign(demand.begin(), demand.end());
  const auto up = static_cast<uint32_t>(std::count(available_.begin(), available_.end(), true));
  const std::vector<uint32_t> counts = ApportionEngines(demand, up);
  const std::vector<uint32_t> next = ReassignEngines(bucket_of_, counts, available_);
  uint32_t moved = 0;
  for (size_t e = 0; e < next.size(); ++e) moved += available_[e] && next[e] != bucket_of_[e];
  bucket_of_ = next;
  return moved;
}

uint32_t BucketPlan::Resplit(std::span<const double> demand) {
  LADLE_CHECK(demand.size() == buckets_.size());
  double total = 0;
  for (double x : demand) total += x > 0 ? x : 0;
  if (total <= 0) return 0;
  return Apply(demand);
}

uint32_t BucketPlan::SetAvailable(uint32_t engine, bool available) {
  LADLE_CHECK(engine < available_.size());
  if (available_[engine] == available) return 0;
  available_[engine] = available;
  if (!available) bucket_of_[engine] = kNoBucket;
  const std::vector<double> demand = last_demand_;
  return Apply(demand);
}

}  // namespace ladle::lb
