#include <fmt/format.h>
#include <utf8proc.h>

#include "impl.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::tokenizer {
namespace {

// Bytes a lead byte announces, or 0 if it can never start a code point.
int SequenceLength(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Valid range of the second byte after lead c (the rest are 0x80..0xBF).
bool SecondByteOk(unsigned char c, unsigned char b) {
  switch (c) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Length of a valid sequence at i (> 0), 0 if the bytes there are invalid, and -1 if they
// are a valid but incomplete prefix running to the end of the buffer.
int Classify(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const int need = SequenceLength(c);
  if (need <= 1) return need;
  for (int k = 1; k < need; ++k) {
    if (i + k >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? SecondByteOk(c, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
  }
  return need;
}

}  // namespace

size_t Utf8EmitLength(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    int n = Classify(bytes, i);
    if (n < 0) break;    // keep the incomplete tail
    i += n > 0 ? n : 1;  // an invalid byte can never complete: let it through
  }
  return i;
}

bool IsValidUtf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    int n = Classify(bytes, i);
    if (n <= 0) return false;
    i += n;
  }
  return true;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

Status IncrementalDecoder::Push(TokenId id, std::string* out) {
  if (!tok_.IsValidId(id)) return OutOfRange(fmt::format("token id {} is not in the vocabulary", id));
  pending_.append(tok_.impl().Bytes(id));
  const size_t n = Utf8EmitLength(pending_);
  out->append(pending_, 0, n);
  pending_.erase(0, n);
  return Status::Ok();
}

std::string IncrementalDecoder::Flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace ladle::tokenizer
