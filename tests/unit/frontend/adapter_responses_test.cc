// OpenAI Responses adapter: items → messages (turn merging, reasoning attachment), stateless
// refusals, tools/format/reasoning, and parity with Chat Completions for the same conversation.
#include <gtest/gtest.h>

#include <string>

#include "adapter_test_util.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/json/json.h"

namespace ladle::frontend {
namespace {

using testing::ExpectSameMessages;
using testing::ExpectSameTools;
using testing::IsError;
using testing::Ok;
using testing::PyDump;

std::string Body(std::string_view input, std::string_view extra = "") {
  std::string b = R"({"model":"deepseek","input":)";
  b += input;
  if (!extra.empty()) {
    b += ",";
    b += extra;
  }
  b += "}";
  return b;
}

TEST(AdapterResponses, StringInputWithInstructions) {
  const Request r = Ok(AdaptResponses(Body(R"("hello")", R"("instructions":"be terse")")));
  EXPECT_EQ(r.api, Api::kResponses);
  EXPECT_TRUE(r.include_usage);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, Role::kSystem);
  EXPECT_EQ(r.messages[0].Text(), "be terse");
  EXPECT_EQ(r.messages[1].role, Role::kUser);
  EXPECT_EQ(r.messages[1].Text(), "hello");
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNone);
  // Empty instructions add nothing.
  EXPECT_EQ(Ok(AdaptResponses(Body(R"("x")", R"("instructions":"")"))).messages.size(), 1u);
}

TEST(AdapterResponses, MessageItemsWithAndWithoutType) {
  const Request r = Ok(AdaptResponses(Body(R"([
    {"role":"developer","content":"rules"},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"see "},
       {"type":"input_image","image_url":"data:image/jpeg;base64,/9j/","detail":"low"}]},
    {"type":"message","role":"assistant","id":"msg_1","status":"completed",
       "content":[{"type":"output_text","text":"ok","annotations":[]}]},
    {"role":"system","content":[{"type":"input_text","text":"sys"}]}])")));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, Role::kDeveloper);
  EXPECT_EQ(r.messages[1].role, Role::kUser);
  ASSERT_EQ(r.messages[1].content.size(), 2u);
  EXPECT_EQ(r.messages[1].content[1].kind, ContentPart::Kind::kImage);
  EXPECT_EQ(r.messages[1].content[1].image.media_type, "image/jpeg");
  EXPECT_EQ(r.messages[2].role, Role::kAssistant);
  EXPECT_EQ(r.messages[2].Text(), "ok");
  EXPECT_FALSE(r.messages[2].content_null);
  EXPECT_EQ(r.messages[3].role, Role::kSystem);
}

TEST(AdapterResponses, OneAssistantTurnMergesReasoningTextAndCalls) {
  const Request r = Ok(AdaptResponses(Body(R"([
    {"role":"user","content":"weather?"},
    {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"short"}],
       "content":[{"type":"reasoning_text","text":"long thought"}]},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
    {"type":"function_call","call_id":"c1","name":"w","arguments":"{\"city\": \"A\"}"},
    {"type":"function_call","call_id":"c2","name":"w","arguments":"{\"city\": \"B\"}"},
    {"type":"function_call_output","call_id":"c1","output":"sunny"},
    {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]}])")));
  ASSERT_EQ(r.messages.size(), 4u);
  const Message& a = r.messages[1];
  EXPECT_EQ(a.role, Role::kAssistant);
  EXPECT_EQ(a.reasoning, "long thought");  // raw content preferred over the summary
  EXPECT_EQ(a.Text(), "Checking.");
  EXPECT_FALSE(a.content_null);
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].id, "c1");
  EXPECT_EQ(a.tool_calls[1].arguments, "{\"city\": \"B\"}");
  EXPECT_EQ(r.messages[2].role, Role::kTool);
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
  EXPECT_EQ(r.messages[2].Text(), "sunny");
  EXPECT_EQ(r.messages[2].name, "w");
  EXPECT_EQ(r.messages[3].tool_call_id, "c2");
  EXPECT_EQ(r.messages[3].Text(), "rain");
}

