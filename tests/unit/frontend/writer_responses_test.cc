// Responses writer: event order, sequence numbers, items and parts, the response object.
#include <gtest/gtest.h>

#include "frontend/writer_test_util.h"

namespace ladle::frontend {
namespace {

using namespace writer_test;  // NOLINT: test helpers

std::vector<std::string> Types(const std::vector<Frame>& frames) {
  std::vector<std::string> types;
  for (const Frame& f : frames) types.push_back(f.event);
  return types;
}

// Every frame is named after its type and numbered 0, 1, 2, … in order.
void ExpectWellFormed(const std::vector<Frame>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(Str(At(frames[i].json, "type")), frames[i].event);
    EXPECT_EQ(Int(At(frames[i].json, "sequence_number")), static_cast<int64_t>(i)) << frames[i].data;
  }
}

TEST(ResponsesWriter, StreamReasoningThenText) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kResponses, true), ReasoningThenText()));
  ExpectWellFormed(f);
  EXPECT_EQ(Types(f), (std::vector<std::string>{
                          "response.created",
                          "response.in_progress",
                          "response.output_item.added",  // reasoning
                          "response.content_part.added",
                          "response.reasoning_text.delta",
                          "response.reasoning_text.delta",
                          "response.reasoning_text.done",
                          "response.content_part.done",
                          "response.output_item.done",
                          "response.output_item.added",  // message
                          "response.content_part.added",
                          "response.output_text.delta",
                          "response.output_text.delta",
                          "response.output_text.done",
                          "response.content_part.done",
                          "response.output_item.done",
                          "response.completed",
                      }));
  // created: the full response object, in progress, no output or usage yet.
  const json::Value& created = At(f[0].json, "response");
  EXPECT_EQ(Str(At(created, "id")), "resp_abc");
  EXPECT_EQ(Str(At(created, "object")), "response");
  EXPECT_EQ(Str(At(created, "status")), "in_progress");
  EXPECT_EQ(Int(At(created, "created_at")), 1700000000);
  EXPECT_TRUE(At(created, "output").as_array().empty());
  EXPECT_TRUE(At(created, "usage").is_null());
  // The reasoning item and its reasoning_text part.
  EXPECT_EQ(json::Dump(At(f[2].json, "item")),
            "{\"id\":\"rs_abc_0\",\"type\":\"reasoning\",\"summary\":[],\"content\":[],\"status\":\"in_progress\"}");
  EXPECT_EQ(f[3].data,
            "{\"type\":\"response.content_part.added\",\"sequence_number\":3,\"item_id\":\"rs_abc_0\",\"output_index\":0,"
            "\"content_index\":0,\"part\":{\"type\":\"reasoning_text\",\"text\":\"\"}}");
  EXPECT_EQ(f[4].data,
            "{\"type\":\"response.reasoning_text.delta\",\"sequence_number\":4,\"item_id\":\"rs_abc_0\",\"output_index\":0,"
            "\"content_index\":0,\"delta\":\"Think \"}");
  EXPECT_EQ(Str(At(f[6].json, "text")), "Think hard.");
  EXPECT_EQ(Str(At(At(At(At(f[8].json, "item"), "content"), 0), "text")), "Think hard.");
  EXPECT_EQ(Str(At(At(f[8].json, "item"), "status")), "completed");
  // The message item and its output_text part.
  EXPECT_EQ(json::Dump(At(f[9].json, "item")),
            "{\"id\":\"msg_abc_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"status\":\"in_progress\"}");
  EXPECT_EQ(Int(At(f[9].json, "output_index")), 1);
  EXPECT_EQ(json::Dump(At(f[10].json, "part")), "{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":[]}");
  EXPECT_EQ(Str(At(f[11].json, "delta")), "Hel");
  EXPECT_EQ(Str(At(f[11].json, "item_id")), "msg_abc_1");
  EXPECT_EQ(Str(At(f[13].json, "text")), "Hello \"you\"\n");
  // completed: output and usage.
  const json::Value& done = At(f[16].json, "response");
  EXPECT_EQ(Str(At(done, "status")), "completed");
  EXPECT_TRUE(At(done, "incomplete_details").is_null());
  EXPECT_TRUE(At(done, "error").is_null());
  ASSERT_EQ(At(done, "output").as_array().size(), 2u);
  EXPECT_EQ(json::Dump(At(done, "usage")),
            "{\"input_tokens\":50,\"input_tokens_details\":{\"cached_tokens\":32},\"output_tokens\":20,"
            "\"output_tokens_details\":{\"reasoning_tokens\":7},\"total_tokens\":70}");
}

TEST(ResponsesWriter, StreamTextThenTwoToolCalls) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kResponses, true), TextThenTwoTools()));
  ExpectWellFormed(f);
  EXPECT_EQ(Types(f), (std::vector<std::string>{
                          "response.created",
                          "response.in_progress",
                          "response.output_item.added",
                          "response.content_part.added",
                          "response.output_text.delta",
                          "response.output_text.done",
                          "response.content_part.done",
                          "response.output_item.done",
                          "response.output_item.added",  // get_weather
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.done",
                          "response.output_item.done",
                          "response.output_item.added",  // get_time
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.done",
                          "response.output_item.done",
                          "response.completed",
                      }));
  EXPECT_EQ(json::Dump(At(f[8].json, "item")),
            "{\"id\":\"fc_abc_1\",\"type\":\"function_call\",\"call_id\":\"call_a\",\"name\":\"get_weather\","
            "\"arguments\":\"\",\"status\":\"in_progress\"}");
  std::string args;
  for (int i = 9; i <= 11; ++i) {
    EXPECT_EQ(Keys(f[i].json), "type,sequence_number,item_id,output_index,delta");
    EXPECT_EQ(Str(At(f[i].json, "item_id")), "fc_abc_1");
    args += Str(At(f[i].json, "delta"));
  }
  EXPECT_EQ(args, "{\"city\": \"Paris\"}");
  EXPECT_EQ(Str(At(f[12].json, "arguments")), args);
  EXPECT_EQ(Str(At(f[12].json, "name")), "get_weather");
  EXPECT_EQ(Str(At(At(f[13].json, "item"), "arguments")), args);
  EXPECT_EQ(Int(At(f[14].json, "output_index")), 2);
  EXPECT_EQ(Str(At(f[17].json, "arguments")), "{\"tz\": \"UTC\"}");
  const json::Value& done = At(f[19].json, "response");
  EXPECT_EQ(Str(At(done, "status")), "completed");
  EXPECT_EQ(Str(At(At(At(done, "output"), 2), "call_id")), "call_b");
}

TEST(ResponsesWriter, MaxTokensIsIncomplete) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kResponses, true), MaxTokens()));
  ExpectWellFormed(f);
  const Frame& last = f.back();
  EXPECT_EQ(last.event, "response.incomplete");
  const json::Value& r = At(last.json, "response");
  EXPECT_EQ(Str(At(r, "status")), "incomplete");
  EXPECT_EQ(json::Dump(At(r, "incomplete_details")), "{\"reason\":\"max_output_tokens\"}");
  // The item cut short says so; the reasoning before it completed.
  EXPECT_EQ(Str(At(At(At(r, "output"), 0), "status")), "completed");
  EXPECT_EQ(Str(At(At(At(r, "output"), 1), "status")), "incomplete");
  EXPECT_EQ(Str(At(f[f.size() - 2].json, "type")), "response.output_item.done");
  EXPECT_EQ(Str(At(At(f[f.size() - 2].json, "item"), "status")), "incomplete");
}

TEST(ResponsesWriter, BodyEqualsTheStreamsFinalResponse) {
  for (const auto& events : {ReasoningThenText(), TextThenTwoTools(), MaxTokens(), Malformed()}) {
    std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kResponses, true), events));
    auto w = MakeResponseWriter(TestMeta(Api::kResponses, false));
    std::string body = Drive(*w, events);
    EXPECT_EQ(w->http_status(), 200);
    EXPECT_EQ(body, json::Dump(At(f.back().json, "response")));
    ParseBody(body);
  }
}

TEST(ResponsesWriter, MalformedCompletesAsText) {
  auto w = MakeResponseWriter(TestMeta(Api::kResponses, false));
  json::Value r = ParseBody(Drive(*w, Malformed()));
  EXPECT_EQ(Str(At(r, "status")), "completed");
  EXPECT_EQ(Str(At(At(At(At(At(r, "output"), 0), "content"), 0), "text")),
            "<\xEF\xBD\x9C" "DSML\xEF\xBD\x9Cinvoke name=\"x\">oops");
  EXPECT_TRUE(w->malformed());
}

TEST(ResponsesWriter, AlternatingKindsOpenNewItems) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kResponses, true),
                                        {Reasoning("a"), Content("b"), Reasoning("c"), Finish(FinishReason::kStop)}));
  ExpectWellFormed(f);
  const json::Value& out = At(At(f.back().json, "response"), "output");
  ASSERT_EQ(out.as_array().size(), 3u);
  EXPECT_EQ(Str(At(At(out, 2), "type")), "reasoning");
  EXPECT_EQ(Str(At(At(out, 2), "id")), "rs_abc_2");
}

TEST(ResponsesWriter, ErrorEndsWithFailed) {
  auto w = MakeResponseWriter(TestMeta(Api::kResponses, true));
  std::vector<Frame> f = SplitSse(Drive(*w, {Content("par"), Finish(FinishReason::kError, "boom")}));
  ExpectWellFormed(f);
  EXPECT_EQ(f.back().event, "response.failed");
  const json::Value& r = At(f.back().json, "response");
  EXPECT_EQ(Str(At(r, "status")), "failed");
  EXPECT_EQ(json::Dump(At(r, "error")), "{\"code\":\"server_error\",\"message\":\"boom\"}");
  EXPECT_EQ(Str(At(At(At(r, "output"), 0), "status")), "incomplete");

  std::vector<Frame> c = SplitSse(Drive(TestMeta(Api::kResponses, true), {Finish(FinishReason::kCancelled)}));
  EXPECT_EQ(Str(At(At(c.back().json, "response"), "status")), "cancelled");

  auto body_writer = MakeResponseWriter(TestMeta(Api::kResponses, false));
  json::Value body = ParseBody(Drive(*body_writer, {Content("x"), Finish(FinishReason::kError, "boom")}));
  EXPECT_EQ(body_writer->http_status(), 500);
  EXPECT_EQ(Str(At(At(body, "error"), "message")), "boom");
}

