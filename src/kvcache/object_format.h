// The on-disk chunk object: one file per (block, failure domain). A plain `fs` store writes one
// chunk holding the whole value (k = 1, m = 0); `ec:K+M` writes K data chunks and M parity chunks.
//
//   offset  size  field
//        0     4  magic "LKV1" (0x31564b4c little-endian)
//        4     2  version (1)
//        6     2  header length (88)
//        8    16  key (lo, hi)
//       24     8  value length (the whole block's, not the chunk's)
//       32     8  write time, ms since the epoch
//       40     8  write id: tells two writes of one key apart, so chunks of different writes
//                 are never mixed in one decode
//       48    16  parent key (zero when flags bit 0 is clear)
//       64     4  chunk length (= ceil(value length / k))
//       68     4  depth in the chain (0 = root or unknown parent)
//       72     1  chunk index (0..k-1 data, k..k+m-1 parity)
//       73     1  k
//       74     1  m
//       75     1  traffic class
//       76     1  flags (bit 0: parent present)
//       77    11  zero
//       88     n  payload (chunk length bytes)
//     88+n     4  CRC32C (ISA-L crc32_iscsi, standard init/xor) over bytes [0, 88+n)
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
inline constexpr uint16_t kChunkVersion = 1;
inline constexpr size_t kChunkHeaderBytes = 88;
inline constexpr size_t kChunkTrailerBytes = 4;
// A block larger than this is refused (and a header claiming more is corrupt).
inline constexpr uint64_t kMaxValueBytes = 1ULL << 30;
inline constexpr unsigned kMaxDomains = 32;

struct ChunkHeader {
  BlockKey key;
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
};

struct DecodedChunk {
  ChunkHeader header;
  std::span<const uint8_t> payload;  // into the decoded bytes
};

// CRC32C (Castagnoli) via ISA-L: Crc32c("123456789") == 0xe3069283.
uint32_t Crc32c(const void* data, size_t len);
// The chunk length of a value of `value_len` bytes coded over k data chunks.
inline uint32_t ChunkLenFor(uint64_t value_len, unsigned k) {
  return static_cast<uint32_t>((value_len + k - 1) / k);
}
inline size_t EncodedChunkSize(uint32_t chunk_len) { return kChunkHeaderBytes + chunk_len + kChunkTrailerBytes; }

// Writes header + payload + CRC into `out` (EncodedChunkSize(h.chunk_len) bytes).
// Precondition: payload.size() == h.chunk_len and the geometry is valid (CHECKed).
void EncodeChunk(const ChunkHeader& h, std::span<const uint8_t> payload, uint8_t* out);
std::vector<uint8_t> EncodeChunk(const ChunkHeader& h, std::span<const uint8_t> payload);

// Validates magic, version, lengths, geometry, reserved bytes and CRC. Any mismatch is
// kDataLoss (the store turns it into a miss).
Result<DecodedChunk> DecodeChunk(std::span<const uint8_t> bytes);
// Only the header fields (for index rebuild from a file's first bytes; no CRC check possible).
Result<ChunkHeader> DecodeChunkHeader(std::span<const uint8_t> bytes);

}  // namespace ladle::kvcache
