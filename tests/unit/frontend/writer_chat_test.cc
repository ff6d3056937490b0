// Chat Completions writer: chunk order and shapes, the non-streaming body, n > 1, failures.
#include <gtest/gtest.h>

#include <limits>

#include "frontend/writer_test_util.h"

namespace ladle::frontend {
namespace {

using namespace writer_test;  // NOLINT: test helpers

// The delta of a chunk frame (choice 0 unless given).
const json::Value& Delta(const Frame& f) { return At(At(At(f.json, "choices"), 0), "delta"); }
const json::Value& FinishOf(const Frame& f) { return At(At(At(f.json, "choices"), 0), "finish_reason"); }

TEST(ChatWriter, StreamReasoningThenTextExactChunks) {
  std::string bytes = Drive(TestMeta(Api::kChat, true), ReasoningThenText());
  std::vector<Frame> f = SplitSse(bytes);
  ASSERT_EQ(f.size(), 8u);  // role, 2 reasoning, 2 content, finish, usage, [DONE]
  // The first chunk, byte for byte: the envelope and the role.
  EXPECT_EQ(bytes.substr(0, bytes.find("\n\n") + 2),
            "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
            "\"model\":\"deepseek-v3.2\",\"system_fingerprint\":\"fp_test\",\"choices\":[{\"index\":0,"
            "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
  for (size_t i = 0; i + 1 < f.size(); ++i) {
    EXPECT_EQ(f[i].event, "");
    EXPECT_EQ(Keys(f[i].json), "id,object,created,model,system_fingerprint,choices" + std::string(i == 6 ? ",usage" : ""));
    EXPECT_EQ(Str(At(f[i].json, "id")), "chatcmpl-abc");
  }
  EXPECT_EQ(Keys(Delta(f[1])), "reasoning_content");
  EXPECT_EQ(Str(At(Delta(f[1]), "reasoning_content")), "Think ");
  EXPECT_EQ(Str(At(Delta(f[2]), "reasoning_content")), "hard.");
  EXPECT_EQ(Keys(Delta(f[3])), "content");
  EXPECT_EQ(Str(At(Delta(f[3]), "content")), "Hel");
  EXPECT_EQ(Str(At(Delta(f[4]), "content")), "lo \"you\"\n");
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(FinishOf(f[i]).is_null());
  EXPECT_EQ(Keys(Delta(f[5])), "");
  EXPECT_EQ(Str(FinishOf(f[5])), "stop");
  // Usage: its own chunk with no choices, cached and reasoning details included.
  EXPECT_TRUE(At(f[6].json, "choices").as_array().empty());
  EXPECT_EQ(json::Dump(At(f[6].json, "usage")),
            "{\"prompt_tokens\":50,\"completion_tokens\":20,\"total_tokens\":70,\"prompt_tokens_details\":"
            "{\"cached_tokens\":32},\"completion_tokens_details\":{\"reasoning_tokens\":7}}");
  EXPECT_EQ(f[7].data, "[DONE]");
}

TEST(ChatWriter, ReasoningFieldIsConfigurable) {
  ResponseMeta meta = TestMeta(Api::kChat, true);
  meta.reasoning_field = "reasoning";
  std::vector<Frame> f = SplitSse(Drive(meta, ReasoningThenText()));
  EXPECT_EQ(Keys(Delta(f[1])), "reasoning");
  meta.stream = false;
  json::Value body = ParseBody(Drive(meta, ReasoningThenText()));
  EXPECT_EQ(Str(At(At(At(At(body, "choices"), 0), "message"), "reasoning")), "Think hard.");
  EXPECT_EQ(At(At(At(body, "choices"), 0), "message").Find("reasoning_content"), nullptr);
}

TEST(ChatWriter, StreamToolCallsFirstDeltaCarriesIdTypeName) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kChat, true), TextThenTwoTools()));
  // role, content, call a start + 3 args, call b start + 2 args, finish, usage, [DONE]
  ASSERT_EQ(f.size(), 12u);
  const json::Value& start_a = At(At(Delta(f[2]), "tool_calls"), 0);
  EXPECT_EQ(json::Dump(start_a),
            "{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}");
  std::string args_a;
  for (int i = 3; i <= 5; ++i) {
    const json::Value& tc = At(At(Delta(f[i]), "tool_calls"), 0);
    EXPECT_EQ(Keys(tc), "index,function");
    EXPECT_EQ(Int(At(tc, "index")), 0);
    EXPECT_EQ(Keys(At(tc, "function")), "arguments");
    args_a += Str(At(At(tc, "function"), "arguments"));
  }
  EXPECT_EQ(args_a, "{\"city\": \"Paris\"}");
  const json::Value& start_b = At(At(Delta(f[6]), "tool_calls"), 0);
  EXPECT_EQ(Int(At(start_b, "index")), 1);
  EXPECT_EQ(Str(At(start_b, "id")), "call_b");
  EXPECT_EQ(Str(At(At(start_b, "function"), "name")), "get_time");
  std::string args_b;
  for (int i = 7; i <= 8; ++i) args_b += Str(At(At(At(At(Delta(f[i]), "tool_calls"), 0), "function"), "arguments"));
  EXPECT_EQ(args_b, "{\"tz\": \"UTC\"}");
  EXPECT_EQ(Str(FinishOf(f[9])), "tool_calls");
}

