#include "unicode_classes.h"

#include <cstring>
#include <memory>
#include <string_view>

namespace ladle::tokenizer::unicode {
namespace {

struct ClassRange {
  uint32_t first;
  uint32_t last;
  uint8_t flags;
};

// General_Category groups and White_Space from Unicode 16.0, the version Hugging Face's
// Oniguruma uses (see tools/unicode/gen_tables.mjs for why not utf8proc's 15.0).
constexpr ClassRange kRanges[] = {
#include "unicode_tables.inc"
};

struct Table {
  std::unique_ptr<uint8_t[]> data{new uint8_t[kInvalidCp + 1]()};
  Table() {
    uint8_t* d = data.get();
    for (const ClassRange& r : kRanges) std::memset(d + r.first, r.flags, r.last - r.first + 1);
    // DeepSeek's second Split: [一-龥぀-ゟ゠-ヿ].
    for (uint32_t cp = 0x4E00; cp <= 0x9FA5; ++cp) d[cp] |= kCjk;
    for (uint32_t cp = 0x3040; cp <= 0x30FF; ++cp) d[cp] |= kCjk;
    for (uint32_t cp : std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")) d[cp] |= kAsciiPunct;
  }
};

const Table& GetTable() {
  static const Table table;
  return table;
}

}  // namespace

const uint8_t* ClassTable() { return GetTable().data.get(); }

uint8_t ClassOf(uint32_t cp) { return cp <= kInvalidCp ? ClassTable()[cp] : 0; }

Decoded DecodeUtf8(const unsigned char* p, const unsigned char* end) {
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

}  // namespace ladle::tokenizer::unicode
