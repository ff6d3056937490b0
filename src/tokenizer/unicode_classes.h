// Per-code-point class flags for the hand-written pre-tokenizer. One byte per scalar value,
// built once from generated Unicode 16.0 ranges (unicode_tables.inc), so the hot loop is a
// table load instead of a regex engine. The regexes remain the oracle (tests/unit/tokenizer),
// and utf8proc cross-checks the tables.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ladle::tokenizer::unicode {

enum : uint8_t {
  kLetter = 1 << 0,      // \p{L}
  kMark = 1 << 1,        // \p{M}
  kNumber = 1 << 2,      // \p{N}
  kPunct = 1 << 3,       // \p{P}
  kSymbol = 1 << 4,      // \p{S}
  kSpace = 1 << 5,       // \s as Oniguruma defines it for Unicode (White_Space)
  kCjk = 1 << 6,         // [一-龥぀-ゟ゠-ヿ]: DeepSeek's second split
  kAsciiPunct = 1 << 7,  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]
};

// Flags for a code point; code points past U+10FFFF (used for invalid bytes) get 0.
uint8_t ClassOf(uint32_t cp);

// Decodes one UTF-8 code point at p (p < end). Invalid or truncated sequences decode as one
// byte with cp = kInvalidCp, so arbitrary bytes still tokenize (and round-trip) deterministically.
inline constexpr uint32_t kInvalidCp = 0x110000;
struct Decoded {
  uint32_t cp;
  uint32_t len;
};
inline Decoded DecodeUtf8(const unsigned char* p, const unsigned char* end) {
  const unsigned char c = p[0];
  if (c < 0x80) return {c, 1};
  auto cont = [&](ptrdiff_t i) { return p + i < end && (p[i] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) {
    if (cont(1)) return {(uint32_t(c & 0x1F) << 6) | (p[1] & 0x3F), 2};
  } else if (c >= 0xE0 && c <= 0xEF) {
    if (cont(1) && cont(2)) {
      uint32_t cp = (uint32_t(c & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
      if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
    }
  } else if (c >= 0xF0 && c <= 0xF4) {
    if (cont(1) && cont(2) && cont(3)) {
      uint32_t cp = (uint32_t(c & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) |
                    (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
      if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
    }
  }
  return {kInvalidCp, 1};
}

// The class table itself (0x110001 entries), for callers that inline the lookup.
const uint8_t* ClassTable();

}  // namespace ladle::tokenizer::unicode
