// kvcache_bench: the KV block store against its peers, side by side in one run.
//   fs     112 KiB Put/Get at queue depths 1, 8, 32 on `fs:DIR` vs fio (io_uring) on the same
//          directory, same block size and depth: one big file, and one file per block.
//   ec     `ec:10+2` over 12 directories: write MB/s; read MB/s and p50/p99 with 0, 1, 2 (and 3)
//          domains down (a domain's directory moved away between runs).
//   codec  EC encode/decode MB/s of the store's coder (kvcache::EcCodec, internal to the library)
//          vs raw ISA-L ec_encode_data on the same buffers; then end to end, Put (encode) and Get
//          with 2 data domains down (decode) on tmpfs, where file I/O costs least.
//   layout EC layout: coding inside each block vs striping across 10 blocks (the store's), the
//          I/O each implies on the same 12 fs targets; writes, reads with 0 and 1 domain down.
//   match  Match latency for a 1,000-block chain (128K tokens) and a 7,813-block chain (1M tokens)
//          on a warm local store.
//   kvcache_bench [--quick] [--dir DIR] [--shm DIR] [--only fs,ec,codec,layout,match] [--direct] [--fsync]
// See bench/kvcache/README.md.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>

#include "bench_util.h"
#include "codec_ref.h"
#ifdef LADLE_BENCH_HAVE_EC_CODEC
#include "layout.h"
#endif
#include "ladle/core/logging.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::bench {
namespace {

namespace fs = std::filesystem;
using kvcache::BlockKey;
using kvcache::KvStore;
using kvcache::MutableBuffer;
using kvcache::TrafficClass;

constexpr size_t kBlock = 112 * 1024;

struct Opts {
  std::string dir = "/var/tmp/ladle-kvbench";
  std::string shm = "/dev/shm/ladle-kvbench";
  std::string fio = "fio";
  std::string only = "fs,ec,codec,layout,match";
  bool quick = false;
  bool direct = false;
  bool fsync = false;
  bool drop_caches = false;
  bool keep = false;
  unsigned write_threads = 4;
  size_t blocks = 0;  // 0: 128 quick, 2048 full
  int reps = 0;       // 0: 1 quick, 3 full
  std::vector<unsigned> depths{1, 8, 32};
};

std::string LoadAvg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

bool Wants(const Opts& o, const char* section) {
  std::stringstream ss(o.only);
  std::string s;
  while (std::getline(ss, s, ',')) if (s == section) return true;
  return false;
}

void DropCaches(const Opts& o) {
  if (!o.drop_caches) return;
  sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
}

Result<std::unique_ptr<KvStore>> OpenStore(const std::string& uri, unsigned depth, const Opts& o) {
  kvcache::StoreOptions so;
  so.io_depth = depth;
  so.write_threads = o.write_threads;
  so.o_direct = o.direct;
  // No GC worker: nothing here fills a disk, and a background pass would perturb the timings.
  so.gc_in_process = false;
  return KvStore::Open(uri, so);
}

std::vector<BlockKey> RandomKeys(size_t n, std::mt19937_64& rng) {
  std::vector<BlockKey> k(n);
  for (auto& key : k) key = BlockKey{rng(), rng()};
  return k;
}

// A handful of distinct payloads; key i stores payloads[i % size].
struct Payloads {
  std::vector<std::vector<uint8_t>> v;
  Payloads(size_t count, size_t size, std::mt19937_64& rng) : v(count, std::vector<uint8_t>(size)) {
    for (auto& p : v) for (auto& b : p) b = static_cast<uint8_t>(rng());
  }
  const std::vector<uint8_t>& For(size_t i) const { return v[i % v.size()]; }
};

// `depth` requests in flight, each carrying `batch` consecutive keys.
RunResult PutLoop(KvStore& s, const std::vector<BlockKey>& keys, const Payloads& p, unsigned depth, size_t batch) {
  const size_t n = keys.size(), reqs = (n + batch - 1) / batch;
  RunResult r = ClosedLoop(reqs, depth, 0, [&](size_t i, std::function<void(bool)> done) {
    const size_t b = i * batch, e = std::min(n, b + batch);
    std::vector<std::span<const uint8_t>> vals;
    for (size_t j = b; j < e; ++j) vals.emplace_back(p.For(j));
    s.Put(std::span(keys).subspan(b, e - b), vals, TrafficClass::kChatbot, [done](std::vector<Status> st) {
      bool ok = true;
      for (const auto& x : st) ok = ok && x.ok();
      done(ok);
    });
  });
  r.bytes = 0;
  for (size_t i = 0; i < n; ++i) r.bytes += p.For(i).size();
  return r;
}

struct GetCounts {
  size_t hits = 0, misses = 0, wrong = 0, errors = 0;
};

// As PutLoop, reading back. `verify` compares bytes (the fs-vs-fio rows skip it: fio does not
// compare either, and a memcmp per block would be charged to us alone).
RunResult GetLoop(KvStore& s, const std::vector<BlockKey>& keys, const Payloads& p, unsigned depth, size_t batch,
                  bool verify, GetCounts* counts) {
  const size_t n = keys.size(), reqs = (n + batch - 1) / batch;
  const size_t cap = p.v[0].size();
  std::mutex mu;
  std::vector<std::vector<uint8_t>> slots(static_cast<size_t>(depth) * batch, std::vector<uint8_t>(cap));
  std::vector<size_t> free_slots;
  for (size_t i = 0; i < depth; ++i) free_slots.push_back(i);
  GetCounts c;
  RunResult r = ClosedLoop(reqs, depth, 0, [&](size_t i, std::function<void(bool)> done) {
    const size_t b = i * batch, e = std::min(n, b + batch);
    size_t slot;
    {
      std::lock_guard g(mu);
      slot = free_slots.back();
      free_slots.pop_back();
    }
    std::vector<MutableBuffer> bufs;
    for (size_t j = b; j < e; ++j) bufs.push_back({slots[slot * batch + (j - b)].data(), cap});
    s.Get(std::span(keys).subspan(b, e - b), bufs, [&, done, slot, b, e](std::vector<Result<size_t>> res) {
      GetCounts local;
      for (size_t j = b; j < e && j - b < res.size(); ++j) {
        const auto& x = res[j - b];
        if (x.ok()) {
          const auto& want = p.For(j);
          const bool same = *x == want.size() &&
                            (!verify || std::memcmp(slots[slot * batch + (j - b)].data(), want.data(), want.size()) == 0);
          same ? ++local.hits : ++local.wrong;
        } else if (x.status().code() == StatusCode::kNotFound) {
          ++local.misses;
        } else {
          ++local.errors;
        }
      }
      {
        std::lock_guard g(mu);
        c.hits += local.hits, c.misses += local.misses, c.wrong += local.wrong, c.errors += local.errors;
        free_slots.push_back(slot);
      }
      // Last: once the final done() runs, GetLoop may return and destroy `mu` and the slots.
      done(local.wrong == 0 && local.errors == 0 && local.misses == 0);
    });
  });
  r.bytes = static_cast<uint64_t>(c.hits) * cap;
  if (counts) *counts = c;
  return r;
}

void Reset(const std::string& d) {
  std::error_code ec;
  fs::remove_all(d, ec);
  fs::create_directories(d, ec);
}

// Ratios the summary prints, in order.
std::vector<std::string> g_summary;

void Ratio(const std::string& what, double ours, double peer, double goal) {
  const double r = peer > 0 ? ours / peer : 0;
  g_summary.push_back(fmt::format("{:<44} {:>8.1f} / {:>8.1f} = {:>5.2f}   goal >= {:.2f}  {}", what, ours, peer, r,
                                  goal, r >= goal ? "met" : "NOT met"));
}

// --- fs vs fio ---------------------------------------------------------------------------------

int FsSection(const Opts& o, size_t n, std::mt19937_64& rng) {
  fmt::print("\n== fs vs fio: {} blocks of {} KiB, {} I/O{}, best of {}, dir {}, load {}\n", n, kBlock / 1024,
             o.direct ? "O_DIRECT" : "buffered", o.fsync ? ", fio fsync=1" : "", o.reps, o.dir, LoadAvg());
  fmt::print("{:<6} {:>3} | {:>9} {:>9} | {:>9} {:>9} | {:>6} {:>6} | {:>15} {:>15}\n", "op", "qd", "ours",
             "ours-bat", "fio-1file", "fio-nfile", "/fio1", "/fioN", "ours p50/p99 us", "fio1 p50/p99 us");
  Payloads p(8, kBlock, rng);
  int bad = 0;
  auto keep_best = [](RunResult& best, RunResult r) {
    if (best.lat_us.empty() || r.MBps() > best.MBps()) best = std::move(r);
  };
  for (unsigned d : o.depths) {
    const std::string ours_dir = o.dir + fmt::format("/fs-qd{}", d);
    RunResult w1, wb, r1, rb;
    std::map<std::string, FioResult> fio;
    // Ours and fio alternate, `reps` times each, and each side keeps its best run: on a shared
    // machine the best run is the one least disturbed by the neighbours.
    for (int rep = 0; rep < o.reps; ++rep) {
      Reset(ours_dir);
      auto store = OpenStore("fs:" + ours_dir, d, o);
      if (!store.ok()) {
        fmt::print(stderr, "open fs:{}: {}\n", ours_dir, store.status().ToString());
        return 1;
      }
      auto keys = RandomKeys(n, rng), keys_b = RandomKeys(n, rng);
      GetCounts c1, c2;
      RunResult a = PutLoop(**store, keys, p, d, 1);
      RunResult b = d > 1 ? PutLoop(**store, keys_b, p, 1, d) : a;
      bad += static_cast<int>(a.failures + b.failures);
      keep_best(w1, std::move(a));
      keep_best(wb, std::move(b));
      DropCaches(o);
      a = GetLoop(**store, keys, p, d, 1, false, &c1);
      b = d > 1 ? GetLoop(**store, keys_b, p, 1, d, false, &c2) : a;
      bad += static_cast<int>(c1.wrong + c1.errors + c1.misses + (d > 1 ? c2.wrong + c2.errors + c2.misses : 0));
      keep_best(r1, std::move(a));
      keep_best(rb, std::move(b));
      store->reset();

      for (bool per_block : {false, true}) {
        const std::string fio_dir = o.dir + fmt::format("/fio{}-qd{}", per_block ? "n" : "1", d);
        Reset(fio_dir);
        for (const char* rw : {"write", "read"}) {
          if (std::string(rw) == "read") DropCaches(o);
          FioJob j{o.fio, fio_dir, rw, kBlock, d, n, per_block, o.direct, o.fsync && std::string(rw) == "write",
                   o.drop_caches};
          auto r = RunFio(j);
          if (!r.ok()) {
            fmt::print(stderr, "fio: {}\n", r.status().ToString());
            return 1;
          }
          FioResult& slot = fio[fmt::format("{}{}", rw, per_block ? "N" : "1")];
          if (r->bw_bytes > slot.bw_bytes) slot = *r;
        }
        if (!o.keep) fs::remove_all(fio_dir);
      }
    }
    if (!o.keep) fs::remove_all(ours_dir);
    auto row = [&](const char* op, const RunResult& a, const RunResult& b, const FioResult& f1, const FioResult& fn) {
      const double best = std::max(a.MBps(), b.MBps());
      fmt::print("{:<6} {:>3} | {:>9.1f} {:>9.1f} | {:>9.1f} {:>9.1f} | {:>6.2f} {:>6.2f} | {:>7.0f}/{:<7.0f} {:>7.0f}/{:<7.0f}\n",
                 op, d, a.MBps(), b.MBps(), f1.bw_bytes / 1e6, fn.bw_bytes / 1e6, best / (f1.bw_bytes / 1e6),
                 best / (fn.bw_bytes / 1e6), a.P50(), a.P99(), f1.p50_us, f1.p99_us);
      Ratio(fmt::format("fs {} qd{} ours(best) / fio 1-file MB/s", op, d), best, f1.bw_bytes / 1e6, 0.80);
      Ratio(fmt::format("fs {} qd{} ours(best) / fio file-per-block MB/s", op, d), best, fn.bw_bytes / 1e6, 0.80);
    };
    row("write", w1, wb, fio["write1"], fio["writeN"]);
    row("read", r1, rb, fio["read1"], fio["readN"]);
  }
  fmt::print("(ours: {} single-key requests in flight; ours-bat: one request of qd keys at a time; MB/s = 1e6 B/s)\n",
             "qd");
  if (bad) fmt::print("!! {} fs requests failed or returned a miss/wrong length\n", bad);
  return bad ? 1 : 0;
}

// --- ec:10+2 with domains down -----------------------------------------------------------------

std::string EcUri(const std::string& base, int domains) {
  std::string uri = "ec:10+2:";
  for (int i = 0; i < domains; ++i) uri += fmt::format("{}{}/d{}", i ? "," : "", base, i);
  return uri;
}

// Writes n blocks, then reads them back with 0..3 domains moved away. Returns failures.
int EcRun(const Opts& o, const std::string& base, size_t n, std::mt19937_64& rng, const char* label,
          RunResult* put_out, RunResult* get2_out) {
  Reset(base);
  for (int i = 0; i < 12; ++i) fs::create_directories(fmt::format("{}/d{}", base, i));
  const std::string uri = EcUri(base, 12);
  Payloads p(8, kBlock, rng);
  auto keys = RandomKeys(n, rng);
  int bad = 0;
  auto store = OpenStore(uri, 32, o);
  if (!store.ok()) {
    fmt::print(stderr, "open {}: {}\n", uri, store.status().ToString());
    return 1;
  }
  // Written as chains of 10 (a prefill's blocks), so each Put is one whole stripe; 4 stripes
  // (40 blocks) in flight.
  RunResult w = PutLoop(**store, keys, p, 4, 10);
  fmt::print("{:<5} {:<6} {:>5} | write {:>8.1f} MB/s, 4 stripes in flight, p50/p99 {:.0f}/{:.0f} us{}\n", label, "0 down", "",
             w.MBps(), w.P50(), w.P99(), w.failures ? fmt::format("  ({} failed)", w.failures) : "");
  bad += static_cast<int>(w.failures);
  if (put_out) *put_out = w;
  const size_t lat_n = std::min<size_t>(n, o.quick ? 128 : 512);
  std::vector<BlockKey> lat_keys(keys.begin(), keys.begin() + lat_n);
  for (int down = 0; down <= 3; ++down) {
    std::string how = "moved away";
    if (down > 0) {
      store->reset();
      // Each state starts from the written state: reads with domains down repair the lost
      // chunks in the background, so a domain taken away in the previous state may be whole
      // again. Restore every domain, then move away domains 0..down-1 together (with chunk i
      // on domain i these hold data chunks, so every read decodes).
      std::error_code ec;
      for (int i = 0; i < 12; ++i) {
        const std::string d = fmt::format("{}/d{}", base, i);
        if (fs::exists(d + ".down")) {
          fs::remove_all(d, ec);
          fs::rename(d + ".down", d, ec);
        }
      }
      for (int i = 0; i < down; ++i) {
        const std::string d = fmt::format("{}/d{}", base, i);
        fs::rename(d, d + ".down", ec);
      }
      store = OpenStore(uri, 32, o);
      if (!store.ok()) {
        // A store that refuses a missing directory gets empty ones: the domains' data is gone either way.
        for (int i = 0; i < down; ++i) fs::create_directories(fmt::format("{}/d{}", base, i));
        how = "emptied (Open refused the missing dir: " + store.status().ToString() + ")";
        store = OpenStore(uri, 32, o);
        if (!store.ok()) {
          fmt::print(stderr, "reopen {} with {} down: {}\n", uri, down, store.status().ToString());
          return bad + 1;
        }
      }
    }
    DropCaches(o);
    GetCounts cl, ct;
    RunResult rl = GetLoop(**store, lat_keys, p, 1, 1, true, &cl);
    RunResult rt = GetLoop(**store, keys, p, 32, 1, true, &ct);
    // With 3 down, the blocks whose own chunk is on a lost domain cannot be rebuilt (misses); the
    // others are still one read of their own chunk and must come back exact (verified).
    const bool want_hits = down <= 2;
    const size_t wrong = cl.wrong + ct.wrong + cl.errors + ct.errors + (want_hits ? cl.misses + ct.misses : 0);
    bad += static_cast<int>(wrong);
    fmt::print("{:<5} {:<6} {:>5} | read  {:>8.1f} MB/s at qd32 | qd1 p50/p99 {:>6.0f}/{:<6.0f} us | hits {} misses {} "
               "wrong {} errors {}{}\n",
               label, fmt::format("{} down", down), "", rt.MBps(), rl.P50(), rl.P99(), ct.hits, ct.misses, ct.wrong,
               ct.errors, down ? "  [" + how + "]" : "");
    if (down == 2 && get2_out) *get2_out = rt;
    if (down == 3 && ct.wrong == 0 && ct.errors == 0) {
      fmt::print("{:<5} {:<6} {:>5} | 3 down: {} clean misses, {} exact (a block whose own chunk survives may still read)\n",
                 label, "", "", ct.misses, ct.hits);
    }
  }
  store->reset();
  if (!o.keep) fs::remove_all(base);
  return bad;
}

int EcSection(const Opts& o, size_t n, std::mt19937_64& rng) {
  fmt::print("\n== ec:10+2 over 12 directories under {}: {} blocks of {} KiB, load {}\n", o.dir + "/ec", n,
             kBlock / 1024, LoadAvg());
  const int bad = EcRun(o, o.dir + "/ec", n, rng, "disk", nullptr, nullptr);
  if (bad) fmt::print("!! {} ec reads or writes wrong (hits expected with <= 2 down, misses with 3)\n", bad);
  return bad ? 1 : 0;
}

// --- codec vs raw ISA-L ------------------------------------------------------------------------

int CodecSection(const Opts& o, size_t n, std::mt19937_64& rng) {
  fmt::print("\n== EC 10+2 coding: raw ISA-L ec_encode_data vs the store on tmpfs ({}), load {}\n", o.shm, LoadAvg());
  Payloads blocks(o.quick ? 32 : 128, kBlock, rng);
  // Interleaved rounds, best of each: on a loaded machine a single window measures the
  // neighbours as much as the coder; the best round of each side is the least disturbed one.
  const int rounds = o.quick ? 3 : 7;
  const double window = o.quick ? 0.1 : 0.3;
  CodecFigures raw;
  raw.decode_exact = true;
  bool exact = true;
  auto best = [](CodecFigures& b, const CodecFigures& f) {
    b.encode_MBps = std::max(b.encode_MBps, f.encode_MBps);
    b.decode_MBps = std::max(b.decode_MBps, f.decode_MBps);
    b.chunk_len = f.chunk_len;
  };
#ifdef LADLE_BENCH_HAVE_EC_CODEC
  CodecFigures lib;
#endif
  for (int r = 0; r < rounds; ++r) {
    const CodecFigures f = MeasureRawIsal(blocks.v, 10, 2, window);
    exact = exact && f.decode_exact;
    best(raw, f);
#ifdef LADLE_BENCH_HAVE_EC_CODEC
    const CodecFigures g = MeasureStoreCodec(blocks.v, 10, 2, f.chunk_len, window);
    exact = exact && g.decode_exact;
    best(lib, g);
#endif
  }
  fmt::print("raw ISA-L   encode {:>8.1f} MB/s   decode (2 data chunks lost) {:>8.1f} MB/s   chunk {} B, best of {}\n",
             raw.encode_MBps, raw.decode_MBps, raw.chunk_len, rounds);
  const double raw_enc = raw.encode_MBps, raw_dec = raw.decode_MBps;
#ifdef LADLE_BENCH_HAVE_EC_CODEC
  fmt::print("store codec encode {:>8.1f} MB/s   decode (2 data chunks lost) {:>8.1f} MB/s   kvcache::EcCodec, best of {}\n",
             lib.encode_MBps, lib.decode_MBps, rounds);
  Ratio("ec encode: EcCodec / raw ISA-L MB/s", lib.encode_MBps, raw_enc, 0.90);
  Ratio("ec decode: EcCodec / raw ISA-L MB/s", lib.decode_MBps, raw_dec, 0.90);
#endif
  fmt::print("decode {}\n", exact ? "exact in every round" : "WRONG in some round");
  // End to end: Put (split, encode, 12 chunk headers + CRC32C, 12 tmpfs writes) and Get with 2
  // data domains down (11-way read, decode). Not a coding ratio; it says what the rest costs.
  RunResult put, get2;
  const int bad = EcRun(o, o.shm + "/ec", n, rng, "shm", &put, &get2);
  fmt::print("store e2e   Put qd32 {:>8.1f} MB/s ({:.2f} of raw encode)   Get qd32 2 down {:>8.1f} MB/s ({:.2f} of raw "
             "decode)\n",
             put.MBps(), raw_enc > 0 ? put.MBps() / raw_enc : 0, get2.MBps(), raw_dec > 0 ? get2.MBps() / raw_dec : 0);
  return bad || !exact ? 1 : 0;
}

// --- EC layout: in-block vs striped ------------------------------------------------------------

int LayoutSection(const Opts& o, size_t n) {
#ifdef LADLE_BENCH_HAVE_EC_CODEC
  const unsigned depth = 32;
  fmt::print("\n== EC 10+2 layout: coding inside each 112 KiB block vs striping across 10 blocks (the store), "
             "{} blocks, 12 dirs under {}, load {}\n", n, o.dir, LoadAvg());
  auto f = MeasureLayouts(o.dir + "/layout", n, depth);
  if (!f.ok()) {
    fmt::print(stderr, "layout: {}\n", f.status().ToString());
    return 1;
  }
  fmt::print("{:<34} | {:>10} | {:>10} | {:>8} | {:>17} | {:>17}\n", "", "in-block", "striped", "str/inb",
             "in-block p50/p99", "striped p50/p99");
  auto row = [&](const std::string& what, const RunResult& a, const RunResult& b) {
    fmt::print("{:<34} | {:>10.1f} | {:>10.1f} | {:>8.2f} | {:>8.0f}/{:<8.0f} | {:>8.0f}/{:<8.0f}{}\n", what, a.MBps(),
               b.MBps(), a.MBps() > 0 ? b.MBps() / a.MBps() : 0, a.P50(), a.P99(), b.P50(), b.P99(),
               a.failures + b.failures ? fmt::format("  FAILED {}+{}", a.failures, b.failures) : "");
    g_summary.push_back(fmt::format("{:<44} {:>8.1f} / {:>8.1f} = {:>5.2f}   (layout choice, no goal)",
                                    "layout " + what + " striped / in-block MB/s", b.MBps(), a.MBps(),
                                    a.MBps() > 0 ? b.MBps() / a.MBps() : 0));
  };
  row(fmt::format("write (qd {} blocks / {} stripes)", f->depth, f->stripe_depth), f->inblock_write, f->striped_write);
  row(fmt::format("read qd {}, 0 down", f->depth), f->inblock_read, f->striped_read);
  row(fmt::format("read qd {}, data domain 0 down", f->depth), f->inblock_read_down, f->striped_read_down);
  row("read qd 1, 0 down", f->inblock_read_qd1, f->striped_read_qd1);
  row("read qd 1, data domain 0 down", f->inblock_read_down_qd1, f->striped_read_down_qd1);
  const size_t bad = f->inblock_write.failures + f->striped_write.failures + f->inblock_read.failures +
                     f->striped_read.failures + f->inblock_read_down.failures + f->striped_read_down.failures;
  return bad ? 1 : 0;
#else
  (void)o;
  (void)n;
  fmt::print("\n== EC layout: skipped (built without the library's internal headers)\n");
  return 0;
#endif
}

// --- Match ---------------------------------------------------------------------------------------

int MatchOne(KvStore& s, const std::vector<BlockKey>& chain, size_t len, size_t want, int reps, const char* what,
             const char* store_label) {
  std::span<const BlockKey> c(chain.data(), len);
  for (int i = 0; i < 5; ++i) (void)s.MatchSync(c);  // warm
  std::vector<double> lat;
  int wrong = 0;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    auto hit = s.MatchSync(c);
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!hit.ok() || *hit != want) ++wrong;
  }
  const double p50 = Percentile(lat, 0.5), p99 = Percentile(lat, 0.99);
  fmt::print("{:<5} {:<28} {:>6} keys  hit {:>6}  p50 {:>9.1f} us  p99 {:>9.1f} us  ({} reps{})\n", store_label, what,
             len, want, p50, p99, reps, wrong ? fmt::format(", {} WRONG counts", wrong) : "");
  if (len == 1000 && want == 1000) {
    g_summary.push_back(fmt::format("{:<44} p50 {:>8.1f} us              goal < 1000 us  {}",
                                    fmt::format("match 1,000-block chain ({})", store_label), p50,
                                    p50 < 1000 ? "met" : "NOT met"));
  }
  return wrong;
}

