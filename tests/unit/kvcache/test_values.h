// Deterministic keys and values shared by the tests and the torn-write child: a value is a pure
// function of its key and length, and its first 8 bytes encode the length, so a reader can
// check any block it gets back without remembering what was written.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "ladle/kvcache/kv_store.h"

namespace testing_values {

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
inline ladle::kvcache::BlockKey KeyFor(uint64_t i) { return {Mix(i * 2 + 1), Mix(i * 2 + 2)}; }
inline size_t LengthFor(const ladle::kvcache::BlockKey& key, uint64_t round) {
  return 8 + Mix(key.lo ^ round) % (200 * 1024);
}
inline std::vector<uint8_t> ValueFor(const ladle::kvcache::BlockKey& key, size_t len) {
  std::vector<uint8_t> v(len);
  uint64_t s = key.lo ^ (key.hi << 1) ^ len;
  for (size_t i = 0; i < len; i += 8) {
    s = Mix(s);
    std::memcpy(v.data() + i, &s, std::min<size_t>(8, len - i));
  }
  if (len >= 8) std::memcpy(v.data(), &len, 8);
  return v;
}
// True when `v` is exactly what ValueFor(key, len) gives for the length it carries.
inline bool IsValueOf(const ladle::kvcache::BlockKey& key, const uint8_t* v, size_t n) {
  if (n < 8) return false;
  uint64_t len;
  std::memcpy(&len, v, 8);
  if (len != n) return false;
  std::vector<uint8_t> want = ValueFor(key, n);
  return std::memcmp(want.data(), v, n) == 0;
}

}  // namespace testing_values
