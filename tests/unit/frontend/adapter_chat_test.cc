// OpenAI Chat Completions adapter: conversion, validation errors (param + code), limits, the
// error JSON writers and the dispatcher.
#include <gtest/gtest.h>

#include <cstdlib>

#include <fstream>
#include <sstream>
#include <string>

#include "adapter_test_util.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/json/json.h"

#ifndef LADLE_TEST_SHARED_DIR
#define LADLE_TEST_SHARED_DIR "../shared"
#endif

namespace ladle::frontend {
namespace {

using testing::IsError;
using testing::Ok;
using testing::PartText;
using testing::PyDump;

// A body with `messages` and extra top-level members spliced in.
std::string Body(std::string_view messages, std::string_view extra = "") {
  std::string b = R"({"model":"deepseek","messages":)";
  b += messages;
  if (!extra.empty()) {
    b += ",";
    b += extra;
  }
  b += "}";
  return b;
}

const char* kUserHi = R"([{"role":"user","content":"hi"}])";

TEST(AdapterChat, MinimalRequestAndDefaults) {
  Adapted a = AdaptChat(Body(kUserHi));
  const Request& r = Ok(a);
  EXPECT_EQ(r.api, Api::kChat);
  EXPECT_EQ(r.model, "deepseek");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, Role::kUser);
  EXPECT_EQ(r.messages[0].Text(), "hi");
  EXPECT_FALSE(r.messages[0].content_null);
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNone);  // OpenAI: none without tools
  EXPECT_TRUE(r.parallel_tool_calls);
  EXPECT_EQ(r.response_format.kind, ResponseFormat::Kind::kText);
  EXPECT_FALSE(r.thinking.enabled);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.sampling.n, 1);
  EXPECT_FALSE(r.sampling.max_tokens.has_value());
  EXPECT_FALSE(r.sampling.temperature.has_value());
  EXPECT_TRUE(r.metadata.is_null());
}

