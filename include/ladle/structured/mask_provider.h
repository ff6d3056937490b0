// The engine's MaskProvider (engine.h) for a compiled constraint: one GrammarMatcher per
// sample (n > 1 samples are independent), the budget from max_tokens, and the reasoning
// trigger.
//
// Reasoning trigger: when the prompt ends inside thinking (V3.1/V3.2/V4 thinking mode, R1),
// the model first writes free reasoning; the constraint starts only after the end-of-thinking
// marker — the `</think>` token id where the version has one, the text "</think>" for R1
// (whose tokenizer spells it with ordinary tokens; bytes of the same token after the marker
// are fed to the matcher, leading whitespace dropped). Before the marker the mask allows
// every token; the budget below is what keeps reasoning from eating the answer's room.
//
// Budget: each sample's matcher gets SetRemainingTokens(max_tokens - generated) before each
// mask. While still reasoning, once the budget gets down to the shortest completion plus the
// marker plus the margin, the mask forces the end-of-thinking marker, so the answer always
// fits and closes. Either kind of narrowing counts as "forced" (forced()).
//
// The budget is counted in tokens, not bytes: DSML tool-call markup runs ~3 bytes a token,
// so a byte count would close a forced call far too early (or, where the bytes never fit,
// steer from the first token). Near the end the provider asks the matcher for the shortest
// completion as tokens (GrammarMatcher::ShortestCompletion); while its slack is large the
// matcher's byte-level check keeps any one token from growing the completion by more than
// the slack, and once the slack is down to kCommitSlack the mask forces that completion
// token by token, so the output always closes within max_tokens when it can at all.
// MinTokens() is the fewest max_tokens that can hold a complete output (the server refuses
// a forced tool call with less, up front).
//
// Lazy tool calls (tool_choice auto, CompiledConstraint::triggers): the mask allows every
// token until a trigger appears in the output (its token id, or its text across tokens),
// then the matcher of that trigger's `after` grammar takes over, fed the rest of the token
// that completed a text trigger. Nothing is forced before a trigger: auto may answer in text.
//
// Thread-safety: FillMask/Accept for one index never overlap (the engine's contract);
// different indices may run at once. forced() and Failure() may be read from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ladle/engine/engine.h"
#include "ladle/grammar/matcher.h"
#include "ladle/structured/constraint.h"

namespace ladle::structured {

struct MaskOptions {
  int n = 1;                // samples
  uint32_t max_tokens = 256;
  bool budget_aware = true;
  uint32_t margin = 4;
  // End-of-thinking trigger: set when the prompt ends inside thinking. `trigger_id` when
  // the version has a </think> token, else `trigger_text` is matched in the output bytes.
  bool starts_in_reasoning = false;
  std::optional<engine::TokenId> trigger_id;
  std::string trigger_text = "</think>";
  // Tokens that spell trigger_text (R1), forced in order when the budget runs out.
  std::vector<engine::TokenId> trigger_tokens;
};

// MaskOptions for a request of `version` whose encoded prompt ends_in_thinking or not.
MaskOptions MaskOptionsFor(frontend::ModelVersion version, const tokenizer::Tokenizer& version_tok,
                           bool ends_in_thinking, int n, uint32_t max_tokens, bool budget_aware);

// A constrained request as data for an engine in another process (`ladle engine`): the spec
// and the mask options as one JSON object. MaskFromWire on the far side compiles the spec with
// its own compile service (cached by the same key) and builds the same provider.
std::string ConstraintWire(const ConstraintSpec& spec, const MaskOptions& opts);
struct WireConstraint {
  ConstraintSpec spec;
  MaskOptions opts;
};
Result<WireConstraint> ParseConstraintWire(std::string_view text);

class StructuredMaskProvider : public engine::MaskProvider {
 public:
  StructuredMaskProvider(std::shared_ptr<const CompiledConstraint> constraint, MaskOptions opts);
  ~StructuredMaskProvider() override;

  void FillMask(int index, uint64_t* bits, size_t vocab_size) override;
  void Accept(int index, engine::TokenId token) override;
  // The matcher's error once it gave up (a grammar too ambiguous for its stack limit).
  std::string Failure(int index) override;
  // ConstraintWire of the spec and options it was made from, once set_wire was called.
  std::string Describe() const override { return wire_; }
  void set_wire(std::string w) { wire_ = std::move(w); }

  // Whether the budget narrowed any sample's mask (reported in the response).
  bool forced() const { return forced_.load(std::memory_order_relaxed); }
  bool forced(int index) const;
  // Whether sample `index` is past its reasoning (the constraint is active).
  bool constrained(int index) const;
  const CompiledConstraint& constraint() const { return *constraint_; }
  // The fewest max_tokens a complete output needs from the start: the shortest completion
  // in tokens (plus the end-of-thinking marker when reasoning comes first) and EOS. 0 for
  // a lazy constraint (nothing is forced before a trigger) or one that cannot complete.
  uint32_t MinTokens() const { return min_tokens_; }

 private:
  struct Sample;
  Sample& At(int index);
  size_t Clamp(int index) const;
  void WatchTriggers(Sample& s, engine::TokenId token);
  // Tokens the shortest completion of `s` needs, at most `bound` (bytes bound tokens).
  uint32_t CompletionTokens(Sample& s, uint32_t bound);
  // The budget for one constrained step; true when the mask was written (a committed token).
  bool ApplyTokenBudget(Sample& s, uint32_t remaining, uint64_t* bits, size_t words, size_t vocab_size);

  std::shared_ptr<const CompiledConstraint> constraint_;
  MaskOptions opts_;
  std::vector<std::unique_ptr<Sample>> samples_;
  std::atomic<bool> forced_{false};
  std::mutex failure_mu_;
  std::vector<std::string> failures_;  // per sample, under failure_mu_
  grammar::MatcherOptions matcher_opts_;
  size_t max_trigger_text_ = 0;
  uint32_t min_tokens_ = 0;
  std::string wire_;
};

}  // namespace ladle::structured
