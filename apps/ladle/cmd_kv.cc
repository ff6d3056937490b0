// `ladle kv`: the persistent KV block store from the command line (include/ladle/kvcache/kv_store.h).
//   ladle kv put   --store fs:/data/kv 0123...ef < block.bin      [--class agent|chatbot]
//   ladle kv get   --store fs:/data/kv 0123...ef > block.bin
//   ladle kv match --store ec:10+2:/d0,...,/d11 KEY1 KEY2 ...     (prints the hit count; `-` reads keys from stdin)
//   ladle kv rm    --store URI KEY...
//   ladle kv stat  --store URI [--json]
//   ladle kv gc    --store URI [--loop]                            (--loop: the storage node's GC worker)
//   ladle kv fsck  --store URI
//   ladle kv bench --store URI [--blocks N --size BYTES --depth D]
// Keys are 32 hex digits (BlockKey::Hex). Exit codes: 0 success, 1 error (message on stderr),
// 2 a miss (`get` of an absent, expired or corrupt block; the caller recomputes), 3 `fsck` found
// unrecoverable objects. `--store` may also come from $LADLE_KV_STORE.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <mutex>
#include <random>
#include <vector>

#include "commands.h"
#include "ladle/json/json.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::app {

namespace {

using kvcache::BlockKey;
using kvcache::KvStore;
using kvcache::MutableBuffer;
using kvcache::TrafficClass;
using Clock = std::chrono::steady_clock;

constexpr int kExitError = 1;
constexpr int kExitMiss = 2;
constexpr int kExitUnrecoverable = 3;

struct KvOpts {
  std::string store;
  std::string cls = "chatbot";
  unsigned io_depth = 32;
  unsigned write_threads = 4;
  bool o_direct = false;
  uint64_t capacity = 0;
  double high_watermark = 0.90, low_watermark = 0.85;
  int64_t ttl_agent_s = 3 * 24 * 3600, ttl_chatbot_s = 7 * 24 * 3600;
  int64_t gc_interval_ms = 1000;
  int64_t hedge_ms = 20, domain_timeout_ms = 500, down_for_ms = 10000;
  // Subcommand arguments.
  std::vector<std::string> keys;
  std::string in_path, out_path;
  bool json = false;
  bool loop = false;
  // bench
  size_t bench_blocks = 1024;
  size_t bench_size = 112 * 1024;
  unsigned bench_depth = 8;
  size_t bench_chain = 1000;
  int bench_match_reps = 100;
  bool bench_keep = false;
};

int Fail(std::string_view what, const Status& s) {
  fmt::print(stderr, "ladle kv {}: {}\n", what, s.ToString());
  return kExitError;
}

Result<std::unique_ptr<KvStore>> OpenStore(const KvOpts& o, bool gc_in_process) {
  std::string uri = o.store;
  if (uri.empty()) {
    if (const char* env = std::getenv("LADLE_KV_STORE")) uri = env;
  }
  if (uri.empty()) return InvalidArgument("--store URI is required (fs:DIR or ec:K+M:DIR0,...), or set LADLE_KV_STORE");
  kvcache::StoreOptions so;
  so.io_depth = o.io_depth;
  so.write_threads = o.write_threads;
  so.o_direct = o.o_direct;
  so.capacity_bytes = o.capacity;
  so.high_watermark = o.high_watermark;
  so.low_watermark = o.low_watermark;
  so.ttl_agent = std::chrono::seconds(o.ttl_agent_s);
  so.ttl_chatbot = std::chrono::seconds(o.ttl_chatbot_s);
  so.gc_interval = std::chrono::milliseconds(o.gc_interval_ms);
  so.hedge_after = std::chrono::milliseconds(o.hedge_ms);
  so.domain_timeout = std::chrono::milliseconds(o.domain_timeout_ms);
  so.down_for = std::chrono::milliseconds(o.down_for_ms);
  // One-shot commands must not start a GC worker that races the command and the storage
  // node's own `ladle kv gc --loop`; only the loop (and bench, which mimics a server) runs one.
  so.gc_in_process = gc_in_process;
  return KvStore::Open(uri, so);
}

TrafficClass ClassOf(const KvOpts& o) { return o.cls == "agent" ? TrafficClass::kAgent : TrafficClass::kChatbot; }

Result<std::vector<BlockKey>> ParseKeys(const std::vector<std::string>& args) {
  std::vector<std::string> words;
  for (const auto& a : args) {
    if (a == "-") {
      // Long chains (7,813 keys for a 1M-token prompt) are easier to pipe than to pass as argv.
      std::string w;
      while (std::cin >> w) words.push_back(w);
    } else {
      words.push_back(a);
    }
  }
  std::vector<BlockKey> keys;
  keys.reserve(words.size());
  for (const auto& w : words) {
    auto k = BlockKey::FromHex(w);
    if (!k.ok()) return k.status().WithContext("key '" + w + "'");
    keys.push_back(*k);
  }
  if (keys.empty()) return InvalidArgument("no keys given");
  return keys;
}

Result<std::vector<uint8_t>> ReadAll(const std::string& path) {
  FILE* f = path.empty() || path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (f == nullptr) return IoError("cannot open " + path);
  std::vector<uint8_t> data;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + n);
  const bool err = std::ferror(f);
  if (f != stdin) std::fclose(f);
  if (err) return IoError("read error on " + (path.empty() ? std::string("stdin") : path));
  return data;
}