TEST(AdapterChat, RolesPartsToolCallsAndToolResults) {
  Adapted a = AdaptChat(Body(R"([
    {"role":"system","content":"be brief"},
    {"role":"developer","content":[{"type":"text","text":"dev "},{"type":"text","text":"rules"}]},
    {"role":"user","name":"ann","content":[
       {"type":"text","text":"look"},
       {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO","detail":"high"}},
       {"type":"image_url","image_url":{"url":"https://x.test/a.jpg"}}]},
    {"role":"assistant","content":null,"reasoning_content":"think",
     "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}},
                   {"id":"c2","type":"function","function":{"name":"g","arguments":"{ \"b\" :2 }"}}]},
    {"role":"tool","tool_call_id":"c1","content":"r1"},
    {"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"r2"}]},
    {"role":"assistant","content":[{"type":"text","text":"done"},{"type":"refusal","refusal":"!"}]}
  ])"));
  const Request& r = Ok(a);
  ASSERT_EQ(r.messages.size(), 7u);
  EXPECT_EQ(r.messages[0].role, Role::kSystem);
  EXPECT_EQ(r.messages[0].Text(), "be brief");
  EXPECT_EQ(r.messages[1].role, Role::kDeveloper);
  ASSERT_EQ(r.messages[1].content.size(), 2u);
  EXPECT_EQ(r.messages[1].Text(), "dev rules");

  const Message& user = r.messages[2];
  EXPECT_EQ(user.name, "ann");
  ASSERT_EQ(user.content.size(), 3u);
  EXPECT_EQ(user.content[0].kind, ContentPart::Kind::kText);
  EXPECT_EQ(user.content[1].kind, ContentPart::Kind::kImage);
  EXPECT_EQ(user.content[1].image.url, "data:image/png;base64,iVBO");
  EXPECT_EQ(user.content[1].image.media_type, "image/png");
  EXPECT_EQ(user.content[2].image.url, "https://x.test/a.jpg");
  EXPECT_EQ(user.content[2].image.media_type, "");

  const Message& asst = r.messages[3];
  EXPECT_EQ(asst.role, Role::kAssistant);
  EXPECT_TRUE(asst.content_null);
  EXPECT_TRUE(asst.content.empty());
  EXPECT_EQ(asst.reasoning, "think");
  ASSERT_EQ(asst.tool_calls.size(), 2u);
  EXPECT_EQ(asst.tool_calls[0].id, "c1");
  EXPECT_EQ(asst.tool_calls[0].name, "f");
  EXPECT_EQ(asst.tool_calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(asst.tool_calls[1].arguments, "{ \"b\" :2 }");  // byte for byte, never re-serialised

  EXPECT_EQ(r.messages[4].role, Role::kTool);
  EXPECT_EQ(r.messages[4].tool_call_id, "c1");
  EXPECT_EQ(r.messages[4].Text(), "r1");
  EXPECT_EQ(r.messages[4].name, "f");  // named after the call it answers
  EXPECT_EQ(r.messages[5].tool_call_id, "c2");
  EXPECT_EQ(r.messages[5].Text(), "r2");
  EXPECT_EQ(r.messages[6].Text(), "done!");  // refusal parts read as text
  EXPECT_FALSE(r.messages[6].reasoning.has_value());
}

TEST(AdapterChat, ReasoningAliasAndPrecedence) {
  const Request r1 = Ok(AdaptChat(Body(R"([{"role":"assistant","content":"a","reasoning":"via reasoning"}])")));
  EXPECT_EQ(r1.messages[0].reasoning, "via reasoning");
  const Request r2 = Ok(AdaptChat(
      Body(R"([{"role":"assistant","content":"a","reasoning":"second","reasoning_content":"first"}])")));
  EXPECT_EQ(r2.messages[0].reasoning, "first");
  const Request r3 = Ok(AdaptChat(Body(R"([{"role":"assistant","content":"a","reasoning_content":null}])")));
  EXPECT_FALSE(r3.messages[0].reasoning.has_value());
}

TEST(AdapterChat, AssistantContentNullNeedsToolCallsOrReasoning) {
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"assistant","content":null}])")), "messages[0].content",
                      "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"assistant"}])")), "messages[0].content",
                      "missing_required_parameter"));
  const Request r = Ok(AdaptChat(Body(R"([{"role":"assistant","reasoning_content":"hmm"}])")));
  EXPECT_TRUE(r.messages[0].content_null);
  // An empty string is content, not null.
  const Request r2 = Ok(AdaptChat(Body(R"([{"role":"assistant","content":""}])")));
  EXPECT_FALSE(r2.messages[0].content_null);
  EXPECT_TRUE(r2.messages[0].content.empty());
}

TEST(AdapterChat, ObjectArgumentsBecomePythonJsonText) {
  const Request r = Ok(AdaptChat(Body(
      R"([{"role":"assistant","tool_calls":[{"id":"c","type":"function",
          "function":{"name":"f","arguments":{"z":1,"a":[true,null,1.50],"s":"é\"x"}}}]}])")));
  EXPECT_EQ(r.messages[0].tool_calls[0].arguments, R"({"z": 1, "a": [true, null, 1.5], "s": "é\"x"})");
}

TEST(AdapterChat, ToolCallIdsMustBePresentButMayBeNull) {
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"tool","content":"x"}])")), "messages[0].tool_call_id",
                      "missing_required_parameter"));
  const Request r = Ok(AdaptChat(Body(R"([{"role":"assistant","content":"",
      "tool_calls":[{"id":null,"type":"function","function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":null,"content":"x"}])")));
  EXPECT_EQ(r.messages[0].tool_calls[0].id, "");
  EXPECT_EQ(r.messages[1].tool_call_id, "");
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"assistant","tool_calls":[{"type":"function",
      "function":{"name":"f","arguments":"{}"}}]}])")),
                      "messages[0].tool_calls[0].id", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"tool","tool_call_id":7,"content":"x"}])")),
                      "messages[0].tool_call_id", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"assistant","tool_calls":[{"id":"c","type":"function",
      "function":{"name":"f","arguments":5}}]}])")),
                      "messages[0].tool_calls[0].function.arguments", "invalid_type"));
}

