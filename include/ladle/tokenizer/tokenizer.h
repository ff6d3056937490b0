// The DeepSeek tokenizer: byte-level BPE with exact parity with Hugging Face `tokenizers`.
//
// Three ways in, by trust level (the recipe's "special-token boundary matching"):
//   EncodePlain     — anything a user or a tool wrote. Byte-level BPE only: the literal text
//                     "<｜User｜>" becomes ordinary tokens and can never produce a control id.
//   EncodeTrusted   — template text written by Ladle itself. Added tokens are matched as
//                     Hugging Face does (for parity checks and tools; prompt builders should
//                     prefer segments).
//   EncodeSegments  — what prompt builders use: special tokens are placed by id, text segments
//                     are encoded plain, and long inputs are split at provably safe pre-token
//                     boundaries and encoded in parallel on the shared pool.
//
// A Tokenizer is a cheap, copyable handle to an immutable loaded vocabulary; all methods are
// const and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle {
class ThreadPool;
}

namespace ladle::tokenizer {

using TokenId = uint32_t;

// An entry of tokenizer.json's "added_tokens", with Hugging Face's matching flags.
struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// One piece of a prompt: either text (encoded plain) or a special token placed by id.
struct Segment {
  enum class Kind : uint8_t { kText, kSpecial };
  Kind kind = Kind::kText;
  std::string_view text;  // kText only; must outlive the EncodeSegments call
  TokenId id = 0;         // kSpecial only

  static Segment Text(std::string_view t) { return Segment{Kind::kText, t, 0}; }
  static Segment Special(TokenId i) { return Segment{Kind::kSpecial, {}, i}; }
};

struct EncodedSegments {
  std::vector<TokenId> ids;
  // Index into `ids` of every special token, in order. Output parsing and the grammar use
  // these to know which control tokens the builder (and only the builder) placed.
  std::vector<uint32_t> special_positions;
};

struct EncodeOptions {
  // Pool for parallel encoding; nullptr means the process-wide SharedPool().
  ThreadPool* pool = nullptr;
  // Inputs shorter than this take the serial path (no thread hand-off at all).
  size_t parallel_min_bytes = 256 * 1024;
  // Target size of one parallel work item.
  size_t chunk_bytes = 128 * 1024;
  // Upper bound on the number of pieces run at once; 0 means the pool's size + 1.
  size_t max_parallelism = 0;
};

class Tokenizer {
 public:
  // Loads a Hugging Face tokenizer.json (byte-level BPE). A file using a model, normalizer,
  // pre-tokenizer or decoder that Ladle cannot reproduce exactly is rejected with
  // kUnsupported naming the part, never approximated.
  static Result<Tokenizer> FromFile(const std::string& path);
  static Result<Tokenizer> FromJson(std::string_view json);

  // Byte-level BPE only. Never produces an added-token id.
  std::vector<TokenId> EncodePlain(std::string_view text, const EncodeOptions& opts = {}) const;
  // Hugging Face-compatible: added tokens in `text` become their ids.
  std::vector<TokenId> EncodeTrusted(std::string_view text, const EncodeOptions& opts = {}) const;
  // Fails with kInvalidArgument if a special segment's id is not an added token.
  Result<EncodedSegments> EncodeSegments(std::span<const Segment> segments,
                                         const EncodeOptions& opts = {}) const;

  // A tokenizer sharing this one's vocabulary and merges, with added tokens replaced or
  // added by id. Later DeepSeek versions re-purpose placeholder ids of the V3 file (e.g.
  // 128798 becomes "<think>" from V3.1 on); this builds each version's view from one file.
  Result<Tokenizer> WithAddedTokens(std::span<const AddedToken> overrides) const;

  // Serial reference path; EncodePlain's output equals this for every input.
  std::vector<TokenId> EncodePlainSerial(std::string_view text) const;

  // Bytes of the ids, concatenated (added tokens decode to their content). The result is
  // raw bytes: a sequence cut inside a code point is not valid UTF-8. Fails with
  // kOutOfRange on an id that is not in the vocabulary.
  Result<std::string> Decode(std::span<const TokenId> ids) const;

  // Largest id + 1 over vocabulary and added tokens (129,280 logit columns is the model's
  // padded size, which may be larger).
  size_t VocabSize() const;
  bool IsValidId(TokenId id) const;
  bool IsAddedToken(TokenId id) const;
  // Exact lookups: a vocabulary or added-token string (vocabulary strings are in the file's
  // byte-level alphabet, e.g. "Ġthe").
  std::optional<TokenId> TokenToId(std::string_view token) const;
  std::optional<std::string> IdToToken(TokenId id) const;
  std::span<const AddedToken> AddedTokens() const;

  // Approximate heap bytes held by the loaded tables.
  size_t MemoryBytes() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Turns ids into text one token at a time for streaming. Emits only complete UTF-8 code
// points, holding partial bytes across calls; the concatenation of every Push plus Flush is
// byte-identical to Tokenizer::Decode of the whole sequence. Bytes that can never become a
// valid code point are passed through as they are (Decode keeps them too), so nothing is lost.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(Tokenizer tok) : tok_(std::move(tok)) {}
  // Appends the newly complete text to *out. Fails with kOutOfRange on an unknown id.
  Status Push(TokenId id, std::string* out);
  // Emits whatever is still held (an incomplete tail at end of stream).
  std::string Flush();
  // Bytes held back waiting for the rest of a code point (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tok_;
  std::string pending_;
};

// Length of the longest prefix of `bytes` that is complete UTF-8 or can never become valid
// (so it is safe to emit now); the rest is an incomplete but still possible code point.
size_t Utf8EmitLength(std::string_view bytes);
bool IsValidUtf8(std::string_view bytes);
// Appends the UTF-8 encoding of a scalar value (utf8proc; nothing for values past U+10FFFF).
void AppendUtf8(std::string& out, uint32_t cp);

}  // namespace ladle::tokenizer
