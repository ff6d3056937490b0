// Anthropic Messages adapter: blocks → messages (tool_result placement, thinking, turn merging),
// tools and tool_choice, thinking budget, and Anthropic-shaped errors.
#include <gtest/gtest.h>

#include <string>

#include "adapter_test_util.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/json/json.h"

namespace ladle::frontend {
namespace {

using testing::Ok;
using testing::PyDump;

std::string Body(std::string_view messages, std::string_view extra = "") {
  std::string b = R"({"model":"deepseek","max_tokens":4096,"messages":)";
  b += messages;
  if (!extra.empty()) {
    b += ",";
    b += extra;
  }
  b += "}";
  return b;
}

const char* kUserHi = R"([{"role":"user","content":"hi"}])";

// Anthropic errors carry no param: the path leads the message.
::testing::AssertionResult IsError(const Adapted& a, std::string_view message_prefix, int status = 400,
                                   std::string_view type = "invalid_request_error") {
  if (a.ok()) return ::testing::AssertionFailure() << "adapted, but an error was expected";
  if (a.error.http_status() != status || a.error.type != type ||
      a.error.message.compare(0, message_prefix.size(), message_prefix) != 0) {
    return ::testing::AssertionFailure() << "got status " << a.error.http_status() << " type " << a.error.type
                                         << " message: " << a.error.message;
  }
  auto parsed = json::Parse(AnthropicErrorJson(a.error));
  if (!parsed.ok() || parsed->Find("type")->as_string() != "error" ||
      parsed->Find("error")->Find("message")->as_string() != a.error.message) {
    return ::testing::AssertionFailure() << "bad error JSON: " << AnthropicErrorJson(a.error);
  }
  return ::testing::AssertionSuccess();
}

TEST(AdapterMessages, MinimalRequest) {
  const Request r = Ok(AdaptMessages(Body(kUserHi)));
  EXPECT_EQ(r.api, Api::kMessages);
  EXPECT_EQ(r.model, "deepseek");
  EXPECT_EQ(*r.sampling.max_tokens, 4096);
  EXPECT_TRUE(r.include_usage);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, Role::kUser);
  EXPECT_EQ(r.messages[0].Text(), "hi");
  EXPECT_FALSE(r.thinking.enabled);
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNone);
}

TEST(AdapterMessages, MaxTokensIsRequiredAndBounded) {
  EXPECT_TRUE(IsError(AdaptMessages(R"({"model":"m","messages":[{"role":"user","content":"x"}]})"),
                      "max_tokens: Field required"));
  EXPECT_TRUE(IsError(AdaptMessages(R"({"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]})"),
                      "max_tokens: Input should be greater than or equal to 1"));
  EXPECT_TRUE(IsError(AdaptMessages(R"({"model":"m","max_tokens":"9","messages":[{"role":"user","content":"x"}]})"),
                      "max_tokens: Input should be an integer"));
  Limits lim;
  lim.max_tokens = 100;
  EXPECT_TRUE(IsError(AdaptMessages(R"({"model":"m","max_tokens":101,"messages":[{"role":"user","content":"x"}]})", lim),
                      "max_tokens: Input should be less than or equal to 100"));
  EXPECT_TRUE(IsError(AdaptMessages(R"({"max_tokens":1,"messages":[{"role":"user","content":"x"}]})"),
                      "model: Field required"));
}

