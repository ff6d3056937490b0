// Byte-level BPE: vocabulary as raw byte strings, merges as (left id, right id) → (rank,
// merged id), and the merge loop Hugging Face runs (lowest rank first, leftmost on a tie).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::tokenizer {

// Open-addressing map from byte strings to ids, keys packed in one arena. Read-only after
// building, so lookups from many threads need no locking.
class BytesMap {
 public:
  void Reserve(size_t n);
  // False if the key was already present.
  bool Insert(std::string_view key, TokenId id);
  std::optional<TokenId> Find(std::string_view key) const;
  // Same, with the key's XXH3_64bits hash already computed.
  std::optional<TokenId> Find(std::string_view key, uint64_t hash) const;
  size_t size() const { return size_; }
  size_t MemoryBytes() const { return arena_.capacity() + slots_.capacity() * sizeof(Slot); }

 private:
  struct Slot {
    uint32_t off = 0;
    uint32_t len = 0;
    uint32_t id = 0;
    uint32_t tag = 0;  // 0 = empty; else high hash bits | 1
  };
  void Grow();
  std::string arena_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

class BpeModel {
 public:
  static constexpr uint32_t kNoRank = UINT32_MAX;

  // Builds from raw-byte vocabulary entries and merges given as pairs of vocabulary ids.
  // Every single byte must be in the vocabulary (byte-level BPE guarantees it).
  static Result<BpeModel> Build(const std::vector<std::pair<std::string, TokenId>>& vocab,
                                const std::vector<std::pair<TokenId, TokenId>>& merges);

  // Appends the ids of one pre-token.
  void EncodeWord(const unsigned char* p, size_t n, std::vector<TokenId>* out) const;
  // The merge loop only, without the whole-word shortcut; `force_heap` picks the
  // O(n log n) path regardless of length (tests compare the two paths).
  void MergeWord(const unsigned char* p, size_t n, std::vector<TokenId>* out,
                 bool force_heap = false) const;

  std::optional<TokenId> Find(std::string_view bytes) const { return vocab_.Find(bytes); }
  TokenId ByteId(unsigned char b) const { return byte_ids_[b]; }
  // Count of vocabulary entries that BPE would not produce as a single token from their own
  // bytes (the whole-word shortcut is disabled for them).
  size_t unreachable_entries() const { return unreachable_; }
  size_t MemoryBytes() const;

 private:
  struct PairSlot {
    uint64_t key = UINT64_MAX;
    uint32_t rank = kNoRank;
    uint32_t merged = 0;
  };
  // Rank and merged id of the pair, or kNoRank.
  inline PairSlot LookupPair(TokenId a, TokenId b) const;
  void MergeSmall(const unsigned char* p, size_t n, std::vector<TokenId>* out) const;
  void MergeHeap(const unsigned char* p, size_t n, std::vector<TokenId>* out) const;

  BytesMap vocab_;
  // Distinguishes models in the per-thread word cache (several tokenizers may share a thread).
  uint32_t instance_ = 0;
  std::vector<PairSlot> pairs_;
  size_t pair_mask_ = 0;
  TokenId byte_ids_[256] = {};
  // Bit per id: the id's own bytes encode to exactly that id.
  std::vector<uint8_t> whole_ok_;
  size_t unreachable_ = 0;
};

}  // namespace ladle::tokenizer