int RunPut(const KvOpts& o) {
  if (o.keys.size() != 1) return Fail("put", InvalidArgument("put takes exactly one KEYHEX"));
  auto key = BlockKey::FromHex(o.keys[0]);
  if (!key.ok()) return Fail("put", key.status());
  auto data = ReadAll(o.in_path);
  if (!data.ok()) return Fail("put", data.status());
  auto store = OpenStore(o, false);
  if (!store.ok()) return Fail("put", store.status());
  std::span<const uint8_t> value(*data);
  auto st = (*store)->PutSync(std::span(&*key, 1), std::span(&value, 1), ClassOf(o));
  if (st.size() != 1) return Fail("put", Internal("store returned no per-key status"));
  if (!st[0].ok()) return Fail("put", st[0]);
  return 0;
}

int RunGet(const KvOpts& o) {
  if (o.keys.size() != 1) return Fail("get", InvalidArgument("get takes exactly one KEYHEX"));
  auto key = BlockKey::FromHex(o.keys[0]);
  if (!key.ok()) return Fail("get", key.status());
  auto store = OpenStore(o, false);
  if (!store.ok()) return Fail("get", store.status());
  // The interface does not report a value's length before the read, so start at a block's
  // usual size and grow on kOutOfRange (nothing is read then).
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    MutableBuffer mb{buf.data(), buf.size()};
    auto r = (*store)->GetSync(std::span(&*key, 1), std::span(&mb, 1));
    if (r.size() != 1) return Fail("get", Internal("store returned no per-key result"));
    if (r[0].ok()) {
      FILE* out = o.out_path.empty() || o.out_path == "-" ? stdout : std::fopen(o.out_path.c_str(), "wb");
      if (out == nullptr) return Fail("get", IoError("cannot open " + o.out_path));
      const bool ok = std::fwrite(buf.data(), 1, *r[0], out) == *r[0] && std::fflush(out) == 0;
      if (out != stdout) std::fclose(out);
      if (!ok) return Fail("get", IoError("write error"));
      return 0;
    }
    if (r[0].status().code() == StatusCode::kNotFound) {
      fmt::print(stderr, "ladle kv get: miss: {}\n", key->Hex());
      return kExitMiss;
    }
    if (r[0].status().code() == StatusCode::kOutOfRange && buf.size() < (size_t{1} << 32)) {
      buf.resize(buf.size() * 8);
      continue;
    }
    return Fail("get", r[0].status());
  }
}

int RunMatch(const KvOpts& o) {
  auto keys = ParseKeys(o.keys);
  if (!keys.ok()) return Fail("match", keys.status());
  auto store = OpenStore(o, false);
  if (!store.ok()) return Fail("match", store.status());
  auto hit = (*store)->MatchSync(*keys);
  if (!hit.ok()) return Fail("match", hit.status());
  fmt::print("{}\n", *hit);
  return 0;
}