TEST(ChatWriter, BodyWithToolCalls) {
  auto w = MakeResponseWriter(TestMeta(Api::kChat, false));
  std::string body = Drive(*w, TextThenTwoTools());
  EXPECT_EQ(w->http_status(), 200);
  EXPECT_EQ(w->content_type(), "application/json");
  EXPECT_EQ(body,
            "{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"deepseek-v3.2\","
            "\"system_fingerprint\":\"fp_test\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
            "\"content\":\"Checking.\",\"tool_calls\":[{\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":"
            "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}},{\"id\":\"call_b\",\"type\":\"function\","
            "\"function\":{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\": \\\"UTC\\\"}\"}}]},\"logprobs\":null,"
            "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":20,"
            "\"total_tokens\":70,\"prompt_tokens_details\":{\"cached_tokens\":32},\"completion_tokens_details\":"
            "{\"reasoning_tokens\":7}}}");
  ParseBody(body);
}

TEST(ChatWriter, BodyContentIsNullWhenOnlyToolCalls) {
  json::Value body = ParseBody(Drive(TestMeta(Api::kChat, false),
                                   {Reasoning("r"), ToolStart(0, "call_x", "f"), ToolArgs(0, "{}"), ToolEnd(0),
                                    Finish(FinishReason::kToolCalls)}));
  const json::Value& msg = At(At(At(body, "choices"), 0), "message");
  EXPECT_TRUE(At(msg, "content").is_null());
  EXPECT_EQ(Str(At(msg, "reasoning_content")), "r");
  EXPECT_EQ(At(msg, "tool_calls").as_array().size(), 1u);
}

TEST(ChatWriter, BodyPlainTextHasNoToolCallsOrReasoning) {
  json::Value body = ParseBody(Drive(TestMeta(Api::kChat, false), {Content("hi"), Finish(FinishReason::kStop)}));
  EXPECT_EQ(Keys(At(At(At(body, "choices"), 0), "message")), "role,content");
  EXPECT_EQ(Str(At(At(At(body, "choices"), 0), "finish_reason")), "stop");
}

TEST(ChatWriter, MaxTokensFinishesWithLength) {
  std::vector<Frame> f = SplitSse(Drive(TestMeta(Api::kChat, true), MaxTokens()));
  EXPECT_EQ(Str(FinishOf(f[3])), "length");
  json::Value body = ParseBody(Drive(TestMeta(Api::kChat, false), MaxTokens()));
  EXPECT_EQ(Str(At(At(At(body, "choices"), 0), "finish_reason")), "length");
  EXPECT_EQ(Str(At(At(At(At(body, "choices"), 0), "message"), "content")), "The answer");
}

TEST(ChatWriter, MalformedIsPlainContentWithStop) {
  auto w = MakeResponseWriter(TestMeta(Api::kChat, true));
  std::vector<Frame> f = SplitSse(Drive(*w, Malformed()));
  EXPECT_EQ(Str(At(Delta(f[1]), "content")), "<\xEF\xBD\x9C" "DSML\xEF\xBD\x9Cinvoke name=\"x\">oops");
  EXPECT_EQ(Str(FinishOf(f[2])), "stop");
  EXPECT_TRUE(w->malformed());
}

