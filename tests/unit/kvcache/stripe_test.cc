// The striped layout (object_format.h): a chain is stored K blocks to a stripe, block j whole on
// domain j, so a healthy read is one chunk per block; a lost domain's blocks are rebuilt from the
// rest of their stripe; a rewrite of one block makes a new stripe and leaves its old siblings
// readable; fully superseded stripes are collected; GC evicts whole stripes, children first;
// Delete takes a block's stripes with it.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "fault_target.h"
#include "object_format.h"
#include "test_util.h"

namespace kvtest {
namespace {

std::vector<std::vector<uint8_t>> Values(const std::vector<BlockKey>& keys, size_t base_len) {
  std::vector<std::vector<uint8_t>> vals;
  for (size_t i = 0; i < keys.size(); ++i) vals.push_back(testing_values::ValueFor(keys[i], base_len + 37 * i));
  return vals;
}

void PutValues(KvStore& s, const std::vector<BlockKey>& keys, const std::vector<std::vector<uint8_t>>& vals) {
  std::vector<std::span<const uint8_t>> spans(vals.begin(), vals.end());
  for (const Status& st : s.PutSync(keys, spans, TrafficClass::kChatbot)) ASSERT_TRUE(st.ok()) << st.ToString();
}

void ExpectValues(KvStore& s, const std::vector<BlockKey>& keys, const std::vector<std::vector<uint8_t>>& vals,
                  const std::string& what) {
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<uint8_t> out;
    auto r = GetOne(s, keys[i], &out);
    ASSERT_TRUE(r.ok()) << what << " block " << i << ": " << r.status().ToString();
    EXPECT_EQ(out, vals[i]) << what << " block " << i;
  }
}

uint64_t TotalReads(const std::string& tag, unsigned n) {
  uint64_t reads = 0;
  for (unsigned d = 0; d < n; ++d) reads += FaultControl::Named(tag + std::to_string(d))->reads.load();
  return reads;
}

TEST(KvStripes, HealthyReadIsOneChunkPerBlockAndALostDomainIsRebuilt) {
  TempDir t;
  StoreOptions o;
  o.gc_in_process = false;
  o.hedge_after = std::chrono::seconds(5);  // no hedge fires: count the reads a healthy Get needs
  std::string tag = "stripe-" + std::to_string(::getpid()) + "-";
  auto store = KvStore::Open(EcUri(t, 10, 2, [&](unsigned d, const std::string& dir) {
                               return "fault:" + tag + std::to_string(d) + ":" + dir;
                             }),
                             o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto keys = Chain(77, 23);  // stripes of 10, 10 and 3
  auto vals = Values(keys, 20000);
  PutValues(s, keys, vals);
  const size_t want_files[12] = {3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 3, 3};
  for (unsigned d = 0; d < 12; ++d) EXPECT_EQ(ChunkFilesUnder(t.Sub("d" + std::to_string(d))).size(), want_files[d]) << d;
  uint64_t before = TotalReads(tag, 12);
  ExpectValues(s, keys, vals, "healthy");
  EXPECT_EQ(TotalReads(tag, 12) - before, keys.size()) << "a healthy read is one chunk per block";
  // Domain 4 fails every read: blocks 4 and 14 come back rebuilt from their stripes.
  FaultControl::Named(tag + "4")->eio = true;
  ExpectValues(s, keys, vals, "domain 4 failing");
  EXPECT_TRUE(s.Stat().targets[4].down);
  for (unsigned d = 0; d < 12; ++d) FaultControl::Named(tag + std::to_string(d))->Reset();
}

TEST(KvStripes, RewriteOfOneBlockKeepsItsSiblingsAndOldStripesAreCollected) {
  TempDir t;
  StoreOptions o;
  o.gc_in_process = false;
  std::string uri = EcUri(t, 4, 1);
  auto keys = Chain(78, 3);
  auto v1 = Values(keys, 5000);
  auto v2 = Values(keys, 9000);
  {
    auto store = KvStore::Open(uri, o);
    ASSERT_TRUE(store.ok());
    KvStore& s = **store;
    PutValues(s, keys, v1);
    // Block 1 alone, new bytes: a new one-block stripe. Blocks 0 and 2 still read from the old.
    PutValues(s, {keys[1]}, {v2[1]});
    ExpectValues(s, keys, {v1[0], v2[1], v1[2]}, "after rewriting block 1");
    EXPECT_EQ(*s.MatchSync(keys), 3u);
  }
  auto store = KvStore::Open(uri, o);  // the newest write of each block wins at open too
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  ExpectValues(s, keys, {v1[0], v2[1], v1[2]}, "reopened");
  // Rewrite the other two: the first stripe holds nothing current and is collected.
  PutValues(s, {keys[0]}, {v2[0]});
  PutValues(s, {keys[2]}, {v2[2]});
  ASSERT_TRUE(s.RunGcOnce().ok());
  ExpectValues(s, keys, v2, "all rewritten");
  // Every chunk left is one of the three one-block stripes: data on domain 0, parity on 4.
  EXPECT_EQ(ChunkFilesUnder(t.Sub("d0")).size(), 3u);
  for (unsigned d = 1; d < 4; ++d) EXPECT_EQ(ChunkFilesUnder(t.Sub("d" + std::to_string(d))).size(), 0u) << d;
  EXPECT_EQ(ChunkFilesUnder(t.Sub("d4")).size(), 3u);
}

TEST(KvStripes, DeleteTakesTheBlocksStripe) {
  TempDir t;
  StoreOptions o;
  o.gc_in_process = false;
  auto store = KvStore::Open(EcUri(t, 4, 1), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto keys = Chain(79, 6);  // stripes [0..3], [4, 5]
  PutValues(s, keys, Values(keys, 3000));
  EXPECT_TRUE(s.DeleteSync(std::span(&keys[5], 1))[0].ok());
  EXPECT_EQ(*s.MatchSync(keys), 4u);
  std::vector<uint8_t> out;
  EXPECT_EQ(GetOne(s, keys[4], &out).status().code(), StatusCode::kNotFound);  // its stripe sibling
  EXPECT_TRUE(s.DeleteSync(std::span(&keys[1], 1))[0].ok());
  EXPECT_EQ(*s.MatchSync(keys), 0u);
  for (unsigned d = 0; d < 5; ++d) EXPECT_EQ(ChunkFilesUnder(t.Sub("d" + std::to_string(d))).size(), 0u) << d;
}

// GC at the watermark on a striped store: whole stripes go, children first, with reads and
// writes racing it; no read fails or returns wrong bytes, and every stored block's parent stays.
TEST(KvStripes, GcEvictsWholeStripesChildrenFirstUnderLoad) {
  TempDir t;
  StoreOptions o;
  o.gc_interval = std::chrono::milliseconds(5);
  const size_t len = 3000;
  const unsigned k = 4;
  // Per domain: one chunk per stripe, about 45 stripes' worth.
  o.capacity_bytes = 45 * EncodedChunkSize(k, len);
  o.high_watermark = 0.8;
  o.low_watermark = 0.6;
  auto store = KvStore::Open(EcUri(t, k, 1), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  std::vector<std::vector<BlockKey>> chains;
  for (int c = 0; c < 40; ++c) chains.push_back(Chain(c + 900, 9));  // stripes of 4, 4 and 1
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, errors{0}, hits{0};
  std::thread writer([&] {
    for (int round = 0; round < 2 && !stop; ++round) {
      for (auto& chain : chains) PutChain(s, chain, len);
    }
  });
  std::thread reader([&] {
    std::mt19937 rng(5);
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
  writer.join();
  stop = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(hits.load(), 0);
  ASSERT_TRUE(s.RunGcOnce().ok());
  EXPECT_GT(s.Stat().evictions, 0u);
  for (auto& ts : s.Stat().targets) {
    EXPECT_LE(ts.used_bytes, static_cast<uint64_t>(o.capacity_bytes * o.high_watermark)) << ts.path;
  }
  for (auto& chain : chains) {
    size_t hit = *s.MatchSync(chain);
    // A stripe goes whole: a chain keeps 0, 4, 8 or 9 blocks.
    EXPECT_TRUE(hit == 0 || hit == 4 || hit == 8 || hit == 9) << hit;
    for (size_t i = 1; i < chain.size(); ++i) {
      if (*s.MatchSync(std::span(&chain[i], 1)) == 1) {
        EXPECT_EQ(*s.MatchSync(std::span(&chain[i - 1], 1)), 1u) << "orphaned child";
      }
    }
  }
}

}  // namespace
}  // namespace kvtest
