// The grammar runtime: a Grammar (grammar.h) compiled against a token vocabulary into an
// immutable automaton, and per-request matchers that give the per-step token mask.
//
//   auto vocab = TokenVocabulary::FromTokenizer(tok, /*eos=*/{1});      // once per model
//   auto cg = CompiledGrammar::Compile(grammar, vocab, {});              // once per constraint
//   GrammarMatcher m(*cg);                                               // once per request
//   m.FillNextTokenMask(bits);   // 129,280 bits, 1 = allowed
//   m.AcceptToken(id);           // advance; false (and no change) if id is not allowed
//   m.Rollback(2);               // speculative decoding: undo the last two tokens
//
// Design (docs/grammar.md): each rule becomes a byte-level DFA whose edges are bytes,
// special tokens or calls of other rules; the matcher holds a set of persistent stacks
// (a pushdown automaton). Masks walk a token trie over the vocabulary; for every
// (rule, DFA state) the tokens are split once into accepted / rejected / uncertain classes
// (whether accepting them depends on the stack below), cached in the CompiledGrammar, so a
// step only simulates the uncertain tokens against the real stacks.
//
// Thread-safety: TokenVocabulary and CompiledGrammar are immutable after construction and
// shared by handle (their lazily built mask caches are internally synchronised). A
// GrammarMatcher belongs to one request and is not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/grammar/grammar.h"

namespace ladle::tokenizer {
class Tokenizer;
}

namespace ladle::grammar {

using TokenId = uint32_t;

// The bytes of every token id and which ids are special, built once per model.
class TokenVocabulary {
 public:
  // `vocab_size` is the number of logit columns (129,280 for DeepSeek): ids past the
  // tokenizer's vocabulary are never allowed. Added/special tokens are excluded from byte
  // matching (a grammar reaches them only through ExprKind::kSpecialToken); `eos` ids are
  // allowed exactly when the grammar can end. A kSpecialToken `<[id]>` is taken only by a
  // token the vocabulary has under that id (a special one, or a normal one, which may then
  // take either path): naming a hole (no bytes, not special), an EOS id or an id past
  // vocab_size allows nothing there.
  static Result<std::shared_ptr<const TokenVocabulary>> FromTokenizer(
      const tokenizer::Tokenizer& tok, std::vector<TokenId> eos, size_t vocab_size = 129280);
  // For tests: explicit token bytes (index = id); `special` ids match only kSpecialToken.
  static Result<std::shared_ptr<const TokenVocabulary>> FromTokens(
      std::vector<std::string> tokens, std::vector<TokenId> special, std::vector<TokenId> eos,
      size_t vocab_size);

  size_t vocab_size() const;
  std::span<const TokenId> eos() const;
  std::string_view TokenBytes(TokenId id) const;  // empty for ids that are not tokens
  bool IsSpecial(TokenId id) const;
  // A stable digest of everything above (part of the compile-cache key).
  uint64_t Fingerprint() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }
  explicit TokenVocabulary(std::unique_ptr<Impl> impl);
  ~TokenVocabulary();

 private:
  std::unique_ptr<Impl> impl_;
};

struct CompileOptions {
  // Wall-clock and memory budget of Compile(); exceeding either is kResourceExhausted
  // ("grammar compile exceeded 2000 ms" / "... 512 MiB"), never a hang.
  uint32_t max_compile_ms = 2000;
  size_t max_memory_bytes = 512ull << 20;
  // Precompute the accepted/rejected/uncertain split for every state at compile time
  // (slower compile, flat mask latency) instead of on first use. Stops at max_compile_ms;
  // the states left over are classified lazily (not an error).
  bool eager_mask_cache = false;
  // Reuse the DFA of a unit (a rule compiled on its own: a string body, a pattern, the rest
  // of an unlisted key) that some earlier compile in this process built for the same body,
  // when it calls no other rule. Off only to measure cold compiles; results are identical.
  bool share_unit_dfas = true;
};

class CompiledGrammar {
 public:
  // Takes the grammar by value: the compiled grammar keeps it, so callers done with theirs
  // should std::move it in (copying a large schema's IR was a measurable share of compile).
  static Result<std::shared_ptr<const CompiledGrammar>> Compile(
      Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab, const CompileOptions& opts = {});

