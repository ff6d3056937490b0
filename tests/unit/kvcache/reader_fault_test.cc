// The fs target's io_uring reader thread failing (docs/kvcache.md, "Invariants": "a reader that
// throws is restarted (3 times), then the target reports healthy = false and fails its reads").
// The failure is injected through the fault target: FaultControl::reader_throws makes the wrapped
// fs target's reader thread throw once per read it queues to its ring. Every wait has a deadline;
// a read is answered with its exact bytes or an error, never wrong bytes, never not at all.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "fault_target.h"
#include "target.h"
#include "test_util.h"

namespace kvtest {
namespace {

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

Ms Since(Clock::time_point t) { return std::chrono::duration_cast<Ms>(Clock::now() - t); }

std::string UniqueName(const char* what) {
  static std::atomic<int> n{0};
  return std::string("reader-") + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

// Keeps the log lines written while it lives (and still prints them where they went before).
class LogCapture {
 public:
  LogCapture() : saved_(spdlog::default_logger()), ring_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096)) {
    std::vector<spdlog::sink_ptr> sinks = saved_->sinks();
    sinks.push_back(ring_);
    auto logger = std::make_shared<spdlog::logger>("kvtest-capture", sinks.begin(), sinks.end());
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(saved_); }
  size_t Count(const std::string& needle) const {
    size_t n = 0;
    for (const std::string& line : ring_->last_formatted()) n += line.find(needle) != std::string::npos;
    return n;
  }

 private:
  std::shared_ptr<spdlog::logger> saved_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring_;
};

// Answers of `n` asynchronous reads, shared with their callbacks (a late answer finds it alive).
struct Answers {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<Result<Bytes>>> got;
  size_t answered = 0;
  explicit Answers(size_t n) : got(n) {}
  static ReadDone Slot(const std::shared_ptr<Answers>& a, size_t i) {
    return [a, i](Result<Bytes> r) {
      std::lock_guard lock(a->mu);
      a->got[i].emplace(std::move(r));
      ++a->answered;
      a->cv.notify_all();
    };
  }
  bool WaitAll(Ms deadline) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, deadline, [&] { return answered == got.size(); });
  }
  size_t Answered() {
    std::lock_guard lock(mu);
    return answered;
  }
};

// One fs target behind `fault:NAME:DIR`, holding chunk files of known bytes.
struct FaultyTarget {
  TempDir t;
  std::string name;
  std::shared_ptr<FaultControl> c;
  std::unique_ptr<Target> target;
  std::vector<BlockKey> keys;
  std::vector<Bytes> bytes;

