// TokenVocabulary's internals: token bytes by id, and the vocabulary as a sorted token trie.
//
// The trie is implicit: non-special tokens sorted by bytes, with for each sorted position the
// longest common prefix with the previous token and the end of its subtree (the first later
// position whose token does not start with this one). A walk in sorted order then only
// re-simulates the bytes past the common prefix, and a prefix the grammar rejects skips every
// token below it in one jump.
#pragma once

#include <algorithm>
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
  std::string sorted_blob;             // token bytes in sorted order, back to back
  std::vector<uint32_t> sorted_off;    // [pos, pos + 1) delimit SortedBytes(pos) in the blob
  std::vector<uint32_t> first_byte_end;  // [b]: first position whose first byte is > b
  size_t max_token_len = 0;
  size_t words() const { return (vocab_size + 63) / 64; }

  // The first position after `i` whose token does not start with the first `len` bytes of
  // token i: the end of i's group at depth len (tokens sharing a prefix are contiguous).
  uint32_t GroupEnd(uint32_t i, size_t len) const {
    const auto n = static_cast<uint32_t>(sorted.size());
    std::string_view pre = SortedBytes(i).substr(0, len);
    if (len == 1) return first_byte_end[static_cast<uint8_t>(pre[0])];
    auto in = [&](uint32_t j) { return SortedBytes(j).substr(0, len) == pre; };
    // Galloping from i: groups are mostly small, so probe outwards before bisecting.
    uint32_t known = i;  // the last position known to be in the group
    uint32_t step = 1, probe = i + 1;
    while (probe < n && in(probe)) {
      known = probe;
      step *= 2;
      probe = known + step;
    }
    uint32_t a = known + 1, b = std::min(probe, n);
    while (a < b) {
      uint32_t mid = a + (b - a) / 2;
      if (in(mid)) {
        a = mid + 1;
      } else {
        b = mid;
      }
    }
    return a;
  }

  // Contiguous in sorted order: trie walks read memory sequentially instead of chasing one
  // heap string per token.
  std::string_view SortedBytes(uint32_t pos) const {
    return std::string_view(sorted_blob.data() + sorted_off[pos], sorted_off[pos + 1] - sorted_off[pos]);
  }
};

}  // namespace ladle::grammar