int RunRm(const KvOpts& o) {
  auto keys = ParseKeys(o.keys);
  if (!keys.ok()) return Fail("rm", keys.status());
  auto store = OpenStore(o, false);
  if (!store.ok()) return Fail("rm", store.status());
  auto st = (*store)->DeleteSync(*keys);
  int rc = 0;
  for (size_t i = 0; i < st.size() && i < keys->size(); ++i) {
    // Removing an absent block is not an error: rm is idempotent, like GC racing the caller.
    if (!st[i].ok() && st[i].code() != StatusCode::kNotFound) {
      fmt::print(stderr, "ladle kv rm: {}: {}\n", (*keys)[i].Hex(), st[i].ToString());
      rc = kExitError;
    }
  }
  return rc;
}

int RunStat(const KvOpts& o) {
  auto store = OpenStore(o, false);
  if (!store.ok()) return Fail("stat", store.status());
  const kvcache::StoreStat s = (*store)->Stat();
  if (o.json) {
    using json::Value;
    Value::Array targets;
    for (const auto& t : s.targets) {
      targets.push_back(Value::MakeObject({{"path", Value::String(t.path)},
                                           {"used_bytes", Value::Int(static_cast<int64_t>(t.used_bytes))},
                                           {"capacity_bytes", Value::Int(static_cast<int64_t>(t.capacity_bytes))},
                                           {"objects", Value::Int(static_cast<int64_t>(t.objects))},
                                           {"down", Value::Bool(t.down)}}));
    }
    auto n = [](uint64_t v) { return Value::Int(static_cast<int64_t>(v)); };
    Value v = Value::MakeObject({{"targets", Value::MakeArray(std::move(targets))},
                                 {"hits", n(s.hits)},
                                 {"misses", n(s.misses)},
                                 {"puts", n(s.puts)},
                                 {"evictions", n(s.evictions)},
                                 {"repairs", n(s.repairs)},
                                 {"corrupt", n(s.corrupt)},
                                 {"healthy", Value::Bool(s.healthy)}});
    fmt::print("{}\n", json::Dump(v, json::Style::kPython));
    return 0;
  }
  auto gib = [](uint64_t b) { return static_cast<double>(b) / (1ull << 30); };
  fmt::print("{:<4} {:>12} {:>12} {:>6} {:>12} {:>5}  {}\n", "#", "used GiB", "cap GiB", "use%", "objects", "down",
             "path");
  for (size_t i = 0; i < s.targets.size(); ++i) {
    const auto& t = s.targets[i];
    const double pct = t.capacity_bytes ? 100.0 * static_cast<double>(t.used_bytes) / t.capacity_bytes : 0.0;
    fmt::print("{:<4} {:>12.3f} {:>12.3f} {:>6.1f} {:>12} {:>5}  {}\n", i, gib(t.used_bytes), gib(t.capacity_bytes),
               pct, t.objects, t.down ? "yes" : "no", t.path);
  }
  fmt::print("hits {}  misses {}  puts {}  evictions {}  repairs {}  corrupt {}  healthy {}\n", s.hits, s.misses,
             s.puts, s.evictions, s.repairs, s.corrupt, s.healthy ? "yes" : "NO");
  return s.healthy ? 0 : kExitError;
}

