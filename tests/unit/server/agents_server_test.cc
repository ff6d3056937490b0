// What real agents and SDKs need from the server (issue 12 §2), with the fake engine: model
// listing in both shapes, count_tokens, each API's context-overflow words, the response store
// behind item_reference and previous_response_id, dropped hosted tools, the output cap and
// model aliases.
#include "response_store.h"
#include "server_fixture.h"

namespace ladle::server::testing {
namespace {

class AgentsServerTest : public ServerFixture {
 protected:
  void SetUp() override { LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath()); }
};

TEST_F(AgentsServerTest, ModelsInBothShapesAndByIdWithAliases) {
  ServerConfig c;
  c.model_aliases = {"claude-sonnet-4-5"};
  StartServer(c);
  json::Value oa = ParseJson(Send(port_, http::verb::get, "/v1/models").body);
  ASSERT_EQ(oa.Find("data")->as_array().size(), 2u);
  EXPECT_EQ(oa.Find("data")->as_array()[1].Find("id")->as_string(), "claude-sonnet-4-5");
  Reply an = Send(port_, http::verb::get, "/v1/models", "", {{"anthropic-version", "2023-06-01"}});
  ASSERT_EQ(an.status, 200);
  json::Value a = ParseJson(an.body);
  EXPECT_EQ(a.Find("data")->as_array()[0].Find("type")->as_string(), "model");
  EXPECT_EQ(a.Find("first_id")->as_string(), "ladle");
  EXPECT_FALSE(a.Find("has_more")->as_bool());
  EXPECT_EQ(ParseJson(Send(port_, http::verb::get, "/v1/models/ladle").body).Find("object")->as_string(), "model");
  Reply missing = Send(port_, http::verb::get, "/v1/models/gpt-5", "", {{"anthropic-version", "2023-06-01"}});
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(ParseJson(missing.body).Find("error")->Find("type")->as_string(), "not_found_error");
  // An alias is served, and the response names the model as the request did.
  Reply msg = Post(port_, "/v1/messages",
                   R"({"model":"claude-sonnet-4-5","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]})");
  ASSERT_EQ(msg.status, 200) << msg.body;
  EXPECT_EQ(ParseJson(msg.body).Find("model")->as_string(), "claude-sonnet-4-5");
}

TEST_F(AgentsServerTest, CountTokensMatchesThePromptTheEngineGets) {
  StartServer();
  const std::string messages = R"("messages":[{"role":"user","content":"Count these words"}],"system":"terse")";
  Reply count = Post(port_, "/v1/messages/count_tokens", R"({"model":"ladle",)" + messages + "}");
  ASSERT_EQ(count.status, 200) << count.body;
  const int64_t n = *ParseJson(count.body).Find("input_tokens")->as_int64();
  ASSERT_EQ(Post(port_, "/v1/messages", R"({"model":"ladle","max_tokens":2,)" + messages + "}").status, 200);
  EXPECT_EQ(n, static_cast<int64_t>(engine_->last_prompt().size()));
  EXPECT_EQ(Post(port_, "/v1/messages/count_tokens", R"({"model":"ladle","messages":7})").status, 400);
}

TEST_F(AgentsServerTest, ContextOverflowInEachApisWords) {
  ServerConfig c;
  c.max_model_len = 64;
  StartServer(c);
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "ladle ";
  Reply a = Post(port_, "/v1/messages",
                 R"({"model":"ladle","max_tokens":4,"messages":[{"role":"user","content":")" + long_text + R"("}]})");
  ASSERT_EQ(a.status, 400);
  const std::string am = ParseJson(a.body).Find("error")->Find("message")->as_string();
  EXPECT_EQ(am.rfind("prompt is too long: ", 0), 0u) << am;
  EXPECT_NE(am.find(" tokens > 63 maximum"), std::string::npos) << am;
  Reply b = Post(port_, "/v1/messages", MessagesBody(false, 60));
  ASSERT_EQ(b.status, 400);
  EXPECT_NE(ParseJson(b.body).Find("error")->Find("message")->as_string().find("exceed context limit"), std::string::npos);
  Reply ch = Post(port_, "/v1/chat/completions", ChatBody(false, 60));
  ASSERT_EQ(ch.status, 400);
  EXPECT_EQ(ParseJson(ch.body).Find("error")->Find("code")->as_string(), "context_length_exceeded");
  // No max_tokens given: the request gets what is left instead of an error.
  Reply fit = Post(port_, "/v1/chat/completions", R"({"model":"ladle","messages":[{"role":"user","content":"Hi"}]})");
  ASSERT_EQ(fit.status, 200) << fit.body;
  EXPECT_EQ(engine_->last_sampling().max_tokens + static_cast<int64_t>(engine_->last_prompt().size()), 64);
}

