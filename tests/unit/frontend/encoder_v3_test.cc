// DeepSeek-V3 and R1 encoders: expectations derived by hand from each model's
// tokenizer_config.json chat_template (V3's is ../shared/tokenizers/deepseek-v3/), quirks included.
#include <gtest/gtest.h>

#include "encoder_test_util.h"
#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"

namespace ladle::frontend {
namespace {

using namespace ladle::frontend::testing;  // NOLINT

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";

std::string V3Call(const std::string& name, const std::string& args) {
  return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n" + args + "\n```<｜tool▁call▁end｜>";
}

// --- V3 -------------------------------------------------------------------------------------

TEST(EncoderV3, SystemPromptsAreHoistedAndJoined) {
  auto p = RenderPrompt(Conversation({System("A"), User("Q"), System("B")}), ModelVersion::kV3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "A\n\nB<｜User｜>Q<｜Assistant｜>");
  EXPECT_FALSE(p->ends_in_thinking);
  // Developer is a system message to a template without that role.
  EXPECT_EQ(Render(Conversation({Developer("D"), User("Q")}), ModelVersion::kV3), kBos + "D<｜User｜>Q<｜Assistant｜>");
}

TEST(EncoderV3, MultiTurnIgnoresThinking) {
  EXPECT_EQ(Render(Conversation({User("Q1"), Assistant("A1", "R1"), User("Q2")}, true), ModelVersion::kV3),
            kBos + "<｜User｜>Q1<｜Assistant｜>A1" + kEos + "<｜User｜>Q2<｜Assistant｜>");
}

TEST(EncoderV3, OneToolRound) {
  // The template closes the call block only after the second call: one call stays open.
  EXPECT_EQ(Render(Conversation({User("Q"), Calls({{"a", "f", R"({"x":1})"}}), ToolResult("a", "R"), Assistant("Done")}),
                   ModelVersion::kV3),
            kBos + "<｜User｜>Q<｜Assistant｜><｜tool▁calls▁begin｜>" + V3Call("f", R"({"x":1})") +
                "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>R<｜tool▁output▁end｜><｜tool▁outputs▁end｜>Done" + kEos +
                "<｜Assistant｜>");
}

TEST(EncoderV3, TwoCallsAndOutputsEndingInToolOutputs) {
  auto p = RenderPrompt(Conversation({User("Q"), Calls({{"a", "f", "{}"}, {"b", "g", "{}"}}), ToolResult("a", "1"),
                                      ToolResult("b", "2")}),
                        ModelVersion::kV3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "<｜User｜>Q<｜Assistant｜><｜tool▁calls▁begin｜>" + V3Call("f", "{}") + "\n" +
                                V3Call("g", "{}") + "<｜tool▁calls▁end｜>" + kEos +
                                "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>1<｜tool▁output▁end｜>\n"
                                "<｜tool▁output▁begin｜>2<｜tool▁output▁end｜><｜tool▁outputs▁end｜>");
  EXPECT_FALSE(p->ends_in_thinking);
}

TEST(EncoderV3, CallsRenderOnlyWithNullContent) {
  Message m = Assistant("");
  m.tool_calls.push_back({"a", "f", "{}"});
  EXPECT_EQ(Render(Conversation({User("Q"), m}), ModelVersion::kV3),
            kBos + "<｜User｜>Q<｜Assistant｜>" + kEos + "<｜Assistant｜>");
}

TEST(EncoderV3, ToolsBlockAfterTheSystemPrompt) {
  Request r = Conversation({System("S"), User("Q")});
  r.tools.push_back(MakeTool("f", "F", R"({"type": "object"})"));
  EXPECT_EQ(Render(r, ModelVersion::kV3),
            kBos + "S\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                   R"({"type": "function", "function": {"name": "f", "description": "F", "parameters": {"type": "object"}}})"
                   "\n</tools>\n\nFor function call returns, you should first print <｜tool▁calls▁begin｜>"
                   "For each function call, you should return object like:\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                   "<function_name>\n```json\n<function_arguments_in_json_format>\n```<｜tool▁call▁end｜>"
                   "At the end of function call returns, you should print <｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
                   "<｜User｜>Q<｜Assistant｜>");
}

// --- R1 -------------------------------------------------------------------------------------

TEST(EncoderR1, GenerationPromptOpensThinking) {
  auto p = RenderPrompt(Conversation({System("S"), User("Q")}, false), ModelVersion::kR1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "S<｜User｜>Q<｜Assistant｜><think>\n");
  EXPECT_TRUE(p->ends_in_thinking);
}

TEST(EncoderR1, ReasoningInHistoryIsCut) {
  EXPECT_EQ(Render(Conversation({User("Q1"), Assistant("<think>r</think>x</think>A1", "R1"), User("Q2")}),
                   ModelVersion::kR1),
            kBos + "<｜User｜>Q1<｜Assistant｜>A1" + kEos + "<｜User｜>Q2<｜Assistant｜><think>\n");
}

TEST(EncoderR1, ToolRoundWithContent) {
  Message calls = Assistant("Let me check.");
  calls.tool_calls = {{"a", "f", "{}"}, {"b", "g", "{}"}};
  auto p = RenderPrompt(
      Conversation({User("Q"), calls, ToolResult("a", "1"), ToolResult("b", "2"), Assistant("Done")}),
      ModelVersion::kR1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "<｜User｜>Q<｜Assistant｜>Let me check.<｜tool▁calls▁begin｜>" + V3Call("f", "{}") +
                                "\n" + V3Call("g", "{}") + "<｜tool▁calls▁end｜>" + kEos +
                                "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>1<｜tool▁output▁end｜>"
                                "<｜tool▁output▁begin｜>2<｜tool▁output▁end｜><｜tool▁outputs▁end｜>Done" +
                                kEos + "<｜Assistant｜><think>\n");
}

TEST(EncoderR1, EndingInToolOutputsLeavesThinkingClosed) {
  auto p = RenderPrompt(Conversation({User("Q"), Calls({{"a", "f", "{}"}}), ToolResult("a", "1")}), ModelVersion::kR1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "<｜User｜>Q<｜Assistant｜><｜tool▁calls▁begin｜>" + V3Call("f", "{}") +
                                "<｜tool▁calls▁end｜>" + kEos +
                                "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>1<｜tool▁output▁end｜>"
                                "<｜tool▁outputs▁end｜>");
  EXPECT_FALSE(p->ends_in_thinking);
}

}  // namespace
}  // namespace ladle::frontend