TEST(AdapterResponses, ReasoningAttachmentRules) {
  // Summary only: joined with blank lines; calls without text: content_null.
  const Request r = Ok(AdaptResponses(Body(R"([
    {"role":"user","content":"q"},
    {"type":"reasoning","summary":[{"type":"summary_text","text":"s1"},{"type":"summary_text","text":"s2"}]},
    {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
    {"type":"reasoning","summary":[{"type":"summary_text","text":"again"}]},
    {"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},
    {"type":"reasoning","summary":[],"encrypted_content":"opaque"},
    {"type":"function_call","call_id":"c3","name":"f","arguments":"{}"},
    {"type":"function_call_output","call_id":"c1","output":"1"},
    {"type":"reasoning","summary":[{"type":"summary_text","text":"trailing"}]}])")));
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[1].reasoning, "s1\n\ns2");
  EXPECT_TRUE(r.messages[1].content_null);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  // Interleaved reasoning starts a new assistant message; text-less reasoning is ignored, so c3
  // joins the message before it.
  EXPECT_EQ(r.messages[2].reasoning, "again");
  ASSERT_EQ(r.messages[2].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[2].tool_calls[1].id, "c3");
  EXPECT_EQ(r.messages[3].role, Role::kTool);
  // A reasoning item with nothing after it is an assistant message of only reasoning.
  EXPECT_EQ(r.messages[4].role, Role::kAssistant);
  EXPECT_EQ(r.messages[4].reasoning, "trailing");
  EXPECT_TRUE(r.messages[4].content_null);
  EXPECT_TRUE(r.messages[4].tool_calls.empty());
}

TEST(AdapterResponses, SameConversationAsChatGivesSameRequest) {
  const Adapted chat = AdaptChat(R"({"model":"m","messages":[
    {"role":"system","content":"sys"},
    {"role":"user","content":"weather in A and B?"},
    {"role":"assistant","content":null,"reasoning_content":"two calls",
     "tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"city\": \"A\"}"}},
                   {"id":"c2","type":"function","function":{"name":"w","arguments":"{\"city\": \"B\"}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"sunny"},
    {"role":"tool","tool_call_id":"c2","content":"rain"},
    {"role":"assistant","content":"A sunny, B rain","reasoning_content":"summarise"},
    {"role":"user","content":[{"type":"text","text":"thanks"},{"type":"image_url","image_url":{"url":"https://i/x.png"}}]}],
    "tools":[{"type":"function","function":{"name":"w","description":"weather",
       "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
    "tool_choice":"required","reasoning_effort":"high","max_completion_tokens":99,"temperature":0.5})");
  const Adapted resp = AdaptResponses(R"({"model":"m","instructions":"sys","input":[
    {"role":"user","content":"weather in A and B?"},
    {"type":"reasoning","summary":[{"type":"summary_text","text":"two calls"}]},
    {"type":"function_call","call_id":"c1","name":"w","arguments":"{\"city\": \"A\"}"},
    {"type":"function_call","call_id":"c2","name":"w","arguments":"{\"city\": \"B\"}"},
    {"type":"function_call_output","call_id":"c1","output":"sunny"},
    {"type":"function_call_output","call_id":"c2","output":"rain"},
    {"type":"reasoning","content":[{"type":"reasoning_text","text":"summarise"}],"summary":[]},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"A sunny, B rain"}]},
    {"role":"user","content":[{"type":"input_text","text":"thanks"},{"type":"input_image","image_url":"https://i/x.png"}]}],
    "tools":[{"type":"function","name":"w","description":"weather",
       "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],
    "tool_choice":"required","reasoning":{"effort":"high"},"max_output_tokens":99,"temperature":0.5})");
  const Request& c = Ok(chat);
  const Request& r = Ok(resp);
  ExpectSameMessages(c.messages, r.messages);
  ExpectSameTools(c.tools, r.tools);
  EXPECT_EQ(c.tool_choice.mode, r.tool_choice.mode);
  EXPECT_EQ(c.thinking.enabled, r.thinking.enabled);
  EXPECT_EQ(c.thinking.effort, r.thinking.effort);
  EXPECT_EQ(c.sampling.max_tokens, r.sampling.max_tokens);
  EXPECT_EQ(c.sampling.temperature, r.sampling.temperature);
  EXPECT_EQ(c.parallel_tool_calls, r.parallel_tool_calls);
}

TEST(AdapterResponses, StatefulParametersAreClearErrors) {
  Adapted prev = AdaptResponses(Body(R"("x")", R"("previous_response_id":"resp_123")"));
  EXPECT_TRUE(IsError(prev, "previous_response_id", "unsupported_parameter"));
  EXPECT_NE(prev.error.message.find("state"), std::string::npos) << prev.error.message;
  // store is the server's (it keeps responses for item_reference); the adapter accepts it.
  EXPECT_TRUE(AdaptResponses(Body(R"("x")", R"("store":true)")).ok());
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("background":true)")), "background", "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("conversation":"conv_1")")), "conversation",
                      "unsupported_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("prompt":{"id":"pmpt_1"})")), "prompt", "unsupported_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"type":"item_reference","id":"msg_1"}])")), "input[0].type",
                      "unsupported_value"));
  // Absent, false and null store/previous_response_id are fine.
  EXPECT_TRUE(AdaptResponses(Body(R"("x")", R"("store":false,"background":false,"previous_response_id":null)")).ok());
  EXPECT_TRUE(AdaptResponses(Body(R"("x")")).ok());
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("store":"yes")")), "store", "invalid_type"));
}