TEST_F(AgentsServerTest, ItemReferencesAndPreviousResponseResolveFromTheStore) {
  StartServer();
  Reply first = Post(port_, "/v1/responses", ResponsesBody(false, 3));
  ASSERT_EQ(first.status, 200) << first.body;
  json::Value r = ParseJson(first.body);
  const std::string resp_id = r.Find("id")->as_string();
  const std::string msg_id = r.Find("output")->as_array()[0].Find("id")->as_string();
  const size_t first_prompt = engine_->last_prompt().size();
  // The AI SDK's multi-turn: the assistant item by reference.
  Reply second = Post(port_, "/v1/responses",
                      R"({"model":"ladle","max_output_tokens":2,"input":[{"role":"user","content":"Hi"},)"
                      R"({"type":"item_reference","id":")" + msg_id + R"("},{"role":"user","content":"More"}]})");
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_GT(engine_->last_prompt().size(), first_prompt + 3);
  const auto via_reference = engine_->last_prompt();
  Reply third = Post(port_, "/v1/responses",
                     R"({"model":"ladle","max_output_tokens":2,"previous_response_id":")" + resp_id +
                         R"(","input":[{"role":"user","content":"More"}]})");
  ASSERT_EQ(third.status, 200) << third.body;
  EXPECT_EQ(engine_->last_prompt(), via_reference);  // the same conversation either way
  // Unknown, or another key's: a 400 naming the item.
  Reply bad = Post(port_, "/v1/responses", R"({"model":"ladle","input":[{"type":"item_reference","id":"msg_nope"}]})");
  ASSERT_EQ(bad.status, 400);
  EXPECT_EQ(ParseJson(bad.body).Find("error")->Find("param")->as_string(), "input[0]");
  Reply other = Post(port_, "/v1/responses",
                     R"({"model":"ladle","input":[{"type":"item_reference","id":")" + msg_id + R"("}]})",
                     {{"authorization", "Bearer someone-else"}});
  EXPECT_EQ(other.status, 400);
  // store:false responses are not kept.
  Reply unstored = Post(port_, "/v1/responses", R"({"model":"ladle","input":"Hi","max_output_tokens":2,"store":false})");
  const std::string unstored_id = ParseJson(unstored.body).Find("id")->as_string();
  EXPECT_EQ(Post(port_, "/v1/responses", R"({"model":"ladle","input":"x","previous_response_id":")" + unstored_id + R"("})").status,
            400);
}

TEST_F(AgentsServerTest, StreamedResponsesAreStoredToo) {
  StartServer();
  Reply s = Post(port_, "/v1/responses", ResponsesBody(true, 3));
  ASSERT_EQ(s.status, 200);
  // max_output_tokens ends it: the last event is response.incomplete, whose items are stored too.
  const size_t at = s.body.find("\"type\":\"response.incomplete\"");
  ASSERT_NE(at, std::string::npos) << s.body;
  EXPECT_NE(s.body.find("\"store\":true"), std::string::npos);  // the echo says it is kept
  const size_t id_at = s.body.rfind("\"id\":\"resp_");
  ASSERT_NE(id_at, std::string::npos);
  const std::string resp_id = s.body.substr(id_at + 6, s.body.find('"', id_at + 6) - (id_at + 6));
  Reply next = Post(port_, "/v1/responses",
                    R"({"model":"ladle","max_output_tokens":2,"previous_response_id":")" + resp_id + R"(","input":"again"})");
  EXPECT_EQ(next.status, 200) << next.body;
}

TEST_F(AgentsServerTest, HostedToolsAreDroppedWithAHeaderAndTheCapHolds) {
  ServerConfig c;
  c.max_tokens_cap = 3;
  StartServer(c);
  Reply r = Post(port_, "/v1/responses",
                 R"({"model":"ladle","input":"Hi","tools":[{"type":"web_search"},{"type":"function","name":"f","parameters":{"type":"object"}}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-ladle-dropped-tools"), "web_search");
  EXPECT_EQ(engine_->last_sampling().max_tokens, 3);
}

TEST(ResponseStore, BoundsAndTtl) {
  ResponseStore store(ResponseStoreOptions{.max_entries = 2, .max_bytes = 1 << 20, .ttl_s = 10});
  auto item = [](const std::string& id) {
    json::Value out = json::Value::MakeArray();
    json::Value m = json::Value::MakeObject();
    m.Set("type", json::Value::String("message"));
    m.Set("id", json::Value::String(id));
    m.Set("role", json::Value::String("assistant"));
    m.Set("content", json::Value::String("x"));
    out.as_array().push_back(std::move(m));
    return out;
  };
  store.Put("resp_a", 1, json::Value::MakeArray(), item("msg_a"), 0);
  store.Put("resp_b", 1, json::Value::MakeArray(), item("msg_b"), 0);
  store.Put("resp_c", 1, json::Value::MakeArray(), item("msg_c"), 0);
  EXPECT_EQ(store.entries(), 2u);  // the oldest went
  const frontend::Limits limits;
  auto ref = [&](const std::string& id, int64_t now) {
    return store.Resolve(R"({"input":[{"type":"item_reference","id":")" + id + R"("}]})", 1, now, limits);
  };
  EXPECT_TRUE(std::holds_alternative<frontend::ApiError>(ref("msg_a", 1)));
  auto ok = ref("msg_c", 1);
  ASSERT_TRUE(std::holds_alternative<ResponseStore::Resolved>(ok));
  EXPECT_NE(std::get<ResponseStore::Resolved>(ok).body.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_TRUE(std::holds_alternative<frontend::ApiError>(ref("msg_c", 10'001)));  // past the TTL
}

}  // namespace
}  // namespace ladle::server::testing
