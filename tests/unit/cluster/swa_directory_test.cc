// The sharded SWA directory (swa_directory.h) on loopback: two and three entrypoints' shards
// over real gRPC, ownership by lb::HashRing, lookups across owners, and an owner that dies
// (its keys become misses within the lookup deadline; it leaves the ring; the rest still hit).
#include "swa_directory.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ladle_cluster.grpc.pb.h"
#include "rpc_convert.h"

namespace ladle::cluster {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

std::vector<kvcache::BlockKey> Keys(int n, uint64_t seed) {
  std::vector<kvcache::BlockKey> k(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) k[static_cast<size_t>(i)] = {seed * 1000003 + static_cast<uint64_t>(i), ~static_cast<uint64_t>(i) ^ seed};
  return k;
}

std::unique_ptr<SwaDirectory> Start() {
  SwaDirectoryOptions o;
  o.probe_ms = 50;
  o.dead_after_ms = 300;
  o.lookup_timeout_ms = 100;
  auto d = std::make_unique<SwaDirectory>(o);
  EXPECT_TRUE(d->Serve("127.0.0.1:0", "").ok());
  return d;
}

bool WaitMembers(const SwaDirectory& d, size_t n) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    if (d.GetStats().members.size() == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(SwaDirectory, AloneItOwnsEveryKey) {
  SwaDirectory d(SwaDirectoryOptions{});
  const auto keys = Keys(50, 1);
  for (const auto& k : keys) d.Record(k, "engine-a:1", NowMs() + 60'000);
  EXPECT_EQ(d.GetStats().entries, 50u);
  const auto h = d.Lookup(keys);
  for (const auto& x : h) EXPECT_EQ(x, "engine-a:1");
  EXPECT_EQ(d.GetStats().remote_lookups, 0u);
}

TEST(SwaDirectory, ExpiredEntriesAreMissesAndTheShardIsBounded) {
  SwaDirectoryOptions o;
  o.max_entries = 10;
  SwaDirectory d(o);
  const auto keys = Keys(30, 2);
  d.Record(keys[0], "e:1", NowMs() - 1);
  EXPECT_EQ(d.Lookup({keys[0]})[0], "");
  for (const auto& k : keys) d.Record(k, "e:1", NowMs() + 60'000);
  EXPECT_LE(d.GetStats().entries, 10u);
}

TEST(SwaDirectory, TwoEntrypointsShardTheKeysAndAnswerEachOther) {
  auto a = Start(), b = Start();
  a->AddPeer(b->self());
  b->AddPeer(a->self());
  ASSERT_TRUE(WaitMembers(*a, 2));
  ASSERT_TRUE(WaitMembers(*b, 2));
  // Both see every engine report (each polls every engine): each keeps only what it owns.
  const auto keys = Keys(400, 3);
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string holder = "engine-" + std::to_string(i % 3) + ":9000";
    a->Record(keys[i], holder, NowMs() + 60'000);
    b->Record(keys[i], holder, NowMs() + 60'000);
  }
  const size_t ea = a->GetStats().entries, eb = b->GetStats().entries;
  EXPECT_EQ(ea + eb, keys.size()) << "every key has exactly one owner";
  EXPECT_GT(ea, 100u);
  EXPECT_GT(eb, 100u);
  // Either entrypoint finds every key: its own from memory, the other's by one RPC.
  for (SwaDirectory* d : {a.get(), b.get()}) {
    const auto h = d->Lookup(keys);
    for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(h[i], "engine-" + std::to_string(i % 3) + ":9000") << i;
  }
  EXPECT_EQ(a->GetStats().remote_lookups, 1u) << "one call per owner per lookup";
  EXPECT_EQ(a->GetStats().remote_failures, 0u);
}

TEST(SwaDirectory, AnOwnerThatDiesCostsOnlyItsShardAndNeverBlocks) {
  auto a = Start(), b = Start(), c = Start();
  for (auto* x : {a.get(), b.get(), c.get()}) {
    for (auto* y : {a.get(), b.get(), c.get()}) x->AddPeer(y->self());
  }
  for (auto* x : {a.get(), b.get(), c.get()}) ASSERT_TRUE(WaitMembers(*x, 3));
  const auto keys = Keys(600, 4);
  for (auto* x : {a.get(), b.get(), c.get()}) {
    for (const auto& k : keys) x->Record(k, "engine:1", NowMs() + 60'000);
  }
  const size_t owned_by_a = a->GetStats().entries, owned_by_b = b->GetStats().entries;
  const std::string b_id = b->self();
  b.reset();  // the entrypoint goes away (its server with it)
  // At once (b still in a's ring): b's keys are misses, within the lookup deadline.
  const auto t0 = Clock::now();
  auto h = a->Lookup(keys);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_LT(ms, 1000) << "a lookup is bounded by its deadline";
  size_t found = 0;
  for (const auto& x : h) found += !x.empty();
  EXPECT_EQ(found, keys.size() - owned_by_b) << "only the dead owner's shard is lost";
  // Then b leaves the ring; its keys move to the survivors (which learn them anew from the
  // engines' next reports: until then, misses), and nothing else moved.
  ASSERT_TRUE(WaitMembers(*a, 2));
  ASSERT_TRUE(WaitMembers(*c, 2));
  EXPECT_EQ(a->GetStats().entries, owned_by_a) << "a keeps every key it owned";
  for (const auto& m : a->GetStats().members) EXPECT_NE(m, b_id);
  for (auto* x : {a.get(), c.get()}) {
    for (const auto& k : keys) x->Record(k, "engine:1", NowMs() + 60'000);
  }
  h = a->Lookup(keys);
  found = 0;
  for (const auto& x : h) found += !x.empty();
  EXPECT_EQ(found, keys.size());
}

TEST(SwaDirectory, MalformedLookupIsInvalidArgument) {
  auto a = Start();
  auto stub = rpc::LadleDirectory::NewStub(FailFastChannel(a->self()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpc::SwaLookupRequest req;
  req.add_key_hi(1);
  rpc::SwaLookupResponse resp;
  EXPECT_EQ(stub->SwaLookup(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(stub->SwaLookup(&ctx2, rpc::SwaLookupRequest(), &resp).ok());
  EXPECT_EQ(resp.member(), a->self());
}

}  // namespace
}  // namespace ladle::cluster
