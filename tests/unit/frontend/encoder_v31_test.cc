// DeepSeek-V3.1 encoder: expectations derived by hand from the DeepSeek-V3.1 tokenizer_config.json
// chat_template and, for tools, the V3.1 model card's ToolCall section.
#include <gtest/gtest.h>

#include "encoder_test_util.h"
#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"
#include "test_data.h"

namespace ladle::frontend {
namespace {

using namespace ladle::frontend::testing;  // NOLINT

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";

std::string V31Call(const std::string& name, const std::string& args) {
  return "<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>" + args + "<｜tool▁call▁end｜>";
}

TEST(EncoderV31, ThinkingOnAndOff) {
  auto off = RenderPrompt(Conversation({System("S"), User("Hi")}, false), ModelVersion::kV31);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(PromptText(*off), kBos + "S<｜User｜>Hi<｜Assistant｜></think>");
  EXPECT_FALSE(off->ends_in_thinking);
  auto on = RenderPrompt(Conversation({System("S"), User("Hi")}, true), ModelVersion::kV31);
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(PromptText(*on), kBos + "S<｜User｜>Hi<｜Assistant｜><think>");
  EXPECT_TRUE(on->ends_in_thinking);
}

TEST(EncoderV31, HistoryKeepsOnlyTheAnswer) {
  EXPECT_EQ(Render(Conversation({User("Q1"), Assistant("A1", "R1"), User("Q2"), Assistant("r</think>A2")}, true),
                   ModelVersion::kV31),
            kBos + "<｜User｜>Q1<｜Assistant｜></think>A1" + kEos + "<｜User｜>Q2<｜Assistant｜></think>A2" + kEos);
}

TEST(EncoderV31, ToolCallsAndOutputs) {
  auto p = RenderPrompt(Conversation({System("S"), User("Q"), Calls({{"a", "f", R"({"x": 1})"}, {"b", "g", "{}"}}),
                                      ToolResult("a", "1"), ToolResult("b", "2")},
                                     true),
                        ModelVersion::kV31);
  ASSERT_TRUE(p.ok());
  // After tool outputs the template adds no generation prompt: the model goes on directly.
  EXPECT_EQ(PromptText(*p), kBos + "S<｜User｜>Q<｜Assistant｜></think><｜tool▁calls▁begin｜>" + V31Call("f", R"({"x": 1})") +
                                V31Call("g", "{}") + "<｜tool▁calls▁end｜>" + kEos +
                                "<｜tool▁output▁begin｜>1<｜tool▁output▁end｜><｜tool▁output▁begin｜>2<｜tool▁output▁end｜>");
  EXPECT_FALSE(p->ends_in_thinking);
  EXPECT_EQ(Render(Conversation({User("Q"), Calls({{"a", "f", "{}"}}), ToolResult("a", "1"), Assistant("Done")}),
                   ModelVersion::kV31),
            kBos + "<｜User｜>Q<｜Assistant｜></think><｜tool▁calls▁begin｜>" + V31Call("f", "{}") +
                "<｜tool▁calls▁end｜>" + kEos + "<｜tool▁output▁begin｜>1<｜tool▁output▁end｜>Done" + kEos);
}

TEST(EncoderV31, ModelCardToolDescription) {
  Request r = Conversation({System("S"), User("Q")});
  r.tools.push_back(MakeTool("f", "F", R"({"type": "object"})"));
  r.tools.push_back(MakeTool("g", "G", R"({"type": "object", "properties": {}})"));
  const std::string rules =
      "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>"
      "{additional_tool_calls}<｜tool▁calls▁end｜>\n\nWhere:\n"
      "- `tool_call_name` must be an exact match to one of the available tools\n"
      "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
      "- For multiple tool calls, chain them directly without separators or spaces";
  EXPECT_EQ(Render(r, ModelVersion::kV31),
            kBos + "S\n\n## Tools\nYou have access to the following tools:\n\n"
                   "### f\nDescription: F\n\nParameters: {\"type\": \"object\"}\n\n"
                   "### g\nDescription: G\n\nParameters: {\"type\": \"object\", \"properties\": {}}\n\n" +
                rules + "<｜User｜>Q<｜Assistant｜></think>");
}

TEST(EncoderV31, ToolDescriptionControlTokensAreTokens) {
  const std::string tok_path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(tok_path);
  auto base = tokenizer::Tokenizer::FromFile(tok_path);
  ASSERT_TRUE(base.ok());
  auto tok = TokenizerForVersion(*base, ModelVersion::kV31);
  ASSERT_TRUE(tok.ok());
  Request r = Conversation({User("Q")}, true);
  r.tools.push_back(MakeTool("f", "F", R"({"type": "object"})"));
  auto p = RenderPrompt(r, ModelVersion::kV31);
  ASSERT_TRUE(p.ok());
  auto enc = EncodePrompt(*p, *tok);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(enc->ids, tok->EncodeTrusted(enc->text));
  // BOS, 5 in the format line, User, Assistant, <think>.
  EXPECT_EQ(enc->special_positions.size(), 9u);
  EXPECT_EQ(enc->ids.back(), *SpecialTokensFor(ModelVersion::kV31).think);
}

TEST(EncoderV31, DeveloperIsSystemAndResponseFormatIsNotDescribed) {
  // The template has no developer role and no response-format block: a developer message joins
  // the system prompt, and the response format is left to the grammar.
  Request r = Conversation({System("S"), Developer("D"), User("Q")});
  r.response_format.kind = ResponseFormat::Kind::kJsonObject;
  EXPECT_EQ(Render(r, ModelVersion::kV31), kBos + "S\n\nD<｜User｜>Q<｜Assistant｜></think>");
}

}  // namespace
}  // namespace ladle::frontend