int RunGc(const KvOpts& o) {
  if (!o.loop) {
    auto store = OpenStore(o, false);
    if (!store.ok()) return Fail("gc", store.status());
    auto n = (*store)->RunGcOnce();
    if (!n.ok()) return Fail("gc", n.status());
    fmt::print("evicted {}\n", *n);
    return 0;
  }
  // The storage node's worker. SIGINT/SIGTERM are blocked before the store starts its threads
  // (they inherit the mask), so only this thread takes them, in sigtimedwait between passes:
  // a pass is never cut short by a signal handler.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto store = OpenStore(o, false);
  if (!store.ok()) return Fail("gc", store.status());
  fmt::print(stderr, "ladle kv gc: running every {} ms on {} (SIGINT/SIGTERM stops)\n", o.gc_interval_ms, o.store);
  uint64_t total = 0;
  for (;;) {
    auto n = (*store)->RunGcOnce();
    if (!n.ok()) {
      // A failing pass is logged and retried next interval: the worker must not die silently.
      fmt::print(stderr, "ladle kv gc: pass failed: {}\n", n.status().ToString());
    } else if (*n > 0) {
      total += *n;
      fmt::print(stderr, "ladle kv gc: evicted {} (total {})\n", *n, total);
    }
    timespec ts{o.gc_interval_ms / 1000, (o.gc_interval_ms % 1000) * 1000000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) break;
  }
  fmt::print(stderr, "ladle kv gc: stopped, evicted {} in all\n", total);
  return 0;
}

int RunFsck(const KvOpts& o) {
  auto store = OpenStore(o, false);
  if (!store.ok()) return Fail("fsck", store.status());
  auto r = (*store)->Fsck();
  if (!r.ok()) return Fail("fsck", r.status());
  fmt::print("objects {}  ok {}  repaired {}  unrecoverable {}\n", r->objects, r->ok, r->repaired, r->unrecoverable);
  return r->unrecoverable > 0 ? kExitUnrecoverable : 0;
}

// --- bench --------------------------------------------------------------------------------

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

// Keeps `depth` single-key requests in flight until `total` completed. New requests are issued
// from this thread, never from a completion: completions run on the store's I/O threads and
// must not block, and an issue may wait for queue space. Returns per-request latency in µs.
template <typename IssueFn>
std::vector<double> ClosedLoop(size_t total, unsigned depth, const char* what, IssueFn issue, size_t* failures) {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0, failed = 0, next = 0, in_flight = 0;
  std::vector<double> lat(total);
  auto last_print = Clock::now();
  std::unique_lock lock(mu);
  while (done < total) {
    while (next < total && in_flight < depth) {
      const size_t i = next++;
      ++in_flight;
      const auto t0 = Clock::now();
      lock.unlock();
      issue(i, [&, i, t0](bool ok) {
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        std::lock_guard g(mu);
        lat[i] = us;
        ++done;
        --in_flight;
        if (!ok) ++failed;
        cv.notify_one();
      });
      lock.lock();
    }
    cv.wait_for(lock, std::chrono::milliseconds(500),
                [&] { return (next < total && in_flight < depth) || done == total; });
    if (Clock::now() - last_print > std::chrono::milliseconds(500) && isatty(STDERR_FILENO)) {
      fmt::print(stderr, "\r  {} {}/{}   ", what, done, total);
      last_print = Clock::now();
    }
  }
  if (isatty(STDERR_FILENO)) fmt::print(stderr, "\r{:40}\r", "");
  *failures = failed;
  return lat;
}

void PrintRow(const char* op, size_t n, size_t bytes_each, double secs, const std::vector<double>& lat, size_t fail) {
  const double mbs = secs > 0 ? static_cast<double>(n * bytes_each) / secs / 1e6 : 0;
  fmt::print("{:<6} {:>8} {:>10.1f} {:>10.0f} {:>10.1f} {:>10.1f} {:>10.1f} {:>7}\n", op, n, mbs,
             secs > 0 ? static_cast<double>(n) / secs : 0, Percentile(lat, 0.5), Percentile(lat, 0.99),
             Percentile(lat, 0.999), fail);
}