TEST(AdapterMessages, SystemStringOrBlocks) {
  const Request s = Ok(AdaptMessages(Body(kUserHi, R"("system":"be kind")")));
  ASSERT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(s.messages[0].role, Role::kSystem);
  EXPECT_EQ(s.messages[0].Text(), "be kind");
  const Request b = Ok(AdaptMessages(Body(kUserHi, R"("system":[{"type":"text","text":"a"},
      {"type":"text","text":"b","cache_control":{"type":"ephemeral"}}])")));
  ASSERT_EQ(b.messages[0].content.size(), 2u);
  EXPECT_EQ(b.messages[0].Text(), "ab");
  EXPECT_EQ(Ok(AdaptMessages(Body(kUserHi, R"("system":"")"))).messages.size(), 1u);
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("system":[{"type":"image"}])")), "system.0.type: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("system":7)")), "system: "));
}

TEST(AdapterMessages, ToolUseAndToolResultsInOrder) {
  const Request r = Ok(AdaptMessages(Body(R"([
    {"role":"user","content":"weather in A and B?"},
    {"role":"assistant","content":[
       {"type":"thinking","thinking":"need both","signature":"sig"},
       {"type":"text","text":"Let me check."},
       {"type":"tool_use","id":"tu_1","name":"weather","input":{"city":"A","days":[1,2],"unit":null,"x":1.0}},
       {"type":"tool_use","id":"tu_2","name":"weather","input":{}}]},
    {"role":"user","content":[
       {"type":"text","text":"also, hurry"},
       {"type":"tool_result","tool_use_id":"tu_1","content":"sunny"},
       {"type":"tool_result","tool_use_id":"tu_2","is_error":true,
        "content":[{"type":"text","text":"fail"},{"type":"text","text":"ed"}]}]}])")));
  ASSERT_EQ(r.messages.size(), 5u);
  const Message& a = r.messages[1];
  EXPECT_EQ(a.role, Role::kAssistant);
  EXPECT_EQ(a.reasoning, "need both");
  EXPECT_EQ(a.Text(), "Let me check.");
  EXPECT_FALSE(a.content_null);
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].id, "tu_1");
  EXPECT_EQ(a.tool_calls[0].name, "weather");
  // Python json.dumps of the input object: ", " / ": ", key order kept, 1.0 stays a float.
  EXPECT_EQ(a.tool_calls[0].arguments, R"({"city": "A", "days": [1, 2], "unit": null, "x": 1.0})");
  EXPECT_EQ(a.tool_calls[1].arguments, "{}");
  // Tool results come first, in block order, then the turn's text.
  EXPECT_EQ(r.messages[2].role, Role::kTool);
  EXPECT_EQ(r.messages[2].tool_call_id, "tu_1");
  EXPECT_EQ(r.messages[2].name, "weather");
  EXPECT_EQ(r.messages[2].Text(), "sunny");
  EXPECT_FALSE(r.messages[2].is_error);
  EXPECT_EQ(r.messages[3].tool_call_id, "tu_2");
  EXPECT_TRUE(r.messages[3].is_error);
  EXPECT_EQ(r.messages[3].Text(), "failed");
  EXPECT_EQ(r.messages[4].role, Role::kUser);
  EXPECT_EQ(r.messages[4].Text(), "also, hurry");
}

TEST(AdapterMessages, OnlyToolResultsMakeNoUserMessage) {
  const Request r = Ok(AdaptMessages(Body(R"([
    {"role":"user","content":"go"},
    {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"q":"é"}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}])")));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_TRUE(r.messages[1].content_null);  // tool use without text, as Chat's content: null
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"q": "é"})");
  EXPECT_EQ(r.messages[2].role, Role::kTool);
  EXPECT_TRUE(r.messages[2].content.empty());
}

TEST(AdapterMessages, ConsecutiveSameRoleMessagesFormOneTurn) {
  const Request r = Ok(AdaptMessages(Body(R"([
    {"role":"user","content":"one"},
    {"role":"user","content":[{"type":"text","text":"two"}]},
    {"role":"assistant","content":[{"type":"thinking","thinking":"t1"}]},
    {"role":"assistant","content":[{"type":"thinking","thinking":"t2"},{"type":"redacted_thinking","data":"xx"},
                                   {"type":"text","text":"answer"}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"z","content":"r"}]},
    {"role":"user","content":"after"}])")));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].Text(), "onetwo");
  ASSERT_EQ(r.messages[0].content.size(), 2u);
  EXPECT_EQ(r.messages[1].reasoning, "t1\n\nt2");
  EXPECT_EQ(r.messages[1].Text(), "answer");
  EXPECT_EQ(r.messages[2].role, Role::kTool);
  EXPECT_EQ(r.messages[2].name, "");  // no matching tool_use: no name, still accepted
  EXPECT_EQ(r.messages[3].Text(), "after");
}

TEST(AdapterMessages, Images) {
  const Request r = Ok(AdaptMessages(Body(R"([{"role":"user","content":[
    {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0K"}},
    {"type":"image","source":{"type":"url","url":"https://x/y.webp"}},
    {"type":"text","text":"what?"}]}])")));
  const Message& m = r.messages[0];
  ASSERT_EQ(m.content.size(), 3u);
  EXPECT_EQ(m.content[0].kind, ContentPart::Kind::kImage);
  EXPECT_EQ(m.content[0].image.url, "data:image/png;base64,iVBORw0K");
  EXPECT_EQ(m.content[0].image.media_type, "image/png");
  EXPECT_EQ(m.content[1].image.url, "https://x/y.webp");
  EXPECT_EQ(m.content[2].text, "what?");
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":[{"type":"image","source":{"type":"base64",
      "media_type":"image/bmp","data":"x"}}]}])")),
                      "messages.0.content.0.source.media_type: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":[{"type":"image","source":{"type":"file",
      "file_id":"f"}}]}])")),
                      "messages.0.content.0.source.type: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"assistant","content":[{"type":"image","source":{}}]}])")),
                      "messages.0.content.0.type: "));
}

