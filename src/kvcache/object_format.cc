// Chunk encode/decode; see object_format.h for the layout.
#include "object_format.h"

#include <isa-l/crc.h>

#include <cstring>

#include "ladle/core/logging.h"

namespace ladle::kvcache {
namespace {

void Put16(uint8_t* p, uint16_t v) { for (int i = 0; i < 2; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i)); }
void Put32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i)); }
void Put64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i)); }
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Status Corrupt(const char* what) { return Status(StatusCode::kDataLoss, std::string("kvcache chunk: ") + what); }

bool GeometryOk(uint64_t value_len, uint32_t chunk_len, unsigned idx, unsigned k, unsigned m) {
  return k >= 1 && k + m <= kMaxDomains && idx < k + m && value_len <= kMaxValueBytes &&
         chunk_len == ChunkLenFor(value_len, k);
}

}  // namespace

uint32_t Crc32c(const void* data, size_t len) {
  // crc32_iscsi takes an int length; chunks are below kMaxValueBytes, but stay safe anyway.
  uint32_t crc = 0xffffffffu;
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    int n = static_cast<int>(std::min<size_t>(len, 1u << 30));
    crc = crc32_iscsi(const_cast<uint8_t*>(p), n, crc);
    p += n;
    len -= static_cast<size_t>(n);
  }
  return crc ^ 0xffffffffu;
}

void EncodeChunk(const ChunkHeader& h, std::span<const uint8_t> payload, uint8_t* out) {
  LADLE_CHECK(GeometryOk(h.value_len, h.chunk_len, h.chunk_idx, h.k, h.m));
  LADLE_CHECK(payload.size() == h.chunk_len);
  LADLE_CHECK(static_cast<uint8_t>(h.cls) <= 1);
  std::memset(out, 0, kChunkHeaderBytes);
  Put32(out + 0, kChunkMagic);
  Put16(out + 4, kChunkVersion);
  Put16(out + 6, kChunkHeaderBytes);
  Put64(out + 8, h.key.lo);
  Put64(out + 16, h.key.hi);
  Put64(out + 24, h.value_len);
  Put64(out + 32, static_cast<uint64_t>(h.write_ms));
  Put64(out + 40, h.write_id);
  if (h.has_parent) {
    Put64(out + 48, h.parent.lo);
    Put64(out + 56, h.parent.hi);
  }
  Put32(out + 64, h.chunk_len);
  Put32(out + 68, h.depth);
  out[72] = h.chunk_idx;
  out[73] = h.k;
  out[74] = h.m;
  out[75] = static_cast<uint8_t>(h.cls);
  out[76] = h.has_parent ? 1 : 0;
  if (!payload.empty()) std::memcpy(out + kChunkHeaderBytes, payload.data(), payload.size());
  size_t body = kChunkHeaderBytes + payload.size();
  Put32(out + body, Crc32c(out, body));
}

std::vector<uint8_t> EncodeChunk(const ChunkHeader& h, std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(EncodedChunkSize(h.chunk_len));
  EncodeChunk(h, payload, out.data());
  return out;
}

Result<ChunkHeader> DecodeChunkHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < kChunkHeaderBytes) return Corrupt("short header");
  const uint8_t* p = bytes.data();
  if (Get32(p) != kChunkMagic) return Corrupt("bad magic");
  if (Get16(p + 4) != kChunkVersion) return Corrupt("unknown version");
  if (Get16(p + 6) != kChunkHeaderBytes) return Corrupt("bad header length");
  for (size_t i = 77; i < kChunkHeaderBytes; ++i) {
    if (p[i] != 0) return Corrupt("reserved bytes set");
  }
  ChunkHeader h;
  h.key = BlockKey{Get64(p + 8), Get64(p + 16)};
  h.value_len = Get64(p + 24);
  h.write_ms = static_cast<int64_t>(Get64(p + 32));
  h.write_id = Get64(p + 40);
  h.parent = BlockKey{Get64(p + 48), Get64(p + 56)};
  h.chunk_len = Get32(p + 64);
  h.depth = Get32(p + 68);
  h.chunk_idx = p[72];
  h.k = p[73];
  h.m = p[74];
  if (p[75] > 1) return Corrupt("unknown traffic class");
  h.cls = static_cast<TrafficClass>(p[75]);
  if (p[76] > 1) return Corrupt("unknown flags");
  h.has_parent = p[76] == 1;
  if (!h.has_parent && (h.parent.lo != 0 || h.parent.hi != 0)) return Corrupt("parent without flag");
  if (!GeometryOk(h.value_len, h.chunk_len, h.chunk_idx, h.k, h.m)) return Corrupt("bad geometry");
  return h;
}

Result<DecodedChunk> DecodeChunk(std::span<const uint8_t> bytes) {
  LADLE_ASSIGN_OR_RETURN(ChunkHeader h, DecodeChunkHeader(bytes));
  if (bytes.size() != EncodedChunkSize(h.chunk_len)) return Corrupt("length does not match header");
  size_t body = kChunkHeaderBytes + h.chunk_len;
  if (Crc32c(bytes.data(), body) != Get32(bytes.data() + body)) return Corrupt("CRC mismatch");
  return DecodedChunk{h, bytes.subspan(kChunkHeaderBytes, h.chunk_len)};
}

}  // namespace ladle::kvcache
