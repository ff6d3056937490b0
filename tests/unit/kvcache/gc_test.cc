// Lifetime: TTL per traffic class (expired = miss, GC deletes), GC between the watermarks in
// least-recently-read order, children before parents, leases under reads in flight, and GC
// racing reads and writes (no read fails or returns wrong bytes).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <set>

#include "fault_target.h"
#include "object_format.h"
#include "test_util.h"

namespace kvtest {
namespace {

struct Clock {
  std::atomic<int64_t> ms{1'700'000'000'000};
  std::function<int64_t()> Fn() {
    return [this] { return ms.load(); };
  }
};

uint64_t FileBytes(size_t value_len) { return EncodedChunkSize(1, value_len); }

TEST(KvGc, TtlPerTrafficClass) {
  TempDir t;
  Clock clock;
  StoreOptions o;
  o.now_ms = clock.Fn();
  o.gc_in_process = false;
  o.ttl_agent = std::chrono::seconds(100);
  o.ttl_chatbot = std::chrono::seconds(300);
  auto store = KvStore::Open("fs:" + t.Sub("fs"), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  BlockKey agent = testing_values::KeyFor(1), chat = testing_values::KeyFor(2);
  ASSERT_TRUE(PutOne(s, agent, testing_values::ValueFor(agent, 100), TrafficClass::kAgent).ok());
  ASSERT_TRUE(PutOne(s, chat, testing_values::ValueFor(chat, 100), TrafficClass::kChatbot).ok());
  std::vector<uint8_t> out;
  clock.ms += 99'000;
  EXPECT_TRUE(GetOne(s, agent, &out).ok());
  clock.ms += 2'000;  // agent expired, chatbot not
  EXPECT_EQ(GetOne(s, agent, &out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*s.MatchSync(std::span(&agent, 1)), 0u);
  EXPECT_TRUE(GetOne(s, chat, &out).ok());
  EXPECT_EQ(*s.RunGcOnce(), 1u);
  EXPECT_FALSE(HoldsBlock(t.Sub("fs"), agent));
  EXPECT_TRUE(HoldsBlock(t.Sub("fs"), chat));
  clock.ms += 300'000;
  EXPECT_EQ(GetOne(s, chat, &out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*s.RunGcOnce(), 1u);
  EXPECT_EQ(s.Stat().targets[0].objects, 0u);
  EXPECT_EQ(s.Stat().targets[0].used_bytes, 0u);
}

// 40 single blocks, read in a known order; GC must keep the most recently read ones.
TEST(KvGc, WatermarksAndLruOrderByLastRead) {
  TempDir t;
  Clock clock;
  StoreOptions o;
  o.now_ms = clock.Fn();
  o.gc_in_process = false;
  const size_t len = 4000;
  o.capacity_bytes = 40 * FileBytes(len);  // 40 blocks fill it completely
  o.high_watermark = 0.9;
  o.low_watermark = 0.5;
  auto store = KvStore::Open("fs:" + t.Sub("fs"), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  std::vector<BlockKey> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(testing_values::KeyFor(100 + i));
    clock.ms += 1;
    ASSERT_TRUE(PutOne(s, keys.back(), testing_values::ValueFor(keys.back(), len)).ok());
  }
  // Read order: a random permutation, each read 1 ms later than the one before.
  std::vector<size_t> order(40);
  for (size_t i = 0; i < 40; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  std::vector<uint8_t> out;
  for (size_t i : order) {
    clock.ms += 1;
    ASSERT_TRUE(GetOne(s, keys[i], &out).ok());
  }
  EXPECT_EQ(*s.RunGcOnce(), 20u);  // down to 50 %: 20 blocks
  TargetStat st = s.Stat().targets[0];
  EXPECT_LE(st.used_bytes, o.capacity_bytes / 2);
  for (size_t r = 0; r < 40; ++r) {
    bool stored = *s.MatchSync(std::span(&keys[order[r]], 1)) == 1;
    EXPECT_EQ(stored, r >= 20) << "read rank " << r;
  }
  // Under the high watermark nothing more goes.
  EXPECT_EQ(*s.RunGcOnce(), 0u);
}

// Chains read in random order: after GC every stored block's parent is stored.
TEST(KvGc, ChildrenBeforeParents) {
  TempDir t;
  Clock clock;
  StoreOptions o;
  o.now_ms = clock.Fn();
  o.gc_in_process = false;
  const size_t len = 1000;
  o.capacity_bytes = 10 * 8 * FileBytes(len);
  o.high_watermark = 0.8;
  o.low_watermark = 0.3;
  auto store = KvStore::Open("fs:" + t.Sub("fs"), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  std::vector<std::vector<BlockKey>> chains;
  for (int c = 0; c < 10; ++c) {
    chains.push_back(Chain(c + 50, 8));
    clock.ms += 1;
    PutChain(s, chains.back(), len);
  }
  std::mt19937 rng(11);
  std::vector<uint8_t> out;
  for (int i = 0; i < 60; ++i) {
    // A read of a chain prefix (the data path), or of one block alone.
    auto& chain = chains[rng() % chains.size()];
    clock.ms += 1;
    if (i % 3 == 0) {
      ASSERT_TRUE(GetOne(s, chain[rng() % chain.size()], &out).ok());
    } else {
      size_t n = 1 + rng() % chain.size();
      std::vector<std::vector<uint8_t>> outs(n, std::vector<uint8_t>(len));
      std::vector<MutableBuffer> bufs;
      for (auto& o2 : outs) bufs.push_back({o2.data(), o2.size()});
      s.GetSync(std::span(chain).first(n), bufs);
    }
  }
  EXPECT_GT(*s.RunGcOnce(), 0u);
  EXPECT_LE(s.Stat().targets[0].used_bytes, o.capacity_bytes * 3 / 10);
  for (auto& chain : chains) {
    for (size_t i = 1; i < chain.size(); ++i) {
      if (*s.MatchSync(std::span(&chain[i], 1)) == 1) {
        EXPECT_EQ(*s.MatchSync(std::span(&chain[i - 1], 1)), 1u) << "orphaned child at depth " << i;
      }
    }
  }
}

// A read in flight holds a lease: GC passes over it even when it is the oldest block.
TEST(KvGc, LeaseHoldsOffGc) {
  TempDir t;
  Clock clock;
  StoreOptions o;
  o.now_ms = clock.Fn();
  o.gc_in_process = false;
  o.domain_timeout = std::chrono::seconds(5);
  o.capacity_bytes = 3 * FileBytes(100);  // two blocks: 67 %, one: 33 %, both over the mark
  o.high_watermark = 0.3;
  o.low_watermark = 0.01;
  std::string name = "lease-" + std::to_string(::getpid());
  auto store = KvStore::Open("fs:fault:" + name + ":" + t.Sub("fs"), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  BlockKey old = testing_values::KeyFor(1), young = testing_values::KeyFor(2);
  ASSERT_TRUE(PutOne(s, old, testing_values::ValueFor(old, 100)).ok());
  clock.ms += 10;
  ASSERT_TRUE(PutOne(s, young, testing_values::ValueFor(young, 100)).ok());
  auto c = FaultControl::Named(name);
  c->delay_ms = 300;  // the read opens the file 300 ms from now
  std::vector<uint8_t> buf(100);
  MutableBuffer b{buf.data(), buf.size()};
  std::atomic<bool> done{false};
  Result<size_t> got = Status(StatusCode::kInternal, "unset");
  s.Get(std::span(&old, 1), std::span<const MutableBuffer>(&b, 1), [&](std::vector<Result<size_t>> r) {
    got = r[0];
    done = true;
  });
  // GC would evict both (down to 1 %); the lease keeps `old`.
  EXPECT_EQ(*s.RunGcOnce(), 1u);  // only `young`
  ASSERT_TRUE(WaitFor([&] { return done.load(); }));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(testing_values::IsValueOf(old, buf.data(), *got));
  c->Reset();
  EXPECT_EQ(*s.RunGcOnce(), 1u);  // the lease is gone: now `old` goes too
}

// A chain put in pieces (as an engine writes a sequence's blocks as they fill), each piece
// naming the last block of the one before: GC still evicts children first. Here the parent
// pieces are the least recently written, so without the link LRU would take them first.
TEST(KvGc, ChainPutInPiecesKeepsItsLinks) {
  TempDir t;
  Clock clock;
  StoreOptions o;
  o.now_ms = clock.Fn();
  o.gc_in_process = false;
  const size_t len = 1000;
  o.capacity_bytes = 40 * FileBytes(len);
  o.high_watermark = 0.5;
  o.low_watermark = 0.25;
  auto store = KvStore::Open("fs:" + t.Sub("fs"), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  std::vector<BlockKey> chain = Chain(900, 24);
  for (size_t i = 0; i < chain.size(); i += 4) {
    clock.ms += 10;
    std::vector<std::vector<uint8_t>> vals;
    std::vector<std::span<const uint8_t>> spans;
    for (size_t j = i; j < i + 4; ++j) vals.push_back(testing_values::ValueFor(chain[j], len));
    for (auto& v : vals) spans.emplace_back(v);
    std::optional<BlockKey> parent;
    if (i > 0) parent = chain[i - 1];
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    s.Put(std::span(chain).subspan(i, 4), spans, TrafficClass::kChatbot,
          [&](std::vector<Status> st) {
            for (auto& x : st) EXPECT_TRUE(x.ok()) << x.ToString();
            std::lock_guard lock(mu);
            done = true;
            cv.notify_all();
          },
          parent);
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; }));
  }
  ASSERT_GT(*s.RunGcOnce(), 0u);
  // What is left is a prefix of the chain: no block without its parent.
  size_t hit = *s.MatchSync(chain);
  EXPECT_GT(hit, 0u);
  for (size_t i = hit; i < chain.size(); ++i) EXPECT_EQ(*s.MatchSync(std::span(&chain[i], 1)), 0u) << i;
}

// GC in process every few ms, writers pushing use over the watermark, readers checking bytes.
TEST(KvGc, GcRacingReadsAndWrites) {
  TempDir t;
  StoreOptions o;
  o.gc_interval = std::chrono::milliseconds(5);
  const size_t len = 3000;
  o.capacity_bytes = 120 * FileBytes(len);
  o.high_watermark = 0.8;
  o.low_watermark = 0.6;
  auto store = KvStore::Open("fs:" + t.Sub("fs"), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  std::vector<std::vector<BlockKey>> chains;
  for (int c = 0; c < 60; ++c) chains.push_back(Chain(c + 500, 4));
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, errors{0}, hits{0};
  std::thread writer([&] {
    for (int round = 0; round < 3 && !stop; ++round) {
      for (auto& chain : chains) PutChain(s, chain, len);
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 rng(r);
      while (!stop) {
        auto& chain = chains[rng() % chains.size()];
        std::vector<std::vector<uint8_t>> outs(chain.size(), std::vector<uint8_t>(len));
        std::vector<MutableBuffer> bufs;
        for (auto& o2 : outs) bufs.push_back({o2.data(), o2.size()});
        auto rs = s.GetSync(chain, bufs);
        for (size_t i = 0; i < rs.size(); ++i) {
          if (rs[i].ok()) {
            ++hits;
            if (!testing_values::IsValueOf(chain[i], outs[i].data(), *rs[i])) ++wrong;
          } else if (rs[i].status().code() != StatusCode::kNotFound) {
            ++errors;
          }
        }
      }
    });
  }
  writer.join();
  stop = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_GT(s.Stat().evictions, 0u);
  ASSERT_TRUE(s.RunGcOnce().ok());
  EXPECT_LE(s.Stat().targets[0].used_bytes, static_cast<uint64_t>(o.capacity_bytes * o.high_watermark));
  for (auto& chain : chains) {
    for (size_t i = 1; i < chain.size(); ++i) {
      if (*s.MatchSync(std::span(&chain[i], 1)) == 1) {
        EXPECT_EQ(*s.MatchSync(std::span(&chain[i - 1], 1)), 1u) << "orphaned child";
      }
    }
  }
}

}  // namespace
}  // namespace kvtest
