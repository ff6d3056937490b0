// Helpers for the encoder tests: build conversations directly (the encoders' input form), and
// read DeepSeek's golden input files ({"tools"?, "messages": [...]}, OpenAI-style messages with
// reasoning_content and per-message tools) into a Request the way DeepSeek's harness feeds its
// encoder.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ladle/frontend/conversation.h"
#include "ladle/frontend/encoder.h"
#include "ladle/json/json.h"

namespace ladle::frontend::testing {

inline Message Msg(Role role, std::string text) {
  Message m;
  m.role = role;
  m.content.push_back({ContentPart::Kind::kText, std::move(text), {}});
  return m;
}
inline Message System(std::string text) { return Msg(Role::kSystem, std::move(text)); }
inline Message Developer(std::string text) { return Msg(Role::kDeveloper, std::move(text)); }
inline Message User(std::string text) { return Msg(Role::kUser, std::move(text)); }
inline Message Assistant(std::string text, std::optional<std::string> reasoning = std::nullopt) {
  Message m = Msg(Role::kAssistant, std::move(text));
  m.reasoning = std::move(reasoning);
  return m;
}
// An assistant turn with calls and null content (what OpenAI clients send).
inline Message Calls(std::vector<ToolCall> calls, std::optional<std::string> reasoning = std::nullopt) {
  Message m;
  m.role = Role::kAssistant;
  m.content_null = true;
  m.tool_calls = std::move(calls);
  m.reasoning = std::move(reasoning);
  return m;
}
inline Message ToolResult(std::string call_id, std::string text) {
  Message m = Msg(Role::kTool, std::move(text));
  m.tool_call_id = std::move(call_id);
  return m;
}

inline json::Value ParseJson(std::string_view text) {
  auto v = json::Parse(text);
  EXPECT_TRUE(v.ok()) << v.status().ToString() << " in " << text;
  return v.ok() ? *v : json::Value();
}

inline Tool MakeTool(std::string name, std::string description, std::string_view parameters) {
  Tool t;
  t.name = std::move(name);
  t.description = std::move(description);
  t.has_description = true;
  t.parameters = ParseJson(parameters);
  return t;
}

inline Request Conversation(std::vector<Message> messages, bool thinking = false) {
  Request r;
  r.messages = std::move(messages);
  r.thinking.enabled = thinking;
  return r;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// DeepSeek's golden input → Request. The harness moves top-level `tools` into messages[0].
inline Request RequestFromGolden(const std::string& text, bool thinking) {
  Request r;
  r.thinking.enabled = thinking;
  json::Value doc = ParseJson(text);
  const json::Value* messages = doc.Find("messages");
  if (messages == nullptr || !messages->is_array()) {
    ADD_FAILURE() << "golden input has no messages";
    return r;
  }
  for (const json::Value& jm : messages->as_array()) {
    Message m;
    const std::string role = jm.Find("role")->as_string();
    m.role = role == "system"      ? Role::kSystem
             : role == "developer" ? Role::kDeveloper
             : role == "user"      ? Role::kUser
             : role == "assistant" ? Role::kAssistant
                                   : Role::kTool;
    const json::Value* content = jm.Find("content");
    if (content == nullptr || content->is_null()) {
      m.content_null = true;
    } else {
      m.content.push_back({ContentPart::Kind::kText, content->as_string(), {}});
    }
    if (const json::Value* rc = jm.Find("reasoning_content"); rc != nullptr && rc->is_string()) {
      m.reasoning = rc->as_string();
    }
    if (const json::Value* id = jm.Find("tool_call_id"); id != nullptr) m.tool_call_id = id->as_string();
    if (const json::Value* calls = jm.Find("tool_calls"); calls != nullptr && calls->is_array()) {
      for (const json::Value& c : calls->as_array()) {
        const json::Value* fn = c.Find("function");
        ToolCall call;
        if (const json::Value* id = c.Find("id"); id != nullptr) call.id = id->as_string();
        call.name = fn->Find("name")->as_string();
        call.arguments = fn->Find("arguments")->as_string();
        m.tool_calls.push_back(std::move(call));
      }
    }
    if (const json::Value* tools = jm.Find("tools"); tools != nullptr && tools->is_array()) {
      m.tools = tools->as_array();
    }
    r.messages.push_back(std::move(m));
  }
  if (const json::Value* tools = doc.Find("tools"); tools != nullptr && tools->is_array() && !r.messages.empty()) {
    r.messages[0].tools = tools->as_array();
  }
  return r;
}

// The rendered text, or the error as text so a failing EXPECT_EQ shows why.
inline std::string Render(const Request& r, ModelVersion v, const RenderOptions& o = {}) {
  auto p = RenderPrompt(r, v, o);
  if (!p.ok()) return "ERROR: " + p.status().ToString();
  return std::string(PromptText(*p));
}

}  // namespace ladle::frontend::testing
