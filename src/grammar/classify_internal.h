// Internals shared by the classifier's files (classify.cc: the full walk; classify_slices.cc:
// the string-body and layer slices): the helpers that turn walked tokens into a MaskEntry.
// The stack-set DFA the walks run on is set_dfa.h (the matcher's run-time walk uses it too).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mask_cache.h"
#include "matcher_sim.h"
#include "set_dfa.h"

namespace ladle::grammar::classify_internal {

using grammar::RefineBlocks;
using grammar::SetDfa;

// Past this many accepted tokens off the commonest completion length, an entry carries no
// budget data (the matcher walks its tokens when the budget is tight).
constexpr size_t kMaxBudgetExceptions = 16384;

struct PairKeyHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& k) const { return k.first ^ (k.second * 0x9E3779B97F4A7C15ULL); }
};

// Accepted tokens with their post-token completion lengths, before they become an entry.
struct Accepted {
  std::vector<TokenId> ids;
  std::vector<uint32_t> after;  // parallel to ids
};

inline void AddUncertain(MaskEntry& e, uint32_t begin, uint32_t end) {
  if (!e.uncertain.empty() && e.uncertain.back().second == begin) {
    e.uncertain.back().second = end;
  } else {
    e.uncertain.push_back({begin, end});
  }
  e.uncertain_count += end - begin;
}

// One sublist in sorted order (the long tokens, about 900 of DeepSeek's 128k; or those the
// string-body slice leaves to a walk), each sharing its common prefix with the previous one.
// Uncertain positions are appended in order, so one list's ranges stay sorted.
void WalkList(SetDfa& dfa, const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos,
              const std::vector<uint16_t>& lcp, int32_t start, Accepted& acc, MaskEntry& e);

// Common-prefix lengths of consecutive positions of a sorted sublist.
std::vector<uint16_t> ListLcp(const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos);

}  // namespace ladle::grammar::classify_internal