int RunBench(const KvOpts& o) {
  auto store = OpenStore(o, true);
  if (!store.ok()) return Fail("bench", store.status());
  KvStore& s = **store;
  const size_t n = o.bench_blocks, size = o.bench_size;
  // Random keys, so repeated runs on one store measure fresh writes, not overwrites.
  std::mt19937_64 rng(std::random_device{}());
  std::vector<BlockKey> keys(n);
  for (auto& k : keys) k = BlockKey{rng(), rng()};
  std::vector<uint8_t> payload(size);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());
  std::vector<std::vector<uint8_t>> bufs(std::min<size_t>(n, o.bench_depth), std::vector<uint8_t>(size));

  fmt::print("store {}  blocks {}  size {} B  depth {}\n", o.store, n, size, o.bench_depth);
  fmt::print("{:<6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}\n", "op", "blocks", "MB/s", "ops/s", "p50 us",
             "p99 us", "p99.9 us", "errors");
  size_t fail = 0;
  auto t0 = Clock::now();
  auto lat = ClosedLoop(n, o.bench_depth, "put", [&](size_t i, std::function<void(bool)> done) {
    std::span<const uint8_t> v(payload);
    s.Put(std::span(&keys[i], 1), std::span(&v, 1), ClassOf(o),
          [done](std::vector<Status> st) { done(st.size() == 1 && st[0].ok()); });
  }, &fail);
  PrintRow("put", n, size, std::chrono::duration<double>(Clock::now() - t0).count(), lat, fail);

  // Each in-flight get owns a buffer slot; completions come back out of order, so slots are
  // taken from a free list rather than by index.
  std::mutex slot_mu;
  std::vector<size_t> free_slots(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) free_slots[i] = i;
  t0 = Clock::now();
  lat = ClosedLoop(n, o.bench_depth, "get", [&](size_t i, std::function<void(bool)> done) {
    size_t slot;
    {
      std::lock_guard g(slot_mu);
      slot = free_slots.back();
      free_slots.pop_back();
    }
    MutableBuffer mb{bufs[slot].data(), bufs[slot].size()};
    s.Get(std::span(&keys[i], 1), std::span(&mb, 1), [&, done, slot, size](std::vector<Result<size_t>> r) {
      const bool ok = r.size() == 1 && r[0].ok() && *r[0] == size &&
                      std::equal(payload.begin(), payload.end(), bufs[slot].begin());
      {
        std::lock_guard g(slot_mu);
        free_slots.push_back(slot);
      }
      done(ok);
    });
  }, &fail);
  PrintRow("get", n, size, std::chrono::duration<double>(Clock::now() - t0).count(), lat, fail);

  // Match on one chain of the written keys (they are present, so the whole chain hits).
  const size_t chain = std::min(o.bench_chain, n);
  std::vector<double> mlat;
  size_t mfail = 0;
  const auto m0 = Clock::now();
  for (int r = 0; r < o.bench_match_reps; ++r) {
    const auto a = Clock::now();
    auto hit = s.MatchSync(std::span(keys.data(), chain));
    mlat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    if (!hit.ok() || *hit != chain) ++mfail;
  }
  fmt::print("{:<6} {:>8} {:>10} {:>10.0f} {:>10.1f} {:>10.1f} {:>10.1f} {:>7}   (chain of {} keys)\n", "match",
             o.bench_match_reps, "-",
             o.bench_match_reps / std::chrono::duration<double>(Clock::now() - m0).count(), Percentile(mlat, 0.5),
             Percentile(mlat, 0.99), Percentile(mlat, 0.999), mfail, chain);
  if (!o.bench_keep) (void)s.DeleteSync(keys);
  return fail == 0 && mfail == 0 ? 0 : kExitError;
}

