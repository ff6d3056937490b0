// DeepSeek-V3.2 encoder: byte-exact against DeepSeek's official vectors (../shared/golden/
// deepseek-v3.2/), and rule by rule against strings derived by hand from encoding_dsv32.py.
#include <gtest/gtest.h>

#include <algorithm>

#include "encoder_test_util.h"
#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"
#include "test_data.h"

namespace ladle::frontend {
namespace {

using namespace ladle::frontend::testing;  // NOLINT

constexpr ModelVersion kV = ModelVersion::kV32;
const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";

std::string GoldenDir() {
  return ladle::testing::EnvOr("LADLE_SHARED", LADLE_TEST_SHARED_DIR) + "/golden/deepseek-v3.2";
}

// TOOLS_SYSTEM_TEMPLATE of encoding_dsv32.py, for hand-derived expectations.
std::string ToolsBlock(const std::string& schemas) {
  return "## Tools\n\nYou have access to a set of tools you can use to answer the user's question.\n"
         "You can invoke functions by writing a \"<｜DSML｜function_calls>\" block like the following as part of "
         "your reply to the user:\n"
         "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"$FUNCTION_NAME\">\n"
         "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
         "...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$FUNCTION_NAME2\">\n...\n</｜DSML｜invoke>\n"
         "</｜DSML｜function_calls>\n\n"
         "String and scalar parameters should be specified as is without any escaping or quotes, while lists and "
         "objects should use JSON format. The \"string\" attribute should be set to \"true\" for string type "
         "parameters and \"false\" for other types (numbers, booleans, arrays, objects).\n\n"
         "If the thinking_mode is enabled, then after function results you should strongly consider outputting a "
         "thinking block. Here is an example:\n\n"
         "<｜DSML｜function_calls>\n...\n</｜DSML｜function_calls>\n\n<function_results>\n...\n</function_results>\n\n"
         "<think>...thinking about results</think>\n\n"
         "Here are the functions available in JSONSchema format:\n<functions>\n" +
         schemas + "\n</functions>\n";
}

const char* kWeatherParams =
    R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})";
const std::string kWeatherSchema =
    R"({"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})";

// --- Golden vectors -------------------------------------------------------------------------

void ExpectGolden(const std::string& input, const std::string& output, bool strip_one_newline) {
  const std::string in_path = GoldenDir() + "/" + input;
  const std::string out_path = GoldenDir() + "/" + output;
  LADLE_REQUIRE_DATA(in_path);
  LADLE_REQUIRE_DATA(out_path);
  std::string expected = ReadFile(out_path);
  if (strip_one_newline) {
    ASSERT_FALSE(expected.empty());
    ASSERT_EQ(expected.back(), '\n');
    expected.pop_back();
  }
  const Request r = RequestFromGolden(ReadFile(in_path), /*thinking=*/true);
  auto prompt = RenderPrompt(r, kV);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  const std::string got(PromptText(*prompt));
  if (got != expected) {
    const auto diff = std::mismatch(got.begin(), got.end(), expected.begin(), expected.end());
    const size_t at = static_cast<size_t>(diff.first - got.begin());
    FAIL() << "first difference at byte " << at << "\n got: "
           << got.substr(at > 80 ? at - 80 : 0, 200) << "\nwant: " << expected.substr(at > 80 ? at - 80 : 0, 200);
  }

  // Ids: the prompt's segments must give exactly what a Hugging Face-style tokenizer gives for
  // the reference string (no user text here spells a control token, so the two must agree).
  const std::string tok_path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(tok_path);
  auto base = tokenizer::Tokenizer::FromFile(tok_path);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  auto tok = TokenizerForVersion(*base, kV);
  ASSERT_TRUE(tok.ok());
  auto enc = EncodePrompt(*prompt, *tok);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(enc->ids, tok->EncodeTrusted(expected));
  EXPECT_EQ(enc->text, expected);
  // Special positions are exactly the added-token ids.
  std::vector<uint32_t> added;
  for (size_t i = 0; i < enc->ids.size(); ++i) {
    if (tok->IsAddedToken(enc->ids[i])) added.push_back(static_cast<uint32_t>(i));
  }
  EXPECT_EQ(enc->special_positions, added);
}