TEST(AdapterMessages, ToolsAndToolChoice) {
  const std::string tools = R"("tools":[{"name":"a","description":"A","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}},
                                        {"type":"custom","name":"b","input_schema":{"type":"object"}}])";
  const Request r = Ok(AdaptMessages(Body(kUserHi, tools)));
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "a");
  EXPECT_EQ(r.tools[0].description, "A");
  EXPECT_EQ(PyDump(r.tools[0].parameters), R"({"type": "object", "properties": {"q": {"type": "string"}}})");
  EXPECT_FALSE(r.tools[1].has_description);
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_TRUE(r.parallel_tool_calls);

  const Request any = Ok(AdaptMessages(Body(kUserHi, tools + R"(,"tool_choice":{"type":"any","disable_parallel_tool_use":true})")));
  EXPECT_EQ(any.tool_choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_FALSE(any.parallel_tool_calls);
  const Request named = Ok(AdaptMessages(Body(kUserHi, tools + R"(,"tool_choice":{"type":"tool","name":"b"})")));
  EXPECT_EQ(named.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.tool_choice.name, "b");
  EXPECT_EQ(Ok(AdaptMessages(Body(kUserHi, tools + R"(,"tool_choice":{"type":"none"})"))).tool_choice.mode,
            ToolChoice::Mode::kNone);

  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, tools + R"(,"tool_choice":{"type":"tool","name":"c"})")),
                      "tool_choice.name: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, tools + R"(,"tool_choice":{"type":"tool"})")),
                      "tool_choice.name: Field required"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, tools + R"(,"tool_choice":"auto")")), "tool_choice: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("tool_choice":{"type":"any"})")), "tool_choice: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("tools":[{"name":"a"}])")), "tools.0.input_schema: Field required"));
  // A declared server tool is dropped (reported), not a 400; forcing it is a 400.
  const Request web = Ok(AdaptMessages(Body(kUserHi, R"("tools":[{"type":"web_search_20250305","name":"web_search"},)"
                                                     R"({"name":"a","input_schema":{}}])")));
  ASSERT_EQ(web.tools.size(), 1u);
  EXPECT_EQ(web.tools[0].name, "a");
  ASSERT_EQ(web.dropped_tools.size(), 1u);
  EXPECT_EQ(web.dropped_tools[0], "web_search");
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("tools":[{"type":"web_search_20250305","name":"web_search"}],)"
                                                  R"("tool_choice":{"type":"tool","name":"web_search"})")),
                      "tool_choice"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("tools":[{"name":"a b","input_schema":{}}])")), "tools.0.name: "));
}

TEST(AdapterMessages, ThinkingConfig) {
  const Request on = Ok(AdaptMessages(Body(kUserHi, R"("thinking":{"type":"enabled","budget_tokens":2048})")));
  EXPECT_TRUE(on.thinking.enabled);
  EXPECT_EQ(on.thinking.budget_tokens, 2048);
  const Request off = Ok(AdaptMessages(Body(kUserHi, R"("thinking":{"type":"disabled"})")));
  EXPECT_FALSE(off.thinking.enabled);
  EXPECT_FALSE(off.thinking.budget_tokens.has_value());
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("thinking":{"type":"enabled","budget_tokens":1023})")),
                      "thinking.budget_tokens: Input should be greater than or equal to 1024"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("thinking":{"type":"enabled","budget_tokens":4096})")),
                      "thinking.budget_tokens: must be less than max_tokens (4096)"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("thinking":{"type":"enabled"})")),
                      "thinking.budget_tokens: Field required"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("thinking":{"type":"on"})")), "thinking.type: "));
}

TEST(AdapterMessages, SamplingStopAndMetadata) {
  const Request r = Ok(AdaptMessages(Body(kUserHi, R"("stop_sequences":["\n\nHuman:","END"],"temperature":0.2,
      "top_p":0.9,"top_k":5,"stream":true,"metadata":{"user_id":"u-1"},"service_tier":"auto")")));
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"\n\nHuman:", "END"}));
  EXPECT_DOUBLE_EQ(*r.sampling.temperature, 0.2);
  EXPECT_DOUBLE_EQ(*r.sampling.top_p, 0.9);
  EXPECT_EQ(*r.sampling.top_k, 5);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.user, "u-1");
  EXPECT_EQ(json::Dump(r.metadata), R"({"user_id":"u-1"})");
  EXPECT_FALSE(Ok(AdaptMessages(Body(kUserHi, R"("top_k":0)"))).sampling.top_k.has_value());

  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("temperature":1.5)")),
                      "temperature: Input should be less than or equal to 1"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("stop_sequences":"END")")), "stop_sequences: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("stop_sequences":[""])")), "stop_sequences.0: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("top_k":-1)")), "top_k: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("metadata":{"user_id":5})")), "metadata.user_id: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("mcp_servers":[{"type":"url","url":"https://m"}])")),
                      "mcp_servers: "));
}

