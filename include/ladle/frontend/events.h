// What the streaming output parser emits and the response writers consume: protocol-neutral
// events in generation order (the recipe's "Streaming output parsing").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ladle::frontend {

// One alternative at a token position (top_logprobs).
struct TopLogprob {
  std::string bytes;  // the token's exact bytes (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
};

// The engine's logprob for one generated token, carried by the event that delivers its text.
struct TokenLogprob {
  std::string bytes;  // the token's exact bytes (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
  std::vector<TopLogprob> top;  // the k most likely tokens, best first; empty for k = 0
};

enum class FinishReason : uint8_t {
  kStop,       // end-of-sentence token or a stop string/id
  kLength,     // max_tokens reached
  kToolCalls,  // at least one tool call was parsed completely
  kCancelled,  // the client went away or the request was cancelled
  kError,      // the engine failed
};

struct Event {
  enum class Kind : uint8_t {
    kReasoning,      // text: a piece of reasoning
    kContent,        // text: a piece of the answer
    kToolCallStart,  // tool_index, tool_id, tool_name: emitted as soon as the name is known
    kToolCallArgs,   // tool_index, text: a fragment of the arguments' JSON text
    kToolCallEnd,    // tool_index
    kFinish,         // finish
  };
  Kind kind = Kind::kContent;
  std::string text;
  int tool_index = -1;
  std::string tool_id;
  std::string tool_name;
  FinishReason finish = FinishReason::kStop;
  // kFinish only: output that looked like a tool call but could not be parsed was
  // returned as content instead (the reason is kept for logs and clients).
  bool malformed = false;
  // kContent / kReasoning, only when the request asked for logprobs: the tokens whose text
  // this event delivers (the first bytes of a token's text decide the event it rides on), in
  // generation order. A token whose text is never shown (markers, tool-call syntax, EOS,
  // text cut by a stop string) rides on no event. Filled by the server after stop-string
  // filtering (src/server/generation.cc); the parser never sets it.
  std::vector<TokenLogprob> logprobs;
};

// Token accounting for usage blocks.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens served from the prefix cache
  int64_t reasoning_tokens = 0;  // completion tokens inside reasoning
  // Structured output: the budget narrowed the grammar's mask so the output closes within
  // max_tokens. Printed as "grammar_forced": true inside usage only when set (SDKs keep
  // unknown usage fields); docs/structured_output.md.
  bool grammar_forced = false;
};

}  // namespace ladle::frontend
