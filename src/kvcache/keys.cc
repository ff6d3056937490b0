// Chain keys: XXH3-128 over (parent, block token ids, tagged extras) with a fixed seed.
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstring>

#include "ladle/kvcache/kv_store.h"

namespace ladle::kvcache {
namespace {

// Fixed for all time: changing it (or making it per process) silently orphans every stored block.
constexpr XXH64_hash_t kChainSeed = 0x4c61646c654b5631ULL;  // "LadleKV1"

void PutLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string BlockKey::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) out[i] = kDigits[(hi >> (60 - 4 * i)) & 15];
  for (int i = 0; i < 16; ++i) out[16 + i] = kDigits[(lo >> (60 - 4 * i)) & 15];
  return out;
}

Result<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 32) return InvalidArgument("block key: want 32 hex digits, got " + std::to_string(hex.size()));
  BlockKey key;
  for (size_t i = 0; i < 32; ++i) {
    int d = HexDigit(hex[i]);
    if (d < 0) return InvalidArgument("block key: not a hex digit at " + std::to_string(i));
    uint64_t& word = i < 16 ? key.hi : key.lo;
    word = (word << 4) | static_cast<uint64_t>(d);
  }
  return key;
}

BlockKey ChainKey(const BlockKey* parent, std::span<const uint32_t> block_tokens, std::span<const ExtraKey> extras) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);  // required for a stack state before a *_reset_withSeed
  XXH3_128bits_reset_withSeed(&state, kChainSeed);
  uint8_t buf[16];
  PutLe64(buf, parent ? parent->lo : 0);
  PutLe64(buf + 8, parent ? parent->hi : 0);
  XXH3_128bits_update(&state, buf, 16);
  // Fixed-width little-endian ids: the digest is the same on every host and for every id width.
  uint8_t ids[4 * 64];
  size_t i = 0;
  while (i < block_tokens.size()) {
    size_t n = std::min<size_t>(64, block_tokens.size() - i);
    for (size_t j = 0; j < n; ++j) PutLe32(ids + 4 * j, block_tokens[i + j]);
    XXH3_128bits_update(&state, ids, 4 * n);
    i += n;
  }
  // Each extra is (tag, length, bytes): the tag keeps kinds apart, the length keeps a value's
  // end unambiguous ("ab"+"c" vs "a"+"bc").
  for (const ExtraKey& e : extras) {
    uint8_t head[12];
    PutLe32(head, static_cast<uint32_t>(e.tag));
    PutLe64(head + 4, e.value.size());
    XXH3_128bits_update(&state, head, 12);
    XXH3_128bits_update(&state, e.value.data(), e.value.size());
  }
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  return BlockKey{h.low64, h.high64};
}

std::vector<BlockKey> ChainKeys(std::span<const uint32_t> tokens, std::span<const ExtraKey> extras) {
  std::vector<BlockKey> keys;
  keys.reserve(tokens.size() / kBlockTokens);
  for (size_t b = 0; (b + 1) * kBlockTokens <= tokens.size(); ++b) {
    const BlockKey* parent = keys.empty() ? nullptr : &keys.back();
    keys.push_back(ChainKey(parent, tokens.subspan(b * kBlockTokens, kBlockTokens), extras));
  }
  return keys;
}

}  // namespace ladle::kvcache
