// Protocol error bodies, API names, and the Adapt() dispatcher. The error JSON is written by
// hand (AppendQuoted) so it is always valid JSON, whatever bytes the message carries.
#include <string>

#include "ladle/frontend/request_adapters.h"
#include "ladle/json/json.h"

namespace ladle::frontend {

namespace {

void AppendNullable(const std::string& s, std::string* out) {
  if (s.empty()) {
    *out += "null";
  } else {
    json::AppendQuoted(s, out);
  }
}

}  // namespace

std::string OpenAiErrorJson(const ApiError& e) {
  std::string out = "{\"error\":{\"message\":";
  json::AppendQuoted(e.message, &out);
  out += ",\"type\":";
  json::AppendQuoted(e.type, &out);
  out += ",\"param\":";
  AppendNullable(e.param, &out);
  out += ",\"code\":";
  AppendNullable(e.code, &out);
  out += "}}";
  return out;
}

std::string AnthropicErrorJson(const ApiError& e) {
  std::string out = "{\"type\":\"error\",\"error\":{\"type\":";
  json::AppendQuoted(e.type, &out);
  out += ",\"message\":";
  json::AppendQuoted(e.message, &out);
  out += "}}";
  return out;
}

std::string ErrorJson(Api api, const ApiError& e) {
  return api == Api::kMessages ? AnthropicErrorJson(e) : OpenAiErrorJson(e);
}

std::optional<Api> ParseApiName(std::string_view name) {
  if (name == "chat") return Api::kChat;
  if (name == "responses") return Api::kResponses;
  if (name == "messages") return Api::kMessages;
  return std::nullopt;
}

Adapted Adapt(Api api, std::string_view body, const Limits& limits) {
  switch (api) {
    case Api::kChat: return AdaptChat(body, limits);
    case Api::kResponses: return AdaptResponses(body, limits);
    case Api::kMessages: return AdaptMessages(body, limits);
  }
  Adapted out;
  out.error.status = StatusCode::kInternal;
  out.error.type = "api_error";
  out.error.message = "unknown API";
  return out;
}

}  // namespace ladle::frontend