  explicit FaultyTarget(const char* what, size_t files) : name(UniqueName(what)), c(FaultControl::Named(name)) {
    TargetOptions o;
    auto r = OpenTarget("fault:" + name + ":" + t.Sub("fs"), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return;
    target = std::move(r).value();
    for (size_t i = 0; i < files; ++i) {
      BlockKey key = testing_values::KeyFor(700000 + i);
      Bytes b = testing_values::ValueFor(key, 3000 + 1009 * i);
      EXPECT_TRUE(target->WriteSync(ChunkWrite{key, std::make_shared<const Bytes>(b), IndexMeta{}}).ok());
      keys.push_back(key);
      bytes.push_back(std::move(b));
    }
  }
  ~FaultyTarget() {
    target.reset();  // answers whatever it still holds
    c->Reset();
  }

  // Reads file i through the reader thread; the answer within `deadline`, or nullopt (a hang).
  std::optional<Result<Bytes>> Read(size_t i, Ms deadline = Ms(2000)) {
    auto a = std::make_shared<Answers>(1);
    target->ReadAsync(keys[i], Answers::Slot(a, 0));
    if (!a->WaitAll(deadline)) return std::nullopt;
    std::lock_guard lock(a->mu);
    return std::move(a->got[0]);
  }
};

// One throw: the read the reader held is answered with an error (not lost, not wrong bytes), the
// failure is logged, the reader is restarted, and every later read gets its exact bytes.
TEST(KvReaderFault, OneThrowRestartsTheReaderAndLaterReadsSucceed) {
  LogCapture log;
  FaultyTarget f("one", 4);
  ASSERT_TRUE(f.target);
  auto first = f.Read(0);
  ASSERT_TRUE(first.has_value() && first->ok()) << "healthy read";
  EXPECT_EQ(**first, f.bytes[0]);

  f.c->reader_throws = 1;
  auto start = Clock::now();
  auto failed = f.Read(1);
  ASSERT_TRUE(failed.has_value()) << "the read held by the failing reader was never answered";
  EXPECT_LT(Since(start), Ms(500));
  ASSERT_FALSE(failed->ok()) << "the injected failure did not fire";
  EXPECT_EQ(failed->status().code(), StatusCode::kIoError) << failed->status().ToString();
  EXPECT_EQ(f.c->reader_throws.load(), 0);

  // Restarted: reads go through the reader thread again, one at a time and 32 at once.
  for (size_t i = 0; i < f.keys.size(); ++i) {
    auto r = f.Read(i);
    ASSERT_TRUE(r.has_value()) << "read " << i << " after the restart hung";
    ASSERT_TRUE(r->ok()) << i << ": " << r->status().ToString();
    EXPECT_EQ(**r, f.bytes[i]) << i;
  }
  auto many = std::make_shared<Answers>(32);
  for (size_t i = 0; i < 32; ++i) f.target->ReadAsync(f.keys[i % f.keys.size()], Answers::Slot(many, i));
  ASSERT_TRUE(many->WaitAll(Ms(2000))) << many->Answered() << " of 32 answered";
  for (size_t i = 0; i < 32; ++i) {
    ASSERT_TRUE(many->got[i]->ok()) << i << ": " << many->got[i]->status().ToString();
    EXPECT_EQ(**many->got[i], f.bytes[i % f.keys.size()]) << i;
  }
  EXPECT_TRUE(f.target->healthy());
  EXPECT_EQ(log.Count("kvcache.reader_failed"), 1u);
  EXPECT_EQ(log.Count("kvcache.target_unhealthy"), 0u);
}

// Throws until the reader gives up: every read is answered (an error, never bytes that are not
// the file's), the target turns unhealthy, and from then on a read is refused at once.
TEST(KvReaderFault, PastItsRestartsTheTargetIsUnhealthyAndRefusesReadsAtOnce) {
  LogCapture log;
  FaultyTarget f("budget", 2);
  ASSERT_TRUE(f.target);
  f.c->reader_throws = 100;
  int throws_seen = 0;
  for (int attempt = 0; attempt < 10 && f.target->healthy(); ++attempt) {
    auto r = f.Read(attempt % 2);
    ASSERT_TRUE(r.has_value()) << "read " << attempt << " hung";
    if (r->ok()) {
      ADD_FAILURE() << "read " << attempt << " succeeded while every reader pass throws";
      EXPECT_EQ(**r, f.bytes[attempt % 2]);
      continue;
    }
    if (r->status().code() == StatusCode::kUnavailable) break;  // unhealthy already
    EXPECT_EQ(r->status().code(), StatusCode::kIoError) << r->status().ToString();
    ++throws_seen;
  }
  ASSERT_TRUE(WaitFor([&] { return !f.target->healthy(); }, Ms(2000))) << "never unhealthy";
  int throws = 100 - f.c->reader_throws.load();
  EXPECT_EQ(throws, throws_seen);
  EXPECT_GE(throws, 2) << "not restarted at all";
  EXPECT_LE(throws, 10);
  EXPECT_EQ(log.Count("kvcache.reader_failed"), static_cast<size_t>(throws));
  EXPECT_EQ(log.Count("kvcache.target_unhealthy"), 1u);
  std::printf("reader: unhealthy after %d throws (%d restarts)\n", throws, throws - 1);

  // Unhealthy: reads are refused on the caller's thread, before ReadAsync returns.
  auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    auto a = std::make_shared<Answers>(1);
    f.target->ReadAsync(f.keys[i % 2], Answers::Slot(a, 0));
    ASSERT_EQ(a->Answered(), 1u) << "read " << i << " of an unhealthy target was queued";
    ASSERT_FALSE(a->got[0]->ok());
    EXPECT_EQ(a->got[0]->status().code(), StatusCode::kUnavailable) << a->got[0]->status().ToString();
  }
  EXPECT_LT(Since(start), Ms(100));
  EXPECT_EQ(f.c->reader_throws.load(), 100 - throws) << "the reader ran again after it gave up";
}