TEST(AdapterChat, ToolsKeepSchemaOrderAndValues) {
  const Request r = Ok(AdaptChat(Body(kUserHi, R"("tools":[
    {"type":"function","function":{"name":"get_weather","description":"Weather",
      "parameters":{"type":"object","properties":{"zeta":{"type":"number","default":1.50,"maximum":1e3},
                    "alpha":{"type":"string","enum":["a","ü"]}},"required":["zeta"]},"strict":true}},
    {"type":"function","function":{"name":"no-params_2"}}])")));
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_TRUE(r.tools[0].has_description);
  EXPECT_EQ(r.tools[0].description, "Weather");
  EXPECT_TRUE(r.tools[0].strict);
  // Python json.dumps of json.loads of the same text.
  EXPECT_EQ(PyDump(r.tools[0].parameters),
            R"({"type": "object", "properties": {"zeta": {"type": "number", "default": 1.5, "maximum": 1000.0}, )"
            R"("alpha": {"type": "string", "enum": ["a", "ü"]}}, "required": ["zeta"]})");
  EXPECT_FALSE(r.tools[1].has_description);
  EXPECT_TRUE(r.tools[1].parameters.is_null());
  EXPECT_FALSE(r.tools[1].strict);
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kAuto);  // OpenAI: auto with tools
}

TEST(AdapterChat, DuplicateSchemaKeysFoldLikePython) {
  // json.loads keeps the first position and the last value of a repeated key.
  const Request r = Ok(AdaptChat(Body(kUserHi, R"("tools":[{"type":"function","function":{"name":"f",
      "parameters":{"a":1,"b":{"x":1,"x":2},"a":3}}}])")));
  EXPECT_EQ(PyDump(r.tools[0].parameters), R"({"a": 3, "b": {"x": 2}})");
}

TEST(AdapterChat, ToolValidation) {
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tools":[{"type":"function","function":{"name":"bad name"}}])")),
                      "tools[0].function.name", "invalid_value"));
  EXPECT_TRUE(IsError(
      AdaptChat(Body(kUserHi, R"("tools":[{"type":"function","function":{"name":")" + std::string(65, 'a') +
                                  R"("}}])")),
      "tools[0].function.name", "string_above_max_length"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tools":[{"type":"function","function":{"name":""}}])")),
                      "tools[0].function.name", "empty_string"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tools":[{"type":"function","function":{"name":"f"}},
      {"type":"function","function":{"name":"f"}}])")),
                      "tools[1]", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tools":[{"type":"function","function":{"name":"f",
      "parameters":"{}"}}])")),
                      "tools[0].function.parameters", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tools":[{"function":{"name":"f"}}])")), "tools[0].type",
                      "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tools":[{"type":"custom","custom":{"name":"f"}}])")),
                      "tools[0].type", "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tools":{"type":"function"})")), "tools", "invalid_type"));
}