  const TokenVocabulary& vocab() const;
  const Grammar& grammar() const;
  size_t MemoryBytes() const;

  // The automaton as bytes, for `ladle grammar-worker` to ship a compiled grammar to the
  // server (mask caches are not included; they rebuild lazily). Deserialize checks the
  // vocabulary fingerprint and fails with kFailedPrecondition on a mismatch.
  std::string Serialize() const;
  static Result<std::shared_ptr<const CompiledGrammar>> Deserialize(
      std::string_view bytes, std::shared_ptr<const TokenVocabulary> vocab);

  struct Impl;
  const Impl& impl() const { return *impl_; }
  explicit CompiledGrammar(std::unique_ptr<Impl> impl);
  ~CompiledGrammar();

 private:
  std::unique_ptr<Impl> impl_;
};

struct MatcherOptions {
  // How many accepted tokens Rollback() can undo (speculative decoding drafts are <= 6).
  uint32_t max_rollback = 8;
  // Budget-aware completion: with SetRemainingTokens(r), every token after which the
  // shortest valid completion (in bytes, so an upper bound in tokens) no longer fits in
  // r - 1 is removed from the mask, so the output always closes validly. The check is exact
  // at every step and costs nothing until some allowed token could overrun: each cached
  // token class carries the completion length every accepted token leaves.
  bool budget_aware = true;
  // Slack the structured-output layer keeps on top of the shortest completion when it must
  // end reasoning early (MaskOptions::margin); the matcher itself needs none.
  uint32_t margin = 4;
  // Token classes with too many distinct completion lengths carry no budget data; where one
  // is in use the check starts only this many tokens before the shortest completion, so a
  // single such token that raises the completion by more than this is not caught.
  uint32_t lookahead = 64;
  // A grammar can be so ambiguous that the number of live parses grows exponentially with
  // the input (e.g. `x ::= "(" (x | [a-z]+){0,3}` after many "("). A step that would track
  // more than this many parse stacks fails the matcher with kResourceExhausted (status())
  // instead of slowing every later token down without bound. JSON-Schema and tool grammars
  // stay in the single digits.
  size_t max_parallel_stacks = 16384;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                          const MatcherOptions& opts = {});
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Writes ceil(vocab_size / 64) words: bit i set = token i allowed next. EOS bits are set
  // iff the grammar can end here. After termination only EOS is allowed.
  void FillNextTokenMask(uint64_t* bits);
  // Advances by one token. Returns false, leaving the state unchanged, if it is not allowed.
  bool AcceptToken(TokenId id);
  // Advances by bytes (tests, jump-forward); false and unchanged if they do not match.
  bool AcceptString(std::string_view bytes);
  // Undoes the last n accepted tokens (n <= min(tokens accepted, max_rollback)).
  Status Rollback(uint32_t n);
  // Forced continuation: the longest byte string every valid continuation starts with (may
  // be empty). Tokenising and accepting it is always safe.
  std::string FindJumpForwardString();
  bool CanTerminate() const;   // the grammar may end here (EOS allowed)
  bool IsTerminated() const;   // EOS was accepted
  void Reset();

  // Budget-aware completion: tokens the request may still produce (call before each mask).
  void SetRemainingTokens(uint32_t remaining);
  // Fewest tokens that can complete the grammar from here (upper bound: bytes, since every
  // single byte is a token).
  uint32_t ShortestCompletionTokens() const;
  // A token sequence that completes the grammar from here (EOS not included): the shortest
  // completion in bytes, split greedily into the longest vocabulary tokens, its special
  // tokens as themselves. Its size is a token count that provably suffices, unlike
  // ShortestCompletionTokens(), which counts bytes: DSML markup is ~3 bytes a token. Empty
  // when the grammar can end here or is terminated; nullopt when it cannot be completed
  // (failed), some byte of the completion starts no vocabulary token, or the shortest way on
  // is a `<[id]>` no token can take (see TokenVocabulary).
  std::optional<std::vector<TokenId>> ShortestCompletion() const;
  // True once the budget forced the mask at least once (reported in the response).
  bool ForcedByBudget() const;
  // OK, or why the matcher gave up (kResourceExhausted: more than max_parallel_stacks live
  // parses). Once failed, the mask allows nothing (not even EOS) and AcceptToken and
  // AcceptString return false, until Reset().
  const Status& status() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ladle::grammar
