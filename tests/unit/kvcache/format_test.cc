// Keys and the chunk format: fixed digests, hex round trips, tagged extras, CRC32C and a decoder
// that refuses every truncation and every single-byte change of a valid chunk.
#include <gtest/gtest.h>

#include "ec_codec.h"
#include "object_format.h"
#include "test_util.h"

namespace kvtest {
namespace {

TEST(KvKeys, HexRoundTrip) {
  BlockKey k{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(k.Hex(), "fedcba98765432100123456789abcdef");
  auto back = BlockKey::FromHex(k.Hex());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, k);
  EXPECT_EQ(*BlockKey::FromHex("FEDCBA98765432100123456789ABCDEF"), k);
  EXPECT_FALSE(BlockKey::FromHex("abc").ok());
  EXPECT_FALSE(BlockKey::FromHex("zedcba98765432100123456789abcdef").ok());
}

TEST(KvKeys, ChainKeysAreAChainOverFullBlocks) {
  std::vector<uint32_t> tokens(3 * kBlockTokens + 5);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 31);
  auto keys = ChainKeys(tokens, {});
  ASSERT_EQ(keys.size(), 3u);  // the trailing partial block has no key
  EXPECT_EQ(keys[0], ChainKey(nullptr, std::span(tokens).subspan(0, kBlockTokens), {}));
  BlockKey third = ChainKey(&keys[1], std::span(tokens).subspan(2 * kBlockTokens, kBlockTokens), {});
  EXPECT_EQ(keys[2].Hex(), third.Hex());
  // A different first block changes every later key.
  auto other = tokens;
  other[0] ^= 1;
  auto keys2 = ChainKeys(other, {});
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(keys[i] == keys2[i]);
  // The digest is fixed across processes and builds (a per-process seed would break sharing).
  EXPECT_EQ(ChainKey(nullptr, std::span(tokens).subspan(0, kBlockTokens), {}).Hex(), keys[0].Hex());
}

TEST(KvKeys, ExtrasAreTagged) {
  std::vector<uint32_t> block(kBlockTokens, 7);
  ExtraKey tenant{ExtraTag::kTenant, "a"};
  ExtraKey salt{ExtraTag::kCacheSalt, "a"};
  EXPECT_FALSE(ChainKey(nullptr, block, std::span(&tenant, 1)) == ChainKey(nullptr, block, std::span(&salt, 1)));
  std::vector<ExtraKey> ab_c{{ExtraTag::kTenant, "ab"}, {ExtraTag::kTenant, "c"}};
  std::vector<ExtraKey> a_bc{{ExtraTag::kTenant, "a"}, {ExtraTag::kTenant, "bc"}};
  EXPECT_FALSE(ChainKey(nullptr, block, ab_c) == ChainKey(nullptr, block, a_bc));
  EXPECT_FALSE(ChainKey(nullptr, block, {}) == ChainKey(nullptr, block, std::span(&tenant, 1)));
}

TEST(KvFormat, Crc32cKnownValue) { EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u); }

// A stripe of `width` blocks, the first `len` bytes long and each next one 3 bytes shorter.
ChunkHeader SampleHeader(uint64_t len, unsigned k, unsigned m, unsigned idx, unsigned width = 1) {
  ChunkHeader h;
  for (unsigned j = 0; j < width; ++j) {
    h.members.push_back({j == 0 ? BlockKey{1, 2} : BlockKey{10 + j, 20 + j}, len >= 3 * j ? len - 3 * j : 0});
    h.value_len += h.members.back().len;
  }
  h.write_ms = 1700000000000;
  h.write_id = 99;
  h.key = StripeKey(h.members[0].key, h.write_id);
  h.has_parent = true;
  h.parent = {3, 4};
  h.chunk_len = static_cast<uint32_t>(ChunkLenOf(h.members, idx, k));
  h.depth = 5;
  h.chunk_idx = static_cast<uint8_t>(idx);
  h.k = static_cast<uint8_t>(k);
  h.m = static_cast<uint8_t>(m);
  h.cls = TrafficClass::kAgent;
  return h;
}