TEST(AdapterResponses, ToolsAndToolChoice) {
  const std::string tools = R"("tools":[{"type":"function","name":"a","parameters":{"type":"object"},"strict":true},
                                        {"type":"function","name":"b","description":"B"}])";
  const Request r = Ok(AdaptResponses(Body(R"("x")", tools + R"(,"tool_choice":{"type":"function","name":"b"},
      "parallel_tool_calls":false)")));
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_TRUE(r.tools[0].strict);
  EXPECT_FALSE(r.tools[1].strict);  // Chat's default, documented in adapter_responses.cc
  EXPECT_EQ(PyDump(r.tools[0].parameters), R"({"type": "object"})");
  EXPECT_TRUE(r.tools[1].has_description);
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(r.tool_choice.name, "b");
  EXPECT_FALSE(r.parallel_tool_calls);

  const Request allowed = Ok(AdaptResponses(Body(R"("x")", tools + R"(,"tool_choice":{"type":"allowed_tools",
      "mode":"auto","tools":[{"type":"function","name":"a"},{"type":"function","name":"b"}]})")));
  EXPECT_EQ(allowed.tool_choice.mode, ToolChoice::Mode::kAllowed);
  EXPECT_FALSE(allowed.tool_choice.allowed_required);
  EXPECT_EQ(allowed.tool_choice.allowed, (std::vector<std::string>{"a", "b"}));

  // Hosted tools are dropped (named for the response header); namespaces are flattened.
  const Request hosted = Ok(AdaptResponses(Body(R"("x")", R"("tools":[{"type":"web_search","external_web_access":false},
      {"type":"namespace","name":"multi_agent_v1","description":"sub-agents","tools":[
        {"type":"function","name":"spawn_agent","parameters":{"type":"object"}},
        {"type":"function","name":"close_agent","parameters":{"type":"object"}}]},
      {"type":"function","name":"exec_command","parameters":{"type":"object"}}])")));
  ASSERT_EQ(hosted.tools.size(), 3u);
  EXPECT_EQ(hosted.tools[0].name, "spawn_agent");
  EXPECT_EQ(hosted.tools[1].name, "close_agent");
  EXPECT_EQ(hosted.tools[2].name, "exec_command");
  EXPECT_EQ(hosted.dropped_tools, (std::vector<std::string>{"web_search"}));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"})")),
                      "tool_choice.type", "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("tools":[{"type":"function","name":"a.b"}])")),
                      "tools[0].name", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", tools + R"(,"tool_choice":{"type":"function","name":"c"})")),
                      "tool_choice.name", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", tools + R"(,"tool_choice":{"type":"web_search_preview"})")),
                      "tool_choice.type", "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("tool_choice":{"type":"function","name":"a"})")),
                      "tool_choice", "invalid_value"));
}

