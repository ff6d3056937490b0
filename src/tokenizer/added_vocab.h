// Hugging Face's added-token matching, for EncodeTrusted only. Tokens with normalized=false
// are matched first on the raw text, then tokens with normalized=true on what is left (Ladle
// supports only the identity normalizer, so both passes see the same bytes). Each pass is
// leftmost-longest, with lstrip / rstrip / single_word as HF applies them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ladle/tokenizer/tokenizer.h"

namespace ladle::tokenizer {

class AddedVocab {
 public:
  struct Span {
    uint32_t begin;
    uint32_t end;
    int64_t id;  // -1 for text that is not an added token
  };

  explicit AddedVocab(const std::vector<AddedToken>& tokens);

  // Splits text into added-token matches and the text between them, in order.
  std::vector<Span> Split(std::string_view text) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> kids;  // sorted by byte
    int32_t token = -1;                                   // index into tokens_
  };
  struct Trie {
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void Add(std::string_view s, int32_t token);
    int32_t Child(int32_t node, unsigned char b) const;
  };
  void SplitPass(const Trie& trie, std::string_view text, uint32_t b, uint32_t e,
                 std::vector<Span>* out) const;

  std::vector<AddedToken> tokens_;
  Trie raw_;         // normalized == false
  Trie normalized_;  // normalized == true
};

}  // namespace ladle::tokenizer
