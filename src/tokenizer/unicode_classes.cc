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

}  // namespace ladle::tokenizer::unicode
