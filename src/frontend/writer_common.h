// Pieces the three response writers share: SSE framing, number and usage formatting, error
// bodies, id derivation, and the ordered list of output items that Responses and Messages
// both build (one item per reasoning run, text run or tool call).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/status.h"
#include "ladle/frontend/events.h"

namespace ladle::frontend::writer_internal {

// `event: <name>\ndata: ` (Responses and Messages name every frame).
void BeginNamedFrame(std::string_view name, std::string* out);
// `data: ` (Chat frames are unnamed).
void BeginDataFrame(std::string* out);
// The blank line that ends a frame.
inline void EndFrame(std::string* out) { out->append("\n\n"); }

void AppendInt(int64_t v, std::string* out);
void AppendDouble(double v, std::string* out);
// A JSON string, or null when s is empty (optional string fields).
void AppendQuotedOrNull(std::string_view s, std::string* out);

// The part of a response id after its prefix ("chatcmpl-", "resp_", "msg_"), so item and call
// ids derived from it stay unique without a second random source.
std::string_view IdBody(std::string_view id);

// Usage in each protocol's words.
void AppendChatUsage(const Usage& u, std::string* out);
void AppendResponsesUsage(const Usage& u, std::string* out);
// Anthropic counts cache reads apart from input_tokens (input = prompt - cached).
// `final` adds output_tokens_details, which only means something once generation ended.
void AppendMessagesUsage(const Usage& u, bool final, std::string* out);

// Logprobs in OpenAI's shape (Chat `logprobs.content[]` and Responses `output_text.logprobs[]`
// share it): {"token":…,"logprob":…,"bytes":[…],"top_logprobs":[{"token","logprob","bytes"}…]}.
// `token` is the text of the bytes; when they are not valid UTF-8 (a token that holds part of
// a code point), OpenAI's convention: "bytes:" then every byte of each ill-formed part as
// \xNN (valid parts stay text), while `bytes` always has the exact bytes. A logprob that is
// not finite (-inf for a token outside the sampler's support) prints as -9999.0, OpenAI's
// "very unlikely" value, because JSON has no infinity.
std::string LogprobTokenText(std::string_view bytes);
void AppendLogprobValue(float v, std::string* out);
void AppendTokenLogprob(const TokenLogprob& t, std::string* out);
// The entries, comma-separated and without brackets, after `*count` earlier ones (so a writer
// can keep one growing list); *count grows by lps.size().
void AppendLogprobEntries(const std::vector<TokenLogprob>& lps, size_t* count, std::string* out);

// True for the finishes that end in an error rather than a response.
inline bool IsFailure(FinishReason r) { return r == FinishReason::kError || r == FinishReason::kCancelled; }
// The message clients see for a failed finish: e.text, or a generic one.
std::string FailureMessage(const Event& e);
// 500 for kError, 499 for kCancelled (HttpStatusFor(StatusCode::kCancelled)).
ladle::StatusCode FailureStatus(FinishReason r);

// {"error":{"message":…,"type":"server_error","param":null,"code":null}} (OpenAiErrorJson)
void AppendOpenAiError(std::string_view message, std::string* out);
// {"type":"error","error":{"type":"api_error","message":…}} (AnthropicErrorJson)
void AppendAnthropicError(std::string_view message, std::string* out);

// An opaque, deterministic signature for a thinking block: Messages clients send thinking
// blocks back with their signature, and an FNV-1a digest of the text lets a later request tell
// its own unchanged blocks apart (it is not a cryptographic seal).
class ThinkingSignature {
 public:
  void Update(std::string_view text);
  std::string Finish() const;
  void Reset() { hash_ = kOffset; }

 private:
  static constexpr uint64_t kOffset = 14695981039346656037ull;
  uint64_t hash_ = kOffset;
};

// One piece of output in generation order.
struct OutputItem {
  enum class Kind : uint8_t { kReasoning, kText, kToolCall };
  Kind kind = Kind::kText;
  std::string text;     // reasoning or text; a tool call's arguments JSON text
  std::string item_id;  // Responses item id
  std::string call_id;  // tool call id
  std::string name;     // tool name
  std::string signature;  // thinking block signature (Messages)
  std::string logprobs;   // Responses output_text: logprob entries so far, comma-separated
  size_t logprob_count = 0;
  int tool_index = -1;  // the parser's tool index
  bool closed = false;
};

// The ordered items and which one is open. Writers drive it: Open/Append/Close and read back.
class OutputItems {
 public:
  // The open item, or nullptr.
  OutputItem* open() { return open_ < 0 ? nullptr : &items_[open_]; }
  int open_index() const { return open_; }
  // Appends a new item and makes it the open one (the caller closed the previous one).
  OutputItem& Open(OutputItem::Kind kind);
  void CloseOpen() {
    if (open_ >= 0) items_[open_].closed = true;
    open_ = -1;
  }
  // The tool-call item for the parser's index, or -1.
  int FindTool(int tool_index) const;
  size_t tool_count() const { return tool_count_; }
  const std::vector<OutputItem>& items() const { return items_; }
  std::vector<OutputItem>& items() { return items_; }

 private:
  std::vector<OutputItem> items_;
  int open_ = -1;
  size_t tool_count_ = 0;
};

}  // namespace ladle::frontend::writer_internal