TEST(EncoderV32Golden, ToolsWeatherConversation) {
  ExpectGolden("test_input.json", "test_output.txt", /*strip_one_newline=*/true);
}

TEST(EncoderV32Golden, SearchAgentWithDeveloperTools) {
  ExpectGolden("test_input_search_wo_date.json", "test_output_search_wo_date.txt", /*strip_one_newline=*/false);
}

// --- Rules ----------------------------------------------------------------------------------

TEST(EncoderV32, SystemAndUserChatMode) {
  auto p = RenderPrompt(Conversation({System("S"), User("Hi")}, /*thinking=*/false), kV);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "S<｜User｜>Hi<｜Assistant｜></think>");
  EXPECT_FALSE(p->ends_in_thinking);
}

TEST(EncoderV32, SystemAndUserThinkingMode) {
  auto p = RenderPrompt(Conversation({System("S"), User("Hi")}, /*thinking=*/true), kV);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "S<｜User｜>Hi<｜Assistant｜><think>");
  EXPECT_TRUE(p->ends_in_thinking);
}

TEST(EncoderV32, NoBosWhenAsked) {
  RenderOptions o;
  o.add_bos = false;
  EXPECT_EQ(Render(Conversation({User("Hi")}), kV, o), "<｜User｜>Hi<｜Assistant｜></think>");
}

TEST(EncoderV32, EarlierReasoningIsDroppedAndLatestKept) {
  const Request r = Conversation({User("Q1"), Assistant("A1", "R1"), User("Q2"), Assistant("A2", "R2")}, true);
  EXPECT_EQ(Render(r, kV), kBos + "<｜User｜>Q1<｜Assistant｜></think>A1" + kEos +
                               "<｜User｜>Q2<｜Assistant｜><think>R2</think>A2" + kEos);
}

TEST(EncoderV32, MultiTurnGenerationPromptsChatAndThinking) {
  EXPECT_EQ(Render(Conversation({User("Q1"), Assistant("A1", "R1"), User("Q2")}, true), kV),
            kBos + "<｜User｜>Q1<｜Assistant｜></think>A1" + kEos + "<｜User｜>Q2<｜Assistant｜><think>");
  EXPECT_EQ(Render(Conversation({User("Q1"), Assistant("A1", "R1"), User("Q2")}, false), kV),
            kBos + "<｜User｜>Q1<｜Assistant｜></think>A1" + kEos + "<｜User｜>Q2<｜Assistant｜></think>");
}

TEST(EncoderV32, ToolCallsAndResultsThinking) {
  Request r = Conversation({System("S"), User("Q"),
                            Calls({{"a", "get_weather", R"({"city": "Paris", "days": 3})"}}, "R1"),
                            ToolResult("a", "sunny")},
                           true);
  auto p = RenderPrompt(r, kV);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(PromptText(*p),
            kBos + "S<｜User｜>Q<｜Assistant｜><think>R1</think>\n\n<｜DSML｜function_calls>\n"
                   "<｜DSML｜invoke name=\"get_weather\">\n"
                   "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                   "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
                   "</｜DSML｜invoke>\n</｜DSML｜function_calls>" +
                kEos + "\n\n<function_results>\n<result>sunny</result>\n</function_results>\n\n<think>");
  EXPECT_TRUE(p->ends_in_thinking);
}

TEST(EncoderV32, ToolResultsChatModeCloseThinking) {
  Request r = Conversation({User("Q"), Calls({{"a", "f", "{}"}, {"b", "g", "{}"}}), ToolResult("a", "1"),
                            ToolResult("b", "2")},
                           false);
  auto p = RenderPrompt(r, kV);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PromptText(*p), kBos + "<｜User｜>Q<｜Assistant｜></think>\n\n<｜DSML｜function_calls>\n"
                                   "<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n"
                                   "<｜DSML｜invoke name=\"g\">\n\n</｜DSML｜invoke>\n</｜DSML｜function_calls>" +
                                kEos + "\n\n<function_results>\n<result>1</result>\n<result>2</result>\n"
                                       "</function_results>\n\n</think>");
  EXPECT_FALSE(p->ends_in_thinking);
}