TEST(ChatWriter, NoUsageChunkWithoutIncludeUsage) {
  ResponseMeta meta = TestMeta(Api::kChat, true);
  meta.include_usage = false;
  std::vector<Frame> f = SplitSse(Drive(meta, ReasoningThenText()));
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(f[6].data, "[DONE]");
  EXPECT_EQ(f[5].json.Find("usage"), nullptr);
}

TEST(ChatWriter, SystemFingerprintNullWhenUnset) {
  ResponseMeta meta = TestMeta(Api::kChat, true);
  meta.system_fingerprint.clear();
  std::vector<Frame> f = SplitSse(Drive(meta, ReasoningThenText()));
  EXPECT_TRUE(At(f[0].json, "system_fingerprint").is_null());
}

TEST(ChatWriter, TwoChoicesInterleave) {
  ResponseMeta meta = TestMeta(Api::kChat, true);
  meta.n = 2;
  auto w = MakeResponseWriter(meta);
  std::string bytes = w->Begin();
  bytes += w->OnEvent(Content("A"), 0);
  bytes += w->OnEvent(ToolStart(0, "", "f"), 1);  // no id: derived from the response id
  bytes += w->OnEvent(ToolArgs(0, "{}"), 1);
  bytes += w->OnEvent(Finish(FinishReason::kStop), 0);
  bytes += w->OnEvent(Finish(FinishReason::kToolCalls), 1);
  bytes += w->End(TestUsage());
  std::vector<Frame> f = SplitSse(bytes);
  ASSERT_EQ(f.size(), 9u);  // 2 roles, content, start, args, 2 finishes, usage, [DONE]
  auto index = [&](size_t i) { return Int(At(At(At(f[i].json, "choices"), 0), "index")); };
  EXPECT_EQ(index(0), 0);
  EXPECT_EQ(index(1), 1);  // a role chunk per choice
  EXPECT_EQ(index(2), 0);
  EXPECT_EQ(index(3), 1);
  EXPECT_EQ(Str(At(At(At(Delta(f[3]), "tool_calls"), 0), "id")), "call_abc_1_0");
  EXPECT_EQ(Str(FinishOf(f[5])), "stop");
  EXPECT_EQ(index(6), 1);
  EXPECT_EQ(Str(At(At(At(f[6].json, "choices"), 0), "finish_reason")), "tool_calls");
  EXPECT_TRUE(At(f[7].json, "choices").as_array().empty());  // the one usage chunk
  EXPECT_EQ(f[8].data, "[DONE]");

  meta.stream = false;
  auto body_writer = MakeResponseWriter(meta);
  body_writer->OnEvent(Content("A"), 0);
  body_writer->OnEvent(Content("B"), 1);
  body_writer->OnEvent(Finish(FinishReason::kLength), 1);
  body_writer->OnEvent(Finish(FinishReason::kStop), 0);
  json::Value body = ParseBody(body_writer->End(TestUsage()));
  ASSERT_EQ(At(body, "choices").as_array().size(), 2u);
  EXPECT_EQ(Str(At(At(At(At(body, "choices"), 1), "message"), "content")), "B");
  EXPECT_EQ(Str(At(At(At(body, "choices"), 1), "finish_reason")), "length");
  EXPECT_EQ(Int(At(At(At(body, "choices"), 1), "index")), 1);
}

