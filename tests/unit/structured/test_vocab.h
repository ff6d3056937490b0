// A small vocabulary for structured-output tests: every single byte (so any text can be
// spelled), a few multi-byte tokens, EOS = 1, and a special </think>-like token.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ladle/grammar/matcher.h"

namespace ladle::structured::testing_vocab {

// Ids: 0 = "<bos>" (special), 1 = EOS (special), 2 = "</think>" (special), 3..258 = bytes
// 0..255, then multi-byte tokens.
inline constexpr uint32_t kEos = 1, kEndThink = 2, kByte0 = 3;
inline uint32_t ByteToken(unsigned char c) { return kByte0 + c; }

inline std::vector<std::string> Tokens() {
  std::vector<std::string> t = {"<bos>", "<eos>", "</think>"};
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\"}", "true", "false", "null", "123", "ab", "abc", "</", "think>", "think>\nx"}) t.push_back(s);
  return t;
}

inline std::shared_ptr<const grammar::TokenVocabulary> ByteVocabulary(size_t vocab_size = 320) {
  auto v = grammar::TokenVocabulary::FromTokens(Tokens(), {0, 1, 2}, {kEos}, vocab_size);
  return v.ok() ? *v : nullptr;
}

inline uint32_t TokenOf(const std::string& s) {
  const auto t = Tokens();
  for (size_t i = 3; i < t.size(); ++i)
    if (t[i] == s && (i >= kByte0 + 256 || s.size() == 1)) return static_cast<uint32_t>(i);
  return 0;
}

}  // namespace ladle::structured::testing_vocab
