// Round trips on fs and ec for sizes 1 B .. 1 MiB, batched and concurrent calls, Match against
// the data path, Delete, Stat, reopen (the index survives), index rebuild from the files.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>

#include "test_util.h"

namespace kvtest {
namespace {

const size_t kSizes[] = {0, 1, 2, 7, 9, 4095, 4096, 4097, 10 * 1024 + 3, 112 * 1024, 1 << 20};

// Each size alone (a one-block stripe), then all of them as one chain (stripes of k blocks of
// mixed sizes, padded to their longest for the parity).
void RoundTrip(const std::string& uri, unsigned k = 1, unsigned m = 0) {
  auto store = KvStore::Open(uri, {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  KvStore& s = **store;
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    BlockKey key = testing_values::KeyFor(1000 + i);
    auto v = testing_values::ValueFor(key, kSizes[i]);
    ASSERT_TRUE(PutOne(s, key, v).ok()) << kSizes[i];
    std::vector<uint8_t> out;
    auto r = GetOne(s, key, &out);
    ASSERT_TRUE(r.ok()) << kSizes[i] << ": " << r.status().ToString();
    EXPECT_EQ(*r, kSizes[i]);
    EXPECT_EQ(out, v) << kSizes[i];
  }
  std::vector<BlockKey> chain;
  std::vector<std::vector<uint8_t>> vals;
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    chain.push_back(testing_values::KeyFor(3000 + i));
    vals.push_back(testing_values::ValueFor(chain.back(), kSizes[i]));
  }
  std::vector<std::span<const uint8_t>> spans(vals.begin(), vals.end());
  for (const Status& st : s.PutSync(chain, spans, TrafficClass::kChatbot)) ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < chain.size(); ++i) {
    std::vector<uint8_t> out;
    auto r = GetOne(s, chain[i], &out);
    ASSERT_TRUE(r.ok()) << "chain " << kSizes[i] << ": " << r.status().ToString();
    EXPECT_EQ(out, vals[i]) << "chain " << kSizes[i];
  }
  EXPECT_EQ(*s.MatchSync(chain), chain.size());
  // A buffer one byte short: kOutOfRange, nothing read.
  BlockKey key = testing_values::KeyFor(1000 + 5);
  std::vector<uint8_t> small(kSizes[5] - 1, 0x5a);
  MutableBuffer b{small.data(), small.size()};
  auto r = s.GetSync(std::span(&key, 1), std::span<const MutableBuffer>(&b, 1))[0];
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(small, std::vector<uint8_t>(kSizes[5] - 1, 0x5a));
  // Absent key: a miss.
  std::vector<uint8_t> out;
  EXPECT_EQ(GetOne(s, testing_values::KeyFor(999999), &out).status().code(), StatusCode::kNotFound);
  StoreStat st = s.Stat();
  EXPECT_EQ(st.puts, 2 * std::size(kSizes));
  EXPECT_GE(st.hits, std::size(kSizes));
  EXPECT_GE(st.misses, 1u);
  EXPECT_TRUE(st.healthy);
  uint64_t objects = 0;
  for (auto& t : st.targets) {
    objects += t.objects;
    EXPECT_GT(t.used_bytes, 0u);
    EXPECT_GT(t.capacity_bytes, 0u);
    EXPECT_FALSE(t.down);
  }
  // A stripe of w blocks is w data chunks and m parity chunks.
  uint64_t want = std::size(kSizes) * (1 + m);
  for (size_t first = 0; first < std::size(kSizes); first += k) want += std::min<size_t>(k, std::size(kSizes) - first) + m;
  EXPECT_EQ(objects, want);
}

TEST(KvRoundTrip, Fs) {
  TempDir t;
  RoundTrip("fs:" + t.Sub("fs"));
}

TEST(KvRoundTrip, FsODirect) {
  TempDir t;
  StoreOptions o;
  o.o_direct = true;
  auto store = KvStore::Open("fs:" + t.Sub("fs"), o);
  ASSERT_TRUE(store.ok());
  for (size_t size : kSizes) {
    BlockKey key = testing_values::KeyFor(size + 77);
    auto v = testing_values::ValueFor(key, size);
    ASSERT_TRUE(PutOne(**store, key, v).ok());
    std::vector<uint8_t> out;
    auto r = GetOne(**store, key, &out);
    ASSERT_TRUE(r.ok()) << size;
    EXPECT_EQ(out, v);
  }
}

TEST(KvRoundTrip, Ec10Plus2) {
  TempDir t;
  RoundTrip(EcUri(t, 10, 2), 10, 2);
}

TEST(KvRoundTrip, Ec4Plus1AndReplication) {
  TempDir t;
  RoundTrip(EcUri(t, 4, 1), 4, 1);
  TempDir t2;
  RoundTrip(EcUri(t2, 1, 2), 1, 2);
}

TEST(KvRoundTrip, BadUris) {
  EXPECT_FALSE(KvStore::Open("nope:/x").ok());
  EXPECT_FALSE(KvStore::Open("fs:").ok());
  EXPECT_FALSE(KvStore::Open("ec:10+2:/a,/b").ok());
  EXPECT_FALSE(KvStore::Open("ec:x+2:/a").ok());
}

TEST(KvRoundTrip, BatchedAndConcurrent) {
  TempDir t;
  auto store = KvStore::Open(EcUri(t, 10, 2), {});
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  // Async calls from 4 threads at once, many in flight each.
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      std::vector<BlockKey> keys;
      for (int i = 0; i < 12; ++i) keys.push_back(testing_values::KeyFor(th * 1000 + i));
      std::vector<std::vector<uint8_t>> vals;
      std::vector<std::span<const uint8_t>> spans;
      for (auto& k : keys) vals.push_back(testing_values::ValueFor(k, 8 + (k.lo % 30000)));
      for (auto& v : vals) spans.emplace_back(v);
      for (auto& st : s.PutSync(keys, spans, TrafficClass::kAgent)) bad += !st.ok();
      std::vector<std::vector<uint8_t>> outs(keys.size(), std::vector<uint8_t>(40000));
      std::vector<MutableBuffer> bufs;
      for (auto& o : outs) bufs.push_back({o.data(), o.size()});
      auto rs = s.GetSync(keys, bufs);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!rs[i].ok() || !testing_values::IsValueOf(keys[i], outs[i].data(), *rs[i])) ++bad;
      }
      if (s.MatchSync(keys).value() != keys.size()) ++bad;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// A target runs several writer threads; a key's writes must still land in the order queued.