// docs/kvcache.md: "a reader that throws is restarted (3 times), then the target reports
// healthy = false". Counts the restarts: a target must survive 3 throws and fail on the 4th.
TEST(KvReaderFault, RestartBudgetIsTheDocumentedThree) {
  FaultyTarget f("docs", 1);
  ASSERT_TRUE(f.target);
  f.c->reader_throws = 100;
  for (int attempt = 0; attempt < 10; ++attempt) {
    auto r = f.Read(0);
    ASSERT_TRUE(r.has_value()) << "read " << attempt << " hung";
    if (r->ok() || r->status().code() == StatusCode::kUnavailable) break;
  }
  ASSERT_TRUE(WaitFor([&] { return !f.target->healthy(); }, Ms(2000)));
  int throws = 100 - f.c->reader_throws.load();
  EXPECT_EQ(throws - 1, 3) << "the reader was restarted " << (throws - 1) << " times, not 3 (unhealthy on throw "
                           << throws << "; fs_target.cc: `restarts + 1 >= kMaxRestarts` with kMaxRestarts = 3)";
}

// The reader throws while it holds a batch of reads taken from its queue at once: every read of
// the batch must still be answered (an error or its exact bytes), and the reader must go on.
TEST(KvReaderFault, ThrowWithABatchInHandAnswersEveryReadOfIt) {
  FaultyTarget f("batch", 9);
  ASSERT_TRUE(f.target);
  // Hold the reader thread inside a completion, so the next 8 reads queue up behind it. The state
  // is shared with the callback: it may outlive this frame by its own deadline.
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool inside = false, release = false;
    std::optional<Result<Bytes>> result;
  };
  auto gate = std::make_shared<Gate>();
  f.target->ReadAsync(f.keys[0], [gate](Result<Bytes> r) {
    std::unique_lock lock(gate->mu);
    gate->result.emplace(std::move(r));
    gate->inside = true;
    gate->cv.notify_all();
    gate->cv.wait_for(lock, Ms(3000), [&] { return gate->release; });
  });
  {
    std::unique_lock lock(gate->mu);
    ASSERT_TRUE(gate->cv.wait_for(lock, Ms(2000), [&] { return gate->inside; })) << "the first read never completed";
  }
  auto batch = std::make_shared<Answers>(8);
  for (size_t i = 0; i < 8; ++i) f.target->ReadAsync(f.keys[1 + i], Answers::Slot(batch, i));
  f.c->reader_throws = 1;  // the reader takes all 8 in one pass, then throws after queuing the first
  {
    std::lock_guard lock(gate->mu);
    gate->release = true;
    gate->cv.notify_all();
  }
  bool all = batch->WaitAll(Ms(1000));
  EXPECT_TRUE(all) << "only " << batch->Answered()
                   << " of 8 reads taken in one pass were answered after the reader threw; the rest are lost "
                      "(their callbacks never run: a store Get on them waits for its 120 s backstop)";
  EXPECT_EQ(f.c->reader_throws.load(), 0);
  {
    std::lock_guard lock(batch->mu);
    for (size_t i = 0; i < 8; ++i) {
      if (batch->got[i] && batch->got[i]->ok()) {
        EXPECT_EQ(**batch->got[i], f.bytes[1 + i]) << i;
      }
    }
  }
  // The reader was restarted: the same files read back exact.
  for (size_t i = 1; i < 9; ++i) {
    auto r = f.Read(i);
    ASSERT_TRUE(r.has_value()) << "read " << i << " after the restart hung";
    ASSERT_TRUE(r->ok()) << r->status().ToString();
    EXPECT_EQ(**r, f.bytes[i]);
  }
  std::lock_guard lock(gate->mu);
  ASSERT_TRUE(gate->result && gate->result->ok());
  EXPECT_EQ(**gate->result, f.bytes[0]);
}

