// Logprobs end to end: Generation places the engine's per-token values on the events that
// deliver each token's text (through the parser and the stop filter), and the server returns
// them in Chat's `logprobs.content` and Responses' output_text.logprobs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "generation.h"
#include "ladle/frontend/model_version.h"
#include "server_fixture.h"
#include "test_data.h"

namespace ladle::server::testing {
namespace {

using frontend::ModelVersion;

class GenerationLogprobs : public ::testing::Test {
 protected:
  void SetUp() override {
    LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
    auto base = tokenizer::Tokenizer::FromFile(ladle::testing::TokenizerPath());
    ASSERT_TRUE(base.ok());
    auto tok = frontend::TokenizerForVersion(*base, ModelVersion::kV32);
    ASSERT_TRUE(tok.ok());
    tok_.emplace(std::move(tok).value());
  }

  // Runs `ids` through a non-streaming Chat Generation, one Output per `chunk` tokens, token
  // i with logprob -(i + 1) / 4 and itself plus id 0 as its alternatives.
  json::Value Run(const std::vector<tokenizer::TokenId>& ids, bool reasoning, std::vector<std::string> stops,
                  int top_logprobs, size_t chunk = 3) {
    frontend::ResponseMeta meta;
    meta.api = frontend::Api::kChat;
    meta.id = "chatcmpl-x";
    meta.top_logprobs = top_logprobs;
    auto g = Generation::Create(ModelVersion::kV32, *tok_, reasoning, meta, stops, 5);
    EXPECT_TRUE(g.ok());
    std::string bytes;
    for (size_t i = 0; i < ids.size(); i += chunk) {
      engine::Output out;
      for (size_t j = i; j < std::min(ids.size(), i + chunk); ++j) {
        engine::TokenEvent t;
        t.token = ids[j];
        t.logprob = -0.25f * static_cast<float>(j + 1);
        t.top_logprobs = {{ids[j], t.logprob}, {0, t.logprob - 1.0f}};
        out.tokens.push_back(t);
      }
      out.finished = i + chunk >= ids.size();
      out.finish = engine::FinishKind::kEos;
      (*g)->Consume(out, &bytes);
    }
    EXPECT_TRUE((*g)->done());
    return ParseJson(bytes);
  }

  std::vector<tokenizer::TokenId> Encode(std::string_view s) const { return tok_->EncodePlain(s); }
  std::string Piece(tokenizer::TokenId id) const { return *tok_->Decode(std::span(&id, 1)); }