TEST(AdapterChat, ToolChoiceForms) {
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"a"}},
                                        {"type":"function","function":{"name":"b"}}])";
  EXPECT_EQ(Ok(AdaptChat(Body(kUserHi, tools + R"(,"tool_choice":"none")"))).tool_choice.mode,
            ToolChoice::Mode::kNone);
  EXPECT_EQ(Ok(AdaptChat(Body(kUserHi, tools + R"(,"tool_choice":"required")"))).tool_choice.mode,
            ToolChoice::Mode::kRequired);
  const Request named =
      Ok(AdaptChat(Body(kUserHi, tools + R"(,"tool_choice":{"type":"function","function":{"name":"b"}})")));
  EXPECT_EQ(named.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.tool_choice.name, "b");
  const Request allowed = Ok(AdaptChat(Body(kUserHi, tools + R"(,"tool_choice":{"type":"allowed_tools",
      "allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"a"}}]}})")));
  EXPECT_EQ(allowed.tool_choice.mode, ToolChoice::Mode::kAllowed);
  EXPECT_TRUE(allowed.tool_choice.allowed_required);
  ASSERT_EQ(allowed.tool_choice.allowed.size(), 1u);
  EXPECT_EQ(allowed.tool_choice.allowed[0], "a");

  EXPECT_TRUE(IsError(
      AdaptChat(Body(kUserHi, tools + R"(,"tool_choice":{"type":"function","function":{"name":"zz"}})")),
      "tool_choice.function.name", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, tools + R"(,"tool_choice":{"type":"allowed_tools",
      "allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"zz"}}]}})")),
                      "tool_choice", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tool_choice":"required")")), "tool_choice", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, tools + R"(,"tool_choice":"sometimes")")), "tool_choice",
                      "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, tools + R"(,"tool_choice":{"type":"allowed_tools",
      "allowed_tools":{"mode":"maybe","tools":[]}})")),
                      "tool_choice.allowed_tools.mode", "invalid_value"));
  // "auto" without tools is harmless and accepted.
  EXPECT_EQ(Ok(AdaptChat(Body(kUserHi, R"("tool_choice":"auto")"))).tool_choice.mode, ToolChoice::Mode::kAuto);
  const Request serial = Ok(AdaptChat(Body(kUserHi, tools + R"(,"parallel_tool_calls":false)")));
  EXPECT_FALSE(serial.parallel_tool_calls);
}

TEST(AdapterChat, ResponseFormats) {
  const Request js = Ok(AdaptChat(Body(kUserHi, R"("response_format":{"type":"json_schema",
      "json_schema":{"name":"person","schema":{"type":"object","properties":{"n":{"type":"integer"}}},"strict":true}})")));
  EXPECT_EQ(js.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(js.response_format.name, "person");
  EXPECT_TRUE(js.response_format.strict);
  EXPECT_EQ(PyDump(js.response_format.schema), R"({"type": "object", "properties": {"n": {"type": "integer"}}})");

  EXPECT_EQ(Ok(AdaptChat(Body(kUserHi, R"("response_format":{"type":"json_object"})"))).response_format.kind,
            ResponseFormat::Kind::kJsonObject);
  for (const char* rf : {R"({"type":"regex","regex":"[a-z]+"})", R"({"type":"regex","pattern":"[a-z]+"})"}) {
    const Request r = Ok(AdaptChat(Body(kUserHi, std::string(R"("response_format":)") + rf)));
    EXPECT_EQ(r.response_format.kind, ResponseFormat::Kind::kRegex);
    EXPECT_EQ(r.response_format.grammar, "[a-z]+");
  }
  for (const char* rf : {R"({"type":"ebnf","ebnf":"root ::= \"a\""})", R"({"type":"grammar","grammar":"root ::= \"a\""})",
                         R"({"type":"ebnf","grammar":"root ::= \"a\""})"}) {
    const Request r = Ok(AdaptChat(Body(kUserHi, std::string(R"("response_format":)") + rf)));
    EXPECT_EQ(r.response_format.kind, ResponseFormat::Kind::kEbnf);
    EXPECT_EQ(r.response_format.grammar, "root ::= \"a\"");
  }
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("response_format":{"type":"regex","regex":"a","pattern":"b"})")),
                      "response_format.pattern", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("response_format":{"type":"regex"})")), "response_format.regex",
                      "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("response_format":{"type":"yaml"})")), "response_format.type",
                      "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("response_format":{"type":"json_schema"})")),
                      "response_format.json_schema", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("response_format":{"type":"json_schema","json_schema":{"schema":{}}})")),
                      "response_format.json_schema.name", "missing_required_parameter"));
  // No schema means "any JSON".
  const Request any = Ok(AdaptChat(Body(kUserHi, R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})")));
  EXPECT_EQ(PyDump(any.response_format.schema), "{}");
}

