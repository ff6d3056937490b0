// Shared pieces of kvcache_bench: a closed-loop driver that keeps D store requests in flight,
// latency percentiles, and the fio subprocess runner (fio.cc).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Nearest-rank percentile of `v` (p in [0, 1]); 0 for an empty sample.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

// One measured run: bytes moved, wall time, per-request latency (µs), failed requests.
struct RunResult {
  double seconds = 0;
  uint64_t bytes = 0;
  std::vector<double> lat_us;
  size_t failures = 0;
  double MBps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }
  double P50() const { return Percentile(lat_us, 0.50); }
  double P99() const { return Percentile(lat_us, 0.99); }
};

// Keeps `depth` requests in flight until `total` have completed, like fio's iodepth. Requests
// are issued from the calling thread, never from a completion: completions run on the store's
// I/O threads and must not block, and issuing may wait for queue space. issue(i, done) must call
// done(ok) exactly once, from any thread.
inline RunResult ClosedLoop(size_t total, unsigned depth, uint64_t bytes_per_request,
                            const std::function<void(size_t, std::function<void(bool)>)>& issue) {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0, next = 0, in_flight = 0;
  RunResult r;
  r.lat_us.resize(total);
  const auto t0 = Clock::now();
  std::unique_lock lock(mu);
  while (done < total) {
    while (next < total && in_flight < depth) {
      const size_t i = next++;
      ++in_flight;
      const auto start = Clock::now();
      lock.unlock();
      issue(i, [&, i, start](bool ok) {
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        std::lock_guard g(mu);
        r.lat_us[i] = us;
        ++done;
        --in_flight;
        if (!ok) ++r.failures;
        cv.notify_one();
      });
      lock.lock();
    }
    cv.wait(lock, [&] { return (next < total && in_flight < depth) || done == total; });
  }
  r.seconds = Seconds(Clock::now() - t0);
  r.bytes = bytes_per_request * total;
  return r;
}

// fio on `dir` with io_uring, one job, `depth` in flight, `bs`-byte I/Os.
struct FioJob {
  std::string fio = "fio";
  std::string dir;
  std::string rw;  // "write" or "read"
  size_t bs = 0;
  unsigned depth = 1;
  size_t count = 0;        // I/Os (blocks)
  bool file_per_block = false;  // nrfiles=count, filesize=bs: the store's layout; else one file
  bool direct = false;
  bool fsync_each = false;
  // fio drops the files' cached pages before a job by default; the store's reads right after its
  // writes find them cached, so the buffered comparison keeps them (--drop-caches makes both cold).
  bool invalidate = false;
};
struct FioResult {
  double bw_bytes = 0;  // bytes/s as fio reports it
  double p50_us = 0, p99_us = 0;  // total latency (submission + completion)
  std::string cmdline;
};
Result<FioResult> RunFio(const FioJob& job);

}  // namespace ladle::bench