int MatchSection(const Opts& o, std::mt19937_64& rng) {
  // A real chain: ChainKeys over a 1M-token prompt (7,813 full blocks); its first 1,000 keys are
  // the 128K-token prompt. Values are 1 KiB: Match reads metadata only, so value size only
  // changes how long the set-up takes.
  const size_t kLong = 7813, kShort = 1000;
  std::vector<uint32_t> tokens(kLong * kvcache::kBlockTokens + 17);
  for (auto& t : tokens) t = static_cast<uint32_t>(rng() % 129280);
  const kvcache::ExtraKey extras[] = {{kvcache::ExtraTag::kModel, "bench-model"}};
  auto chain = kvcache::ChainKeys(tokens, extras);
  fmt::print("\n== Match on a warm local store ({} chain keys, 1 KiB values, fs on {}), load {}\n", chain.size(),
             o.quick ? "tmpfs" : "disk", LoadAvg());
  Payloads p(4, 1024, rng);
  int bad = 0;
  const int reps_short = o.quick ? 200 : 1000, reps_long = o.quick ? 30 : 200;
  struct Target {
    const char* label;
    std::string base;
    bool ec;
  };
  // --quick keeps the fs store on tmpfs too: writing 7,813 blocks to a loaded disk is most of
  // the section's time, and Match reads only the in-memory catalog either way.
  const std::string fs_base = (o.quick ? o.shm : o.dir) + "/match";
  for (const Target& t : {Target{"fs", fs_base, false}, Target{"ec", o.shm + "/match-ec", true}}) {
    Reset(t.base);
    if (t.ec) for (int i = 0; i < 12; ++i) fs::create_directories(fmt::format("{}/d{}", t.base, i));
    auto store = OpenStore(t.ec ? EcUri(t.base, 12) : "fs:" + t.base, 32, o);
    if (!store.ok()) {
      fmt::print(stderr, "open {}: {}\n", t.base, store.status().ToString());
      return bad + 1;
    }
    // The ec store gets the 1,000-block chain only (12 chunk files a block; --quick stays short).
    const size_t len = t.ec ? kShort : kLong;
    std::vector<BlockKey> keys(chain.begin(), chain.begin() + len);
    // Set-up only (not timed): batches of 64 keys, 4 in flight, the store's cheapest write pattern.
    RunResult w = PutLoop(**store, keys, p, 4, 64);
    bad += static_cast<int>(w.failures);
    bad += MatchOne(**store, chain, kShort, kShort, reps_short, "1,000-block chain, all hit", t.label);
    if (!t.ec) bad += MatchOne(**store, chain, kLong, kLong, reps_long, "7,813-block chain, all hit", t.label);
    // A hole in the middle: Match must stop there.
    std::vector<BlockKey> hole{chain[kShort / 2]};
    (void)(*store)->DeleteSync(hole);
    // ec: the block goes with its stripe (10 blocks of its Put of 64, from the Put's start).
    const size_t put0 = kShort / 2 / 64 * 64, at = t.ec ? put0 + (kShort / 2 - put0) / 10 * 10 : kShort / 2;
    bad += MatchOne(**store, chain, kShort, at, reps_short, "1,000-block chain, hole at 500", t.label);
    store->reset();
    if (!o.keep) fs::remove_all(t.base);
  }
  return bad;
}

}  // namespace
}  // namespace ladle::bench