// Eight rewrites of each key are queued back to back without waiting: the last one must win
// on every key, on one directory and on an ec store.
TEST(KvRoundTrip, RewritesOfAKeyLandInOrder) {
  TempDir t;
  for (const std::string& uri : {"fs:" + t.Sub("fs"), EcUri(t, 4, 1)}) {
    StoreOptions o;
    o.write_threads = 4;
    auto store = KvStore::Open(uri, o);
    ASSERT_TRUE(store.ok()) << uri;
    KvStore& s = **store;
    std::vector<BlockKey> keys;
    for (int i = 0; i < 61; ++i) keys.push_back(testing_values::KeyFor(7000 + i));
    const int rounds = 8;
    std::vector<std::vector<std::vector<uint8_t>>> vals(rounds);
    std::mutex mu;
    std::condition_variable cv;
    int left = rounds * static_cast<int>(keys.size()), bad = 0;
    for (int r = 0; r < rounds; ++r) {
      for (const BlockKey& k : keys) vals[r].push_back(std::vector<uint8_t>(1000 + 100 * r, static_cast<uint8_t>(r + 1)));
      for (size_t i = 0; i < keys.size(); ++i) {
        std::span<const uint8_t> v(vals[r][i]);
        s.Put(std::span(&keys[i], 1), std::span(&v, 1), TrafficClass::kChatbot, [&](std::vector<Status> st) {
          std::lock_guard lock(mu);
          bad += !st[0].ok();
          if (--left == 0) cv.notify_all();
        });
      }
    }
    {
      std::unique_lock lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return left == 0; }));
    }
    EXPECT_EQ(bad, 0);
    std::vector<uint8_t> out;
    for (const BlockKey& k : keys) {
      auto n = GetOne(s, k, &out);
      ASSERT_TRUE(n.ok()) << uri << " " << k.Hex();
      EXPECT_EQ(out, vals[rounds - 1][0]) << uri << " " << k.Hex() << ": an older rewrite landed last";
    }
  }
}

