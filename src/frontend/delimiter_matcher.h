// Incremental multi-delimiter matching for the streaming output parser (Aho-Corasick compiled
// to a DFA over a small symbol alphabet).
//
// The parser sees the model's output as a stream of symbols: bytes 0..255 of decoded text, and
// one symbol per control token recognised by id. Delimiters are symbol sequences, so a marker
// whose ｜DSML｜ part is a token ("<" DSML "invoke name=\"") and one spelled in text are matched
// the same way, and text that merely looks like a control token can never match its id.
//
// The matcher keeps only the current automaton node between calls. The node's depth is the
// "window": the longest suffix of the input that is still a prefix of some delimiter, i.e. the
// only bytes that may not be emitted yet. Its symbols are never stored: they are the first
// `depth` symbols of a delimiter the node records. Everything that falls out of the window is
// settled and handed back at once; nothing is ever rescanned.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::frontend::parser {

using Symbol = uint16_t;
// 0..255 are bytes; these follow. kOther stands for any control token the grammar has no use
// for (BOS/EOS, placeholders, ...): it breaks a partial match and is then dropped.
inline constexpr Symbol kSymOther = 256;
inline constexpr Symbol kSymThink = 257;
inline constexpr Symbol kSymEndThink = 258;
inline constexpr Symbol kSymCallsBegin = 259;
inline constexpr Symbol kSymCallsEnd = 260;
inline constexpr Symbol kSymCallBegin = 261;
inline constexpr Symbol kSymCallEnd = 262;
inline constexpr Symbol kSymSep = 263;
inline constexpr Symbol kSymDsml = 264;
inline constexpr Symbol kNumSymbols = 265;

inline bool IsByte(Symbol s) { return s < 256; }

// An immutable automaton for one set of delimiters. Delimiter i is reported as match id i.
// Rule (checked by Build): no delimiter may occur inside another except as its suffix, so a
// reported match always spans the whole window and the choice of match is never ambiguous.
class DelimiterSet {
 public:
  static Result<DelimiterSet> Build(std::vector<std::vector<Symbol>> delimiters);

  size_t size() const { return delims_.size(); }
  std::span<const Symbol> delimiter(int i) const { return delims_[i]; }
  size_t max_length() const { return max_len_; }

 private:
  friend class DelimiterMatcher;
  struct Node {
    uint16_t depth = 0;
    int16_t ref = -1;    // a delimiter whose first `depth` symbols spell this node
    int16_t match = -1;  // longest delimiter ending here, or -1
  };
  std::vector<std::vector<Symbol>> delims_;
  std::vector<uint8_t> cls_;    // symbol -> class (0 = in no delimiter)
  size_t nclasses_ = 1;
  std::vector<Node> nodes_;
  std::vector<uint16_t> next_;  // nodes_.size() x nclasses_ DFA transitions
  std::vector<uint8_t> root_plain_;  // byte b leaves the root where it is, matching nothing
  size_t max_len_ = 0;
};

// Streaming state over one DelimiterSet (which must outlive it).
class DelimiterMatcher {
 public:
  struct Step {
    // The first `settled` symbols of (window before the step + the new symbol) left the window:
    // they are plain input, in order. Read them with SettledSymbol() before the next call.
    size_t settled = 0;
    int match = -1;  // a delimiter completed by the new symbol (the window is then empty)
  };

  DelimiterMatcher() = default;
  explicit DelimiterMatcher(const DelimiterSet* set) { Reset(set); }

  // Switches to `set` (or restarts it) with an empty window.
  void Reset(const DelimiterSet* set) {
    set_ = set;
    node_ = 0;
    prev_node_ = 0;
  }
  const DelimiterSet* set() const { return set_; }

  Step Feed(Symbol s);
  // i-th settled symbol of the last Feed (i < Step::settled).
  Symbol SettledSymbol(size_t i) const;

  bool at_root() const { return node_ == 0; }
  size_t window_size() const { return set_->nodes_[node_].depth; }
  // The held symbols, oldest first.
  std::span<const Symbol> window() const {
    const auto& n = set_->nodes_[node_];
    if (n.ref < 0) return {};  // the root: nothing held
    return std::span<const Symbol>(set_->delims_[n.ref]).first(n.depth);
  }

  // At the root: how many leading bytes of `text` stay plain without touching the automaton
  // (the hot path for ordinary prose, which contains no delimiter characters at all).
  size_t PlainPrefix(std::string_view text) const {
    size_t i = 0;
    const uint8_t* plain = set_->root_plain_.data();
    while (i < text.size() && plain[static_cast<uint8_t>(text[i])]) ++i;
    return i;
  }

 private:
  const DelimiterSet* set_ = nullptr;
  uint32_t node_ = 0;
  uint32_t prev_node_ = 0;  // node before the last Feed (SettledSymbol reads its prefix)
  Symbol last_ = 0;
};

}  // namespace ladle::frontend::parser