TEST(AdapterResponses, TextFormatReasoningAndSampling) {
  const Request r = Ok(AdaptResponses(Body(R"("x")", R"("text":{"format":{"type":"json_schema","name":"out",
      "schema":{"type":"object","required":["a"]},"strict":true},"verbosity":"low"},
      "reasoning":{"effort":"medium","summary":"auto"},"max_output_tokens":64,"temperature":1.5,"top_p":0.5,
      "top_logprobs":3,"stream":true,"metadata":{"a":"b"},"user":"u")")));
  EXPECT_EQ(r.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(r.response_format.name, "out");
  EXPECT_TRUE(r.response_format.strict);
  EXPECT_EQ(PyDump(r.response_format.schema), R"({"type": "object", "required": ["a"]})");
  EXPECT_TRUE(r.thinking.enabled);
  EXPECT_EQ(r.thinking.effort, "medium");
  EXPECT_EQ(*r.sampling.max_tokens, 64);
  EXPECT_DOUBLE_EQ(*r.sampling.temperature, 1.5);
  EXPECT_DOUBLE_EQ(*r.sampling.top_p, 0.5);
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.user, "u");

  EXPECT_FALSE(Ok(AdaptResponses(Body(R"("x")", R"("reasoning":{"effort":"none"})"))).thinking.enabled);
  EXPECT_FALSE(Ok(AdaptResponses(Body(R"("x")", R"("reasoning":{"summary":"auto"})"))).thinking.enabled);
  EXPECT_TRUE(Ok(AdaptResponses(Body(R"("x")", R"("include":["message.output_text.logprobs"])"))).sampling.logprobs);
  const Request rx = Ok(AdaptResponses(Body(R"("x")", R"("text":{"format":{"type":"regex","pattern":"\\d+"}})")));
  EXPECT_EQ(rx.response_format.kind, ResponseFormat::Kind::kRegex);
  EXPECT_EQ(rx.response_format.grammar, "\\d+");

  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("text":{"format":{"type":"json_schema","schema":{}}})")),
                      "text.format.name", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("reasoning":{"effort":"max"})")), "reasoning.effort",
                      "invalid_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("max_output_tokens":0)")), "max_output_tokens",
                      "integer_below_min_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("temperature":3)")), "temperature", "decimal_above_max_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"("x")", R"("top_logprobs":30)")), "top_logprobs",
                      "integer_above_max_value"));
}

TEST(AdapterResponses, ItemErrorsNameTheParam) {
  EXPECT_TRUE(IsError(AdaptResponses(R"({"model":"m"})"), "input", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(R"({"input":"x"})"), "model", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body("42")), "input", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptResponses(Body("[]")), "input", "empty_array"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"content":"x"}])")), "input[0].type", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"type":"message","content":"x"}])")), "input[0].role",
                      "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"role":"tool","content":"x"}])")), "input[0].role", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"role":"user","content":[{"type":"input_text"}]}])")),
                      "input[0].content[0].text", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"role":"user","content":[{"type":"input_image","file_id":"f"}]}])")),
                      "input[0].content[0].file_id", "unsupported_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"role":"user","content":[{"type":"input_file","file_data":"x"}]}])")),
                      "input[0].content[0].type", "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"role":"system","content":[{"type":"input_image","image_url":"https://a"}]}])")),
                      "input[0].content[0].type", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"type":"function_call","name":"f","arguments":"{}"}])")),
                      "input[0].call_id", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"type":"function_call","call_id":"c","name":"f","arguments":[1]}])")),
                      "input[0].arguments", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"type":"function_call_output","call_id":"c"}])")),
                      "input[0].output", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"type":"reasoning","summary":[{"type":"text","text":"x"}]}])")),
                      "input[0].summary[0].type", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"type":"web_search_call","id":"ws"}])")), "input[0].type",
                      "unsupported_value"));
  Limits few;
  few.max_messages = 1;
  EXPECT_TRUE(IsError(AdaptResponses(Body(R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])"), few),
                      "input", "array_above_max_length"));
}

TEST(AdapterResponses, ObjectArgumentsAndUnknownFields) {
  const Request r = Ok(AdaptResponses(Body(R"([{"type":"function_call","call_id":"c","name":"f",
      "arguments":{"b":[1,2.0],"a":"x"},"status":"completed","whatever":1}])", R"("truncation":"auto","x":{})")));
  EXPECT_EQ(r.messages[0].tool_calls[0].arguments, R"({"b": [1, 2.0], "a": "x"})");
}

}  // namespace
}  // namespace ladle::frontend