TEST(AdapterChat, ThinkingSwitches) {
  EXPECT_FALSE(Ok(AdaptChat(Body(kUserHi))).thinking.enabled);
  EXPECT_TRUE(Ok(AdaptChat(Body(kUserHi, R"("chat_template_kwargs":{"thinking":true,"other":1})"))).thinking.enabled);
  EXPECT_FALSE(Ok(AdaptChat(Body(kUserHi, R"("chat_template_kwargs":{"thinking":false})"))).thinking.enabled);
  const Request high = Ok(AdaptChat(Body(kUserHi, R"("reasoning_effort":"high")")));
  EXPECT_TRUE(high.thinking.enabled);
  EXPECT_EQ(high.thinking.effort, "high");
  const Request none = Ok(AdaptChat(Body(kUserHi, R"("reasoning_effort":"none")")));
  EXPECT_FALSE(none.thinking.enabled);
  EXPECT_EQ(none.thinking.effort, "none");
  // Either switch turns thinking on.
  EXPECT_TRUE(Ok(AdaptChat(Body(kUserHi, R"("chat_template_kwargs":{"thinking":false},"reasoning_effort":"low")")))
                  .thinking.enabled);
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("reasoning_effort":"extreme")")), "reasoning_effort",
                      "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("chat_template_kwargs":{"thinking":"yes"})")),
                      "chat_template_kwargs.thinking", "invalid_type"));
}

TEST(AdapterChat, SamplingValues) {
  const Request r = Ok(AdaptChat(Body(kUserHi, R"("temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,
      "seed":-12,"max_tokens":100,"stop":["a","bc"],"stop_token_ids":[1,128001],"n":3,"logprobs":true,
      "top_logprobs":5,"presence_penalty":-1.5,"frequency_penalty":2,"stream":true,
      "stream_options":{"include_usage":true},"metadata":{"k":"v"},"user":"u1")")));
  const Sampling& s = r.sampling;
  EXPECT_DOUBLE_EQ(*s.temperature, 0.7);
  EXPECT_DOUBLE_EQ(*s.top_p, 0.9);
  EXPECT_EQ(*s.top_k, 40);
  EXPECT_DOUBLE_EQ(*s.min_p, 0.05);
  EXPECT_EQ(*s.seed, -12);
  EXPECT_EQ(*s.max_tokens, 100);
  EXPECT_EQ(s.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(s.stop_token_ids, (std::vector<uint32_t>{1, 128001}));
  EXPECT_EQ(s.n, 3);
  EXPECT_TRUE(s.logprobs);
  EXPECT_EQ(s.top_logprobs, 5);
  EXPECT_DOUBLE_EQ(*s.presence_penalty, -1.5);
  EXPECT_DOUBLE_EQ(*s.frequency_penalty, 2.0);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(json::Dump(r.metadata), R"({"k":"v"})");
  EXPECT_EQ(r.user, "u1");

  EXPECT_EQ(Ok(AdaptChat(Body(kUserHi, R"("stop":"END")"))).sampling.stop, std::vector<std::string>{"END"});
  EXPECT_FALSE(Ok(AdaptChat(Body(kUserHi, R"("top_k":-1)"))).sampling.top_k.has_value());
  EXPECT_FALSE(Ok(AdaptChat(Body(kUserHi, R"("top_k":0)"))).sampling.top_k.has_value());
  EXPECT_EQ(*Ok(AdaptChat(Body(kUserHi, R"("max_tokens":10,"max_completion_tokens":20)"))).sampling.max_tokens, 20);
  EXPECT_EQ(*Ok(AdaptChat(Body(kUserHi, R"("max_completion_tokens":7)"))).sampling.max_tokens, 7);
  // null means "not given".
  EXPECT_FALSE(Ok(AdaptChat(Body(kUserHi, R"("temperature":null,"stop":null,"n":null)"))).sampling.temperature);
}

TEST(AdapterChat, SamplingRangeErrors) {
  Limits lim;
  lim.max_tokens = 1000;
  lim.max_stop = 2;
  lim.max_n = 4;
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("temperature":2.5)")), "temperature", "decimal_above_max_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("temperature":-0.1)")), "temperature", "decimal_below_min_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("temperature":"hot")")), "temperature", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("top_p":0)")), "top_p", "decimal_below_min_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("top_p":1.01)")), "top_p", "decimal_above_max_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("min_p":1.5)")), "min_p", "decimal_above_max_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("top_k":-2)")), "top_k", "integer_below_min_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("top_k":2.5)")), "top_k", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("max_tokens":0)"), lim), "max_tokens", "integer_below_min_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("max_tokens":1001)"), lim), "max_tokens", "integer_above_max_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("max_tokens":1.0)"), lim), "max_tokens", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("max_tokens":18446744073709551615)"), lim), "max_tokens",
                      "integer_above_max_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("max_completion_tokens":-5)"), lim), "max_completion_tokens",
                      "integer_below_min_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("stop":["a","b","c"])"), lim), "stop", "array_above_max_length"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("stop":["a",""])"), lim), "stop[1]", "empty_string"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("stop":5)"), lim), "stop", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("n":5)"), lim), "n", "integer_above_max_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("n":0)"), lim), "n", "integer_below_min_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("top_logprobs":3)")), "top_logprobs", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("logprobs":true,"top_logprobs":21)")), "top_logprobs",
                      "integer_above_max_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("presence_penalty":-2.01)")), "presence_penalty",
                      "decimal_below_min_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("stop_token_ids":[1,-1])")), "stop_token_ids[1]", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("stop_token_ids":[1,"2"])")), "stop_token_ids[1]", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("seed":1.5)")), "seed", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("stream":"yes")")), "stream", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("stream_options":{"include_usage":true})")), "stream_options",
                      "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("metadata":{"k":1})")), "metadata.k", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("user":5)")), "user", "invalid_type"));
}

