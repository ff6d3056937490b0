#include "delimiter_matcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>

namespace ladle::frontend::parser {
namespace {

// Whether `needle` occurs in `hay` anywhere but at its very end.
bool OccursExceptAsSuffix(std::span<const Symbol> hay, std::span<const Symbol> needle) {
  if (needle.size() > hay.size()) return false;
  for (size_t i = 0; i + needle.size() < hay.size(); ++i) {
    if (std::equal(needle.begin(), needle.end(), hay.begin() + i)) return true;
  }
  return false;
}

}  // namespace

Result<DelimiterSet> DelimiterSet::Build(std::vector<std::vector<Symbol>> delimiters) {
  DelimiterSet set;
  if (delimiters.size() > 32000) return InvalidArgument("too many delimiters");
  for (size_t i = 0; i < delimiters.size(); ++i) {
    const auto& d = delimiters[i];
    if (d.empty()) return InvalidArgument(fmt::format("delimiter {} is empty", i));
    for (Symbol s : d) {
      if (s >= kNumSymbols) return InvalidArgument(fmt::format("delimiter {} has symbol {}", i, s));
    }
    for (size_t j = 0; j < delimiters.size(); ++j) {
      if (i == j) continue;
      if (delimiters[j] == d) return InvalidArgument(fmt::format("delimiters {} and {} are equal", i, j));
      // A delimiter inside another (other than at its end) would make the first match ambiguous.
      if (OccursExceptAsSuffix(delimiters[j], d)) {
        return InvalidArgument(fmt::format("delimiter {} occurs inside delimiter {}", i, j));
      }
    }
    set.max_len_ = std::max(set.max_len_, d.size());
  }

  // Symbol classes: every symbol used by some delimiter gets its own class; the rest share 0.
  set.cls_.assign(kNumSymbols, 0);
  for (const auto& d : delimiters) {
    for (Symbol s : d) {
      if (set.cls_[s] == 0) {
        if (set.nclasses_ == 255) return InvalidArgument("too many distinct delimiter symbols");
        set.cls_[s] = static_cast<uint8_t>(set.nclasses_++);
      }
    }
  }
  const size_t nc = set.nclasses_;

  // Trie (kNone marks a missing edge until the DFA is completed).
  constexpr uint16_t kNone = 0xFFFF;
  set.nodes_.push_back(Node{});
  set.next_.assign(nc, kNone);
  for (size_t i = 0; i < delimiters.size(); ++i) {
    uint32_t u = 0;
    const auto& d = delimiters[i];
    for (size_t k = 0; k < d.size(); ++k) {
      const uint8_t c = set.cls_[d[k]];
      if (set.next_[u * nc + c] == kNone) {
        if (set.nodes_.size() >= kNone - 1) return InvalidArgument("delimiter automaton too large");
        set.next_[u * nc + c] = static_cast<uint16_t>(set.nodes_.size());
        Node n;
        n.depth = static_cast<uint16_t>(k + 1);
        n.ref = static_cast<int16_t>(i);
        set.nodes_.push_back(n);
        set.next_.resize(set.nodes_.size() * nc, kNone);
      }
      u = set.next_[u * nc + c];
    }
    set.nodes_[u].match = static_cast<int16_t>(i);
  }

  // Failure links by breadth-first order, completing the DFA as we go: a missing edge follows
  // the failure node's edge, and a node with no match of its own inherits its failure node's
  // (the longest delimiter that is a suffix of this node's prefix).
  std::vector<uint32_t> fail(set.nodes_.size(), 0);
  std::deque<uint32_t> queue;
  for (size_t c = 0; c < nc; ++c) {
    uint16_t& e = set.next_[c];
    if (e == kNone) {
      e = 0;
    } else {
      fail[e] = 0;
      queue.push_back(e);
    }
  }
  while (!queue.empty()) {
    const uint32_t u = queue.front();
    queue.pop_front();
    if (set.nodes_[u].match < 0) set.nodes_[u].match = set.nodes_[fail[u]].match;
    for (size_t c = 0; c < nc; ++c) {
      uint16_t& e = set.next_[u * nc + c];
      const uint16_t via_fail = set.next_[fail[u] * nc + c];
      if (e == kNone) {
        e = via_fail;
      } else {
        fail[e] = via_fail;
        queue.push_back(e);
      }
    }
  }

  set.root_plain_.assign(256, 0);
  for (int b = 0; b < 256; ++b) {
    const uint16_t v = set.next_[set.cls_[b]];
    set.root_plain_[b] = v == 0 && set.nodes_[0].match < 0;
  }
  set.delims_ = std::move(delimiters);
  return set;
}

DelimiterMatcher::Step DelimiterMatcher::Feed(Symbol s) {
  const DelimiterSet& set = *set_;
  const uint32_t v = set.next_[node_ * set.nclasses_ + set.cls_[s]];
  Step step;
  const size_t before = set.nodes_[node_].depth;
  prev_node_ = node_;
  last_ = s;
  const auto& nv = set.nodes_[v];
  if (nv.match >= 0) {
    // The window after this symbol ends with the delimiter; whatever precedes it settles.
    step.settled = before + 1 - set.delims_[nv.match].size();
    step.match = nv.match;
    node_ = 0;
  } else {
    step.settled = before + 1 - nv.depth;
    node_ = v;
  }
  return step;
}

Symbol DelimiterMatcher::SettledSymbol(size_t i) const {
  const auto& n = set_->nodes_[prev_node_];
  if (i < n.depth) return set_->delims_[n.ref][i];
  return last_;
}

}  // namespace ladle::frontend::parser
