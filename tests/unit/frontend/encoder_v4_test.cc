// DeepSeek-V4 encoder: expectations derived by hand from DeepSeek's encoding_dsv4.py (as vendored
// in vLLM's deepseek_v4_encoding.py): merged tool results, call-order sorting, generation prompt
// only before assistant turns, reasoning kept when tools are listed, DSML `tool_calls`.
#include <gtest/gtest.h>

#include "encoder_test_util.h"
#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"
#include "test_data.h"

namespace ladle::frontend {
namespace {

using namespace ladle::frontend::testing;  // NOLINT

constexpr ModelVersion kV = ModelVersion::kV4;
const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";

std::string ToolsBlock(const std::string& schemas) {
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools "
         "by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
         "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
         "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
         "...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
         "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
         "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
         "<think>...</think> BEFORE any tool calls or final response.\n\n"
         "Otherwise, output directly after </think> with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n" +
         schemas +
         "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
}

const char* kParams = R"({"type": "object", "properties": {"x": {"type": "integer"}}})";
const std::string kSchema =
    R"({"name": "f", "description": "F", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}})";

const std::string kCallsFG =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
    "<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter name=\"y\" string=\"true\">z</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

Request AgentTurn(bool thinking) {
  return Conversation({System("S"), User("Q"), Calls({{"a", "f", R"({"x": 1})"}, {"b", "g", R"({"y": "z"})"}}, "R"),
                       ToolResult("b", "B"), ToolResult("a", "A")},
                      thinking);
}

TEST(EncoderV4, SystemAndUser) {
  auto chat = RenderPrompt(Conversation({System("S"), User("Hi")}, false), kV);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(PromptText(*chat), kBos + "S<｜User｜>Hi<｜Assistant｜></think>");
  EXPECT_FALSE(chat->ends_in_thinking);
  auto think = RenderPrompt(Conversation({System("S"), User("Hi")}, true), kV);
  ASSERT_TRUE(think.ok());
  EXPECT_EQ(PromptText(*think), kBos + "S<｜User｜>Hi<｜Assistant｜><think>");
  EXPECT_TRUE(think->ends_in_thinking);
}

TEST(EncoderV4, EarlierReasoningDroppedWithoutTools) {
  EXPECT_EQ(Render(Conversation({User("Q1"), Assistant("A1", "R1"), User("Q2")}, true), kV),
            kBos + "<｜User｜>Q1<｜Assistant｜></think>A1" + kEos + "<｜User｜>Q2<｜Assistant｜><think>");
}

TEST(EncoderV4, ReasoningKeptWhenToolsAreListed) {
  Request r = Conversation({User("Q1"), Assistant("A1", "R1"), User("Q2")}, true);
  r.tools.push_back(MakeTool("f", "F", kParams));
  EXPECT_EQ(Render(r, kV), kBos + "\n\n" + ToolsBlock(kSchema) + "<｜User｜>Q1<｜Assistant｜><think>R1</think>A1" +
                               kEos + "<｜User｜>Q2<｜Assistant｜><think>");
}

TEST(EncoderV4, ToolResultsMergeIntoAUserTurnInCallOrder) {
  auto p = RenderPrompt(AgentTurn(true), kV);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // No tools listed: drop_thinking stays on, and the merged tool results are the last "user"
  // turn, so the calling turn's reasoning is dropped as the reference does.
  EXPECT_EQ(PromptText(*p), kBos + "S<｜User｜>Q<｜Assistant｜></think>" + kCallsFG + kEos +
                                "<｜User｜><tool_result>A</tool_result>\n\n<tool_result>B</tool_result>"
                                "<｜Assistant｜><think>");
  EXPECT_TRUE(p->ends_in_thinking);
}

TEST(EncoderV4, AgentLoopWithToolsKeepsItsReasoning) {
  Request r = AgentTurn(true);
  r.tools.push_back(MakeTool("f", "F", kParams));
  EXPECT_EQ(Render(r, kV), kBos + "S\n\n" + ToolsBlock(kSchema) + "<｜User｜>Q<｜Assistant｜><think>R</think>" +
                               kCallsFG + kEos +
                               "<｜User｜><tool_result>A</tool_result>\n\n<tool_result>B</tool_result>"
                               "<｜Assistant｜><think>");
  Request chat = AgentTurn(false);
  chat.tools = r.tools;
  EXPECT_EQ(Render(chat, kV), kBos + "S\n\n" + ToolsBlock(kSchema) + "<｜User｜>Q<｜Assistant｜></think>" + kCallsFG +
                                  kEos +
                                  "<｜User｜><tool_result>A</tool_result>\n\n<tool_result>B</tool_result>"
                                  "<｜Assistant｜></think>");
}

TEST(EncoderV4, ConsecutiveUserTurnsMerge) {
  EXPECT_EQ(Render(Conversation({User("a"), User("b")}), kV), kBos + "<｜User｜>a\n\nb<｜Assistant｜></think>");
  EXPECT_EQ(Render(Conversation({User("Q"), Calls({{"a", "f", "{}"}}), ToolResult("a", "A"), User("more")}), kV),
            kBos + "<｜User｜>Q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n"
                   "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" +
                kEos + "<｜User｜><tool_result>A</tool_result>\n\nmore<｜Assistant｜></think>");
}

TEST(EncoderV4, DeveloperRole) {
  EXPECT_EQ(Render(Conversation({Developer("D")}, true), kV), kBos + "<｜User｜>D<｜Assistant｜><think>");
  // Followed by a user turn: no generation prompt in between.
  EXPECT_EQ(Render(Conversation({Developer("D"), User("Q")}, false), kV),
            kBos + "<｜User｜>D<｜User｜>Q<｜Assistant｜></think>");
  // Thinking mode drops a developer turn before the last user turn (drop_thinking).
  EXPECT_EQ(Render(Conversation({Developer("D"), User("Q")}, true), kV), kBos + "<｜User｜>Q<｜Assistant｜><think>");
  // Content comes before the tools block (the opposite of V3.2).
  Request r = Conversation({Developer("D")}, false);
  r.tools.push_back(MakeTool("f", "F", kParams));
  EXPECT_EQ(Render(r, kV), kBos + "<｜User｜>D\n\n" + ToolsBlock(kSchema) + "<｜Assistant｜></think>");
}

TEST(EncoderV4, MaxReasoningEffortPrefix) {
  Request r = Conversation({User("Q")}, true);
  r.thinking.effort = "max";
  EXPECT_EQ(Render(r, kV),
            kBos +
                "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
                "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
                "root cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
                "adversarial scenarios.\n"
                "Explicitly write out your entire deliberation process, documenting every intermediate step, "
                "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
                "unchecked.\n\n"
                "<｜User｜>Q<｜Assistant｜><think>");
  r.thinking.effort = "high";
  EXPECT_EQ(Render(r, kV), kBos + "<｜User｜>Q<｜Assistant｜><think>");
  r.thinking.enabled = false;
  r.thinking.effort = "max";
  EXPECT_EQ(Render(r, kV), kBos + "<｜User｜>Q<｜Assistant｜></think>");
}

TEST(EncoderV4, ResponseFormatBlock) {
  Request r = Conversation({System("S"), User("Q")}, false);
  r.response_format.kind = ResponseFormat::Kind::kJsonObject;
  EXPECT_EQ(Render(r, kV), kBos +
                               "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
                               "reply:\n{\"type\": \"json_object\"}<｜User｜>Q<｜Assistant｜></think>");
}

TEST(EncoderV4, FinalAssistantTurnHasNoGenerationPrompt) {
  auto p = RenderPrompt(Conversation({User("Q"), Assistant("A")}, false), kV);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "<｜User｜>Q<｜Assistant｜></think>A" + kEos);
  EXPECT_FALSE(p->ends_in_thinking);
}

TEST(EncoderV4, DsmlIsAControlTokenOfV4) {
  const std::string tok_path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(tok_path);
  auto base = tokenizer::Tokenizer::FromFile(tok_path);
  ASSERT_TRUE(base.ok());
  auto tok = TokenizerForVersion(*base, kV);
  ASSERT_TRUE(tok.ok());
  Request r = AgentTurn(true);
  r.tools.push_back(MakeTool("f", "F", kParams));
  auto p = RenderPrompt(r, kV);
  ASSERT_TRUE(p.ok());
  auto enc = EncodePrompt(*p, *tok);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  // Template text only (no request text spells a control token): HF-style matching agrees.
  EXPECT_EQ(enc->ids, tok->EncodeTrusted(enc->text));
  const auto dsml = *SpecialTokensFor(kV).dsml;
  EXPECT_GT(std::count(enc->ids.begin(), enc->ids.end(), dsml), 10);
  // The bare V3 file is not V4's tokenizer: encoding must refuse rather than misplace ids.
  EXPECT_EQ(EncodePrompt(*p, *base).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ladle::frontend