TEST(AdapterChat, MessageErrorsNameTheParam) {
  EXPECT_TRUE(IsError(AdaptChat(R"({"messages":[]})"), "model", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(R"({"model":null,"messages":[]})"), "model", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(R"({"model":3,"messages":[]})"), "model", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(R"({"model":"m"})"), "messages", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body("[]")), "messages", "empty_array"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"({"role":"user"})")), "messages", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":"a"},"x"])")), "messages[1]", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"content":"a"}])")), "messages[0].role", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"robot","content":"a"}])")), "messages[0].role", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user"}])")), "messages[0].content", "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":5}])")), "messages[0].content", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":[]}])")), "messages[0].content", "empty_array"));
  Adapted deep = AdaptChat(Body(R"([{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"x"},
      {"type":"text","text":7}]}])"));
  EXPECT_TRUE(IsError(deep, "messages[1].content[1].text", "invalid_type"));
  EXPECT_EQ(deep.error.message, "Invalid type for 'messages[1].content[1].text': expected a string, but got an "
                                "integer instead.");
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":[{"text":"x"}]}])")), "messages[0].content[0].type",
                      "missing_required_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":[{"type":"video","url":"x"}]}])")),
                      "messages[0].content[0].type", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}])")),
                      "messages[0].content[0].type", "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":[{"type":"file","file":{}}]}])")),
                      "messages[0].content[0].type", "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://a"}}]}])")),
                      "messages[0].content[0].type", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://a"}}]}])")),
                      "messages[0].content[0].image_url.url", "invalid_image_url"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://a","detail":"max"}}]}])")),
                      "messages[0].content[0].image_url.detail", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"user","content":[{"type":"image_url","image_url":"https://a"}]}])")),
                      "messages[0].content[0].image_url", "invalid_type"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"assistant","tool_calls":[{"id":"c","type":"code","function":{}}]}])")),
                      "messages[0].tool_calls[0].type", "invalid_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"assistant","tool_calls":[{"id":"c","function":{"arguments":"{}"}}]}])")),
                      "messages[0].tool_calls[0].function.name", "missing_required_parameter"));
}

TEST(AdapterChat, LegacyFunctionCallingIsRejected) {
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"function","name":"f","content":"x"}])")), "messages[0].role",
                      "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}}])")),
                      "messages[0].function_call", "unsupported_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("functions":[{"name":"f"}])")), "functions", "unsupported_parameter"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("function_call":"auto")")), "function_call", "unsupported_parameter"));
}

