// Internal to ladle_structured.
#pragma once

#include "ladle/structured/constraint.h"

namespace ladle::structured {

// kToolCall: rebuilds the request's tools and choice from the payload and asks the tool-call
// grammar builder (tool_grammar.h) for the version's call syntax. tool_constraint.cc.
Result<grammar::Grammar> BuildToolCallSpecGrammar(const ConstraintSpec& spec, grammar::CompileReport* report);

// A lazy kToolCall spec: every trigger of the version with its compiled `after` grammar.
Result<std::vector<CompiledTrigger>> CompileLazyTriggers(const ConstraintSpec& spec,
                                                        std::shared_ptr<const grammar::TokenVocabulary> vocab,
                                                        const grammar::CompileOptions& opts,
                                                        grammar::CompileReport* report);

}  // namespace ladle::structured
