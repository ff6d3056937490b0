// A slow, obviously-correct recognizer over the grammar IR (grammar.h): the oracle that tests
// compare the front-ends and the automaton compiler against. Internal to the grammar module
// (tests include it through src/grammar/).
//
// How: the IR is lowered to a plain context-free grammar (one nonterminal per expression and
// per rule; repeats expanded: a{m,n} = m copies then a chain of n-m optional copies, a{m,} =
// m copies then a left-recursive star) and run through an Earley recogniser. Earley copes with
// any CFG, so recursion of every kind, left recursion included, is accepted here even though
// the automaton compiler rejects left recursion: the oracle is deliberately the more
// permissive side. Code-point classes are matched by decoding UTF-8 from the input; invalid
// UTF-8 never matches one.
//
// Cost: O(n^3) worst case, linear-ish for the grammars front-ends produce; inputs of a few KB
// against schema-sized grammars take milliseconds to a second. Not for production use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/grammar/grammar.h"

namespace ladle::grammar {

// One input symbol: a byte of text, or a special (control) token by id, which only a
// kSpecialToken expression matches.
struct Symbol {
  bool special = false;
  uint32_t value = 0;
  friend bool operator==(const Symbol&, const Symbol&) = default;
};

inline Symbol ByteSymbol(uint8_t b) { return Symbol{false, b}; }
inline Symbol SpecialSymbol(uint32_t id) { return Symbol{true, id}; }
std::vector<Symbol> BytesToSymbols(std::string_view bytes);

class ReferenceRecognizer {
 public:
  // Lowers the grammar once; reuse the recognizer for many inputs. Fails with
  // kResourceExhausted when the lowered grammar would exceed `max_symbols` production
  // symbols (huge counted repeats), kInvalidArgument on a malformed IR.
  static Result<ReferenceRecognizer> Create(const Grammar& g, size_t max_symbols = 50'000'000);

  // The whole input is a sentence of the grammar.
  bool Matches(std::span<const Symbol> input) const;
  bool Matches(std::string_view bytes) const;
  // Some continuation (possibly empty) makes the input a sentence. An input ending inside a
  // UTF-8 sequence counts when the sequence can still be completed into an allowed code point.
  bool IsPrefix(std::span<const Symbol> input) const;
  bool IsPrefix(std::string_view bytes) const;

  ReferenceRecognizer(ReferenceRecognizer&&) noexcept;
  ReferenceRecognizer& operator=(ReferenceRecognizer&&) noexcept;
  ~ReferenceRecognizer();

  struct Cfg;

 private:
  explicit ReferenceRecognizer(std::unique_ptr<Cfg> cfg);
  bool Run(std::span<const Symbol> input, bool prefix) const;
  std::unique_ptr<Cfg> cfg_;
};

// One-shot conveniences (lower + run). On a grammar the recognizer cannot lower they return
// false and, when `error` is given, store why.
bool ReferenceMatches(const Grammar& g, std::span<const Symbol> input, Status* error = nullptr);
bool ReferenceMatches(const Grammar& g, std::string_view bytes, Status* error = nullptr);
bool ReferenceIsPrefix(const Grammar& g, std::span<const Symbol> input, Status* error = nullptr);
bool ReferenceIsPrefix(const Grammar& g, std::string_view bytes, Status* error = nullptr);

// A random sentence of the grammar, for differential tests and fuzzers: alternatives and
// repeat counts drawn from `seed`, code points biased to the edges of their ranges. Past
// `soft_depth` nested expressions or `soft_length` symbols it only takes the choices that
// finish soonest, so it always terminates. nullopt when the root derives nothing.
std::optional<std::vector<Symbol>> RandomSentence(const Grammar& g, uint64_t seed, size_t soft_length = 256,
                                                  int soft_depth = 48);
// Bytes only: nullopt also when the sentence holds a special token.
std::optional<std::string> RandomText(const Grammar& g, uint64_t seed, size_t soft_length = 256, int soft_depth = 48);

}  // namespace ladle::grammar
