#include "tokenizer_fixture.h"

#include <memory>
#include <vector>

namespace ladle::testing {

const tokenizer::Tokenizer* SharedTokenizer() {
  static std::unique_ptr<tokenizer::Tokenizer> tok = [] {
    auto r = tokenizer::Tokenizer::FromFile(TokenizerPath());
    if (!r.ok()) {
      ADD_FAILURE() << r.status().ToString();
      return std::unique_ptr<tokenizer::Tokenizer>();
    }
    return std::make_unique<tokenizer::Tokenizer>(std::move(r).value());
  }();
  return tok.get();
}

void AppendUtf8(std::string* s, uint32_t cp) {
  if (cp < 0x80) {
    s->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string RandomTrickyText(std::mt19937& rng, size_t chars) {
  static const std::vector<uint32_t> kAlphabet = {
      'a', 'b', 'Z', 'q', 'e', ' ', ' ', ' ', '\t', '\n', '\n', '\r', '\v', '\f', '.', ',', '!',
      '\'', '"', '-', '_', '(', ')', '[', '{', '<', '>', '|', '/', '\\', '#', '@', '$', '%', '^',
      '0', '1', '2', '9', 0xA0, 0x3000, 0x2003, 0x2028, 0x1C, 0x1F,            // spaces, separators
      0x4E00, 0x4E2D, 0x6587, 0x9FA5, 0x9FA6, 0x3042, 0x3099, 0x309B, 0x30A0,  // CJK, kana edges
      0x30AB, 0x30FB, 0x30FC, 0x3040, 0x3001, 0x3002, 0xFF0C, 0xAC00, 0xD55C,  // punct, Hangul
      0x0301, 0x0308, 0x20DD, 0x0903,                                          // marks
      0x0661, 0x2460, 0x00BD, 0x2167, 0x00B2,                                  // other \p{N}
      0x1F600, 0x1F44D, 0x1F3FD, 0x200D, 0x200C, 0xFE0F, 0x00AD, 0xE000,      // emoji, Cf, Co
      0x0416, 0x03A9, 0x05D0, 0x0627, 0x0E01, 0x00E9, 0x00DF, 0x2014, 0x20AC, 0x00A9, 0x2192};
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string s;
  for (size_t i = 0; i < chars; ++i) AppendUtf8(&s, kAlphabet[pick(rng)]);
  return s;
}

}  // namespace ladle::testing