TEST(KvFormat, RoundTripAndEveryByteMatters) {
  ChunkHeader h = SampleHeader(37, 10, 2, 11, 3);
  std::vector<uint8_t> payload(h.chunk_len);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 13);
  std::vector<uint8_t> bytes = EncodeChunk(h, payload);
  auto dec = DecodeChunk(bytes);
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  EXPECT_EQ(dec->header.key, h.key);
  EXPECT_EQ(dec->header.value_len, 37u + 34u + 31u);
  EXPECT_EQ(dec->header.members, h.members);
  EXPECT_EQ(dec->payload.size(), 37u);  // a parity chunk is the slot, the longest member
  EXPECT_EQ(dec->header.chunk_idx, 11);
  EXPECT_EQ(dec->header.depth, 5u);
  EXPECT_EQ(dec->header.cls, TrafficClass::kAgent);
  EXPECT_EQ(std::vector<uint8_t>(dec->payload.begin(), dec->payload.end()), payload);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80}) {
      auto bad = bytes;
      bad[i] ^= flip;
      EXPECT_FALSE(DecodeChunk(bad).ok()) << "byte " << i;
    }
  }
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(DecodeChunk(std::span(bytes).first(n)).ok()) << n;
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(DecodeChunk(longer).ok());
}

TEST(KvFormat, GeometryIsChecked) {
  // A data chunk is its own block's length; chunk 5 of a 3-wide stripe does not exist.
  ChunkHeader h = SampleHeader(37, 10, 2, 1, 3);
  EXPECT_EQ(h.chunk_len, 34u);
  std::vector<uint8_t> payload(h.chunk_len, 7);
  auto bytes = EncodeChunk(h, payload);
  ASSERT_TRUE(DecodeChunk(bytes).ok());
  EXPECT_EQ(bytes.size(), EncodedChunkSize(3, 34));
  auto bad = bytes;
  bad[72] = 5;  // chunk index of a virtual (all-zero, never stored) data chunk
  EXPECT_FALSE(DecodeChunkHeader(bad).ok());
  bad = bytes;
  bad[77] = 11;  // wider than k
  EXPECT_FALSE(DecodeChunkHeader(bad).ok());
}

TEST(KvFormat, EmptyValue) {
  ChunkHeader h = SampleHeader(0, 1, 0, 0);
  auto bytes = EncodeChunk(h, {});
  auto dec = DecodeChunk(bytes);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(dec->payload.size(), 0u);
}

TEST(KvEcCodec, AnyKOfNRebuilds) {
  const unsigned k = 10, m = 2;
  EcCodec codec(k, m);
  const size_t len = 1111;
  std::vector<std::vector<uint8_t>> chunks(k + m, std::vector<uint8_t>(len));
  for (unsigned d = 0; d < k; ++d) {
    for (size_t i = 0; i < len; ++i) chunks[d][i] = static_cast<uint8_t>(testing_values::Mix(d * 100000 + i));
  }
  std::vector<uint8_t*> p;
  for (auto& c : chunks) p.push_back(c.data());
  codec.Encode(len, p.data(), p.data() + k);
  // Every pattern of two losses.
  for (unsigned a = 0; a < k + m; ++a) {
    for (unsigned b = a + 1; b < k + m; ++b) {
      uint32_t sources = ((1u << (k + m)) - 1) & ~(1u << a) & ~(1u << b);
      std::vector<uint8_t*> src;
      for (unsigned d = 0; d < k + m; ++d) {
        if (sources & (1u << d)) src.push_back(chunks[d].data());
      }
      std::vector<std::vector<uint8_t>> out(k, std::vector<uint8_t>(len, 0));
      std::vector<uint8_t*> outp;
      for (auto& o : out) outp.push_back(o.data());
      ASSERT_TRUE(codec.Decode(len, sources, src.data(), outp.data()));
      for (unsigned j : {a, b}) {
        if (j < k) {
          EXPECT_EQ(out[j], chunks[j]) << a << "," << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvtest
