// Messages writer: message_start/ping, content blocks one at a time with sequential indices,
// the thinking signature, stop reasons, usage mapping and the message body.
#include <gtest/gtest.h>

#include "frontend/writer_test_util.h"

namespace ladle::frontend {
namespace {

using namespace writer_test;  // NOLINT: test helpers

// "event" or "event/delta-type" per frame, after checking each frame is named after its type.
std::vector<std::string> Shape(const std::vector<Frame>& frames) {
  std::vector<std::string> shape;
  for (const Frame& f : frames) {
    EXPECT_EQ(Str(At(f.json, "type")), f.event);
    std::string s = f.event;
    if (f.event == "content_block_delta") s += "/" + Str(At(At(f.json, "delta"), "type"));
    if (f.event == "content_block_start") s += "/" + Str(At(At(f.json, "content_block"), "type"));
    shape.push_back(s);
  }
  return shape;
}

// Blocks are numbered 0, 1, … and each stops before the next starts.
void ExpectSequentialBlocks(const std::vector<Frame>& frames) {
  int open = -1, next = 0;
  for (const Frame& f : frames) {
    if (f.event == "content_block_start") {
      EXPECT_EQ(open, -1) << "block started while another was open: " << f.data;
      EXPECT_EQ(Int(At(f.json, "index")), next);
      open = next++;
    } else if (f.event == "content_block_delta") {
      EXPECT_EQ(Int(At(f.json, "index")), open);
    } else if (f.event == "content_block_stop") {
      EXPECT_EQ(Int(At(f.json, "index")), open);
      open = -1;
    }
  }
  EXPECT_EQ(open, -1);
}

TEST(MessagesWriter, StreamReasoningThenText) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kMessages, true), ReasoningThenText()));
  EXPECT_EQ(Shape(f), (std::vector<std::string>{
                          "message_start",
                          "ping",
                          "content_block_start/thinking",
                          "content_block_delta/thinking_delta",
                          "content_block_delta/thinking_delta",
                          "content_block_delta/signature_delta",
                          "content_block_stop",
                          "content_block_start/text",
                          "content_block_delta/text_delta",
                          "content_block_delta/text_delta",
                          "content_block_stop",
                          "message_delta",
                          "message_stop",
                      }));
  ExpectSequentialBlocks(f);
  EXPECT_EQ(f[0].data,
            "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_abc\",\"type\":\"message\",\"role\":\"assistant\","
            "\"model\":\"deepseek-v3.2\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":"
            "{\"input_tokens\":18,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":32,\"output_tokens\":0}}}");
  EXPECT_EQ(f[1].data, "{\"type\":\"ping\"}");
  EXPECT_EQ(json::Dump(At(f[2].json, "content_block")), "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}");
  EXPECT_EQ(f[3].data,
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Think \"}}");
  EXPECT_FALSE(Str(At(At(f[5].json, "delta"), "signature")).empty());
  EXPECT_EQ(json::Dump(At(f[7].json, "content_block")), "{\"type\":\"text\",\"text\":\"\"}");
  EXPECT_EQ(Str(At(At(f[9].json, "delta"), "text")), "lo \"you\"\n");
  EXPECT_EQ(f[11].data,
            "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":"
            "{\"input_tokens\":18,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":32,\"output_tokens\":20,"
            "\"output_tokens_details\":{\"thinking_tokens\":7}}}");
  EXPECT_EQ(f[12].data, "{\"type\":\"message_stop\"}");
}

TEST(MessagesWriter, StreamTextThenTwoToolUses) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kMessages, true), TextThenTwoTools()));
  EXPECT_EQ(Shape(f), (std::vector<std::string>{
                          "message_start",
                          "ping",
                          "content_block_start/text",
                          "content_block_delta/text_delta",
                          "content_block_stop",
                          "content_block_start/tool_use",
                          "content_block_delta/input_json_delta",
                          "content_block_delta/input_json_delta",
                          "content_block_delta/input_json_delta",
                          "content_block_stop",
                          "content_block_start/tool_use",
                          "content_block_delta/input_json_delta",
                          "content_block_delta/input_json_delta",
                          "content_block_stop",
                          "message_delta",
                          "message_stop",
                      }));
  ExpectSequentialBlocks(f);
  EXPECT_EQ(json::Dump(At(f[5].json, "content_block")),
            "{\"type\":\"tool_use\",\"id\":\"call_a\",\"name\":\"get_weather\",\"input\":{}}");
  std::string args;
  for (int i = 6; i <= 8; ++i) args += Str(At(At(f[i].json, "delta"), "partial_json"));
  EXPECT_EQ(args, "{\"city\": \"Paris\"}");
  EXPECT_EQ(Int(At(f[10].json, "index")), 2);
  EXPECT_EQ(Str(At(At(f[14].json, "delta"), "stop_reason")), "tool_use");
}

TEST(MessagesWriter, StopReasons) {
  auto stop_reason = [](const std::vector<Event>& events) {
    json::Value body = ParseBody(Drive(TestMeta(Api::kMessages, false), events));
    return Str(At(body, "stop_reason"));
  };
  EXPECT_EQ(stop_reason(ReasoningThenText()), "end_turn");
  EXPECT_EQ(stop_reason(TextThenTwoTools()), "tool_use");
  EXPECT_EQ(stop_reason(MaxTokens()), "max_tokens");
  EXPECT_EQ(stop_reason(Malformed()), "end_turn");
  // A broken call closed early by the parser finishes with kStop: end_turn, not tool_use.
  EXPECT_EQ(stop_reason({ToolStart(0, "c", "f"), ToolArgs(0, "{"), ToolEnd(0), Finish(FinishReason::kStop, "", true)}),
            "end_turn");
  json::Value seq = ParseBody(Drive(TestMeta(Api::kMessages, false), {Content("a"), Finish(FinishReason::kStop, "STOP")}));
  EXPECT_EQ(Str(At(seq, "stop_reason")), "stop_sequence");
  EXPECT_EQ(Str(At(seq, "stop_sequence")), "STOP");
  std::vector<Frame> f =
      SplitSse(Drive(TestMeta(Api::kMessages, true), {Content("a"), Finish(FinishReason::kStop, "STOP")}));
  EXPECT_EQ(json::Dump(At(f[f.size() - 2].json, "delta")), "{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"STOP\"}");
}

TEST(MessagesWriter, MaxTokensClosesTheOpenThinkingBlockWithASignature) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kMessages, true), {Reasoning("cut"), Finish(FinishReason::kLength)}));
  EXPECT_EQ(Shape(f), (std::vector<std::string>{"message_start", "ping", "content_block_start/thinking",
                                                "content_block_delta/thinking_delta", "content_block_delta/signature_delta",
                                                "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(Str(At(At(f[6].json, "delta"), "stop_reason")), "max_tokens");
}

TEST(MessagesWriter, BodyMatchesTheStream) {
  auto w = MakeResponseWriter(TestMeta(Api::kMessages, false));
  std::vector<Event> events = {Reasoning("Think"), Content("Hi"), ToolStart(0, "call_a", "f"),
                               ToolArgs(0, "{\"x\": [1, "), ToolArgs(0, "2]}"), ToolEnd(0), Finish(FinishReason::kToolCalls)};
  std::string body = Drive(*w, events);
  EXPECT_EQ(w->http_status(), 200);
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kMessages, true), events));
  std::string signature = Str(At(At(f[4].json, "delta"), "signature"));
  EXPECT_EQ(body,
            "{\"id\":\"msg_abc\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"deepseek-v3.2\",\"content\":["
            "{\"type\":\"thinking\",\"thinking\":\"Think\",\"signature\":\"" + signature + "\"},"
            "{\"type\":\"text\",\"text\":\"Hi\"},"
            "{\"type\":\"tool_use\",\"id\":\"call_a\",\"name\":\"f\",\"input\":{\"x\":[1,2]}}],"
            "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":18,"
            "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":32,\"output_tokens\":20,"
            "\"output_tokens_details\":{\"thinking_tokens\":7}}}");
  ParseBody(body);
}