TEST(AdapterMessages, BlockAndRoleErrors) {
  EXPECT_TRUE(IsError(AdaptMessages(Body("[]")), "messages: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"system","content":7}])")), "messages.0.content: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"tool","content":"x"}])")), "messages.0.role: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user"}])")), "messages.0.content: Field required"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":[{"type":"text"}]}])")),
                      "messages.0.content.0.text: Field required"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":1}]}])")),
                      "messages.1.content.0.text: Input should be a string, but got an integer"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":[{"type":"tool_use","id":"x","name":"f","input":{}}]}])")),
                      "messages.0.content.0.type: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"assistant","content":[{"type":"tool_use","id":"x","name":"f","input":"{}"}]}])")),
                      "messages.0.content.0.input: Input should be an object"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":[{"type":"tool_result"}]}])")),
                      "messages.0.content.0.tool_use_id: Field required"));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",
      "content":[{"type":"document","source":{}}]}]}])")),
                      "messages.0.content.0.content.0.type: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":[{"type":"video"}]}])")),
                      "messages.0.content.0.type: "));
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"assistant","content":[{"type":"thinking"}]}])")),
                      "messages.0.content.0.thinking: Field required"));
}

TEST(AdapterMessages, BodyErrorsUseAnthropicTypes) {
  Adapted bad = AdaptMessages("{not json");
  EXPECT_TRUE(IsError(bad, "The request body is not valid JSON"));
  Limits lim;
  lim.max_body_bytes = 16;
  Adapted big = AdaptMessages(Body(kUserHi), lim);
  EXPECT_TRUE(IsError(big, "Request body of", 413, "request_too_large"));
  EXPECT_EQ(ErrorJson(Api::kMessages, big.error).find("\"type\":\"error\""), 1u);
  Limits few;
  few.max_messages = 1;
  EXPECT_TRUE(IsError(AdaptMessages(Body(R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"}])"), few),
                      "messages: at most 1 items"));
}

TEST(AdapterMessages, UnknownFieldsIgnored) {
  const Request r = Ok(AdaptMessages(Body(R"([{"role":"user","content":[{"type":"text","text":"x",
      "citations":null,"cache_control":{"type":"ephemeral"},"extra":1}],"other":true}])",
                                          R"("container":"c","context_management":{},"zz":[1])")));
  EXPECT_EQ(r.messages[0].Text(), "x");
}

}  // namespace
// Issue 12 (Claude Code): system messages inside `messages` stay at their position.
TEST(AdapterMessages, SystemMessagesInsideTheConversation) {
  const Request r = Ok(AdaptMessages(Body(R"([{"role":"user","content":"a"},{"role":"system","content":"be brief"},)"
                                          R"({"role":"assistant","content":"b"},)"
                                          R"({"role":"system","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]},)"
                                          R"({"role":"user","content":"c"}])")));
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0].role, Role::kUser);
  EXPECT_EQ(r.messages[1].role, Role::kSystem);
  EXPECT_EQ(r.messages[2].role, Role::kAssistant);
  EXPECT_EQ(r.messages[3].role, Role::kSystem);
  EXPECT_EQ(r.messages[4].role, Role::kUser);
}

TEST(AdapterMessages, AdaptiveThinkingAndNativeStructuredOutput) {
  const Request a = Ok(AdaptMessages(Body(kUserHi, R"("thinking":{"type":"adaptive"})")));
  EXPECT_TRUE(a.thinking.enabled);
  EXPECT_FALSE(a.thinking.budget_tokens.has_value());
  const Request f = Ok(AdaptMessages(Body(kUserHi, R"("output_config":{"format":{"type":"json_schema",)"
                                                   R"("schema":{"type":"object","properties":{"x":{"type":"integer"}}}}})")));
  EXPECT_EQ(f.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_TRUE(f.response_format.schema.is_object());
  const Request b = Ok(AdaptMessages(Body(kUserHi, R"("output_format":{"type":"json_schema","schema":{"type":"string"}})")));
  EXPECT_EQ(b.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_TRUE(IsError(AdaptMessages(Body(kUserHi, R"("output_config":{"format":{"type":"xml"}})")), "output_config.format.type"));
}

}  // namespace ladle::frontend
