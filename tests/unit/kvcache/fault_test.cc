// The fault-injection target on fs and ec: slow, dead (hangs), corrupt chunks, ENOSPC, EIO.
// Every call finishes within its deadline, faults surface as misses or Status errors, never as
// wrong bytes, and ec absorbs one faulty domain.
#include <gtest/gtest.h>
#include <unistd.h>

#include "fault_target.h"
#include "test_util.h"

namespace kvtest {
namespace {

struct FaultFs {
  TempDir t;
  std::string name = "fs-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  std::shared_ptr<FaultControl> c = FaultControl::Named(name);
  std::unique_ptr<KvStore> s;
  explicit FaultFs(StoreOptions o = {}) {
    o.gc_in_process = false;
    auto r = KvStore::Open("fs:fault:" + name + ":" + t.Sub("fs"), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    s = std::move(r).value();
  }
  ~FaultFs() { c->Reset(); }
};

using Ms = std::chrono::milliseconds;
Ms Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - t);
}

TEST(KvFault, SlowTargetStillServes) {
  StoreOptions o;
  o.domain_timeout = Ms(3000);
  FaultFs f(o);
  BlockKey key = testing_values::KeyFor(1);
  auto v = testing_values::ValueFor(key, 5000);
  f.c->delay_ms = 80;
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(PutOne(*f.s, key, v).ok());
  std::vector<uint8_t> out;
  ASSERT_TRUE(GetOne(*f.s, key, &out).ok());
  EXPECT_EQ(out, v);
  EXPECT_GE(Since(start), Ms(160));
  EXPECT_FALSE(f.s->Stat().targets[0].down);
}

TEST(KvFault, DeadTargetTimesOutAndIsMarkedDown) {
  StoreOptions o;
  o.domain_timeout = Ms(150);
  o.down_for = Ms(400);
  FaultFs f(o);
  BlockKey key = testing_values::KeyFor(2);
  auto v = testing_values::ValueFor(key, 100);
  ASSERT_TRUE(PutOne(*f.s, key, v).ok());
  f.c->dead = true;
  auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> out;
  EXPECT_EQ(GetOne(*f.s, key, &out).status().code(), StatusCode::kNotFound);
  EXPECT_LT(Since(start), Ms(2000));
  EXPECT_TRUE(f.s->Stat().targets[0].down);
  // While down: immediate misses and failed puts, no waiting.
  start = std::chrono::steady_clock::now();
  EXPECT_EQ(*f.s->MatchSync(std::span(&key, 1)), 0u);
  EXPECT_FALSE(PutOne(*f.s, testing_values::KeyFor(3), v).ok());
  EXPECT_LT(Since(start), Ms(100));
  // Back after down_for.
  f.c->dead = false;
  ASSERT_TRUE(WaitFor([&] { return !f.s->Stat().targets[0].down; }));
  ASSERT_TRUE(GetOne(*f.s, key, &out).ok());
  EXPECT_EQ(out, v);
}

TEST(KvFault, DeadTargetOnPutHasADeadline) {
  StoreOptions o;
  o.domain_timeout = Ms(150);
  FaultFs f(o);
  f.c->dead = true;
  auto start = std::chrono::steady_clock::now();
  Status s = PutOne(*f.s, testing_values::KeyFor(4), testing_values::ValueFor(testing_values::KeyFor(4), 10));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_LT(Since(start), Ms(2000));
}

TEST(KvFault, CorruptChunkIsAMiss) {
  FaultFs f;
  BlockKey key = testing_values::KeyFor(5);
  ASSERT_TRUE(PutOne(*f.s, key, testing_values::ValueFor(key, 3000)).ok());
  f.c->corrupt_reads = true;
  std::vector<uint8_t> out;
  EXPECT_EQ(GetOne(*f.s, key, &out).status().code(), StatusCode::kNotFound);
  EXPECT_GT(f.s->Stat().corrupt, 0u);
}

TEST(KvFault, EnospcOnPut) {
  FaultFs f;
  f.c->enospc = true;
  BlockKey key = testing_values::KeyFor(6);
  Status s = PutOne(*f.s, key, testing_values::ValueFor(key, 10));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  std::vector<uint8_t> out;
  EXPECT_EQ(GetOne(*f.s, key, &out).status().code(), StatusCode::kNotFound);
}

TEST(KvFault, EioOnReadIsAMiss) {
  FaultFs f;
  BlockKey key = testing_values::KeyFor(7);
  ASSERT_TRUE(PutOne(*f.s, key, testing_values::ValueFor(key, 10)).ok());
  f.c->eio = true;
  std::vector<uint8_t> out;
  EXPECT_EQ(GetOne(*f.s, key, &out).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(f.s->Stat().targets[0].down);
}

// On ec:4+2, one domain with each fault in turn: exact reads; ENOSPC on three of the domains a
// one-block stripe writes (its data chunk 0 and parity 4, 5): the put fails.
TEST(KvFault, EcAbsorbsOneFaultyDomain) {
  TempDir t;
  std::string base = "ec-" + std::to_string(::getpid()) + "-";
  StoreOptions o;
  o.gc_in_process = false;
  o.domain_timeout = Ms(200);
  o.down_for = Ms(100);
  auto uri = EcUri(t, 4, 2, [&](unsigned d, const std::string& dir) { return "fault:" + base + std::to_string(d) + ":" + dir; });
  auto store = KvStore::Open(uri, o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto c1 = FaultControl::Named(base + "1");
  int n = 0;
  for (auto set : std::vector<std::function<void()>>{[&] { c1->corrupt_reads = true; }, [&] { c1->eio = true; },
                                                     [&] { c1->delay_ms = 50; }, [&] { c1->dead = true; },
                                                     [&] { c1->enospc = true; }}) {
    BlockKey key = testing_values::KeyFor(100 + n++);
    auto v = testing_values::ValueFor(key, 9000);
    set();
    ASSERT_TRUE(PutOne(s, key, v).ok()) << n;
    std::vector<uint8_t> out;
    ASSERT_TRUE(GetOne(s, key, &out).ok()) << n;
    EXPECT_EQ(out, v) << n;
    c1->Reset();
    ASSERT_TRUE(WaitFor([&] { return !s.Stat().targets[1].down; }));
  }
  for (unsigned d : {0u, 4u, 5u}) FaultControl::Named(base + std::to_string(d))->enospc = true;
  BlockKey key = testing_values::KeyFor(999);
  EXPECT_EQ(PutOne(s, key, testing_values::ValueFor(key, 100)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(*s.MatchSync(std::span(&key, 1)), 0u);
  for (unsigned d = 0; d < 6; ++d) FaultControl::Named(base + std::to_string(d))->Reset();
}

}  // namespace
}  // namespace kvtest
