// The streaming output parser (the recipe's "Streaming output parsing"): token ids as the
// engine produces them, in chunks of any size, become protocol-neutral Events — reasoning,
// content, tool calls with streamed argument JSON, and one finish.
//
// What it guarantees:
//   * Control tokens are recognised by id only: </think>, the V3/V3.1 tool-call markers
//     (128806..128814) and ｜DSML｜ where the version has it as a token. The same characters
//     spelled with ordinary tokens are plain text and can neither end reasoning nor start a call.
//   * Chunking never changes the result: the events of any split of the same ids, with
//     adjacent text of the same kind joined, are identical. Only a possible delimiter prefix
//     (shorter than the longest delimiter) and an incomplete UTF-8 sequence are ever held back.
//   * A tool call's name is emitted (kToolCallStart) as soon as it is known and its arguments
//     stream as JSON text fragments: V3/V3.1 pass the model's JSON through; DSML (V3.2/V4)
//     arguments are built from parameter boundaries, string="true" values escaped piece by
//     piece and other values passed through raw. No argument object is ever built.
//   * Every kToolCallArgs lies between the kToolCallStart and kToolCallEnd of its index, and
//     Finish emits exactly one kFinish, last.
//
// Phases: the stream starts in reasoning or content (start_in_reasoning). </think> ends
// reasoning; a later <think> opens another reasoning span (a <think> right at the start of one
// repeats the prompt's and is dropped); a stray </think> is dropped. A tool-call opener by id
// also ends reasoning (models sometimes skip </think>). A call may come bare, without its
// section wrapper. Text after a tool-call section is dropped, as vLLM, SGLang and dynamo all
// do; further sections are still parsed. A DSML string="false" value that is not JSON (a date,
// a word) is passed as a JSON string instead.
//
// Malformed output, in brief (tests/unit/frontend/parser_parity_test.cc records the choice
// made for every reference fixture):
//   * A tool-call section that breaks before any call in it was committed (no valid name yet)
//     is returned as content, verbatim, markers included, with Event::malformed set.
//   * A call whose name was already streamed cannot be taken back: when it breaks (wrong or
//     missing closer, truncated or invalid arguments) it is closed with kToolCallEnd, its
//     arguments are what the model produced, and Event::malformed is set.
//   * finish is kToolCalls only when the engine stopped normally and at least one call was
//     parsed completely (its closer seen and its arguments well formed).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/frontend/events.h"
#include "ladle/frontend/model_version.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::frontend {

struct StreamParserOptions {
  // Tool-call ids are this prefix followed by the call's index. Empty: "call_" and 24 random
  // alphanumerics, fresh per parser (ids must differ across responses, not within one).
  std::string tool_id_prefix;
  // Replaces SpecialTokensFor(version), e.g. to try a ｜DSML｜ token id before the version
  // table has one. The tokenizer must decode these ids to their marker text.
  std::optional<SpecialTokens> special_tokens;
};

// One parser per response; not thread-safe (the grammar tables behind it are shared and
// immutable, so creating one is cheap).
class StreamParser {
 public:
  // `tok` must be TokenizerForVersion(base, version). `start_in_reasoning` says how the prompt
  // ended: true after a generation prompt that opened reasoning (`<think>`, R1's `<think>\n`),
  // false after `</think>` or a non-thinking prompt.
  static Result<StreamParser> Create(ModelVersion version, tokenizer::Tokenizer tok, bool start_in_reasoning,
                                     StreamParserOptions opts = {});

  StreamParser(StreamParser&&) noexcept;
  StreamParser& operator=(StreamParser&&) noexcept;
  ~StreamParser();

  // Feeds the next ids (any number, including none). Ids outside the vocabulary are skipped
  // and counted (invalid_ids()). After Finish this returns nothing.
  std::vector<Event> Push(std::span<const tokenizer::TokenId> ids);
  // Ends the stream: flushes held text, closes an open call and emits the kFinish event.
  // `from_engine` is why generation stopped (kStop for EOS or a stop string/id). Calling it
  // again returns nothing.
  std::vector<Event> Finish(FinishReason from_engine);

  bool finished() const;
  // Ids consumed while reasoning (including the </think> that ended it), for usage blocks.
  int64_t reasoning_tokens() const;
  int64_t invalid_ids() const;

 private:
  struct Impl;
  explicit StreamParser(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether a prompt ends by opening reasoning, i.e. the `start_in_reasoning` to give the parser:
// true when its last marker (whitespace aside) is <think> — a token from V3.1 on, the text
// "<think>" for R1/V3 — and false after </think> or anything else.
bool PromptOpensReasoning(ModelVersion version, const tokenizer::Tokenizer& tok,
                          std::span<const tokenizer::TokenId> prompt);

// "stop", "length", "tool_calls", "cancelled", "error" (OpenAI's spellings where they exist).
std::string_view FinishReasonName(FinishReason r);
Result<FinishReason> ParseFinishReason(std::string_view name);

}  // namespace ladle::frontend
