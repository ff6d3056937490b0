// The fetcher's wire format, shared by fetcher_server.cc and fetcher_client.cc. One message per
// SOCK_SEQPACKET packet: a 16-byte header (type, version, count, request id), then a body of
// little-endian fields. Keys are two uint64 (lo, hi). Replies carry the request's id.
//
//   HELLO            -> HELLO_REPLY   stride u64, block_bytes u64, cache_slots u32, put_first u32,
//                                     put_count u32, name (u16 len + bytes); the shm fd in SCM_RIGHTS
//   MATCH  n×key     -> MATCH_REPLY   code u16, hits u64, message
//   FETCH  n×key     -> FETCH_KEYS    (any number, streamed) n×{index u32, slot u32, len u32, code u16, pad u16}
//                       FETCH_DONE    code u16, message (after every key was answered)
//   RELEASE n×slot   (no reply)
//   PUT_ALLOC (count = n) -> PUT_ALLOC_REPLY n'×slot
//   PUT_FREE n×slot  (no reply)
//   PUT    class u8, has_parent u8, parent key, n×{key, slot u32, len u32} -> PUT_REPLY n×code u16, message
//   STAT             -> STAT_REPLY    n×u64 (FetcherStats in declaration order; readers take what they know)
//   ERROR            code u16, message: the request was refused as a whole (too large, draining)
//
// A packet that does not parse is a protocol violation: the fetcher drops that client.
#pragma once

#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <string>
#include <string_view>

#include "ladle/core/status.h"
#include "ladle/kvcache/fetcher.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::kvcache::wire {

inline constexpr uint16_t kVersion = 1;
// Keys (or slots) per message. Bounded so that the largest packet (PUT: 24 bytes an entry) stays
// well under the default socket buffer (net.core.wmem_default, ~208 KiB), which caps a
// SOCK_SEQPACKET datagram; the client splits longer fetches and matches.
inline constexpr size_t kMaxKeys = 4096;
inline constexpr size_t kHeaderBytes = 16;
inline constexpr size_t kMaxMessage = 512;
inline constexpr size_t kMaxPacket = kHeaderBytes + 18 + kMaxKeys * 24 + kMaxMessage + 64;

enum class Type : uint16_t {
  kHello = 1,
  kHelloReply = 2,
  kMatch = 3,
  kMatchReply = 4,
  kFetch = 5,
  kFetchKeys = 6,
  kFetchDone = 7,
  kRelease = 8,
  kPutAlloc = 9,
  kPutAllocReply = 10,
  kPutFree = 11,
  kPut = 12,
  kPutReply = 13,
  kStat = 14,
  kStatReply = 15,
  kError = 16,
};

struct Header {
  Type type{};
  uint16_t version = kVersion;
  uint32_t count = 0;
  uint64_t req = 0;
};

// Appends little-endian fields to a packet.
class Writer {
 public:
  Writer(Type type, uint64_t req, uint32_t count) {
    U16(static_cast<uint16_t>(type));
    U16(kVersion);
    U32(count);
    U64(req);
  }
  void U8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Key(const BlockKey& k) {
    U64(k.lo);
    U64(k.hi);
  }
  // A length-prefixed string, cut at kMaxMessage.
  void Str(std::string_view s) {
    if (s.size() > kMaxMessage) s = s.substr(0, kMaxMessage);
    U16(static_cast<uint16_t>(s.size()));
    buf_.append(s.data(), s.size());
  }
  // Rewrites the header's count (for packets filled before their count is known).
  void SetCount(uint32_t count) {
    for (int i = 0; i < 4; ++i) buf_[4 + i] = static_cast<char>((count >> (8 * i)) & 0xff);
  }
  size_t size() const { return buf_.size(); }
  std::string Take() { return std::move(buf_); }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string buf_;
};

// Reads little-endian fields; any read past the end sets !ok() and yields zeros.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : p_(bytes) {}
  uint8_t U8() { return static_cast<uint8_t>(Le(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Le(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Le(4)); }
  uint64_t U64() { return Le(8); }
  BlockKey Key() {
    BlockKey k;
    k.lo = U64();
    k.hi = U64();
    return k;
  }
  std::string Str() {
    size_t n = U16();
    if (!Need(n)) return {};
    std::string s(reinterpret_cast<const char*>(p_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? p_.size() - pos_ : 0; }

  // The header, or false when the packet is too short or of another version.
  bool ReadHeader(Header* h) {
    uint16_t type = U16();
    h->version = U16();
    h->count = U32();
    h->req = U64();
    h->type = static_cast<Type>(type);
    return ok_ && h->version == kVersion && type >= 1 && type <= static_cast<uint16_t>(Type::kError);
  }

 private:
  bool Need(size_t n) {
    if (!ok_ || p_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  uint64_t Le(int n) {
    if (!Need(static_cast<size_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::span<const uint8_t> p_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Status codes travel as their numeric value; an unknown value reads as kInternal.
inline StatusCode CodeFrom(uint16_t v) {
  return v <= static_cast<uint16_t>(StatusCode::kOverloaded) ? static_cast<StatusCode>(v) : StatusCode::kInternal;
}

// FetcherStats as a list of uint64, in declaration order: a newer fetcher may append fields.
inline constexpr size_t kStatFields = 22;
inline void EncodeStats(const FetcherStats& s, Writer* w) {
  const uint64_t v[kStatFields] = {s.fetches,      s.keys_fetched,   s.shm_hits,     s.joined,        s.store_reads,
                                   s.misses,       s.exhausted,      s.evictions,    s.puts,          s.put_drops,
                                   s.store_errors, s.slots,          s.slots_used,   s.slots_pinned,  s.slots_free,
                                   s.slots_loading, s.put_slots,     s.put_slots_free, s.clients,     s.store_hits,
                                   s.store_misses, s.store_healthy ? 1u : 0u};
  for (uint64_t x : v) w->U64(x);
}
inline FetcherStats DecodeStats(uint32_t count, Reader* r) {
  uint64_t v[kStatFields] = {};
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t x = r->U64();
    if (i < kStatFields) v[i] = x;
  }
  FetcherStats s;
  uint64_t* out[] = {&s.fetches,      &s.keys_fetched, &s.shm_hits,     &s.joined,       &s.store_reads,
                     &s.misses,       &s.exhausted,    &s.evictions,    &s.puts,         &s.put_drops,
                     &s.store_errors, &s.slots,        &s.slots_used,   &s.slots_pinned, &s.slots_free,
                     &s.slots_loading, &s.put_slots,   &s.put_slots_free, &s.clients,    &s.store_hits,
                     &s.store_misses};
  for (size_t i = 0; i < std::size(out); ++i) *out[i] = v[i];
  s.store_healthy = v[21] != 0;
  return s;
}

}  // namespace ladle::kvcache::wire
