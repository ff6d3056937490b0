#include "ladle/engine/block_manager.h"

#include <gtest/gtest.h>


namespace ladle::engine {
namespace {

std::vector<BlockHash> Chain(const std::vector<TokenId>& toks, int bs, uint64_t salt = 0) {
  std::vector<BlockHash> h;
  std::vector<kvcache::ExtraKey> extras;
  if (salt != 0) extras.push_back({kvcache::ExtraTag::kCacheSalt, std::to_string(salt)});
  for (size_t i = 0; i + bs <= toks.size(); i += bs)
    h.push_back(HashBlock(h.empty() ? nullptr : &h.back(), std::span<const TokenId>(toks).subspan(i, bs), extras));
  return h;
}

// A name for tests that do not need a real chain.
BlockHash H(uint64_t x) { return BlockHash{x, 0}; }

// The pool names blocks with the persistent store's keys: a chain built here equals the
// store's ChainKeys over the same tokens and extras, so a store Match finds what the pool named.
TEST(BlockManager, ChainKeysAreTheStoresKeys) {
  std::vector<TokenId> toks(128 * 3 + 17);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<TokenId>(i * 7919 % 129280);
  std::vector<kvcache::ExtraKey> extras = {{kvcache::ExtraTag::kModel, "m"}, {kvcache::ExtraTag::kCacheSalt, "5"}};
  std::vector<BlockHash> ours;
  for (size_t i = 0; i + 128 <= toks.size(); i += 128)
    ours.push_back(HashBlock(ours.empty() ? nullptr : &ours.back(), std::span<const TokenId>(toks).subspan(i, 128), extras));
  std::vector<uint32_t> ids(toks.begin(), toks.end());
  EXPECT_EQ(ours, kvcache::ChainKeys(ids, extras));
  ASSERT_EQ(ours.size(), 3u);
  // Another model fingerprint names every block differently.
  std::vector<kvcache::ExtraKey> other = {{kvcache::ExtraTag::kModel, "m2"}, {kvcache::ExtraTag::kCacheSalt, "5"}};
  auto theirs = kvcache::ChainKeys(ids, other);
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_FALSE(ours[i] == theirs[i]);
}

TEST(BlockManager, AllocateRefReleaseCounts) {
  BlockManager m(4, 2, 128);
  EXPECT_EQ(m.available_blocks(), 4);
  int32_t a = m.Allocate(), b = m.Allocate();
  EXPECT_NE(a, b);
  EXPECT_EQ(m.used_blocks(), 2);
  m.Ref(a);
  EXPECT_EQ(m.refcount(a), 2);
  m.Release(a);
  EXPECT_EQ(m.used_blocks(), 2);
  m.Release(a);
  m.Release(b);
  EXPECT_EQ(m.used_blocks(), 0);
  for (int i = 0; i < 4; ++i) EXPECT_GE(m.Allocate(), 0);
  EXPECT_EQ(m.Allocate(), -1);  // exhausted, never over-committed
}

TEST(BlockManager, HashChainNamesTheWholePrefix) {
  std::vector<TokenId> x(256, 7), y(256, 7);
  y[0] = 8;  // differs only in block 0
  auto hx = Chain(x, 128), hy = Chain(y, 128);
  EXPECT_NE(hx[0], hy[0]);
  EXPECT_NE(hx[1], hy[1]);  // same tokens in block 1, different parent
  EXPECT_NE(Chain(x, 128, 1)[0], hx[0]);  // extra key changes the name
  EXPECT_EQ(Chain(x, 128), hx);
}

TEST(BlockManager, MatchSharesRegisteredBlocksAndStopsAtFirstMiss) {
  BlockManager m(8, 1, 128);
  std::vector<TokenId> t(384);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<TokenId>(i);
  auto h = Chain(t, 128);
  int32_t b0 = m.Allocate(), b1 = m.Allocate();
  m.Register(b0, h[0]);
  m.Register(b1, h[1]);
  auto hit = m.Match(h);  // h[2] never registered
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], b0);
  EXPECT_EQ(m.refcount(b0), 2);
  std::vector<BlockHash> skip = {h[1]};
  EXPECT_EQ(m.Match(std::span<const BlockHash>(h).subspan(2)).size(), 0u);
  m.ReleaseAll(&hit);
  EXPECT_EQ(m.refcount(b1), 1);
}

TEST(BlockManager, ReleasedCachedBlocksStayFindableUntilEvicted) {
  BlockManager m(2, 1, 128);
  std::vector<TokenId> t(128, 3);
  auto h = Chain(t, 128);
  int32_t b = m.Allocate();
  m.Register(b, h[0]);
  m.Release(b);
  EXPECT_EQ(m.available_blocks(), 2);  // cached but unreferenced counts as available
  auto hit = m.Match(h);
  ASSERT_EQ(hit.size(), 1u);
  EXPECT_EQ(hit[0], b);
  m.ReleaseAll(&hit);
  // Allocation takes the never-cached block first, then evicts the cached one.
  int32_t x = m.Allocate();
  EXPECT_NE(x, b);
  EXPECT_TRUE(m.IsCached(h[0]));
  int32_t y = m.Allocate();
  EXPECT_EQ(y, b);
  EXPECT_FALSE(m.IsCached(h[0]));
  EXPECT_EQ(m.Match(h).size(), 0u);
}

TEST(BlockManager, EvictsLeastRecentlyReleased) {
  BlockManager m(2, 1, 128);
  std::vector<TokenId> t(256, 1);
  t[128] = 2;
  auto h = Chain(t, 128);
  int32_t a = m.Allocate(), b = m.Allocate();
  m.Register(a, h[0]);
  m.Register(b, h[1]);
  m.Release(b);
  m.Release(a);  // a released last: most recent
  EXPECT_EQ(m.Allocate(), b);
  EXPECT_TRUE(m.IsCached(h[0]));
}

TEST(BlockManager, DuplicateRegistrationKeepsTheFirstBlock) {
  BlockManager m(2, 1, 128);
  int32_t a = m.Allocate(), b = m.Allocate();
  m.Register(a, H(42));
  m.Register(b, H(42));
  std::vector<BlockHash> h = {H(42)};
  auto hit = m.Match(h);
  ASSERT_EQ(hit.size(), 1u);
  EXPECT_EQ(hit[0], a);
  m.Release(b);  // b was never named: back to the free list
  EXPECT_EQ(m.Allocate(), b);
}

TEST(BlockManager, Slots) {
  BlockManager m(1, 2, 128);
  int32_t a = m.AllocateSlot(), b = m.AllocateSlot();
  EXPECT_NE(a, b);
  EXPECT_EQ(m.AllocateSlot(), -1);
  m.FreeSlot(a);
  EXPECT_EQ(m.free_slots(), 1);
  EXPECT_EQ(m.AllocateSlot(), a);
}

}  // namespace
}  // namespace ladle::engine