TEST(MessagesWriter, SignatureDependsOnTheThinkingText) {
  auto signature = [](const std::string& thinking) {
    json::Value body =
        ParseBody(Drive(TestMeta(Api::kMessages, false), {Reasoning(thinking), Finish(FinishReason::kStop)}));
    return Str(At(At(At(body, "content"), 0), "signature"));
  };
  EXPECT_EQ(signature("abc"), signature("abc"));
  EXPECT_NE(signature("abc"), signature("abd"));
  // Split or whole, the same text signs the same.
  json::Value split = ParseBody(
      Drive(TestMeta(Api::kMessages, false), {Reasoning("a"), Reasoning("bc"), Finish(FinishReason::kStop)}));
  EXPECT_EQ(Str(At(At(At(split, "content"), 0), "signature")), signature("abc"));
}

TEST(MessagesWriter, TruncatedToolInputBecomesEmptyObject) {
  json::Value body = ParseBody(Drive(TestMeta(Api::kMessages, false),
                                     {ToolStart(0, "c", "f"), ToolArgs(0, "{\"city\": \"Ber"), Finish(FinishReason::kLength)}));
  EXPECT_EQ(json::Dump(At(At(At(body, "content"), 0), "input")), "{}");
  EXPECT_EQ(Str(At(body, "stop_reason")), "max_tokens");
}

TEST(MessagesWriter, AlternatingKindsNeverInterleave) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kMessages, true),
                                        {Reasoning("a"), Content("b"), Reasoning("c"), Content("d"),
                                         ToolStart(0, "", "f"), Content("e"), Finish(FinishReason::kStop)}));
  ExpectSequentialBlocks(f);
  std::vector<std::string> starts;
  for (const Frame& fr : f) {
    if (fr.event != "content_block_start") continue;
    const json::Value& block = At(fr.json, "content_block");
    starts.push_back(Str(At(block, "type")));
    // A tool call without an id gets one derived from the message id and its block index.
    if (starts.back() == "tool_use") {
      EXPECT_EQ(Str(At(block, "id")), "toolu_abc_4");
    }
  }
  EXPECT_EQ(starts, (std::vector<std::string>{"thinking", "text", "thinking", "text", "tool_use", "text"}));
}

TEST(MessagesWriter, ErrorIsTheLastEvent) {
  auto w = MakeResponseWriter(TestMeta(Api::kMessages, true));
  std::vector<Frame> f = SplitSse(Drive(*w, {Content("par"), Finish(FinishReason::kError, "boom"), Content("x")}));
  EXPECT_EQ(f.back().event, "error");
  EXPECT_EQ(f.back().data, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}");
  for (const Frame& fr : f) EXPECT_NE(fr.event, "message_delta");

  auto body_writer = MakeResponseWriter(TestMeta(Api::kMessages, false));
  json::Value body = ParseBody(Drive(*body_writer, {Finish(FinishReason::kCancelled)}));
  EXPECT_EQ(body_writer->http_status(), 499);
  EXPECT_EQ(Str(At(body, "type")), "error");

  std::vector<Frame> cut = SplitSse(Drive(TestMeta(Api::kMessages, true), {Content("cut")}));
  EXPECT_EQ(cut.back().event, "error");
}

TEST(MessagesWriter, CachedTokensNeverExceedThePrompt) {
  Usage u{.prompt_tokens = 10, .completion_tokens = 1, .cached_tokens = 12, .reasoning_tokens = 0};
  json::Value body = ParseBody(Drive(TestMeta(Api::kMessages, false), {Content("a"), Finish(FinishReason::kStop)}, u));
  EXPECT_EQ(Int(At(At(body, "usage"), "input_tokens")), 0);
  EXPECT_EQ(Int(At(At(body, "usage"), "cache_read_input_tokens")), 10);
}

}  // namespace
}  // namespace ladle::frontend