TEST(AdapterChat, UnhonourableParametersAreRejectedNotDropped) {
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("logit_bias":{"50256":-100})")), "logit_bias",
                      "unsupported_parameter"));
  EXPECT_TRUE(Ok(AdaptChat(Body(kUserHi, R"("logit_bias":{})"))).messages.size() == 1);
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("modalities":["text","audio"])")), "modalities[1]",
                      "unsupported_value"));
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("audio":{"voice":"x"})")), "audio", "unsupported_parameter"));
}

TEST(AdapterChat, UnknownFieldsAreIgnored) {
  const Request r = Ok(AdaptChat(Body(R"([{"role":"user","content":"hi","extra":{"deep":[1,2]},"cache":true}])",
                                      R"("service_tier":"auto","store":true,"prediction":{"type":"content"},"x":[null])")));
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].Text(), "hi");
}

TEST(AdapterChat, MessageLevelToolsOnSystemAndDeveloper) {
  const Request r = Ok(AdaptChat(Body(R"([{"role":"developer","content":"d","tools":[
      {"type":"function","function":{"name":"search","parameters":{"type":"object","b":1,"a":2}}}]},
      {"role":"user","content":"q"}])")));
  ASSERT_EQ(r.messages[0].tools.size(), 1u);
  EXPECT_EQ(PyDump(r.messages[0].tools[0]),
            R"({"type": "function", "function": {"name": "search", "parameters": {"type": "object", "b": 1, "a": 2}}})");
  EXPECT_TRUE(r.tools.empty());
  EXPECT_TRUE(IsError(AdaptChat(Body(R"([{"role":"system","content":"d","tools":[{"type":"function","function":{"name":"a b"}}]}])")),
                      "messages[0].tools[0].function.name", "invalid_value"));
}

TEST(AdapterChat, BodyLimitsAndMalformedJson) {
  Adapted bad = AdaptChat(R"({"model":"m","messages":[)");
  EXPECT_TRUE(IsError(bad, "", ""));
  EXPECT_NE(bad.error.message.find("not valid JSON"), std::string::npos) << bad.error.message;
  EXPECT_TRUE(IsError(AdaptChat("[1,2]"), "", ""));
  EXPECT_TRUE(IsError(AdaptChat(""), "", ""));
  EXPECT_TRUE(IsError(AdaptChat("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"), "", ""));

  Limits lim;
  lim.max_body_bytes = 64;
  Adapted big = AdaptChat(Body(R"([{"role":"user","content":")" + std::string(100, 'x') + "\"}]"), lim);
  EXPECT_TRUE(IsError(big, "", "request_too_large", 413));
  EXPECT_EQ(big.error.type, "invalid_request_error");

  Limits few;
  few.max_messages = 2;
  few.max_tools = 1;
  Adapted many = AdaptChat(Body(R"([{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}])"), few);
  EXPECT_TRUE(IsError(many, "messages", "array_above_max_length"));
  EXPECT_NE(many.error.message.find("maximum length 2"), std::string::npos) << many.error.message;
  EXPECT_TRUE(IsError(AdaptChat(Body(kUserHi, R"("tools":[{"type":"function","function":{"name":"a"}},
      {"type":"function","function":{"name":"b"}}])"), few), "tools", "array_above_max_length"));

  Limits shallow;
  shallow.max_json_depth = 8;
  Adapted deep = AdaptChat(Body(kUserHi, R"("metadata":{"a":{"b":{"c":{"d":{"e":{"f":{"g":{}}}}}}}})"), shallow);
  EXPECT_TRUE(IsError(deep, "", ""));
  EXPECT_NE(deep.error.message.find("not valid JSON"), std::string::npos) << deep.error.message;
}

TEST(AdapterErrors, OpenAiErrorJsonShape) {
  Adapted a = AdaptChat(Body(R"([{"role":"user","content":[{"type":"text","text":1}]}])"));
  ASSERT_FALSE(a.ok());
  auto parsed = json::Parse(OpenAiErrorJson(a.error));
  ASSERT_TRUE(parsed.ok());
  const json::Value* err = parsed->Find("error");
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->Find("type")->as_string(), "invalid_request_error");
  EXPECT_EQ(err->Find("param")->as_string(), "messages[0].content[0].text");
  EXPECT_EQ(err->Find("code")->as_string(), "invalid_type");
  EXPECT_EQ(err->Find("message")->as_string(), a.error.message);
  EXPECT_EQ(ErrorJson(Api::kChat, a.error), OpenAiErrorJson(a.error));
  EXPECT_EQ(ErrorJson(Api::kResponses, a.error), OpenAiErrorJson(a.error));

  ApiError e;
  e.message = "quote \" backslash \\ newline \n ctl \x01";
  EXPECT_EQ(OpenAiErrorJson(e),
            R"({"error":{"message":"quote \" backslash \\ newline \n ctl \u0001","type":"invalid_request_error","param":null,"code":null}})");
  EXPECT_EQ(AnthropicErrorJson(e),
            R"({"type":"error","error":{"type":"invalid_request_error","message":"quote \" backslash \\ newline \n ctl \u0001"}})");
  EXPECT_EQ(ErrorJson(Api::kMessages, e), AnthropicErrorJson(e));
}