// Through the store (fs:fault:...): each reader failure is a clean miss (the domain is marked
// down for down_for), and once the reader gives up, Stat() says unhealthy, Get and Match miss at
// once and Put fails at once. Nothing was lost: reopened, every block reads back exact.
TEST(KvReaderFault, StoreReportsUnhealthyAndMissesCleanly) {
  TempDir t;
  std::string name = UniqueName("store");
  auto c = FaultControl::Named(name);
  std::string uri = "fs:fault:" + name + ":" + t.Sub("fs");
  StoreOptions o;
  o.gc_in_process = false;
  o.domain_timeout = Ms(500);
  o.down_for = Ms(50);
  std::vector<BlockKey> keys;
  std::vector<Bytes> vals;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(testing_values::KeyFor(710000 + i));
    vals.push_back(testing_values::ValueFor(keys.back(), 4000 + 3000 * i));
  }
  {
    auto store = KvStore::Open(uri, o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    KvStore& s = **store;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(PutOne(s, keys[i], vals[i]).ok());
    Bytes out;
    ASSERT_TRUE(GetOne(s, keys[0], &out).ok());
    EXPECT_EQ(out, vals[0]);
    ASSERT_TRUE(s.Stat().healthy);

    c->reader_throws = 100;
    int misses = 0;
    for (int attempt = 0; attempt < 10 && s.Stat().healthy; ++attempt) {
      // Marked down by the last failure for down_for: wait until it is asked again.
      ASSERT_TRUE(WaitFor([&] { auto st = s.Stat(); return !st.targets[0].down || !st.healthy; }, Ms(2000)));
      auto start = Clock::now();
      auto r = GetOne(s, keys[attempt % 4], &out);
      EXPECT_LT(Since(start), Ms(1000)) << attempt;
      if (r.ok()) {
        ADD_FAILURE() << "get " << attempt << " hit while every reader pass throws";
        EXPECT_EQ(out, vals[attempt % 4]);
      } else {
        EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
        ++misses;
      }
    }
    ASSERT_TRUE(WaitFor([&] { return !s.Stat().healthy; }, Ms(2000))) << "the store never reported unhealthy";
    EXPECT_GE(misses, 2);
    StoreStat st = s.Stat();
    EXPECT_FALSE(st.healthy);
    EXPECT_TRUE(st.targets[0].down) << "an unhealthy target is skipped like a down one";
    uint64_t throws_before = 100 - c->reader_throws.load();

    // Unhealthy: no waiting, no wrong bytes.
    auto start = Clock::now();
    std::vector<Bytes> outs(4, Bytes(64 * 1024));
    std::vector<MutableBuffer> bufs;
    for (auto& b : outs) bufs.push_back({b.data(), b.size()});
    for (const auto& r : s.GetSync(keys, bufs)) EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
    EXPECT_EQ(*s.MatchSync(keys), 0u);
    BlockKey extra = testing_values::KeyFor(719999);
    EXPECT_FALSE(PutOne(s, extra, testing_values::ValueFor(extra, 100)).ok());
    EXPECT_LT(Since(start), Ms(200));
    EXPECT_FALSE(s.Stat().healthy) << "healthy again without a reopen";
    EXPECT_EQ(100 - c->reader_throws.load(), throws_before) << "the reader ran after it gave up";
  }
  c->Reset();
  auto store = KvStore::Open(uri, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->Stat().healthy);
  for (int i = 0; i < 4; ++i) {
    Bytes out;
    auto r = GetOne(**store, keys[i], &out);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(out, vals[i]) << i;
  }
}

}  // namespace
}  // namespace kvtest
