// TokenVocabulary's internals: token bytes by id, and the vocabulary as a sorted token trie.
//
// The trie is implicit: non-special tokens sorted by bytes, with for each sorted position the
// longest common prefix with the previous token and the end of its subtree (the first later
// position whose token does not start with this one). A walk in sorted order then only
// re-simulates the bytes past the common prefix, and a prefix the grammar rejects skips every
// token below it in one jump.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/grammar/matcher.h"

namespace ladle::grammar {

// The JSON string body as a byte DFA (state 0 = between characters, -1 = dead): unescaped
// scalar values other than `"`, `\` and controls, and the escapes \" \\ \/ \b \f \n \r \t
// and \uXXXX of a non-surrogate. A subset of every string body the schema compiler emits
// (json_schema_lexical.cc also takes surrogate pairs): the classifier only uses it to prove
// that a state accepts at least what it accepts.
struct StringBody {
  static constexpr int kStates = 14;
  static int Step(int state, uint8_t b) { return Table()[state][b]; }
  static const std::array<std::array<int8_t, 256>, kStates>& Table();
};

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
  bool IsEos(TokenId id) const { return std::binary_search(eos.begin(), eos.end(), id); }
  // Whether emitting `id` can take a special-token edge `<[id]>` (ExprKind::kSpecialToken): an
  // added/special token, or a normal token (which then may take either path). Never an EOS id
  // (EOS only ends the grammar, matcher.h), a hole (no bytes and not special: an id the
  // tokenizer lacks, a logit column past it) or an id past vocab_size, whatever the grammar
  // names. The mask, AcceptToken and ShortestCompletion all ask this one predicate.
  bool TakesSpecialEdge(TokenId id) const {
    if (id >= vocab_size) return false;
    return special[id] ? !IsEos(id) : !bytes[id].empty();
  }

  // Tokens longer than this are "long" (TokenSpan, mask_cache.h): 912 of DeepSeek V3's
  // 128k are. long_pos lists their sorted positions in order, long_lcp the common prefix
  // of each with the previous long token.
  static constexpr size_t kShortTokenBytes = 16;
  std::vector<uint32_t> long_pos;
  std::vector<uint16_t> long_lcp;
  // The short tokens split by the JSON string body (StringBody below), for the classifier's
  // string-body slice: `body_ok` (by id) holds the short tokens without a quote that the body
  // accepts from a character boundary (125,215 of DeepSeek V3's), body_end[c] those of them
  // that end in body state c != 0 (inside a character or an escape), sorted by id; the short
  // tokens it rejects (1,536) and the short ones with a quote (334) are listed like the long
  // ones, to be walked per state.
  std::vector<uint64_t> body_ok;
  size_t body_ok_count = 0;
  // body_next[d * StringBody::kStates + c]: the bytes some body_ok token has at offset d
  // where the body is in state c (the containment check only follows these).
  std::vector<ByteSet> body_next;
  std::vector<std::vector<TokenId>> body_end;
  std::vector<uint32_t> body_bad_pos, quote_pos;
  std::vector<uint16_t> body_bad_lcp, quote_lcp;

  // Summaries of the larger trie nodes, for the classifier's bulk acceptance: the node of
  // prefix SortedBytes(i)[0, d) with i its first position (d in lcp[i] + 1 .. lcp[i] +
  // node_count[i]) is node_sets[node_first[i] + d - lcp[i] - 1]: its group end and every
  // byte at depth >= d below it. A state that loops on all those bytes accepts the whole
  // group without walking it. Only nodes of at least kMinSummaryTokens tokens are kept.
  static constexpr uint32_t kMinSummaryTokens = 8;
  struct NodeSummary {
    ByteSet below;
    uint32_t end = 0;
  };
  std::vector<NodeSummary> node_sets;
  std::vector<uint32_t> node_first;  // by sorted position
  std::vector<uint8_t> node_count;   // by sorted position
  const NodeSummary* Summary(uint32_t i, size_t depth) const {
    const size_t k = depth - lcp[i] - 1;  // depth > lcp[i] at a node's first position
    return depth > lcp[i] && k < node_count[i] ? &node_sets[node_first[i] + k] : nullptr;
  }

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
