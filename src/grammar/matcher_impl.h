// CompiledGrammar's internals (shared by matcher.cc and serialize.cc).
#pragma once

#include <memory>

#include "automaton.h"
#include "ladle/grammar/matcher.h"
#include "mask_cache.h"

namespace ladle::grammar {

struct CompiledGrammar::Impl {
  Grammar grammar;
  std::shared_ptr<const TokenVocabulary> vocab;
  Automaton automaton;
  std::unique_ptr<MaskCache> cache;  // lazily filled; internally synchronised
};

// Builds the Impl's cache and, with `eager`, classifies every state that can be a stack top
// until `eager_until` (what is left stays lazy: eagerness is an optimisation, not a reason to
// fail a compile).
std::shared_ptr<const CompiledGrammar> FinishCompiled(
    std::unique_ptr<CompiledGrammar::Impl> impl, bool eager,
    std::chrono::steady_clock::time_point eager_until = std::chrono::steady_clock::time_point::max());

}  // namespace ladle::grammar
