#include "unicode_classes.h"

#include <utf8proc.h>

#include <memory>

namespace ladle::tokenizer::unicode {
namespace {

bool IsWhiteSpace(uint32_t cp) {
  // Unicode White_Space, which is what Oniguruma's \s matches under a Unicode encoding.
  // Note U+001C..U+001F are *not* included (unlike Python's str.isspace).
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

uint8_t Compute(uint32_t cp) {
  uint8_t f = 0;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      f |= kLetter;
      break;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      f |= kMark;
      break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      f |= kNumber;
      break;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      f |= kPunct;
      break;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
      f |= kSymbol;
      break;
    default:
      break;
  }
  if (IsWhiteSpace(cp)) f |= kSpace;
  if ((cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x309F) ||
      (cp >= 0x30A0 && cp <= 0x30FF)) {
    f |= kCjk;
  }
  if (cp < 0x80 && ((cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) ||
                    (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E))) {
    f |= kAsciiPunct;
  }
  return f;
}

struct Table {
  std::unique_ptr<uint8_t[]> data{new uint8_t[kInvalidCp + 1]};
  Table() {
    for (uint32_t cp = 0; cp < kInvalidCp; ++cp) {
      data[cp] = (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : Compute(cp);
    }
    data[kInvalidCp] = 0;
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
