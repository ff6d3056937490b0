// fio as the peer: run it as a subprocess with --output-format=json and read its bandwidth and
// latency percentiles, so our figures and fio's come from the same directory, block size and
// queue depth in one run.
#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "bench_util.h"
#include "ladle/json/json.h"

namespace ladle::bench {

namespace {

double PercentileUs(const json::Value* side, const char* key) {
  // lat_ns (submission to completion) needs --lat_percentiles=1; clat_ns is the fallback.
  for (const char* lat : {"lat_ns", "clat_ns"}) {
    const json::Value* l = side->Find(lat);
    const json::Value* pct = l ? l->Find("percentile") : nullptr;
    const json::Value* v = pct ? pct->Find(key) : nullptr;
    if (v != nullptr && v->is_number()) return v->as_double() / 1000.0;
  }
  return 0;
}

}  // namespace

Result<FioResult> RunFio(const FioJob& j) {
  std::string cmd = fmt::format(
      "{} --name=ladle --directory={} --rw={} --bs={} --ioengine=io_uring --iodepth={} --numjobs=1 "
      "--lat_percentiles=1 --percentile_list=50:99 --output-format=json",
      j.fio, j.dir, j.rw, j.bs, j.depth);
  if (j.file_per_block) {
    // One file per block, like the store's layout; enough open files to keep `depth` in flight.
    cmd += fmt::format(" --nrfiles={} --filesize={} --file_service_type=sequential --openfiles={}", j.count, j.bs,
                       std::max<unsigned>(2 * j.depth, 16));
    // Writes create each file inside the timed run, as the store does: without this fio lays
    // every file out before the clock starts and times only overwrites of existing files.
    if (j.rw == "write") cmd += " --create_on_open=1";
  } else {
    cmd += fmt::format(" --size={}", j.count * j.bs);
  }
  if (j.direct) cmd += " --direct=1";
  if (j.fsync_each) cmd += " --fsync=1";
  cmd += fmt::format(" --invalidate={}", j.invalidate ? 1 : 0);
  FioResult out;
  out.cmdline = cmd;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return IoError("cannot run " + j.fio);
  std::string text;
  char buf[8192];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) return IoError(fmt::format("fio exited with {}: {}", WEXITSTATUS(rc), cmd));
  // fio may print notes before the JSON document.
  const size_t brace = text.find('{');
  if (brace == std::string::npos) return ParseError("no JSON in fio's output: " + text.substr(0, 200));
  auto doc = json::Parse(std::string_view(text).substr(brace));
  if (!doc.ok()) return doc.status().WithContext("fio output");
  const json::Value* jobs = doc->Find("jobs");
  if (jobs == nullptr || !jobs->is_array() || jobs->as_array().empty()) return ParseError("fio output has no jobs");
  const json::Value* side = jobs->as_array()[0].Find(j.rw == "write" ? "write" : "read");
  const json::Value* bw = side ? side->Find("bw_bytes") : nullptr;
  if (bw == nullptr || !bw->is_number()) return ParseError("fio output has no bw_bytes");
  out.bw_bytes = bw->as_double();
  out.p50_us = PercentileUs(side, "50.000000");
  out.p99_us = PercentileUs(side, "99.000000");
  return out;
}

}  // namespace ladle::bench
