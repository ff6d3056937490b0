// The on-disk chunk object. Blocks are stored in STRIPES: a stripe is up to K consecutive blocks
// of one chain (one Put), coded Reed-Solomon K+M across the K+M failure domains. Data chunk j
// (domain j) is block j itself, whole: a healthy read is one file of one block (112 KiB at the
// recipe's size), never K small pieces. Parity chunk p (domain K+p) is computed over the stripe's
// blocks, each zero-padded to the stripe's longest ("slot"). A stripe narrower than K (the tail
// of a chain) is a shortened code: data chunks g..K-1 are all zero, known without being stored.
// A plain `fs` store is K = 1, M = 0: one block per stripe, one file per block.
//
// Every chunk file of a stripe is named by the stripe's key on its domain: a digest of its first
// block's key and its write id, so every write is a new stripe and a rewrite of a block never
// touches the files of the stripe that held it before (its other blocks stay readable).
//
//   offset  size  field
//        0     4  magic "LKV1" (0x31564b4c little-endian)
//        4     2  version (2)
//        6     2  header length (88 + 24 * width)
//        8    16  stripe key (lo, hi) = StripeKey(members[0].key, write id)
//       24     8  value length: the stripe's blocks together
//       32     8  write time, ms since the epoch
//       40     8  write id: tells two writes of one stripe key apart, so chunks of different
//                 writes are never mixed in one decode
//       48    16  parent key of members[0] (zero when flags bit 0 is clear)
//       64     4  chunk length: members[idx].len for a data chunk, the slot for a parity chunk
//       68     4  depth of members[0] in the chain (0 = root or unknown parent); member j is
//                 one deeper than member j-1, which is its parent
//       72     1  chunk index (0..width-1 data, k..k+m-1 parity)
//       73     1  k
//       74     1  m
//       75     1  traffic class
//       76     1  flags (bit 0: parent present)
//       77     1  width: blocks in the stripe (1..k)
//       78    10  zero
//       88  24*w  members: key (lo, hi), length (8), per block in chain order
//      ...     n  payload (chunk length bytes)
//      ...     4  CRC32C (ISA-L crc32_iscsi, standard init/xor) over every byte before it
//
// Everything is little-endian. DecodeChunk is a pure function over bytes (the fuzzer drives it):
// every field is checked, and an input that decodes is exactly what EncodeChunk writes for it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::kvcache {

inline constexpr uint32_t kChunkMagic = 0x31564b4c;
inline constexpr uint16_t kChunkVersion = 2;
inline constexpr size_t kChunkHeaderBytes = 88;  // the fixed part
inline constexpr size_t kMemberBytes = 24;
inline constexpr size_t kChunkTrailerBytes = 4;
// A block larger than this is refused (and a header claiming more is corrupt).
inline constexpr uint64_t kMaxValueBytes = 1ULL << 30;
inline constexpr unsigned kMaxDomains = 32;

// One block of a stripe.
struct StripeMember {
  BlockKey key;
  uint64_t len = 0;
  friend bool operator==(const StripeMember&, const StripeMember&) = default;
};

// The name of a stripe's files.
BlockKey StripeKey(const BlockKey& first, uint64_t write_id);

struct ChunkHeader {
  BlockKey key;  // the stripe's: StripeKey(members[0].key, write_id)
  uint64_t value_len = 0;
  int64_t write_ms = 0;
  uint64_t write_id = 0;
  bool has_parent = false;
  BlockKey parent;
  uint32_t chunk_len = 0;
  uint32_t depth = 0;
  uint8_t chunk_idx = 0;
  uint8_t k = 1;
  uint8_t m = 0;
  TrafficClass cls = TrafficClass::kChatbot;
  std::vector<StripeMember> members;  // width = members.size(), 1..k
};

struct DecodedChunk {
  ChunkHeader header;
  std::span<const uint8_t> payload;  // into the decoded bytes
};

// CRC32C (Castagnoli) via ISA-L: Crc32c("123456789") == 0xe3069283.
uint32_t Crc32c(const void* data, size_t len);
// The slot: the longest member (parity chunks are this long; data chunks pad to it).
uint64_t SlotLen(std::span<const StripeMember> members);
// What chunk `idx` of a stripe holds: its block's length (data) or the slot (parity).
uint64_t ChunkLenOf(std::span<const StripeMember> members, unsigned idx, unsigned k);
inline size_t HeaderBytes(size_t width) { return kChunkHeaderBytes + kMemberBytes * width; }
inline size_t EncodedChunkSize(size_t width, uint64_t chunk_len) {
  return HeaderBytes(width) + chunk_len + kChunkTrailerBytes;
}

// Writes header + payload + CRC into `out` (EncodedChunkSize(width, h.chunk_len) bytes).
// Precondition: payload.size() == h.chunk_len and the geometry is valid (CHECKed).
void EncodeChunk(const ChunkHeader& h, std::span<const uint8_t> payload, uint8_t* out);
std::vector<uint8_t> EncodeChunk(const ChunkHeader& h, std::span<const uint8_t> payload);

// Validates magic, version, lengths, geometry, reserved bytes and CRC. Any mismatch is
// kDataLoss (the store turns it into a miss).
Result<DecodedChunk> DecodeChunk(std::span<const uint8_t> bytes);
// Only the header and member table (index rebuild from a file's first bytes; no CRC check).
Result<ChunkHeader> DecodeChunkHeader(std::span<const uint8_t> bytes);

}  // namespace ladle::kvcache
