// Internal state behind the Tokenizer handle. Immutable once loaded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "added_vocab.h"
#include "bpe.h"
#include "ladle/tokenizer/tokenizer.h"
#include "pretokenizer.h"

namespace ladle::tokenizer {

struct Tokenizer::Impl {
  std::shared_ptr<const BpeModel> bpe_ptr;  // shared between versions' views
  const BpeModel& bpe;
  PreTokenizer pre;
  explicit Impl(std::shared_ptr<const BpeModel> b) : bpe_ptr(std::move(b)), bpe(*bpe_ptr) {}
  std::vector<AddedToken> added_tokens;
  std::unique_ptr<AddedVocab> added;

  // Bytes of every id for decoding: id i is dec_arena[dec_off[i], dec_off[i+1]).
  std::string dec_arena;
  std::vector<uint32_t> dec_off;
  std::vector<uint8_t> valid;     // id is a vocabulary or added token
  std::vector<uint8_t> is_added;  // id is an added token
  size_t vocab_size = 0;

  std::string_view Bytes(TokenId id) const {
    return std::string_view(dec_arena).substr(dec_off[id], dec_off[id + 1] - dec_off[id]);
  }
  // Serial byte-level BPE of plain text, appended to *out.
  void EncodePlainInto(std::string_view text, std::vector<TokenId>* out) const;
  // Segments with ids already validated; the parallel machinery lives here.
  void EncodeSegmentsInto(std::span<const Segment> segments, const EncodeOptions& opts,
                          EncodedSegments* out) const;
};

// GPT-2's byte ↔ printable-code-point table used by ByteLevel vocabularies.
const std::vector<uint32_t>& ByteToCodePoint();
// Inverse: -1 for code points outside the alphabet.
int CodePointToByte(uint32_t cp);

Result<std::shared_ptr<Tokenizer::Impl>> LoadTokenizerJson(std::string_view json);

// Builds the added-token matcher and the decode tables from impl->added_tokens and the
// vocabulary strings (raw bytes by id, empty where absent).
void BuildAddedAndDecodeTables(Tokenizer::Impl* impl, const std::vector<std::string_view>& vocab_bytes);

}  // namespace ladle::tokenizer
