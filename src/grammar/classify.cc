// Token classification of one DFA state (mask_cache.h): a walk of the token trie through a
// lazily built DFA over closed stack sets, with whole groups accepted at once where the state
// loops on every byte below a trie node. The walk can cover every token, only the short ones
// (whose class is shared between states alike within kShortTokenBytes) or only the long ones.
// The slices that skip most of the walk are in classify_slices.cc.
#include <algorithm>
#include <string>

#include "classify_internal.h"

namespace ladle::grammar {

namespace classify_internal {

// One sublist in sorted order (the long tokens, about 900 of DeepSeek's 128k; or those the
// string-body slice leaves to a walk), each sharing its common prefix with the previous one.
// Uncertain positions are appended in order, so one list's ranges stay sorted.
void WalkList(SetDfa& dfa, const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos,
              const std::vector<uint16_t>& lcp, int32_t start, Accepted& acc, MaskEntry& e) {
  std::vector<int32_t> lv(1, start);
  std::vector<uint8_t> anyb(1, 0);
  const size_t n = pos.size();
  size_t valid = 0;
  for (size_t k = 0; k < n;) {
    const uint32_t i = pos[k];
    std::string_view tok = v.SortedBytes(i);
    const size_t len = tok.size();
    if (lv.size() < len + 1) {
      lv.resize(len + 1);
      anyb.resize(len + 1);
    }
    size_t p = std::min<size_t>(lcp[k], valid);
    for (; p < len; ++p) {
      anyb[p + 1] = anyb[p] || dfa.Barrier(lv[p]);
      lv[p + 1] = dfa.Step(lv[p], static_cast<uint8_t>(tok[p]));
      if (lv[p + 1] == SetDfa::kDead) break;
    }
    if (p == len) {
      acc.ids.push_back(v.sorted[i]);
      acc.after.push_back(dfa.Short(lv[len]));
      valid = len;
      ++k;
      continue;
    }
    valid = p;
    // Every later listed token sharing tok[0..p] dies the same way.
    const bool uncertain = anyb[p + 1];
    do {
      if (uncertain) AddUncertain(e, pos[k], pos[k] + 1);
      ++k;
    } while (k < n && lcp[k] > p);
  }
}

// Common-prefix lengths of consecutive positions of a sorted sublist.
std::vector<uint16_t> ListLcp(const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos) {
  std::vector<uint16_t> lcp(pos.size(), 0);
  for (size_t k = 1; k < pos.size(); ++k) {
    std::string_view x = v.SortedBytes(pos[k - 1]), y = v.SortedBytes(pos[k]);
    size_t n = 0;
    while (n < x.size() && n < y.size() && x[n] == y[n]) ++n;
    lcp[k] = static_cast<uint16_t>(n);
  }
  return lcp;
}

}  // namespace classify_internal

using namespace classify_internal;

namespace {

// The short (or every) token walk over the sorted trie.
// False when it stops after `max_steps` trie steps (the entry is then incomplete).
bool WalkSorted(SetDfa& dfa, const TokenVocabulary::Impl& v, int32_t start, TokenSpan span, Accepted& acc,
                MaskEntry& e, size_t max_steps = SIZE_MAX) {
  size_t steps = 0;
  const size_t max_len = span == TokenSpan::kShort ? TokenVocabulary::Impl::kShortTokenBytes : SIZE_MAX;
  std::vector<int32_t> lv(1, start);
  std::vector<uint8_t> anyb(1, 0);  // anyb[d]: the frame could pop before byte d
  const size_t n = v.sorted.size();
  size_t valid = 0;  // lv[0..valid] hold the prefix of the last token walked
  for (size_t i = 0; i < n;) {
    std::string_view tok = v.SortedBytes(static_cast<uint32_t>(i));
    const size_t len = tok.size();
    if (len > max_len) {
      // Not ours; the next token shares with the last walked one at most what it shares
      // with this one.
      valid = std::min<size_t>(valid, v.lcp[i]);
      ++i;
      continue;
    }
    if (lv.size() < len + 1) {
      lv.resize(len + 1);
      anyb.resize(len + 1);
    }
    size_t p = std::min<size_t>(v.lcp[i], valid);
    size_t bulk_end = 0;
    if ((steps += len - p + 1) > max_steps) return false;
    for (; p < len; ++p) {
      anyb[p + 1] = anyb[p] || dfa.Barrier(lv[p]);
      lv[p + 1] = dfa.Step(lv[p], static_cast<uint8_t>(tok[p]));
      if (lv[p + 1] == SetDfa::kDead) break;
      // Entering a large node at its first token: if the state loops on every byte below
      // it, every token of the group is accepted and ends in this very state.
      if (const auto* ns = v.Summary(static_cast<uint32_t>(i), p + 1); ns && dfa.LoopsOn(lv[p + 1], ns->below)) {
        bulk_end = ns->end;
        ++p;
        break;
      }
    }
    if (bulk_end) {
      const uint32_t d = dfa.Short(lv[p]);
      for (size_t j = i; j < bulk_end; ++j) {
        if (v.sorted_off[j + 1] - v.sorted_off[j] > max_len) continue;
        acc.ids.push_back(v.sorted[j]);
        acc.after.push_back(d);
      }
      // Levels 0..p hold the group's common prefix, which is all a later token can share.
      valid = p;
      i = bulk_end;
      continue;
    }
    if (p == len) {
      acc.ids.push_back(v.sorted[i]);
      acc.after.push_back(dfa.Short(lv[len]));
      valid = len;
      ++i;
      continue;
    }
    // Dead at byte p without popping: every token sharing tok[0..p] fails the same way, and
    // is uncertain if the frame could have popped before. (Long tokens in such a group
    // are listed too; the runtime walk simulates them, which is merely extra work.)
    valid = p;
    const uint32_t end = v.GroupEnd(static_cast<uint32_t>(i), p + 1);
    if (anyb[p + 1]) AddUncertain(e, static_cast<uint32_t>(i), end);
    i = end;
  }
  return true;
}

// Budget data and the accepted set's representation.
void FinishEntry(const TokenVocabulary::Impl& v, Accepted acc, MaskEntry& e) {
  e.accepted_count = acc.ids.size();
  if (!acc.ids.empty()) {
    // The commonest completion is the base; the others are listed, unless there are so many
    // that the list would cost more than a walk. Few distinct lengths per state (usually one
    // to three): a short list beats a map.
    std::vector<std::pair<uint32_t, size_t>> freq;
    for (uint32_t d : acc.after) {
      auto it = std::find_if(freq.begin(), freq.end(), [d](const auto& f) { return f.first == d; });
      if (it == freq.end()) {
        freq.push_back({d, 1});
      } else {
        ++it->second;
      }
    }
    auto top = std::max_element(freq.begin(), freq.end(), [](auto& x, auto& y) { return x.second < y.second; });
    e.budget_base = top->first;
    e.budget_min = std::min_element(freq.begin(), freq.end())->first;
    e.budget_max = std::max_element(freq.begin(), freq.end())->first;
    const size_t others = acc.ids.size() - top->second;
    if (others > kMaxBudgetExceptions) {
      e.budget_known = false;
    } else {
      e.budget_exceptions.reserve(others);
      for (size_t k = 0; k < acc.ids.size(); ++k) {
        if (acc.after[k] != e.budget_base) e.budget_exceptions.push_back({acc.ids[k], acc.after[k]});
      }
      std::sort(e.budget_exceptions.begin(), e.budget_exceptions.end());
    }
  }
  if (acc.ids.size() * 32 >= v.vocab_size) {
    e.accepted_bits.assign(v.words(), 0);
    for (TokenId id : acc.ids) e.accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  } else {
    std::sort(acc.ids.begin(), acc.ids.end());
    e.accepted_ids = std::move(acc.ids);
  }
}

MaskEntry AllUncertain(const TokenVocabulary::Impl& v) {
  MaskEntry all;
  all.uncertain.push_back({0, static_cast<uint32_t>(v.sorted.size())});
  all.uncertain_count = v.sorted.size();
  return all;
}

}  // namespace

MaskEntry ClassifyState(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, TokenSpan span) {
  MaskEntry e;
  ClassifyStateWithin(a, v, state, span, SIZE_MAX, &e);
  return e;
}

bool ClassifyStateWithin(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, TokenSpan span,
                         size_t max_steps, MaskEntry* out) {
  SetDfa dfa(a);
  const int32_t start = dfa.Start(state);
  Accepted acc;
  MaskEntry& e = *out;
  e = MaskEntry{};
  if (span == TokenSpan::kLong) {
    WalkList(dfa, v, v.long_pos, v.long_lcp, start, acc, e);
  } else if (!WalkSorted(dfa, v, start, span, acc, e, max_steps)) {
    return false;
  }
  // Too ambiguous to classify from one frame: every token is left to the runtime walk,
  // which simulates against the real stacks (under the matcher's own stack limit).
  if (dfa.overflowed()) {
    e = AllUncertain(v);
    return true;
  }
  FinishEntry(v, std::move(acc), e);
  return true;
}

MaskEntry MergeEntries(const TokenVocabulary::Impl& v, const MaskEntry& x, const MaskEntry& y) {
  MaskEntry e;
  std::vector<uint64_t> bits(v.words(), 0);
  x.OrInto(bits.data());
  y.OrInto(bits.data());
  e.accepted_count = x.accepted_count + y.accepted_count;  // disjoint token sets
  if (e.accepted_count * 32 >= v.vocab_size) {
    e.accepted_bits = std::move(bits);
  } else {
    e.accepted_ids.reserve(e.accepted_count);
    for (size_t w = 0; w < bits.size(); ++w) {
      for (uint64_t b = bits[w]; b; b &= b - 1) e.accepted_ids.push_back(static_cast<TokenId>(w * 64 + __builtin_ctzll(b)));
    }
  }
  e.uncertain = x.uncertain;
  e.uncertain.insert(e.uncertain.end(), y.uncertain.begin(), y.uncertain.end());
  MergeRanges(e.uncertain);
  e.uncertain_count = 0;
  for (auto [b, end] : e.uncertain) e.uncertain_count += end - b;
  // Budget: the larger side's base; the other side's tokens off that base are exceptions.
  const MaskEntry& big = x.accepted_count >= y.accepted_count ? x : y;
  const MaskEntry& small = &big == &x ? y : x;
  e.budget_known = x.budget_known && y.budget_known;
  e.budget_base = big.budget_base;
  e.budget_min = big.accepted_count == 0 ? small.budget_min
                 : small.accepted_count == 0 ? big.budget_min
                                             : std::min(big.budget_min, small.budget_min);
  e.budget_max = std::max(big.accepted_count ? big.budget_max : 0, small.accepted_count ? small.budget_max : 0);
  if (e.budget_known && small.accepted_count > 0) {
    e.budget_exceptions = big.budget_exceptions;
    auto add = [&](TokenId t, uint32_t d) {
      if (d != e.budget_base) e.budget_exceptions.push_back({t, d});
    };
    std::vector<uint64_t> listed(v.words(), 0);
    for (auto [t, d] : small.budget_exceptions) {
      add(t, d);
      listed[t >> 6] |= uint64_t{1} << (t & 63);
    }
    // The small side's base tokens: its accepted set minus its listed exceptions.
    std::vector<uint64_t> sb(v.words(), 0);
    small.OrInto(sb.data());
    if (small.budget_base != e.budget_base) {
      for (size_t w = 0; w < sb.size(); ++w) {
        for (uint64_t b = sb[w] & ~listed[w]; b; b &= b - 1) add(static_cast<TokenId>(w * 64 + __builtin_ctzll(b)), small.budget_base);
      }
    }
    std::sort(e.budget_exceptions.begin(), e.budget_exceptions.end());
    if (e.budget_exceptions.size() > kMaxBudgetExceptions) {
      e.budget_known = false;
      e.budget_exceptions.clear();
    }
  } else if (e.budget_known) {
    e.budget_exceptions = big.budget_exceptions;
  }
  if (!e.budget_known) e.budget_exceptions.clear();
  return e;
}

}  // namespace ladle::grammar
