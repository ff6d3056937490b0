// TokenVocabulary's internals: token bytes by id, and the vocabulary as a sorted token trie.
//
// The trie is implicit: non-special tokens sorted by bytes, with for each sorted position the
// longest common prefix with the previous token and the end of its subtree (the first later
// position whose token does not start with this one). A walk in sorted order then only
// re-simulates the bytes past the common prefix, and a prefix the grammar rejects skips every
// token below it in one jump.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/grammar/matcher.h"

namespace ladle::grammar {

struct TokenVocabulary::Impl {
  size_t vocab_size = 0;
  std::vector<TokenId> eos;
  std::vector<std::string> bytes;   // by id; empty = not a token (or special)
  std::vector<uint8_t> special;     // by id
  std::vector<TokenId> special_ids; // sorted
  uint64_t fingerprint = 0;

  // The implicit trie over non-special, non-empty tokens.
  std::vector<TokenId> sorted;        // sorted position -> id
  std::vector<uint32_t> position;     // id -> sorted position (UINT32_MAX if not in the trie)
  std::vector<uint16_t> lcp;          // with the previous sorted token (0 for the first)
  std::vector<uint32_t> subtree_end;  // first later position not prefixed by this token
  size_t words() const { return (vocab_size + 63) / 64; }

  std::string_view SortedBytes(uint32_t pos) const { return bytes[sorted[pos]]; }
};

}  // namespace ladle::grammar
