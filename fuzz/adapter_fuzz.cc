// libFuzzer target for the request adapters (build and run with scripts/fuzz; seeds in
// fuzz/corpus/adapter/, a JSON dictionary in fuzz/adapter.dict: pass -dict=fuzz/adapter.dict).
//
// Each input goes, with default limits and with tight ones, to AdaptChat, AdaptResponses and
// AdaptMessages as the whole body, and also spliced into a valid envelope of each API
// ({"model":"m","messages":<input>} and the like) so that mutations of the interesting part
// are not all stopped by the top-level checks.
//
// Properties (a violation aborts with a message; libFuzzer saves the input):
//   on failure  — status 400 or 413 (413 exactly when the body is over max_body_bytes); a
//                 non-empty, valid UTF-8 message; ErrorJson() parses with json::Parse and has
//                 the protocol's shape (OpenAI: error.{message,type,param,code}, param and code
//                 strings or null; Anthropic: type "error", error.{type,message}).
//   on success  — the request is for the right API, has a model and at least one message;
//                 tools are within limits, validly named and unique; a named or allowed
//                 tool_choice names existing tools and needs tools; stop strings are non-empty
//                 and within limits; n, max_tokens, top_logprobs, temperature, top_p and top_k
//                 are within their ranges; only assistants carry tool calls or reasoning, only
//                 tool messages carry tool_call_id / is_error; content_null means no content;
//                 image URLs are http(s) or data: URIs; every stored JSON value (parameters,
//                 schemas, metadata, message tools) dumps to text json::Parse accepts; Anthropic
//                 tool_use arguments are Python json.dumps text that round-trips exactly;
//                 Anthropic thinking budgets are >= 1024 and < max_tokens; every string is valid
//                 UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ladle/frontend/conversation.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/json/json.h"

