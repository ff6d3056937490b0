// The one conversation form that every protocol adapter produces and every per-version
// encoder consumes (the recipe's "Multi-protocol API adaptation"). Protocol details stop at
// the adapters (request_adapters.h); model-version details start at the encoders (encoder.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ladle/json/json.h"

namespace ladle::frontend {

enum class Api : uint8_t { kChat, kResponses, kMessages };

enum class Role : uint8_t { kSystem, kDeveloper, kUser, kAssistant, kTool };

// An image keeps its place in the content and its size for the vision path; the pixels stay
// behind a URL or data URI until then.
struct ImagePart {
  std::string url;          // http(s) URL or data: URI as given
  std::string media_type;   // e.g. "image/png" when known
  int width = 0, height = 0;  // 0 when unknown
  // The part's place in the request as the client wrote it ("messages[2].content[0].content[1]"
  // for an image inside an Anthropic tool_result), for errors about this image. Set by the
  // adapters; the conversation's own message numbering differs once a system prompt or
  // instructions are moved in.
  std::string where;
  // Set by whoever has looked at the pixels (the server's image stage) before rendering: how
  // many placeholder tokens the image takes (one per vision patch group), and the image's
  // ordinal in the request, which Prompt::images reports back. A vision version refuses to
  // render an image whose placeholder_tokens is 0.
  int placeholder_tokens = 0;
  int index = -1;
};

struct ContentPart {
  enum class Kind : uint8_t { kText, kImage };
  Kind kind = Kind::kText;
  std::string text;  // kText
  ImagePart image;   // kImage
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text exactly as the client sent it (or as the model wrote it)
};

struct Message {
  Role role = Role::kUser;
  std::vector<ContentPart> content;
  // True when the client sent content null / absent (e.g. an assistant turn with only tool
  // calls); some templates render null and "" differently.
  bool content_null = false;
  std::optional<std::string> reasoning;  // assistant: reasoning_content / reasoning / thinking
  std::vector<ToolCall> tool_calls;      // assistant
  std::string tool_call_id;              // tool: the call this result answers
  bool is_error = false;                 // tool: Anthropic tool_result is_error
  std::string name;                      // optional participant / tool name
  // Tools attached to this message (a system/developer message carrying its own tool list,
  // as DeepSeek's V3.2 harness does). Each is an OpenAI-style {"type":"function",...} object.
  std::vector<json::Value> tools;

  // All text parts joined (images skipped).
  std::string Text() const;
};

struct Tool {
  std::string name;
  std::string description;
  json::Value parameters;  // JSON Schema (an object), key order preserved
  bool strict = false;
  bool has_description = false;
};

struct ToolChoice {
  enum class Mode : uint8_t { kAuto, kNone, kRequired, kNamed, kAllowed };
  Mode mode = Mode::kAuto;
  std::string name;                   // kNamed
  std::vector<std::string> allowed;   // kAllowed: tool names
  bool allowed_required = false;      // kAllowed with mode "required"
};

struct ResponseFormat {
  enum class Kind : uint8_t { kText, kJsonObject, kJsonSchema, kRegex, kEbnf };
  Kind kind = Kind::kText;
  std::string name;    // json_schema name
  json::Value schema;  // json_schema
  bool strict = false;
  std::string grammar;  // regex pattern or EBNF text
};

struct Thinking {
  bool enabled = false;
  std::string effort;                   // "low" | "medium" | "high" | ... when given
  std::optional<int64_t> budget_tokens;  // Anthropic thinking.budget_tokens
};

struct Sampling {
  std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty;
  std::optional<int64_t> top_k, seed, max_tokens;
  std::vector<std::string> stop;
  std::vector<uint32_t> stop_token_ids;
  int n = 1;
  bool logprobs = false;
  int top_logprobs = 0;
};

struct Request {
  Api api = Api::kChat;
  std::string model;
  std::vector<Message> messages;  // system/instructions included, in order
  std::vector<Tool> tools;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  ResponseFormat response_format;
  Thinking thinking;
  Sampling sampling;
  bool stream = false;
  bool include_usage = false;  // Chat stream_options.include_usage (always on for the others)
  json::Value metadata;        // passed through
  std::string user;
  // Hosted tools the request declared but this server cannot run (Anthropic server tools,
  // OpenAI's web_search, ...): dropped from `tools` rather than failing the request, and named
  // in the response's x-ladle-dropped-tools header. A request that forces one is still a 400.
  std::vector<std::string> dropped_tools;
};

}  // namespace ladle::frontend