void RegisterKv(CLI::App& app, RunFn* run) {
  auto o = std::make_shared<KvOpts>();
  auto* kv = app.add_subcommand("kv", "The persistent KV block store: put/get/match/rm/stat/gc/fsck/bench");
  kv->require_subcommand(1);
  // Store options may come before or after the subcommand: `ladle kv --store X get K` and
  // `ladle kv get --store X K` both work.
  kv->fallthrough();
  kv->add_option("--store", o->store, "fs:DIR or ec:K+M:DIR0,...,DIR{K+M-1} (default $LADLE_KV_STORE)");
  kv->add_option("--class", o->cls, "traffic class of written blocks (TTL)")
      ->capture_default_str()
      ->check(CLI::IsMember({"agent", "chatbot"}));
  kv->add_option("--io-depth", o->io_depth, "io_uring queue depth per target")->capture_default_str();
  kv->add_option("--write-threads", o->write_threads, "writer threads per target (a key's writes stay ordered)")
      ->capture_default_str();
  kv->add_flag("--o-direct", o->o_direct, "open value files with O_DIRECT");
  kv->add_option("--capacity", o->capacity, "per-target capacity in bytes (0 = the file system's size)");
  kv->add_option("--high-watermark", o->high_watermark, "GC starts above this fraction")->capture_default_str();
  kv->add_option("--low-watermark", o->low_watermark, "GC evicts down to this fraction")->capture_default_str();
  kv->add_option("--ttl-agent", o->ttl_agent_s, "agent TTL in seconds")->capture_default_str();
  kv->add_option("--ttl-chatbot", o->ttl_chatbot_s, "chatbot TTL in seconds")->capture_default_str();
  kv->add_option("--interval-ms", o->gc_interval_ms, "GC pass interval")->capture_default_str();
  kv->add_option("--hedge-ms", o->hedge_ms, "ec: ask the last domain too after this")->capture_default_str();
  // A FUSE-mounted distributed FS on a busy node can take longer than the default per I/O.
  kv->add_option("--domain-timeout-ms", o->domain_timeout_ms, "mark a domain down past this")->capture_default_str();
  kv->add_option("--down-for-ms", o->down_for_ms, "how long a down domain is skipped")->capture_default_str();

  auto set = [run, o](int (*fn)(const KvOpts&)) { *run = [o, fn] { return fn(*o); }; };
  auto* put = kv->add_subcommand("put", "write stdin (or --in FILE) as the block KEYHEX");
  put->add_option("key", o->keys, "KEYHEX")->required();
  put->add_option("-i,--in", o->in_path, "read the value from FILE instead of stdin");
  put->callback([set] { set(RunPut); });
  auto* get = kv->add_subcommand("get", "write the block KEYHEX to stdout (exit 2 on a miss)");
  get->add_option("key", o->keys, "KEYHEX")->required();
  get->add_option("-o,--out", o->out_path, "write to FILE instead of stdout");
  get->callback([set] { set(RunGet); });
  auto* match = kv->add_subcommand("match", "print how many leading keys of a chain are present");
  match->add_option("keys", o->keys, "KEYHEX... (`-` reads whitespace-separated keys from stdin)")->required();
  match->callback([set] { set(RunMatch); });
  auto* rm = kv->add_subcommand("rm", "delete blocks");
  rm->add_option("keys", o->keys, "KEYHEX... (`-` reads keys from stdin)")->required();
  rm->callback([set] { set(RunRm); });
  auto* stat = kv->add_subcommand("stat", "bytes used and capacity per target, counts, hits and misses");
  stat->add_flag("--json", o->json, "one JSON object");
  stat->callback([set] { set(RunStat); });
  auto* gc = kv->add_subcommand("gc", "one GC pass (TTL, then LRU to the low watermark), or --loop");
  gc->add_flag("--loop", o->loop, "run as the storage node's GC worker until SIGINT/SIGTERM");
  gc->callback([set] { set(RunGc); });
  auto* fsck = kv->add_subcommand("fsck", "verify every chunk and repair what can be repaired (exit 3: unrecoverable)");
  fsck->callback([set] { set(RunFsck); });
  auto* bench = kv->add_subcommand("bench", "Put/Get/Match loop: MB/s and latency percentiles");
  bench->add_option("--blocks", o->bench_blocks, "blocks to write and read")->capture_default_str();
  bench->add_option("--size", o->bench_size, "bytes per block")->capture_default_str();
  bench->add_option("--depth", o->bench_depth, "requests in flight")->capture_default_str();
  bench->add_option("--chain", o->bench_chain, "Match chain length (<= --blocks)")->capture_default_str();
  bench->add_option("--match-reps", o->bench_match_reps, "Match calls to time")->capture_default_str();
  bench->add_flag("--keep", o->bench_keep, "leave the written blocks in the store");
  bench->callback([set] { set(RunBench); });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterKv);

}  // namespace ladle::app