TEST(KvRoundTrip, DeleteAndMatchStopsAtFirstHole) {
  TempDir t;
  auto store = KvStore::Open("fs:" + t.Sub("fs"), {});
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto chain = Chain(1, 50);
  PutChain(s, chain, 100);
  EXPECT_EQ(*s.MatchSync(chain), 50u);
  BlockKey hole = chain[20];
  EXPECT_TRUE(s.DeleteSync(std::span(&hole, 1))[0].ok());
  EXPECT_EQ(*s.MatchSync(chain), 20u);
  std::vector<uint8_t> out;
  EXPECT_EQ(GetOne(s, hole, &out).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(HoldsBlock(t.Sub("fs"), hole));
  EXPECT_EQ(*s.MatchSync({}), 0u);
}

// Match agrees with the data path on random chains with holes (deleted blocks, and a file
// removed behind the store's back: Get misses on it, and Match follows once the miss is seen).
TEST(KvRoundTrip, MatchAgreesWithGet) {
  TempDir t;
  auto store = KvStore::Open(EcUri(t, 4, 2), {});
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 8; ++trial) {
    auto chain = Chain(100 + trial, 16);
    PutChain(s, chain, 64 + trial);
    std::vector<BlockKey> holes;
    for (int h = 0; h < 3; ++h) holes.push_back(chain[rng() % chain.size()]);
    s.DeleteSync(holes);
    size_t match = *s.MatchSync(chain);
    std::vector<std::vector<uint8_t>> outs(chain.size(), std::vector<uint8_t>(256));
    std::vector<MutableBuffer> bufs;
    for (auto& o : outs) bufs.push_back({o.data(), o.size()});
    auto rs = s.GetSync(chain, bufs);
    size_t lead = 0;
    while (lead < rs.size() && rs[lead].ok()) ++lead;
    EXPECT_EQ(match, lead) << trial;
    for (size_t i = 0; i < lead; ++i) EXPECT_TRUE(testing_values::IsValueOf(chain[i], outs[i].data(), *rs[i]));
  }
}

TEST(KvRoundTrip, ReopenKeepsBlocksAndRebuildsAMissingIndex) {
  TempDir t;
  std::string dir = t.Sub("fs");
  auto chain = Chain(3, 10);
  {
    auto store = KvStore::Open("fs:" + dir, {});
    ASSERT_TRUE(store.ok());
    PutChain(**store, chain, 5000);
  }
  {
    auto store = KvStore::Open("fs:" + dir, {});
    ASSERT_TRUE(store.ok());
    EXPECT_EQ(*(*store)->MatchSync(chain), 10u);
  }
  std::filesystem::remove_all(dir + "/.index");
  auto store = KvStore::Open("fs:" + dir, {});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->MatchSync(chain), 10u);
  std::vector<uint8_t> out;
  ASSERT_TRUE(GetOne(**store, chain[9], &out).ok());
  EXPECT_TRUE(testing_values::IsValueOf(chain[9], out.data(), out.size()));
  // A second store on the same directory is refused (the index has one owner), not corrupted.
  EXPECT_FALSE(KvStore::Open("fs:" + dir, {}).ok());
}

}  // namespace
}  // namespace kvtest
