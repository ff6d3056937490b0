// The recipe's hit policy and SWA KVCache rules (kv_hit_policy.h) and the SWA host pool
// (swa_pool.h): the 128-boundary arithmetic, the final-chunk rule, the decode copy area and its
// <= 5-token overshoot, TTL expiry and the pool's bounds.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "ladle/engine/kv_hit_policy.h"
#include "ladle/engine/swa_pool.h"

namespace ladle::engine {
namespace {

const SwaGeometry kG;  // 128 / 128 / 6

TEST(HitPolicy, RecipeExamples) {
  auto all = [](int64_t) { return true; };
  auto none = [](int64_t) { return false; };
  // Under one block past the cap: nothing to reuse.
  EXPECT_EQ(DecideHit(kG, 100, 0, all).hit, 0);
  EXPECT_EQ(DecideHit(kG, 134 + 127, 256, all).hit, 0);
  // L = 262: cap 128, L1 = 128.
  HitDecision h = DecideHit(kG, 262, 256, all);
  EXPECT_EQ(h.cap, 128);
  EXPECT_EQ(h.block_reused, 128);
  EXPECT_TRUE(h.swa_hit);
  EXPECT_EQ(h.hit, 128);
  EXPECT_EQ(h.replayed(), 0);
  h = DecideHit(kG, 262, 256, none);
  EXPECT_FALSE(h.swa_hit);
  EXPECT_EQ(h.hit, 0);
  EXPECT_EQ(h.replay_from, 0);
  EXPECT_EQ(h.replayed(), 128);
  EXPECT_EQ(h.block_reused, 128);  // Block KV reused as is even when SWA must be replayed
  // A whole 10,000-token prompt cached: cap 9,866, L1 = 9,856 (77 blocks).
  h = DecideHit(kG, 10000, 10000, all);
  EXPECT_EQ(h.block_reused, 9856);
  EXPECT_EQ(h.hit, 9856);
  h = DecideHit(kG, 10000, 10000, none);
  EXPECT_EQ(h.hit, 9728);
  EXPECT_EQ(h.replay_from, 9728);
  // The block cache holds less than the cap: L1 is the block hit.
  h = DecideHit(kG, 10000, 640, all);
  EXPECT_EQ(h.block_reused, 640);
  // A block hit that is not a block multiple is rounded down.
  EXPECT_EQ(DecideHit(kG, 10000, 700, all).block_reused, 640);
}

TEST(HitPolicy, AsksSwaOnlyAboutL1) {
  std::vector<int64_t> asked;
  auto swa = [&](int64_t a) {
    asked.push_back(a);
    return a == 512;
  };
  HitDecision h = DecideHit(kG, 5000, 512, swa);
  EXPECT_EQ(asked, std::vector<int64_t>{512});
  EXPECT_TRUE(h.swa_hit);
  asked.clear();
  (void)DecideHit(kG, 5000, 0, swa);
  EXPECT_TRUE(asked.empty());  // no block hit: SWA is not consulted
}

// Every (L, block hit, SWA present) against the rule written out the long way.
TEST(HitPolicy, ExhaustiveAgainstTheRule) {
  for (int64_t L = 0; L <= 1200; ++L) {
    for (int64_t bh = 0; bh <= 1300; bh += 37) {
      for (bool swa : {false, true}) {
        HitDecision h = DecideHit(kG, L, bh, [&](int64_t) { return swa; });
        int64_t cap = L - 134 < 0 ? 0 : L - 134;
        int64_t l1 = 0;
        for (int64_t x = 0; x <= std::min(cap, bh); x += 128) l1 = x;
        ASSERT_EQ(h.block_reused, l1) << L << " " << bh;
        ASSERT_EQ(h.block_reused % 128, 0);
        ASSERT_LE(h.block_reused, cap);
        int64_t want = l1 == 0 ? 0 : (swa ? l1 : l1 - 128);
        ASSERT_EQ(h.hit, want) << L << " " << bh << " " << swa;
        ASSERT_EQ(h.replayed(), (l1 > 0 && !swa) ? 128 : 0);
        // At least ring tokens are always computed: the ring and rollback are rebuilt by the forward.
        ASSERT_LE(h.hit + 134, std::max<int64_t>(L, 134));
      }
    }
  }
}

TEST(SwaAnchors, AfterPrefill) {
  EXPECT_EQ(PrefillSwaAnchor(kG, 0, true), std::nullopt);
  EXPECT_EQ(PrefillSwaAnchor(kG, 127, true), std::nullopt);
  EXPECT_EQ(PrefillSwaAnchor(kG, 128, true), std::nullopt);  // (128 - 1) rounds down to 0
  EXPECT_EQ(PrefillSwaAnchor(kG, 129, true), 128);
  EXPECT_EQ(PrefillSwaAnchor(kG, 256, true), 128);
  EXPECT_EQ(PrefillSwaAnchor(kG, 257, true), 256);
  EXPECT_EQ(PrefillSwaAnchor(kG, 10000, true), 9984);
  for (int64_t e = 1; e < 3000; ++e) {
    auto a = PrefillSwaAnchor(kG, e, true);
    if (e - 1 < 128) {
      EXPECT_FALSE(a.has_value()) << e;
    } else {
      ASSERT_TRUE(a.has_value()) << e;
      EXPECT_EQ(*a % 128, 0);
      EXPECT_LE(*a, e - 1);
      EXPECT_GT(*a + 128, e - 1);
    }
  }
}

TEST(SwaAnchors, ChunkedPrefillStoresOnlyAtTheFinalChunk) {
  // A 1,000-token prompt in chunks of 256: only the last chunk's end yields an anchor.
  std::vector<std::optional<int64_t>> got;
  for (int64_t end = 256; end < 1000; end += 256) got.push_back(PrefillSwaAnchor(kG, end, /*final_chunk=*/false));
  got.push_back(PrefillSwaAnchor(kG, 1000, true));
  for (size_t i = 0; i + 1 < got.size(); ++i) EXPECT_EQ(got[i], std::nullopt);
  EXPECT_EQ(got.back(), 896);
}

TEST(SwaAnchors, RingHoldsTheWindowUpToSixPastTheBoundary) {
  for (int64_t over = 0; over <= 6; ++over) EXPECT_TRUE(RingHoldsWindow(kG, 1024 + over, 1024)) << over;
  EXPECT_FALSE(RingHoldsWindow(kG, 1024 + 7, 1024));
  EXPECT_FALSE(RingHoldsWindow(kG, 1023, 1024));  // the window is not complete yet
}

// The copy area: every boundary crossed gives one copy, at most 5 tokens past it, and the ring
// then still holds the boundary's whole window; shown for every start offset and step size.
TEST(SwaDecodeCopy, OvershootAtMostFiveAndTheRingAbsorbsIt) {
  int max_over = 0;
  for (int64_t start = 128; start < 128 + 128; ++start) {
    for (int64_t step = 1; step <= 6; ++step) {
      SwaDecodeCopier c(kG, start);
      std::set<int64_t> anchors;
      for (int64_t pos = start + step; pos <= start + 700; pos += step) {
        auto r = c.OnStep(pos);
        ASSERT_TRUE(r.ok());
        if (!r->has_value()) continue;
        const auto& copy = **r;
        ASSERT_EQ(copy.anchor % 128, 0);
        ASSERT_LE(copy.overshoot(), 5) << start << " " << step;
        ASSERT_TRUE(RingHoldsWindow(kG, copy.taken_at, copy.anchor));
        ASSERT_TRUE(anchors.insert(copy.anchor).second) << "two copies for one boundary";
        max_over = std::max<int>(max_over, static_cast<int>(copy.overshoot()));
      }
      // Exactly the boundaries in (start, end].
      const int64_t end = start + (700 / step) * step;
      std::set<int64_t> want;
      for (int64_t b = (start / 128 + 1) * 128; b <= end; b += 128) want.insert(b);
      ASSERT_EQ(anchors, want) << start << " " << step;
      ASSERT_EQ(c.Final().has_value(), !want.empty());
      if (!want.empty()) {
        ASSERT_EQ(c.Final()->anchor, *want.rbegin());
      }
    }
  }
  EXPECT_EQ(max_over, 5);  // reached: a 6-token step from boundary - 1
}

TEST(SwaDecodeCopy, RandomSpeculativeSteps) {
  std::mt19937 rng(3);
  SwaDecodeCopier c(kG, 300);
  int64_t pos = 300;
  int copies = 0;
  for (int i = 0; i < 5000; ++i) {
    pos += 1 + static_cast<int64_t>(rng() % 6);
    auto r = c.OnStep(pos);
    ASSERT_TRUE(r.ok());
    if (r->has_value()) {
      ++copies;
      ASSERT_LE((*r)->overshoot(), 5);
    }
  }
  EXPECT_EQ(copies, static_cast<int>(pos / 128 - 300 / 128));
}

TEST(SwaDecodeCopy, RefusesStepsTheRingCannotAbsorb) {
  SwaDecodeCopier c(kG, 250);
  EXPECT_FALSE(c.OnStep(257).ok());  // 7 tokens in one step
  EXPECT_FALSE(c.OnStep(240).ok());  // backwards
  EXPECT_TRUE(c.OnStep(256).ok());
  EXPECT_EQ(c.Final()->anchor, 256);
  EXPECT_FALSE(c.Final().has_value() && c.Final()->anchor != 256);
}

TEST(SwaGeometry, Validates) {
  EXPECT_TRUE(kG.Validate().ok());
  EXPECT_EQ(kG.ring(), 134);
  EXPECT_FALSE((SwaGeometry{0, 128, 6}).Validate().ok());
  EXPECT_FALSE((SwaGeometry{128, 128, 0}).Validate().ok());
}

kvcache::BlockKey K(uint64_t i) { return kvcache::BlockKey{i * 0x9e3779b97f4a7c15ULL + 1, i}; }

TEST(SwaPool, TtlExpiry) {
  SwaPool p({.capacity_bytes = 1 << 20, .ttl_ms = 180'000});
  ASSERT_TRUE(p.Put(K(1), 128, std::vector<uint8_t>(100, 7), 1'000));
  auto got = p.Get(K(1), 1'000 + 179'999);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(*got, std::vector<uint8_t>(100, 7));
  EXPECT_TRUE(p.Contains(K(1), 1'000 + 179'999));
  // A read does not extend the TTL.
  EXPECT_EQ(p.Get(K(1), 1'000 + 180'000), nullptr);
  EXPECT_FALSE(p.Contains(K(1), 1'000 + 180'000));
  SwaPoolStats s = p.Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.expired, 1u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
  ASSERT_TRUE(p.Put(K(2), 128, std::vector<uint8_t>(10), 0));
  ASSERT_TRUE(p.Put(K(3), 256, std::vector<uint8_t>(10), 100'000));
  EXPECT_EQ(p.Expire(180'000), 1u);  // K(2) only
  EXPECT_TRUE(p.Contains(K(3), 180'000));
}

TEST(SwaPool, BoundedByBytesLruFirst) {
  SwaPool p({.capacity_bytes = 1000, .ttl_ms = 1'000'000});
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(p.Put(K(i), 128, std::vector<uint8_t>(100, static_cast<uint8_t>(i)), 0));
  EXPECT_EQ(p.Stats().bytes, 1000u);
  ASSERT_NE(p.Get(K(0), 1), nullptr);  // K(0) becomes the most recent; K(1) is now the oldest
  ASSERT_TRUE(p.Put(K(10), 128, std::vector<uint8_t>(150), 2));
  EXPECT_TRUE(p.Contains(K(0), 3));
  EXPECT_FALSE(p.Contains(K(1), 3));
  EXPECT_FALSE(p.Contains(K(2), 3));  // 150 bytes needed two 100-byte entries out
  EXPECT_TRUE(p.Contains(K(3), 3));
  EXPECT_LE(p.Stats().bytes, 1000u);
  EXPECT_EQ(p.Stats().evicted, 2u);
  EXPECT_FALSE(p.Put(K(99), 128, std::vector<uint8_t>(1001), 3));  // larger than the pool
  EXPECT_EQ(p.Stats().refused, 1u);
  // Replacing a key keeps the byte count exact.
  ASSERT_TRUE(p.Put(K(0), 256, std::vector<uint8_t>(50), 4));
  uint64_t sum = 0;
  for (uint64_t i = 0; i <= 10; ++i) {
    if (auto r = p.Get(K(i), 5)) sum += r->size();
  }
  EXPECT_EQ(p.Stats().bytes, sum);
}

TEST(SwaPool, ExpiredEntriesMakeRoomBeforeLiveOnes) {
  SwaPool p({.capacity_bytes = 300, .ttl_ms = 100});
  ASSERT_TRUE(p.Put(K(1), 128, std::vector<uint8_t>(100), 0));    // expires at 100
  ASSERT_TRUE(p.Put(K(2), 128, std::vector<uint8_t>(100), 50));   // expires at 150
  ASSERT_TRUE(p.Put(K(3), 128, std::vector<uint8_t>(100), 60));
  ASSERT_NE(p.Get(K(1), 70), nullptr);  // most recent now, but it expires first
  ASSERT_TRUE(p.Put(K(4), 128, std::vector<uint8_t>(100), 120));
  EXPECT_FALSE(p.Contains(K(1), 120));  // expired: went first, though most recently used
  EXPECT_TRUE(p.Contains(K(2), 120));
  EXPECT_TRUE(p.Contains(K(3), 120));
  EXPECT_TRUE(p.Contains(K(4), 120));
}

TEST(SwaDirectory, LocalRecordsLocatesAndExpires) {
  LocalSwaDirectory d;
  EXPECT_EQ(d.Locate(K(1), 0), std::nullopt);
  d.Record(K(1), "engine-a", 1000);
  EXPECT_EQ(d.Locate(K(1), 999), "engine-a");
  d.Record(K(1), "engine-b", 2000);  // moved
  EXPECT_EQ(d.Locate(K(1), 1500), "engine-b");
  EXPECT_EQ(d.Locate(K(1), 2000), std::nullopt);
  d.Record(K(2), "engine-a", 5000);
  d.Forget(K(2));
  EXPECT_EQ(d.Locate(K(2), 0), std::nullopt);
}

}  // namespace
}  // namespace ladle::engine