TEST(EncoderV32, ResultsGoByPositionNotId) {
  // encoding_dsv32.py pairs results with calls by position; ids are not consulted.
  Request r = Conversation({User("Q"), Calls({{"a", "f", "{}"}, {"b", "g", "{}"}}), ToolResult("b", "B"),
                            ToolResult("a", "A")},
                           false);
  const std::string text = Render(r, kV);
  EXPECT_NE(text.find("<result>B</result>\n<result>A</result>"), std::string::npos) << text;
}

TEST(EncoderV32, NonStringArgumentsArePythonJson) {
  Request r = Conversation(
      {User("Q"), Calls({{"a", "f", R"({"q":"x y","filters":{"a":[1,2.5,true,null]},"n":1.0,"big":1e20,"s":"é\"<｜User｜>"})"}})},
      false);
  const std::string text = Render(r, kV);
  EXPECT_NE(text.find("<｜DSML｜parameter name=\"q\" string=\"true\">x y</｜DSML｜parameter>\n"
                      "<｜DSML｜parameter name=\"filters\" string=\"false\">{\"a\": [1, 2.5, true, null]}"
                      "</｜DSML｜parameter>\n"
                      "<｜DSML｜parameter name=\"n\" string=\"false\">1.0</｜DSML｜parameter>\n"
                      "<｜DSML｜parameter name=\"big\" string=\"false\">1e+20</｜DSML｜parameter>\n"
                      "<｜DSML｜parameter name=\"s\" string=\"true\">é\"<｜User｜></｜DSML｜parameter>"),
            std::string::npos)
      << text;
}

TEST(EncoderV32, DuplicateArgumentKeysBehaveLikeAPythonDict) {
  Request r = Conversation({User("Q"), Calls({{"a", "f", R"({"a": 1, "b": 2, "a": 3})"}})}, false);
  const std::string text = Render(r, kV);
  EXPECT_NE(text.find("name=\"a\" string=\"false\">3</｜DSML｜parameter>\n<｜DSML｜parameter name=\"b\""),
            std::string::npos)
      << text;
}

TEST(EncoderV32, DeveloperRole) {
  EXPECT_EQ(Render(Conversation({Developer("Do X")}, true), kV),
            kBos + "<｜User｜>\n\n# The user's message is: Do X<｜Assistant｜><think>");
  EXPECT_EQ(Render(Conversation({Developer("Do X")}, false), kV),
            kBos + "<｜User｜>\n\n# The user's message is: Do X<｜Assistant｜></think>");
}

TEST(EncoderV32, DeveloperBeforeLastUserIsDroppedInThinkingMode) {
  const Request thinking = Conversation({Developer("D"), User("Q")}, true);
  EXPECT_EQ(Render(thinking, kV), kBos + "<｜User｜>Q<｜Assistant｜><think>");
  RenderOptions keep;
  keep.drop_thinking = false;
  EXPECT_EQ(Render(thinking, kV, keep),
            kBos + "<｜User｜>\n\n# The user's message is: D<｜Assistant｜></think><｜User｜>Q<｜Assistant｜><think>");
  EXPECT_EQ(Render(Conversation({Developer("D"), User("Q")}, false), kV),
            kBos + "<｜User｜>\n\n# The user's message is: D<｜Assistant｜></think><｜User｜>Q<｜Assistant｜></think>");
}

TEST(EncoderV32, RequestToolsGoIntoTheFirstSystemMessage) {
  Request r = Conversation({System("S"), User("Q")}, false);
  r.tools.push_back(MakeTool("get_weather", "Weather of a city", kWeatherParams));
  EXPECT_EQ(Render(r, kV), kBos + "S\n\n" + ToolsBlock(kWeatherSchema) + "<｜User｜>Q<｜Assistant｜></think>");
}

TEST(EncoderV32, RequestToolsGetAnInsertedSystemMessageWithoutOne) {
  Request r = Conversation({User("Q")}, false);
  r.tools.push_back(MakeTool("get_weather", "Weather of a city", kWeatherParams));
  EXPECT_EQ(Render(r, kV), kBos + "\n\n" + ToolsBlock(kWeatherSchema) + "<｜User｜>Q<｜Assistant｜></think>");
}

TEST(EncoderV32, RequestToolsGoIntoALeadingDeveloperMessage) {
  Request r = Conversation({Developer("D")}, true);
  r.tools.push_back(MakeTool("get_weather", "Weather of a city", kWeatherParams));
  EXPECT_EQ(Render(r, kV), kBos + "<｜User｜>\n\n" + ToolsBlock(kWeatherSchema) +
                               "\n\n# The user's message is: D<｜Assistant｜><think>");
}

TEST(EncoderV32, ResponseFormatBlock) {
  Request r = Conversation({System("S"), User("Q")}, false);
  r.response_format.kind = ResponseFormat::Kind::kJsonSchema;
  r.response_format.name = "r";
  r.response_format.schema = ParseJson(R"({"type":"object"})");
  r.response_format.strict = true;
  const std::string block =
      "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
      R"({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": true}})";
  EXPECT_EQ(Render(r, kV), kBos + "S" + block + "<｜User｜>Q<｜Assistant｜></think>");
  // After the tools block when both are present, and on an inserted system turn without a system.
  r.tools.push_back(MakeTool("get_weather", "Weather of a city", kWeatherParams));
  EXPECT_EQ(Render(r, kV), kBos + "S\n\n" + ToolsBlock(kWeatherSchema) + block + "<｜User｜>Q<｜Assistant｜></think>");
  r.messages.erase(r.messages.begin());
  r.tools.clear();
  r.response_format.kind = ResponseFormat::Kind::kJsonObject;
  EXPECT_EQ(Render(r, kV),
            kBos + "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                   R"({"type": "json_object"})"
                   "<｜User｜>Q<｜Assistant｜></think>");
}

