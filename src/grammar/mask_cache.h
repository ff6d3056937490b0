// Per-state token classes: for a frame in DFA state s, every non-special token is
//   accepted  — consumed entirely without popping the frame (whatever is below it),
//   rejected  — dies without popping the frame,
//   uncertain — can only continue by popping the frame (depends on the stack below).
// A mask step ORs the accepted sets of the distinct top states and simulates only the
// uncertain tokens against the real stacks.
//
// Entries are computed on first use (or eagerly) and shared: within a grammar by state, and
// across grammars through a process-wide table keyed by the structural hash of the
// sub-automaton reachable from the state plus the vocabulary fingerprint (every JSON string
// body of every schema is one entry).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "automaton.h"
#include "token_trie.h"

namespace ladle::grammar {

struct MaskEntry {
  // Whichever is smaller: a bitset over ids (vocab words) or a sorted id list.
  std::vector<uint64_t> accepted_bits;
  std::vector<TokenId> accepted_ids;
  // Sorted, disjoint [begin, end) ranges of trie positions: the groups below a prefix at which
  // the frame could pop. Ranges, not lists: "the frame may end here" makes every token
  // uncertain, and the runtime walk skips dead groups wholesale anyway.
  std::vector<std::pair<uint32_t, uint32_t>> uncertain;
  size_t accepted_count = 0, uncertain_count = 0;
  // Uncertain tokens that can only go on by popping the frame and then consuming a byte in
  // `pop_first` (the layer slice's tokens that need more layers than are left): the matcher
  // walks them only when some stack below can take such a byte after the pop, which for a
  // string's closing quote is never. Not counted in uncertain_count.
  std::vector<std::pair<uint32_t, uint32_t>> pop_uncertain;
  ByteSet pop_first;
  // Budget-aware completion without a trie walk: an accepted token leaves this frame in a
  // state whose own shortest completion (bytes until the frame can pop) is `budget_base` for
  // most tokens and budget_exceptions[i].second for the listed ones (sorted by id). With B
  // the shortest completion below the frame, the token's completion is that plus B. Entries
  // where too many tokens differ keep budget_known = false and the matcher walks instead.
  bool budget_known = true;
  // Left out to keep the mask cheap (the string-body slice, when completion lengths vary
  // along the body); MaskCache::GetWithBudget classifies the state in full when a tight
  // budget needs them.
  bool budget_deferred = false;
  uint32_t budget_base = 0, budget_min = 0, budget_max = 0;
  std::vector<std::pair<TokenId, uint32_t>> budget_exceptions;

  void OrInto(uint64_t* bits) const;
  size_t MemoryBytes() const {
    return sizeof(*this) + accepted_bits.size() * 8 + accepted_ids.size() * 4 + uncertain.size() * 8 +
           pop_uncertain.size() * 8 +
           budget_exceptions.size() * 8;
  }
};

// Which tokens a classification covers. A state's class of the short tokens (at most
// kShortTokenBytes) depends only on what lies within that many bytes of it, so it is shared
// between far more states (every count of `char{0,500}` but the last few, say) than a class
// of all tokens could be; the few long tokens are classified per state and merged in.
enum class TokenSpan : uint8_t { kAll, kShort, kLong };

// The classification itself (no caching): a walk of the token trie from `state` (classify.cc).
MaskEntry ClassifyState(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state,
                        TokenSpan span = TokenSpan::kAll);
// The same, giving up (false, *out incomplete) past `max_steps` trie steps: cheap states are
// classified outright, before paying for a structural key.
bool ClassifyStateWithin(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, TokenSpan span,
                         size_t max_steps, MaskEntry* out);
// The string-body slice: when every short quote-free token the JSON string body accepts
// (StringBody, token_trie.h) is provably accepted from `state` (a breadth-first check over
// pairs of states, to kShortTokenBytes), the entry is that precomputed set plus walks of
// the ~2,800 other tokens, instead of a walk over all 129k. String bodies, keys where unlisted
// keys are allowed and loose patterns all qualify, whatever follows them. False (nothing
// written) when the state does not qualify. Budget data is exact when each body state
// fixes the completion length after it, else left out (budget_known = false).
bool ClassifyStringBody(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, MaskEntry* out);
// The layer slice: at a layer boundary of a layered counted repeat (Automaton::layered: a
// JSON string with maxLength, a bounded pattern) a token inside the body is accepted iff the
// layers it takes are left, which a per-body table gives at once; the tokens that leave the
// body (a quote, ~2k for strings) are walked. No budget
// data (budget_deferred). Entries are shared by every boundary alike (same body, layers left
// and layers still needed), in any grammar; nullptr elsewhere.
std::shared_ptr<const MaskEntry> ClassifyLayer(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state);
// The entry of the union of two disjoint token spans' entries of one state.
MaskEntry MergeEntries(const TokenVocabulary::Impl& v, const MaskEntry& x, const MaskEntry& y);

class MaskCache {
 public:
  explicit MaskCache(size_t num_states);
  ~MaskCache();
  // Thread-safe; concurrent first uses of one state may both compute it (one result wins).
  const MaskEntry& Get(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state);
  // Get's entry, or when that deferred its budget data, the full classification that has it
  // (same tokens; computed once per state on first need).
  const MaskEntry& GetWithBudget(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state);
  size_t MemoryBytes() const;

 private:
  const MaskEntry& Install(std::atomic<const MaskEntry*>* slots, int32_t state, std::shared_ptr<const MaskEntry> entry);
  std::shared_ptr<const MaskEntry> Classify(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state);
  std::unique_ptr<std::atomic<const MaskEntry*>[]> budget_slots_;
  std::unique_ptr<std::atomic<const MaskEntry*>[]> slots_;
  size_t n_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const MaskEntry>> owned_;
  size_t bytes_ = 0;
};

// A digest of everything a token can see from `state`: the sub-automaton within
// `max_bytes` bytes (the longest token) of it — transitions, calls, acceptance and each
// state's shortest completion, with edges leaving that horizon marked but not followed —
// independent of state numbering. Two states
// with equal keys classify every token alike, so the states of `char{0,255}` that are more
// than a token away from the bound share one entry, and so do identical string bodies of
// different grammars. Returns false when the horizon holds too many states to hash.
bool StructuralKey(const Automaton& a, int32_t state, size_t max_bytes, std::pair<uint64_t, uint64_t>* key);

// Process-wide cache statistics (tests and bench).
struct SharedMaskCacheStats {
  size_t entries = 0, bytes = 0, hits = 0, misses = 0;
  size_t body_slices = 0;   // entries built by ClassifyStringBody (never in the shared table)
  size_t layer_slices = 0;  // entries built by ClassifyLayer (likewise)
};
SharedMaskCacheStats GetSharedMaskCacheStats();

}  // namespace ladle::grammar