namespace {

using namespace ladle::frontend;  // NOLINT
namespace json = ladle::json;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "\n*** adapter_fuzz: property violated: %s\n%s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, what, detail) \
  do {                                 \
    if (!(cond)) Fail(what, (detail)); \
  } while (0)

// Independent of the library: true when s is well-formed UTF-8 (no overlongs, surrogates or
// code points above U+10FFFF).
bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

void CheckUtf8(std::string_view s, const char* what) { FUZZ_CHECK(ValidUtf8(s), what, std::string(s)); }

void CheckJsonValue(const json::Value& v, const char* what) {
  const std::string text = json::Dump(v);
  FUZZ_CHECK(json::Parse(text).ok(), what, text);
  const std::string py = json::Dump(v, json::Style::kPython);
  FUZZ_CHECK(json::Parse(py).ok(), what, py);
}

void CheckError(Api api, const Adapted& a, size_t body_size, const Limits& limits) {
  const ApiError& e = a.error;
  FUZZ_CHECK(e.http_status() == 400 || e.http_status() == 413, "error status is 400 or 413",
             std::to_string(e.http_status()));
  FUZZ_CHECK((e.http_status() == 413) == (body_size > limits.max_body_bytes), "413 exactly for oversized bodies",
             e.message);
  FUZZ_CHECK(!e.message.empty(), "error message is not empty", "");
  CheckUtf8(e.message, "error message is valid UTF-8");
  CheckUtf8(e.param, "error param is valid UTF-8");
  const std::string body = ErrorJson(api, e);
  auto parsed = json::Parse(body);
  FUZZ_CHECK(parsed.ok(), "error JSON parses", body);
  if (api == Api::kMessages) {
    const json::Value* type = parsed->Find("type");
    const json::Value* err = parsed->Find("error");
    FUZZ_CHECK(type != nullptr && type->is_string() && type->as_string() == "error", "Anthropic error type", body);
    FUZZ_CHECK(err != nullptr && err->is_object(), "Anthropic error object", body);
    const json::Value* etype = err->Find("type");
    FUZZ_CHECK(etype != nullptr && (etype->as_string() == "invalid_request_error" ||
                                    etype->as_string() == "request_too_large"),
               "Anthropic error.type", body);
    const json::Value* msg = err->Find("message");
    FUZZ_CHECK(msg != nullptr && msg->is_string() && msg->as_string() == e.message, "Anthropic error.message", body);
  } else {
    const json::Value* err = parsed->Find("error");
    FUZZ_CHECK(err != nullptr && err->is_object(), "OpenAI error object", body);
    const json::Value* msg = err->Find("message");
    FUZZ_CHECK(msg != nullptr && msg->is_string() && msg->as_string() == e.message, "OpenAI error.message", body);
    const json::Value* type = err->Find("type");
    FUZZ_CHECK(type != nullptr && type->is_string() && type->as_string() == "invalid_request_error",
               "OpenAI error.type", body);
    for (const char* key : {"param", "code"}) {
      const json::Value* v = err->Find(key);
      FUZZ_CHECK(v != nullptr && (v->is_null() || v->is_string()), "OpenAI param/code is a string or null", body);
    }
  }
}

bool HasTool(const Request& r, const std::string& name) {
  for (const Tool& t : r.tools) {
    if (t.name == name) return true;
  }
  return false;
}

void CheckRequest(Api api, const Request& r, const Limits& limits) {
  FUZZ_CHECK(r.api == api, "request is for the adapter's API", "");
  FUZZ_CHECK(!r.model.empty(), "model is set", "");
  CheckUtf8(r.model, "model is valid UTF-8");
  FUZZ_CHECK(!r.messages.empty(), "at least one message", r.model);

  FUZZ_CHECK(r.tools.size() <= limits.max_tools, "tool count within limit", std::to_string(r.tools.size()));
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const Tool& t = r.tools[i];
    FUZZ_CHECK(ValidName(t.name), "tool name matches ^[a-zA-Z0-9_-]{1,64}$", t.name);
    for (size_t j = 0; j < i; ++j) FUZZ_CHECK(r.tools[j].name != t.name, "tool names are unique", t.name);
    FUZZ_CHECK(t.parameters.is_null() || t.parameters.is_object(), "tool parameters are an object", t.name);
    FUZZ_CHECK(t.has_description || t.description.empty(), "description only when given", t.name);
    CheckUtf8(t.description, "tool description is valid UTF-8");
    CheckJsonValue(t.parameters, "tool parameters dump to valid JSON");
  }
  const ToolChoice& tc = r.tool_choice;
  if (tc.mode == ToolChoice::Mode::kRequired || tc.mode == ToolChoice::Mode::kNamed ||
      tc.mode == ToolChoice::Mode::kAllowed) {
    FUZZ_CHECK(!r.tools.empty(), "a forcing tool_choice needs tools", "");
  }
  if (tc.mode == ToolChoice::Mode::kNamed) FUZZ_CHECK(HasTool(r, tc.name), "named tool exists", tc.name);
  if (tc.mode == ToolChoice::Mode::kAllowed) {
    FUZZ_CHECK(!tc.allowed.empty(), "allowed tools are listed", "");
    for (const std::string& n : tc.allowed) FUZZ_CHECK(HasTool(r, n), "allowed tool exists", n);
  }

  const Sampling& s = r.sampling;
  FUZZ_CHECK(s.stop.size() <= limits.max_stop, "stop count within limit", std::to_string(s.stop.size()));
  for (const std::string& stop : s.stop) {
    FUZZ_CHECK(!stop.empty(), "stop strings are non-empty", "");
    CheckUtf8(stop, "stop string is valid UTF-8");
  }
  FUZZ_CHECK(s.n >= 1 && s.n <= limits.max_n, "n within [1, max_n]", std::to_string(s.n));
  if (s.max_tokens) {
    FUZZ_CHECK(*s.max_tokens >= 1 && *s.max_tokens <= limits.max_tokens, "max_tokens within range",
               std::to_string(*s.max_tokens));
  }
  FUZZ_CHECK(api != Api::kMessages || s.max_tokens.has_value(), "Messages requires max_tokens", "");
  FUZZ_CHECK(s.top_logprobs >= 0 && s.top_logprobs <= 20, "top_logprobs within [0, 20]",
             std::to_string(s.top_logprobs));
  if (s.temperature) {
    FUZZ_CHECK(*s.temperature >= 0 && *s.temperature <= (api == Api::kMessages ? 1.0 : 2.0),
               "temperature within range", std::to_string(*s.temperature));
  }
  if (s.top_p) FUZZ_CHECK(*s.top_p > 0 && *s.top_p <= 1, "top_p within (0, 1]", std::to_string(*s.top_p));
  if (s.top_k) FUZZ_CHECK(*s.top_k > 0, "top_k set only when it limits", std::to_string(*s.top_k));