TEST(ResponsesWriter, EndWithoutFinishFails) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kResponses, true), {Content("cut")}));
  EXPECT_EQ(f.back().event, "response.failed");
}

TEST(ResponsesWriter, EchoesRequestSettings) {
  Request req;
  req.api = Api::kResponses;
  req.model = "m";
  req.stream = true;
  req.sampling.temperature = 0.5;
  req.sampling.max_tokens = 64;
  req.parallel_tool_calls = false;
  req.thinking.effort = "high";
  req.tool_choice.mode = ToolChoice::Mode::kRequired;
  Tool t;
  t.name = "f";
  t.parameters = json::Value::MakeObject({{"type", json::Value::String("object")}});
  req.tools.push_back(t);
  req.metadata = json::Value::MakeObject({{"k", json::Value::String("v")}});
  ResponseMeta meta = MakeResponseMeta(req, 5);
  EXPECT_TRUE(meta.id.starts_with("resp_"));
  std::vector<Frame> f = SplitSse(Drive(meta, {Content("x"), Finish(FinishReason::kStop)}));
  const json::Value& r = At(f[0].json, "response");
  EXPECT_EQ(Str(At(r, "temperature")), "0.5");
  EXPECT_EQ(Int(At(r, "max_output_tokens")), 64);
  EXPECT_FALSE(At(r, "parallel_tool_calls").as_bool());
  EXPECT_EQ(Str(At(At(r, "reasoning"), "effort")), "high");
  EXPECT_EQ(Str(At(r, "tool_choice")), "required");
  EXPECT_EQ(Str(At(At(At(r, "tools"), 0), "name")), "f");
  EXPECT_EQ(Str(At(At(r, "metadata"), "k")), "v");
  EXPECT_TRUE(At(r, "top_p").is_null());
}

// output_text.logprobs: the delta carries its tokens, the done event and the part all of them;
// reasoning tokens are not reported (reasoning_text has no logprobs in this API).
TEST(ResponsesWriter, OutputTextLogprobs) {
  auto lp = [](std::string bytes, float v) {
    return TokenLogprob{.bytes = bytes, .logprob = v, .top = {TopLogprob{.bytes = bytes, .logprob = v}}};
  };
  std::vector<Event> events = ReasoningThenText();
  events[0].logprobs = {lp("Think", -1.0f)};
  events[2].logprobs = {lp("Hel", -0.5f)};
  events[3].logprobs = {lp("lo", -0.25f)};
  ResponseMeta meta = TestMeta(Api::kResponses, true);
  meta.top_logprobs = 1;
  std::vector<Frame> f = SplitSse(Drive(meta, events));
  ExpectWellFormed(f);
  const std::string hel =
      "{\"token\":\"Hel\",\"logprob\":-0.5,\"bytes\":[72,101,108],\"top_logprobs\":[{\"token\":\"Hel\",\"logprob\":-0.5,"
      "\"bytes\":[72,101,108]}]}";
  const std::string lo =
      "{\"token\":\"lo\",\"logprob\":-0.25,\"bytes\":[108,111],\"top_logprobs\":[{\"token\":\"lo\",\"logprob\":-0.25,"
      "\"bytes\":[108,111]}]}";
  int deltas = 0, done = 0;
  for (const Frame& fr : f) {
    if (fr.event == "response.reasoning_text.delta") {
      EXPECT_EQ(fr.json.Find("logprobs"), nullptr);
    }
    if (fr.event == "response.output_text.delta") {
      EXPECT_NE(fr.data.find("\"logprobs\":[" + (deltas++ == 0 ? hel : lo) + "]"), std::string::npos) << fr.data;
    }
    if (fr.event == "response.output_text.done") {
      ++done;
      EXPECT_NE(fr.data.find("\"logprobs\":[" + hel + "," + lo + "]"), std::string::npos) << fr.data;
    }
  }
  EXPECT_EQ(deltas, 2);
  EXPECT_EQ(done, 1);
  meta.stream = false;
  std::string body = Drive(meta, events);
  EXPECT_NE(body.find("\"annotations\":[],\"logprobs\":[" + hel + "," + lo + "]}"), std::string::npos) << body;
  // Not asked for: [] as before, whatever the events carry.
  meta.top_logprobs = -1;
  std::string plain = Drive(meta, events);
  EXPECT_NE(plain.find("\"annotations\":[],\"logprobs\":[]}"), std::string::npos);
  EXPECT_EQ(plain.find("\"token\""), std::string::npos);
}

}  // namespace
}  // namespace ladle::frontend