TEST(ChatWriter, ErrorMidStreamSendsErrorFrameThenDone) {
  auto w = MakeResponseWriter(TestMeta(Api::kChat, true));
  std::vector<Frame> f = SplitSse(Drive(*w, {Content("par"), Finish(FinishReason::kError, "boom"), Content("ignored")}));
  ASSERT_EQ(f.size(), 4u);  // role, content, error, [DONE] — no usage after an error
  EXPECT_EQ(f[2].data, "{\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
  EXPECT_EQ(f[3].data, "[DONE]");
  EXPECT_EQ(w->http_status(), 200);
}

TEST(ChatWriter, FailedBodyIsAnErrorWithStatus) {
  auto w = MakeResponseWriter(TestMeta(Api::kChat, false));
  json::Value body = ParseBody(Drive(*w, {Content("x"), Finish(FinishReason::kError)}));
  EXPECT_EQ(w->http_status(), 500);
  EXPECT_EQ(Str(At(At(body, "error"), "type")), "server_error");
  EXPECT_FALSE(Str(At(At(body, "error"), "message")).empty());

  auto cancelled = MakeResponseWriter(TestMeta(Api::kChat, false));
  Drive(*cancelled, {Finish(FinishReason::kCancelled)});
  EXPECT_EQ(cancelled->http_status(), 499);
}

TEST(ChatWriter, EndWithoutFinishIsAnError) {
  auto w = MakeResponseWriter(TestMeta(Api::kChat, true));
  std::vector<Frame> f = SplitSse(Drive(*w, {Content("cut")}));
  ASSERT_EQ(f.size(), 4u);
  EXPECT_NE(f[2].json.Find("error"), nullptr);
}

TEST(ChatWriter, ArgumentsWithoutStartStartANamelessCall) {
  json::Value body =
      ParseBody(Drive(TestMeta(Api::kChat, false), {ToolArgs(3, "{\"a\":1}"), Finish(FinishReason::kToolCalls)}));
  const json::Value& call = At(At(At(At(At(body, "choices"), 0), "message"), "tool_calls"), 0);
  EXPECT_EQ(Str(At(At(call, "function"), "name")), "");
  EXPECT_EQ(Str(At(At(call, "function"), "arguments")), "{\"a\":1}");
  EXPECT_FALSE(Str(At(call, "id")).empty());
}

TEST(ChatWriter, ToolCallsFinishOnlyForAParsedCall) {
  // kToolCalls without any call (the parser never sends it) says "stop".
  json::Value a = ParseBody(Drive(TestMeta(Api::kChat, false), {Content("x"), Finish(FinishReason::kToolCalls)}));
  EXPECT_EQ(Str(At(At(At(a, "choices"), 0), "finish_reason")), "stop");
  // A call the parser had to close early (malformed) ends with kStop: the call is reported
  // as streamed, but the finish does not ask the client to run it.
  json::Value b = ParseBody(Drive(TestMeta(Api::kChat, false), {ToolStart(0, "c", "f"), ToolArgs(0, "{\"a\":"), ToolEnd(0),
                                                               Finish(FinishReason::kStop, "", true)}));
  EXPECT_EQ(Str(At(At(At(b, "choices"), 0), "finish_reason")), "stop");
  EXPECT_EQ(At(At(At(At(b, "choices"), 0), "message"), "tool_calls").as_array().size(), 1u);
}

// Logprobs. Values are exact in binary so their shortest form is predictable.
TokenLogprob Lp(std::string bytes, float logprob, std::vector<TopLogprob> top = {}) {
  return TokenLogprob{.bytes = std::move(bytes), .logprob = logprob, .top = std::move(top)};
}
Event WithLogprobs(Event e, std::vector<TokenLogprob> lps) {
  e.logprobs = std::move(lps);
  return e;
}
// Reasoning "Hm" (one token), content "Hi" (two tokens, k = 1) and "é" (two partial tokens).
std::vector<Event> LogprobEvents() {
  return {WithLogprobs(Reasoning("Hm"), {Lp("Hm", -0.5f, {{"Hm", -0.5f}})}),
          WithLogprobs(Content("Hi"), {Lp("H", -0.25f, {{"H", -0.25f}}), Lp("i", 0.0f, {{"i", 0.0f}})}),
          WithLogprobs(Content("\xC3\xA9"), {Lp("\xC3", -1.5f, {{"\xC3", -1.5f}}),
                                             Lp("\xA9", -std::numeric_limits<float>::infinity(), {{"\xA9", -2.0f}})}),
          Finish(FinishReason::kStop)};
}

TEST(ChatWriter, StreamLogprobsRideOnTheirChunks) {
  ResponseMeta meta = TestMeta(Api::kChat, true);
  meta.top_logprobs = 1;
  std::string bytes = Drive(meta, LogprobEvents());
  std::vector<Frame> f = SplitSse(bytes);
  ASSERT_EQ(f.size(), 7u);  // role, reasoning, 2 content, finish, usage, [DONE]
  const std::string envelope =
      "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
      "\"model\":\"deepseek-v3.2\",\"system_fingerprint\":\"fp_test\",\"choices\":[{\"index\":0,";
  std::vector<std::string> chunks;
  for (size_t pos = 0; pos < bytes.size();) {
    size_t end = bytes.find("\n\n", pos) + 2;
    chunks.push_back(bytes.substr(pos, end - pos));
    pos = end;
  }
  EXPECT_EQ(chunks[0], envelope + "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                                  "\"finish_reason\":null}]}\n\n");
  EXPECT_EQ(chunks[1], envelope + "\"delta\":{\"reasoning_content\":\"Hm\"},\"logprobs\":{\"content\":[{\"token\":"
                                  "\"Hm\",\"logprob\":-0.5,\"bytes\":[72,109],\"top_logprobs\":[{\"token\":\"Hm\","
                                  "\"logprob\":-0.5,\"bytes\":[72,109]}]}],\"refusal\":null},\"finish_reason\":null}]}\n\n");
  EXPECT_EQ(chunks[2], envelope + "\"delta\":{\"content\":\"Hi\"},\"logprobs\":{\"content\":[{\"token\":\"H\","
                                  "\"logprob\":-0.25,\"bytes\":[72],\"top_logprobs\":[{\"token\":\"H\",\"logprob\":-0.25,"
                                  "\"bytes\":[72]}]},{\"token\":\"i\",\"logprob\":0,\"bytes\":[105],\"top_logprobs\":"
                                  "[{\"token\":\"i\",\"logprob\":0,\"bytes\":[105]}]}],\"refusal\":null},"
                                  "\"finish_reason\":null}]}\n\n");
  // A partial code point: "bytes:" and \xNN in `token`, the exact bytes in `bytes`; -inf
  // prints as -9999.0.
  EXPECT_EQ(chunks[3], envelope + "\"delta\":{\"content\":\"\xC3\xA9\"},\"logprobs\":{\"content\":[{\"token\":"
                                  "\"bytes:\\\\xc3\",\"logprob\":-1.5,\"bytes\":[195],\"top_logprobs\":[{\"token\":"
                                  "\"bytes:\\\\xc3\",\"logprob\":-1.5,\"bytes\":[195]}]},{\"token\":\"bytes:\\\\xa9\","
                                  "\"logprob\":-9999.0,\"bytes\":[169],\"top_logprobs\":[{\"token\":\"bytes:\\\\xa9\","
                                  "\"logprob\":-2,\"bytes\":[169]}]}],\"refusal\":null},\"finish_reason\":null}]}\n\n");
  EXPECT_EQ(chunks[4], envelope + "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n");
}

TEST(ChatWriter, BodyLogprobsListEveryReportedToken) {
  ResponseMeta meta = TestMeta(Api::kChat, false);
  meta.top_logprobs = 0;
  std::vector<Event> events = LogprobEvents();
  for (Event& e : events) {
    for (TokenLogprob& t : e.logprobs) t.top.clear();  // k = 0: the engine sends no alternatives
  }
  std::string body = Drive(meta, events);
  EXPECT_NE(body.find("\"message\":{\"role\":\"assistant\",\"content\":\"Hi\xC3\xA9\",\"reasoning_content\":\"Hm\"},"
                      "\"logprobs\":{\"content\":[{\"token\":\"Hm\",\"logprob\":-0.5,\"bytes\":[72,109],"
                      "\"top_logprobs\":[]},{\"token\":\"H\",\"logprob\":-0.25,\"bytes\":[72],\"top_logprobs\":[]},"
                      "{\"token\":\"i\",\"logprob\":0,\"bytes\":[105],\"top_logprobs\":[]},{\"token\":\"bytes:\\\\xc3\","
                      "\"logprob\":-1.5,\"bytes\":[195],\"top_logprobs\":[]},{\"token\":\"bytes:\\\\xa9\",\"logprob\":"
                      "-9999.0,\"bytes\":[169],\"top_logprobs\":[]}],\"refusal\":null},\"finish_reason\":\"stop\"}"),
            std::string::npos)
      << body;
  ParseBody(body);
  // A turn with no text still says logprobs were asked for.
  json::Value calls = ParseBody(Drive(meta, TextThenTwoTools()));
  EXPECT_EQ(json::Dump(At(At(At(calls, "choices"), 0), "logprobs")), "{\"content\":[],\"refusal\":null}");
}

TEST(ChatWriter, WithoutLogprobsTheBytesAreUnchanged) {
  // Logprobs on the events but not asked for (meta.top_logprobs -1): every byte as before.
  for (bool stream : {true, false}) {
    std::vector<Event> plain = LogprobEvents();
    for (Event& e : plain) e.logprobs.clear();
    std::string with = Drive(TestMeta(Api::kChat, stream), LogprobEvents());
    EXPECT_EQ(with, Drive(TestMeta(Api::kChat, stream), plain));
    EXPECT_EQ(with.find("\"logprobs\":{"), std::string::npos);
    EXPECT_NE(with.find("\"logprobs\":null"), std::string::npos);
  }
}

TEST(ChatWriter, LogprobTokenTextKeepsValidPartsAndEscapesTheRest) {
  ResponseMeta meta = TestMeta(Api::kChat, false);
  meta.top_logprobs = 0;
  auto w = MakeResponseWriter(meta);
  std::string body = w->Begin();
  // " é" then a lone lead byte, a stray continuation and an overlong C0: each bad byte escaped.
  body += w->OnEvent(WithLogprobs(Content("x"), {Lp(" \xC3\xA9\xE2\x80", -1.0f), Lp("\xC0\x80", -1.0f)}));
  body += w->OnEvent(Finish(FinishReason::kStop));
  body += w->End(TestUsage());
  json::Value lp = At(At(At(ParseBody(body), "choices"), 0), "logprobs");
  EXPECT_EQ(Str(At(At(At(lp, "content"), 0), "token")), "bytes: \xC3\xA9\\xe2\\x80");
  EXPECT_EQ(json::Dump(At(At(At(lp, "content"), 0), "bytes")), "[32,195,169,226,128]");
  EXPECT_EQ(Str(At(At(At(lp, "content"), 1), "token")), "bytes:\\xc0\\x80");
}

TEST(ChatWriter, TwoChoicesEachGetTheirOwnLogprobs) {
  ResponseMeta meta = TestMeta(Api::kChat, false);
  meta.n = 2;
  meta.top_logprobs = 0;
  auto w = MakeResponseWriter(meta);
  std::string body = w->Begin();
  body += w->OnEvent(WithLogprobs(Content("a"), {Lp("a", -1.0f)}), 0);
  body += w->OnEvent(WithLogprobs(Content("b"), {Lp("b", -2.0f)}), 1);
  body += w->OnEvent(Finish(FinishReason::kStop), 0);
  body += w->OnEvent(Finish(FinishReason::kStop), 1);
  body += w->End(TestUsage());
  json::Value v = ParseBody(body);
  EXPECT_EQ(json::Dump(At(At(At(v, "choices"), 0), "logprobs")),
            "{\"content\":[{\"token\":\"a\",\"logprob\":-1,\"bytes\":[97],\"top_logprobs\":[]}],\"refusal\":null}");
  EXPECT_EQ(json::Dump(At(At(At(v, "choices"), 1), "logprobs")),
            "{\"content\":[{\"token\":\"b\",\"logprob\":-2,\"bytes\":[98],\"top_logprobs\":[]}],\"refusal\":null}");
}

TEST(ResponseMetaTest, NewIdsHaveTheApiPrefix) {
  EXPECT_TRUE(NewResponseId(Api::kChat).starts_with("chatcmpl-"));
  EXPECT_TRUE(NewResponseId(Api::kResponses).starts_with("resp_"));
  EXPECT_TRUE(NewResponseId(Api::kMessages).starts_with("msg_"));
  EXPECT_EQ(NewResponseId(Api::kMessages).size(), 4u + 24u);
  EXPECT_NE(NewResponseId(Api::kChat), NewResponseId(Api::kChat));
}

TEST(ResponseMetaTest, FromRequest) {
  Request req;
  req.api = Api::kChat;
  req.model = "m";
  req.stream = true;
  req.include_usage = true;
  req.sampling.n = 3;
  ResponseMeta m = MakeResponseMeta(req, 123);
  EXPECT_TRUE(m.id.starts_with("chatcmpl-"));
  EXPECT_EQ(m.model, "m");
  EXPECT_EQ(m.created, 123);
  EXPECT_TRUE(m.stream);
  EXPECT_TRUE(m.include_usage);
  EXPECT_EQ(m.n, 3);
  EXPECT_EQ(m.top_logprobs, -1);
  req.sampling.logprobs = true;
  EXPECT_EQ(MakeResponseMeta(req, 123).top_logprobs, 0);
  req.sampling.top_logprobs = 5;
  EXPECT_EQ(MakeResponseMeta(req, 123).top_logprobs, 5);
}

}  // namespace
}  // namespace ladle::frontend