int main(int argc, char** argv) {
  using namespace ladle::bench;
  Opts o;
  CLI::App app("kvcache_bench: the KV block store vs fio and raw ISA-L, ratios in one run");
  app.add_flag("--quick", o.quick, "small sizes (< 30 s), for CI");
  app.add_option("--dir", o.dir, "disk directory for fs, ec and match (removed and recreated)")->capture_default_str();
  app.add_option("--shm", o.shm, "tmpfs directory for the coding figures")->capture_default_str();
  app.add_option("--fio", o.fio, "fio binary")->capture_default_str();
  app.add_option("--only", o.only, "comma-separated sections: fs, ec, codec, layout, match")->capture_default_str();
  app.add_option("--blocks", o.blocks, "112 KiB blocks per run (default 128 quick, 2048 full)");
  app.add_option("--reps", o.reps, "fs runs per side and depth, best kept (default 1 quick, 3 full)");
  app.add_option("--depths", o.depths, "queue depths for fs vs fio")->capture_default_str();
  app.add_flag("--direct", o.direct, "O_DIRECT for the store and fio (default buffered for both)");
  app.add_flag("--fsync", o.fsync, "fio writes with fsync=1 (for a store that syncs each block)");
  app.add_flag("--drop-caches", o.drop_caches, "drop the page cache before each read run (machine-wide!)");
  app.add_flag("--keep", o.keep, "keep the directories written");
  app.add_option("--write-threads", o.write_threads, "the store's writer threads per target")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // Repairs, domain-down notices and (with 3 domains down, as intended) unrecoverable blocks are
  // logged per block; they would bury the table.
  ladle::log::Init(ladle::log::Format::kText, spdlog::level::err);
  const size_t n = o.blocks ? o.blocks : (o.quick ? 128 : 2048);
  if (o.reps <= 0) o.reps = o.quick ? 1 : 3;
  std::mt19937_64 rng(20261202);
  const auto t0 = Clock::now();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  fmt::print("kvcache_bench {} on {} ({} CPUs), load {}\n", o.quick ? "--quick" : "(full)", host,
             sysconf(_SC_NPROCESSORS_ONLN), LoadAvg());
  int rc = 0;
  // The ec sections write 12 chunk files a block: --quick gives them a quarter of the blocks.
  const size_t n_ec = o.blocks ? o.blocks : (o.quick ? 32 : 2048);
  std::string took;
  auto timed = [&](const char* name, auto fn) {
    const auto s0 = Clock::now();
    rc |= fn();
    took += fmt::format(" {} {:.1f} s", name, Seconds(Clock::now() - s0));
  };
  if (Wants(o, "fs")) timed("fs", [&] { return FsSection(o, n, rng); });
  if (Wants(o, "ec")) timed("ec", [&] { return EcSection(o, n_ec, rng); });
  if (Wants(o, "codec")) timed("codec", [&] { return CodecSection(o, n_ec, rng); });
  if (Wants(o, "layout")) timed("layout", [&] { return LayoutSection(o, o.blocks ? o.blocks : (o.quick ? 100 : 1000)); });
  if (Wants(o, "match")) timed("match", [&] { return MatchSection(o, rng) ? 1 : 0; });
  fmt::print("\n== ratios (ours / peer), load {}, {:.1f} s in all ({})\n", LoadAvg(), Seconds(Clock::now() - t0),
             took.empty() ? "" : took.substr(1));
  for (const auto& s : g_summary) fmt::print("{}\n", s);
  if (rc) fmt::print("!! some requests failed or returned wrong data (see above)\n");
  return rc;
}