TEST(AdapterErrors, ApiNamesAndDispatch) {
  EXPECT_EQ(ParseApiName("chat"), Api::kChat);
  EXPECT_EQ(ParseApiName("responses"), Api::kResponses);
  EXPECT_EQ(ParseApiName("messages"), Api::kMessages);
  EXPECT_FALSE(ParseApiName("Chat").has_value());
  EXPECT_FALSE(ParseApiName("completions").has_value());
  EXPECT_EQ(Ok(Adapt(Api::kChat, Body(kUserHi))).api, Api::kChat);
  EXPECT_EQ(Ok(Adapt(Api::kResponses, R"({"model":"m","input":"x"})")).api, Api::kResponses);
  EXPECT_EQ(Ok(Adapt(Api::kMessages, R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]})")).api,
            Api::kMessages);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// DeepSeek's own V3.2 encoding vectors are Chat-shaped; with a model name they must adapt.
TEST(AdapterChat, DeepSeekGoldenInputsAdapt) {
  const std::string dir = std::string(LADLE_TEST_SHARED_DIR) + "/golden/deepseek-v3.2/";
  const std::string input = ReadFile(dir + "test_input.json");
  const std::string search = ReadFile(dir + "test_input_search_wo_date.json");
  if (input.empty() || search.empty()) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL() << "golden vectors missing in CI under " << dir;
    GTEST_SKIP() << "no golden vectors under " << dir;
  }
  auto with_model = [](std::string body) {
    return R"({"model":"deepseek-v3.2",)" + body.substr(body.find('{') + 1);
  };
  const Request r = Ok(AdaptChat(with_model(input)));
  auto raw = json::Parse(input);
  ASSERT_TRUE(raw.ok());
  ASSERT_EQ(r.messages.size(), raw->Find("messages")->as_array().size());
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[1].name, "get_weather");
  EXPECT_EQ(PyDump(r.tools[0].parameters),
            PyDump(*raw->Find("tools")->as_array()[0].Find("function")->Find("parameters")));
  EXPECT_EQ(r.messages[2].tool_calls.at(0).arguments, "{\"timezone\": \"Asia/Shanghai\"}");
  EXPECT_TRUE(r.messages[2].content_null);
  EXPECT_EQ(r.messages[3].role, Role::kTool);
  EXPECT_EQ(r.messages[3].tool_call_id, "call_xK9mN3pL2qR8vT5wY6hZ1aB4");

  // The search vector: developer message with its own tools, null ids.
  const Request s = Ok(AdaptChat(with_model(search)));
  EXPECT_EQ(s.messages[0].role, Role::kDeveloper);
  EXPECT_FALSE(s.messages[0].tools.empty());
  EXPECT_EQ(s.messages[1].tool_calls.at(0).id, "");
  EXPECT_EQ(s.messages[2].tool_call_id, "");
}

}  // namespace
}  // namespace ladle::frontend
