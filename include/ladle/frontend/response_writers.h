// Parser events (events.h) → each protocol's response: a non-streaming JSON body or a stream
// of SSE frames, for OpenAI Chat Completions, OpenAI Responses and Anthropic Messages (the
// recipe's "converted back into each protocol's streaming response"). Shapes follow what the
// official `openai` and `@anthropic-ai/sdk` stream readers accept; tests/sdk checks that, and
// docs/response_formats.md lists the event sequences.
//
// One writer per request. Call Begin once, OnEvent for each parser event, End once; each call
// returns the bytes to send next (non-streaming writers return everything from End). Writers
// never fail: input they cannot place (arguments for a tool call that never started, events
// after the finish) is handled as documented below rather than rejected.
//
// Finishes other than stop/length/tool_calls:
//   kError / kCancelled, streaming: Chat sends an OpenAI error frame (`data: {"error":...}`)
//     then `data: [DONE]`; Responses ends with `response.failed` (status "failed", or
//     "cancelled"); Messages sends `event: error` and nothing after it. The SDKs raise these.
//   kError / kCancelled, non-streaming: the body is the protocol's error JSON and
//     http_status() is 500 (error) or 499 (cancelled, as HttpStatusFor(kCancelled)).
//   End() without a kFinish counts as kError: the output is not known to be complete.
//   kFinish.malformed only matters to logs: the text already arrived as content, so the
//     finish maps like any other stop.
// On kFinish, `text` is read too: for kStop it is the stop string that ended generation ("" for
// end-of-sentence; Messages reports it as stop_reason "stop_sequence"), for kError/kCancelled
// the message clients see ("" → a generic one).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ladle/core/status.h"
#include "ladle/frontend/conversation.h"
#include "ladle/frontend/events.h"
#include "ladle/json/json.h"

namespace ladle::frontend {

// Request settings the Responses API echoes in its response object. Absent values print as
// null (or the API's default where it has one).
struct ResponsesEcho {
  json::Value instructions;  // null, or the instructions string as given
  std::optional<int64_t> max_output_tokens;
  bool parallel_tool_calls = true;
  std::string reasoning_effort;  // "" → null
  std::optional<double> temperature, top_p;
  json::Value text;         // {"format":{...}}; null → {"format":{"type":"text"}}
  json::Value tool_choice;  // "auto" | "none" | "required" | {...}; null → "auto"
  json::Value tools;        // array of {"type":"function",...}; null → []
  json::Value metadata;     // object; null → {}
  std::string user;         // "" → null
  bool store = false;       // whether the server keeps this response (its item ids resolve later)
};

struct ResponseMeta {
  Api api = Api::kChat;
  std::string id;  // "chatcmpl-…" / "resp_…" / "msg_…"; see NewResponseId
  std::string model;
  int64_t created = 0;  // unix seconds
  bool stream = false;
  // Chat: stream_options.include_usage (a final chunk with empty choices). Responses and
  // Messages always report usage.
  bool include_usage = false;
  std::string reasoning_field = "reasoning_content";  // Chat: the reasoning delta/message field
  std::string system_fingerprint;                     // Chat: "" → null
  int n = 1;                                          // Chat: number of choices
  // Logprobs: -1 when the request did not ask for them (Chat then prints `"logprobs":null`,
  // Responses `"logprobs":[]`, byte for byte as without this feature); otherwise the number
  // of alternatives per token (0..20). The values ride on Event::logprobs: Chat reports the
  // tokens of content and reasoning events in `logprobs.content` (as vLLM does), Responses
  // those of output_text only. See docs/response_formats.md.
  int top_logprobs = -1;
  ResponsesEcho echo;                                 // Responses only
};

// A fresh id with the API's prefix and 24 random alphanumerics.
std::string NewResponseId(Api api);

// Meta for `req` with a new id and `created` (unix seconds): api, model, stream,
// include_usage, n and the Responses echo come from the request.
ResponseMeta MakeResponseMeta(const Request& req, int64_t created);

class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // Streaming: the opening frames (Chat: a role chunk per choice; Responses: created and
  // in_progress; Messages: message_start and ping). `prompt` gives the prompt and cached token
  // counts, known before generation (Messages reports them in message_start). Non-streaming:
  // nothing.
  virtual void AppendBegin(const Usage& prompt, std::string* out) = 0;
  // One parser event for choice `choice` (only Chat with n > 1 uses choices other than 0;
  // Chat ignores a choice outside 0..n-1, the other writers ignore the argument). Events
  // after a choice's kFinish are ignored.
  virtual void AppendEvent(const Event& e, int choice, std::string* out) = 0;
  // Streaming: the closing frames with `usage`. Non-streaming: the whole JSON body.
  virtual void AppendEnd(const Usage& usage, std::string* out) = 0;

  std::string Begin(const Usage& prompt = {}) {
    std::string s;
    AppendBegin(prompt, &s);
    return s;
  }
  std::string OnEvent(const Event& e, int choice = 0) {
    std::string s;
    AppendEvent(e, choice, &s);
    return s;
  }
  std::string End(const Usage& usage) {
    std::string s;
    AppendEnd(usage, &s);
    return s;
  }

  // "text/event-stream" or "application/json".
  std::string_view content_type() const { return stream_ ? "text/event-stream" : "application/json"; }
  // The status to send the body with: 200, or after End() of a failed non-streaming request
  // 500/499. Streams are always 200 (their status went out before the first event).
  int http_status() const { return HttpStatusFor(status_); }
  // Whether any choice finished with kFinish.malformed (for logs and metrics).
  bool malformed() const { return malformed_; }

 protected:
  explicit ResponseWriter(bool stream) : stream_(stream) {}
  bool stream_;
  StatusCode status_ = StatusCode::kOk;
  bool malformed_ = false;
};

std::unique_ptr<ResponseWriter> MakeChatWriter(const ResponseMeta& meta);
std::unique_ptr<ResponseWriter> MakeResponsesWriter(const ResponseMeta& meta);
std::unique_ptr<ResponseWriter> MakeMessagesWriter(const ResponseMeta& meta);
// The writer for meta.api.
std::unique_ptr<ResponseWriter> MakeResponseWriter(const ResponseMeta& meta);

}  // namespace ladle::frontend
