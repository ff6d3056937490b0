// Chunk encode/decode; see object_format.h for the layout.
#include "object_format.h"

#include <isa-l/crc.h>

#include <algorithm>
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

// The member table, the index and the chunk length agree with a stripe of k+m.
bool GeometryOk(const ChunkHeader& h) {
  size_t w = h.members.size();
  if (!(h.k >= 1 && h.k + h.m <= kMaxDomains && w >= 1 && w <= h.k)) return false;
  if (!(h.chunk_idx < w || (h.chunk_idx >= h.k && h.chunk_idx < h.k + h.m))) return false;
  if (!(h.key == StripeKey(h.members[0].key, h.write_id))) return false;
  uint64_t total = 0;
  for (const StripeMember& mb : h.members) {
    if (mb.len > kMaxValueBytes) return false;
    total += mb.len;
  }
  return total == h.value_len && h.chunk_len == ChunkLenOf(h.members, h.chunk_idx, h.k);
}

}  // namespace

BlockKey StripeKey(const BlockKey& first, uint64_t write_id) {
  // SplitMix64 finalisers of the write id, one per half: distinct writes of one block get
  // unrelated names, and the name is checkable from the header alone.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  return BlockKey{first.lo ^ mix(write_id), first.hi ^ mix(write_id ^ 0x5354524950454b59ULL)};
}

uint64_t SlotLen(std::span<const StripeMember> members) {
  uint64_t slot = 0;
  for (const StripeMember& mb : members) slot = std::max(slot, mb.len);
  return slot;
}

uint64_t ChunkLenOf(std::span<const StripeMember> members, unsigned idx, unsigned k) {
  return idx < k ? (idx < members.size() ? members[idx].len : 0) : SlotLen(members);
}

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
  LADLE_CHECK(GeometryOk(h));
  LADLE_CHECK(payload.size() == h.chunk_len);
  LADLE_CHECK(static_cast<uint8_t>(h.cls) <= 1);
  size_t hdr = HeaderBytes(h.members.size());
  std::memset(out, 0, kChunkHeaderBytes);
  Put32(out + 0, kChunkMagic);
  Put16(out + 4, kChunkVersion);
  Put16(out + 6, static_cast<uint16_t>(hdr));
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
  out[77] = static_cast<uint8_t>(h.members.size());
  uint8_t* mp = out + kChunkHeaderBytes;
  for (const StripeMember& mb : h.members) {
    Put64(mp, mb.key.lo);
    Put64(mp + 8, mb.key.hi);
    Put64(mp + 16, mb.len);
    mp += kMemberBytes;
  }
  if (!payload.empty()) std::memcpy(out + hdr, payload.data(), payload.size());
  size_t body = hdr + payload.size();
  Put32(out + body, Crc32c(out, body));
}

std::vector<uint8_t> EncodeChunk(const ChunkHeader& h, std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(EncodedChunkSize(h.members.size(), h.chunk_len));
  EncodeChunk(h, payload, out.data());
  return out;
}

Result<ChunkHeader> DecodeChunkHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < kChunkHeaderBytes) return Corrupt("short header");
  const uint8_t* p = bytes.data();
  if (Get32(p) != kChunkMagic) return Corrupt("bad magic");
  if (Get16(p + 4) != kChunkVersion) return Corrupt("unknown version");
  size_t width = p[77];
  if (width < 1 || width > kMaxDomains) return Corrupt("bad width");
  if (Get16(p + 6) != HeaderBytes(width)) return Corrupt("bad header length");
  if (bytes.size() < HeaderBytes(width)) return Corrupt("short member table");
  for (size_t i = 78; i < kChunkHeaderBytes; ++i) {
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
  h.members.resize(width);
  for (size_t j = 0; j < width; ++j) {
    const uint8_t* mp = p + kChunkHeaderBytes + j * kMemberBytes;
    h.members[j].key = BlockKey{Get64(mp), Get64(mp + 8)};
    h.members[j].len = Get64(mp + 16);
  }
  if (!GeometryOk(h)) return Corrupt("bad geometry");
  return h;
}

Result<DecodedChunk> DecodeChunk(std::span<const uint8_t> bytes) {
  LADLE_ASSIGN_OR_RETURN(ChunkHeader h, DecodeChunkHeader(bytes));
  size_t hdr = HeaderBytes(h.members.size());
  if (bytes.size() != EncodedChunkSize(h.members.size(), h.chunk_len)) return Corrupt("length does not match header");
  size_t body = hdr + h.chunk_len;
  if (Crc32c(bytes.data(), body) != Get32(bytes.data() + body)) return Corrupt("CRC mismatch");
  std::span<const uint8_t> payload = bytes.subspan(hdr, h.chunk_len);
  return DecodedChunk{std::move(h), payload};
}

}  // namespace ladle::kvcache