TEST(EncoderV32, InvalidConversationsAreRejected) {
  auto orphan = RenderPrompt(Conversation({User("Q"), ToolResult("a", "x")}), kV);
  EXPECT_EQ(orphan.status().code(), StatusCode::kInvalidArgument);
  auto extra = RenderPrompt(
      Conversation({User("Q"), Calls({{"a", "f", "{}"}}), ToolResult("a", "1"), ToolResult("b", "2")}), kV);
  EXPECT_EQ(extra.status().code(), StatusCode::kInvalidArgument);
  auto bad_args = RenderPrompt(Conversation({User("Q"), Calls({{"a", "f", "{not json"}})}), kV);
  EXPECT_EQ(bad_args.status().code(), StatusCode::kInvalidArgument);
  auto array_args = RenderPrompt(Conversation({User("Q"), Calls({{"a", "f", "[1]"}})}), kV);
  EXPECT_EQ(array_args.status().code(), StatusCode::kInvalidArgument);
  auto empty_dev = RenderPrompt(Conversation({Developer("")}), kV);
  EXPECT_EQ(empty_dev.status().code(), StatusCode::kInvalidArgument);
  Message image = User("look");
  image.content.push_back({ContentPart::Kind::kImage, "", ImagePart{"data:image/png;base64,AA", "image/png", 1, 1}});
  auto img = RenderPrompt(Conversation({image}), kV);
  EXPECT_EQ(img.status().code(), StatusCode::kUnsupported);
}

TEST(EncoderV32, ContentPartsJoinWithNewline) {
  Message m = User("a");
  m.content.push_back({ContentPart::Kind::kText, "b", {}});
  EXPECT_EQ(Render(Conversation({m}), kV), kBos + "<｜User｜>a\nb<｜Assistant｜></think>");
}

}  // namespace
}  // namespace ladle::frontend