  const ResponseFormat& rf = r.response_format;
  if (rf.kind == ResponseFormat::Kind::kRegex || rf.kind == ResponseFormat::Kind::kEbnf) {
    FUZZ_CHECK(!rf.grammar.empty(), "regex/ebnf formats carry a grammar", "");
  }
  if (rf.kind == ResponseFormat::Kind::kJsonSchema) {
    FUZZ_CHECK(ValidName(rf.name), "json_schema name is valid", rf.name);
    FUZZ_CHECK(rf.schema.is_object(), "json_schema schema is an object", "");
    CheckJsonValue(rf.schema, "schema dumps to valid JSON");
  }
  if (r.thinking.budget_tokens) {
    FUZZ_CHECK(r.thinking.enabled, "a budget means thinking is on", "");
    FUZZ_CHECK(*r.thinking.budget_tokens >= 1024 && *r.thinking.budget_tokens < *s.max_tokens,
               "budget_tokens within [1024, max_tokens)", std::to_string(*r.thinking.budget_tokens));
  }
  FUZZ_CHECK(r.metadata.is_null() || r.metadata.is_object(), "metadata is an object", "");
  CheckJsonValue(r.metadata, "metadata dumps to valid JSON");
  CheckUtf8(r.user, "user is valid UTF-8");

  for (const Message& m : r.messages) {
    if (m.role != Role::kAssistant) {
      FUZZ_CHECK(m.tool_calls.empty(), "only assistants make tool calls", "");
      FUZZ_CHECK(!m.reasoning.has_value(), "only assistants carry reasoning", "");
    }
    if (m.role != Role::kTool) {
      FUZZ_CHECK(m.tool_call_id.empty() && !m.is_error, "only tool messages answer calls", "");
    }
    if (m.role != Role::kSystem && m.role != Role::kDeveloper) {
      FUZZ_CHECK(m.tools.empty(), "only system/developer messages carry tools", "");
    }
    if (m.content_null) FUZZ_CHECK(m.content.empty(), "content_null means no content", "");
    for (const ContentPart& p : m.content) {
      if (p.kind == ContentPart::Kind::kText) {
        FUZZ_CHECK(!p.text.empty(), "text parts are non-empty", "");
        CheckUtf8(p.text, "text is valid UTF-8");
      } else {
        const std::string_view url = p.image.url;
        FUZZ_CHECK(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("data:"),
                   "image URLs are http(s) or data:", std::string(url));
      }
    }
    if (m.reasoning) CheckUtf8(*m.reasoning, "reasoning is valid UTF-8");
    for (const ToolCall& c : m.tool_calls) {
      CheckUtf8(c.arguments, "arguments are valid UTF-8");
      CheckUtf8(c.name, "call name is valid UTF-8");
      if (api == Api::kMessages) {
        auto parsed = json::Parse(c.arguments);
        FUZZ_CHECK(parsed.ok() && parsed->is_object(), "tool_use arguments are a JSON object", c.arguments);
        FUZZ_CHECK(json::Dump(*parsed, json::Style::kPython) == c.arguments,
                   "tool_use arguments are Python json.dumps text", c.arguments);
      }
    }
    for (const json::Value& t : m.tools) {
      FUZZ_CHECK(t.is_object(), "message tools are objects", "");
      CheckJsonValue(t, "message tools dump to valid JSON");
    }
  }
}

void RunOne(Api api, std::string_view body, const Limits& limits) {
  const Adapted a = Adapt(api, body, limits);
  if (a.ok()) {
    CheckRequest(api, *a.request, limits);
  } else {
    CheckError(api, a, body.size(), limits);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  static const Limits kDefault;
  static const Limits kTight = [] {
    Limits l;
    l.max_body_bytes = 2048;
    l.max_messages = 4;
    l.max_tools = 2;
    l.max_stop = 2;
    l.max_tokens = 3000;
    l.max_n = 2;
    l.max_json_depth = 12;
    return l;
  }();
  const std::string chat = std::string(R"({"model":"m","messages":)") + std::string(input) + "}";
  const std::string responses = std::string(R"({"model":"m","input":)") + std::string(input) + "}";
  const std::string messages = std::string(R"({"model":"m","max_tokens":2048,"messages":)") + std::string(input) + "}";
  for (const Limits* limits : {&kDefault, &kTight}) {
    for (Api api : {Api::kChat, Api::kResponses, Api::kMessages}) RunOne(api, input, *limits);
    RunOne(Api::kChat, chat, *limits);
    RunOne(Api::kResponses, responses, *limits);
    RunOne(Api::kMessages, messages, *limits);
  }
  return 0;
}
