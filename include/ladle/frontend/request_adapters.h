// Protocol request bodies → the one conversation form (conversation.h), with validation.
// Every invalid field yields the protocol's own error, naming the parameter; unknown fields
// are ignored as the official APIs ignore them. Limits are explicit and configurable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ladle/core/status.h"
#include "ladle/frontend/conversation.h"

namespace ladle::frontend {

struct Limits {
  size_t max_body_bytes = 32u << 20;
  size_t max_messages = 10000;
  size_t max_tools = 512;
  size_t max_stop = 16;
  int64_t max_tokens = 1 << 20;  // upper bound on max_tokens / max_output_tokens
  int max_n = 16;
  size_t max_json_depth = 128;
};

// An error in protocol terms. The writers below render it in each API's shape.
struct ApiError {
  // What went wrong, as a Status code; the HTTP status is derived (HttpStatusFor, core).
  StatusCode status = StatusCode::kInvalidArgument;
  int http_status() const { return HttpStatusFor(status); }
  std::string type = "invalid_request_error";  // OpenAI error.type / Anthropic error.type
  std::string message;
  std::string param;  // OpenAI error.param ("" → null), e.g. "messages[2].content"
  std::string code;   // OpenAI error.code ("" → null), e.g. "invalid_value", "model_not_found"
};

// {"error":{"message":...,"type":...,"param":...,"code":...}}
std::string OpenAiErrorJson(const ApiError& e);
// {"type":"error","error":{"type":...,"message":...}}
std::string AnthropicErrorJson(const ApiError& e);
// The shape `api` uses (Chat and Responses: OpenAI's; Messages: Anthropic's).
std::string ErrorJson(Api api, const ApiError& e);

struct Adapted {
  std::optional<Request> request;
  ApiError error;  // meaningful when !ok()
  bool ok() const { return request.has_value(); }
};

Adapted AdaptChat(std::string_view body, const Limits& limits = {});
Adapted AdaptResponses(std::string_view body, const Limits& limits = {});
Adapted AdaptMessages(std::string_view body, const Limits& limits = {});
Adapted Adapt(Api api, std::string_view body, const Limits& limits = {});

// "chat" | "responses" | "messages"
std::optional<Api> ParseApiName(std::string_view name);

}  // namespace ladle::frontend