  std::optional<tokenizer::Tokenizer> tok_;
};

const json::Value& Choice(const json::Value& body) { return body.Find("choices")->as_array()[0]; }

// The tokens of logprobs.content joined, and their logprobs.
std::string JoinedTokens(const json::Value& content, std::vector<double>* values = nullptr) {
  std::string s;
  for (const auto& t : content.as_array()) {
    for (const auto& b : t.Find("bytes")->as_array()) s.push_back(static_cast<char>(*b.as_int64()));
    if (values) values->push_back(t.Find("logprob")->as_double());
  }
  return s;
}

TEST_F(GenerationLogprobs, ContentTokensInOrderWithTheEngineValues) {
  auto ids = Encode("Hello, world! Caf\xC3\xA9 au lait.");
  json::Value body = Run(ids, false, {}, 1);
  const json::Value& content = *Choice(body).Find("logprobs")->Find("content");
  std::vector<double> values;
  EXPECT_EQ(JoinedTokens(content, &values), "Hello, world! Caf\xC3\xA9 au lait.");
  ASSERT_EQ(values.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(values[i], -0.25 * static_cast<double>(i + 1));
    const json::Value& top = *content.as_array()[i].Find("top_logprobs");
    ASSERT_EQ(top.as_array().size(), 1u);  // k = 1 of the two the engine sent
    EXPECT_EQ(top.as_array()[0].Find("logprob")->as_double(), values[i]);
    EXPECT_EQ(top.as_array()[0].Find("token")->as_string(), content.as_array()[i].Find("token")->as_string());
  }
  EXPECT_EQ(Choice(body).Find("message")->Find("content")->as_string(), "Hello, world! Caf\xC3\xA9 au lait.");
}

TEST_F(GenerationLogprobs, TopZeroGivesEmptyAlternatives) {
  json::Value body = Run(Encode("Hi there"), false, {}, 0);
  for (const auto& t : Choice(body).Find("logprobs")->Find("content")->as_array()) {
    EXPECT_TRUE(t.Find("top_logprobs")->as_array().empty());
  }
}

TEST_F(GenerationLogprobs, ChunkingDoesNotChangeTheResult) {
  auto ids = Encode("One two three four five six seven.");
  EXPECT_EQ(json::Dump(Run(ids, false, {}, 1, 1)), json::Dump(Run(ids, false, {}, 1, 100)));
}

TEST_F(GenerationLogprobs, StopStringDropsTheTokensItCut) {
  auto ids = Encode("Alpha beta gamma delta epsilon");
  json::Value body = Run(ids, false, {" gamma"}, 0);
  EXPECT_EQ(Choice(body).Find("message")->Find("content")->as_string(), "Alpha beta");
  const json::Value& content = *Choice(body).Find("logprobs")->Find("content");
  // Exactly the tokens whose text starts before the cut.
  std::string joined = JoinedTokens(content);
  EXPECT_TRUE(joined.starts_with("Alpha beta")) << joined;
  EXPECT_LT(joined.size(), std::string("Alpha beta gamma").size()) << joined;
}

TEST_F(GenerationLogprobs, ReasoningTokensComeFirstAndMarkersAreNotReported) {
  const auto& special = frontend::SpecialTokensFor(ModelVersion::kV32);
  ASSERT_TRUE(special.end_think.has_value());
  std::vector<tokenizer::TokenId> ids = Encode("Let me think.");
  const size_t reasoning = ids.size();
  ids.push_back(*special.end_think);
  for (auto id : Encode("The answer.")) ids.push_back(id);
  ids.push_back(special.eos);
  json::Value body = Run(ids, true, {}, 0);
  const json::Value& content = *Choice(body).Find("logprobs")->Find("content");
  std::vector<double> values;
  // As vLLM: reasoning tokens are reported too, in generation order; </think> and EOS show no
  // text and are not.
  EXPECT_EQ(JoinedTokens(content, &values), "Let me think.The answer.");
  ASSERT_EQ(values.size(), ids.size() - 2);
  EXPECT_EQ(values[reasoning], -0.25 * static_cast<double>(reasoning + 2));  // after </think>
}

// A blank line before a DSML tool call (models write one; a forced call's grammar allows it)
// is no answer: the message has no content, the call is intact, and the blank line's tokens
// ride on no event. Whitespace that is the whole answer, or leads real text, is kept.
TEST_F(GenerationLogprobs, WhitespaceBeforeAToolCallIsNotContent) {
  const std::string call =
      "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜function_calls>";
  const auto& special = frontend::SpecialTokensFor(ModelVersion::kV32);
  for (size_t chunk : {1, 3, 100}) {
    std::vector<tokenizer::TokenId> ids = Encode("\n\n");
    for (auto id : tok_->EncodeTrusted(call)) ids.push_back(id);
    ids.push_back(special.eos);
    json::Value body = Run(ids, false, {}, 0, chunk);
    const json::Value& msg = *Choice(body).Find("message");
    const json::Value* content = msg.Find("content");
    EXPECT_TRUE(content == nullptr || content->is_null() || content->as_string().empty())
        << "chunk " << chunk << ": " << json::Dump(body);
    const json::Value* calls = msg.Find("tool_calls");
    ASSERT_TRUE(calls && calls->is_array()) << json::Dump(body);
    ASSERT_EQ(calls->as_array().size(), 1u);
    EXPECT_EQ(calls->as_array()[0].Find("function")->Find("name")->as_string(), "get_weather");
    EXPECT_EQ(Choice(body).Find("finish_reason")->as_string(), "tool_calls");
    EXPECT_TRUE(Choice(body).Find("logprobs")->Find("content")->as_array().empty()) << json::Dump(body);
  }
  // Text before the call keeps its whitespace; a whitespace-only answer is the answer.
  std::vector<tokenizer::TokenId> ids = Encode("\n\nLet me check.\n\n");
  for (auto id : tok_->EncodeTrusted(call)) ids.push_back(id);
  ids.push_back(special.eos);
  EXPECT_EQ(Choice(Run(ids, false, {}, 0)).Find("message")->Find("content")->as_string(), "\n\nLet me check.\n\n");
  ids = Encode("\n\n");
  ids.push_back(special.eos);
  json::Value ws = Run(ids, false, {}, 0);
  EXPECT_EQ(Choice(ws).Find("message")->Find("content")->as_string(), "\n\n");
  EXPECT_EQ(JoinedTokens(*Choice(ws).Find("logprobs")->Find("content")), "\n\n");
}

class LogprobsServerTest : public ServerFixture {};

TEST_F(LogprobsServerTest, ChatStreamAndBody) {
  LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
  StartServer();
  // Without logprobs: null as always.
  Reply plain = Post(port_, "/v1/chat/completions", ChatBody(false, 4));
  EXPECT_NE(plain.body.find("\"logprobs\":null"), std::string::npos) << plain.body;
  // Non-streaming, n = 2: the fake engine's values (-1/8 per position, -1 per sample).
  Reply body = Post(port_, "/v1/chat/completions", ChatBody(false, 4, R"(,"logprobs":true,"top_logprobs":2,"n":2)"));
  ASSERT_EQ(body.status, 200) << body.body;
  EXPECT_EQ(engine_->last_sampling().top_logprobs, 2);
  json::Value v = ParseJson(body.body);
  for (size_t c = 0; c < 2; ++c) {
    const json::Value& choice = v.Find("choices")->as_array()[c];
    const json::Value& content = *choice.Find("logprobs")->Find("content");
    std::vector<double> values;
    EXPECT_EQ(JoinedTokens(content, &values), choice.Find("message")->Find("content")->as_string());
    ASSERT_EQ(values.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(values[i], -0.125 * static_cast<double>(i + 1) - static_cast<double>(c));
    EXPECT_EQ(content.as_array()[0].Find("top_logprobs")->as_array().size(), 2u);
  }
  // Streaming: each chunk carries the tokens of its own text.
  Reply stream = Post(port_, "/v1/chat/completions", ChatBody(true, 6, R"(,"logprobs":true)"));
  ASSERT_EQ(stream.status, 200);
  std::string text, tokens;
  size_t count = 0;
  for (size_t pos = 0; (pos = stream.body.find("data: {", pos)) != std::string::npos;) {
    size_t end = stream.body.find("\n\n", pos);
    json::Value chunk = ParseJson(stream.body.substr(pos + 6, end - pos - 6));
    pos = end;
    if (chunk.Find("choices")->as_array().empty()) continue;
    const json::Value& choice = chunk.Find("choices")->as_array()[0];
    const json::Value* delta_content = choice.Find("delta")->Find("content");
    const std::string piece = delta_content ? std::string(delta_content->as_string()) : "";
    const json::Value& lp = *choice.Find("logprobs");
    if (piece.empty()) {
      EXPECT_TRUE(lp.is_null());
      continue;
    }
    ASSERT_TRUE(lp.is_object());
    std::string joined = JoinedTokens(*lp.Find("content"));
    EXPECT_EQ(joined, piece);
    for (const auto& t : lp.Find("content")->as_array()) EXPECT_TRUE(t.Find("top_logprobs")->as_array().empty());
    count += lp.Find("content")->as_array().size();
    text += piece;
    tokens += joined;
  }
  EXPECT_EQ(count, 6u);
  EXPECT_EQ(tokens, text);
}

TEST_F(LogprobsServerTest, ResponsesOutputTextLogprobs) {
  LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
  StartServer();
  Reply r = Post(port_, "/v1/responses",
                 R"({"model":"ladle","input":"Hi","max_output_tokens":3,"include":["message.output_text.logprobs"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  json::Value v = ParseJson(r.body);
  const json::Value* part = nullptr;
  for (const auto& item : v.Find("output")->as_array()) {
    if (item.Find("type")->as_string() == "message") part = &item.Find("content")->as_array()[0];
  }
  ASSERT_NE(part, nullptr) << r.body;
  std::vector<double> values;
  EXPECT_EQ(JoinedTokens(*part->Find("logprobs"), &values), part->Find("text")->as_string());
  EXPECT_EQ(values, (std::vector<double>{-0.125, -0.25, -0.375}));
}

}  // namespace
}  // namespace ladle::server::testing
