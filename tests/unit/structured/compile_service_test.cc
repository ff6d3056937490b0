// The compile service: key canonicalisation, LRU bounds, single flight, cached errors.
#include "ladle/structured/compile_service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ladle/json/json.h"
#include "test_vocab.h"

namespace ladle::structured {
namespace {

ConstraintSpec Regex(std::string pattern) {
  ConstraintSpec s;
  s.kind = ConstraintKind::kRegex;
  s.payload = std::move(pattern);
  return s;
}

ConstraintSpec Schema(std::string_view text) {
  frontend::Request req;
  req.response_format.kind = frontend::ResponseFormat::Kind::kJsonSchema;
  req.response_format.schema = *json::Parse(text);
  auto spec = SpecFromRequest(req, frontend::ModelVersion::kV32);
  EXPECT_TRUE(spec.ok() && spec->has_value());
  return **spec;
}

TEST(ConstraintKey, PropertyOrderIsPartOfTheKey) {
  // Property order can change the language (groups in schema order past the any-order bound,
  // or JsonSchemaOptions::kSchema), so the order is part of the key: two orders are two
  // grammars.
  const auto a = Schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}})");
  const auto b = Schema(R"({"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}})");
  EXPECT_NE(KeyFor(a, 1), KeyFor(b, 1));
}

TEST(ConstraintKey, WhitespaceInTheRequestIsNot) {
  const auto a = Schema(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  const auto b = Schema("{ \"type\" : \"object\",\n \"properties\": {\"a\": {\"type\": \"integer\"}} }");
  EXPECT_EQ(a.payload, b.payload);
  EXPECT_EQ(KeyFor(a, 1), KeyFor(b, 1));
}

TEST(ConstraintKey, VocabularyVersionAndOptionsAreInTheKey) {
  const auto a = Regex("[0-9]+");
  EXPECT_NE(KeyFor(a, 1), KeyFor(a, 2));
  auto b = a;
  b.version = frontend::ModelVersion::kV4;
  EXPECT_NE(KeyFor(a, 1), KeyFor(b, 1));
  auto c = a;
  c.whitespace = grammar::JsonSchemaOptions::Whitespace::kCompact;
  EXPECT_NE(KeyFor(a, 1), KeyFor(c, 1));
  auto d = a;
  d.param = "somewhere.else";  // where it came from does not change the grammar
  EXPECT_EQ(KeyFor(a, 1), KeyFor(d, 1));
  auto e = a;
  e.kind = ConstraintKind::kEbnf;
  EXPECT_NE(KeyFor(a, 1), KeyFor(e, 1));
}

TEST(ConstraintSpec, JsonRoundTrip) {
  auto s = Schema(R"({"type":"object"})");
  s.whitespace = grammar::JsonSchemaOptions::Whitespace::kPretty;
  s.max_whitespace = 7;
  s.allow_unlisted_properties = false;
  s.ends_in_thinking = true;
  s.version = frontend::ModelVersion::kR1;
  auto back = SpecFromJson(SpecToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(KeyFor(s, 9), KeyFor(*back, 9));
  EXPECT_EQ(back->param, s.param);
  EXPECT_FALSE(SpecFromJson(R"({"kind":"nope","payload":"","version":"v3","whitespace":"compact"})").ok());
}

TEST(SpecFromRequest, KindsAndPrecedence) {
  frontend::Request req;
  auto none = SpecFromRequest(req, frontend::ModelVersion::kV32);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  req.response_format.kind = frontend::ResponseFormat::Kind::kJsonObject;
  auto obj = SpecFromRequest(req, frontend::ModelVersion::kV32);
  ASSERT_TRUE(obj.ok() && obj->has_value());
  EXPECT_EQ((*obj)->kind, ConstraintKind::kJsonObject);
  EXPECT_EQ((*obj)->param, "response_format");

  req.api = frontend::Api::kResponses;
  req.response_format.kind = frontend::ResponseFormat::Kind::kJsonSchema;
  req.response_format.schema = *json::Parse(R"({"type":"string"})");
  auto sch = SpecFromRequest(req, frontend::ModelVersion::kV32);
  ASSERT_TRUE(sch.ok() && sch->has_value());
  EXPECT_EQ((*sch)->param, "text.format.schema");

  // A forced tool call wins over response_format: the answer is a tool call.
  frontend::Tool t;
  t.name = "get_weather";
  t.parameters = *json::Parse(R"({"type":"object","properties":{"city":{"type":"string"}}})");
  req.tools.push_back(t);
  req.tool_choice.mode = frontend::ToolChoice::Mode::kAuto;
  auto autos = SpecFromRequest(req, frontend::ModelVersion::kV32);
  ASSERT_TRUE(autos.ok() && autos->has_value());
  EXPECT_EQ((*autos)->kind, ConstraintKind::kJsonSchema);  // auto, not strict: the format wins
  frontend::Request text_auto = req;
  text_auto.response_format = {};
  auto lazy = SpecFromRequest(text_auto, frontend::ModelVersion::kV32);
  ASSERT_TRUE(lazy.ok() && lazy->has_value());
  EXPECT_EQ((*lazy)->kind, ConstraintKind::kToolCall);  // free until the tool-call trigger
  EXPECT_TRUE((*lazy)->lazy);
  req.tool_choice.mode = frontend::ToolChoice::Mode::kRequired;
  auto forced = SpecFromRequest(req, frontend::ModelVersion::kV32, /*ends_in_thinking=*/true);
  ASSERT_TRUE(forced.ok() && forced->has_value());
  EXPECT_EQ((*forced)->kind, ConstraintKind::kToolCall);
  EXPECT_FALSE((*forced)->lazy);
  EXPECT_TRUE((*forced)->ends_in_thinking);
  const frontend::Request back = ToolRequestFromPayload(*json::Parse((*forced)->payload));
  ASSERT_EQ(back.tools.size(), 1u);
  EXPECT_EQ(back.tools[0].name, "get_weather");
  EXPECT_EQ(json::Dump(back.tools[0].parameters), json::Dump(t.parameters));
  EXPECT_EQ(back.tool_choice.mode, frontend::ToolChoice::Mode::kRequired);
}

class CompileServiceTest : public ::testing::Test {
 protected:
  std::shared_ptr<const grammar::TokenVocabulary> vocab_ = testing_vocab::ByteVocabulary();
};

TEST_F(CompileServiceTest, HitsAfterTheFirstCompile) {
  auto svc = CompileService::Create(vocab_, {});
  ASSERT_TRUE(svc.ok());
  auto a = (*svc)->Get(Regex("[0-9]+"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = (*svc)->Get(Regex("[0-9]+"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());  // the same shared grammar
  const CompileStats s = (*svc)->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.local_compiles, 1u);
  EXPECT_GT(s.bytes, 0u);
}

TEST_F(CompileServiceTest, LruBoundByEntries) {
  CompileServiceOptions o;
  o.max_entries = 2;
  auto svc = std::move(CompileService::Create(vocab_, o)).value();
  ASSERT_TRUE(svc->Get(Regex("a+")).ok());
  ASSERT_TRUE(svc->Get(Regex("b+")).ok());
  ASSERT_TRUE(svc->Get(Regex("a+")).ok());  // a is now the most recent
  ASSERT_TRUE(svc->Get(Regex("c+")).ok());  // evicts b
  CompileStats s = svc->stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.misses, 3u);
  ASSERT_TRUE(svc->Get(Regex("a+")).ok());  // still cached
  EXPECT_EQ(svc->stats().misses, 3u);
  ASSERT_TRUE(svc->Get(Regex("b+")).ok());  // compiled again
  EXPECT_EQ(svc->stats().misses, 4u);
}

TEST_F(CompileServiceTest, LruBoundByBytes) {
  CompileServiceOptions o;
  auto probe = std::move(CompileService::Create(vocab_, o)).value();
  auto one = probe->Get(Regex("x+"));
  ASSERT_TRUE(one.ok());
  const size_t size = (*one)->MemoryBytes();
  o.max_bytes = size + size / 2;  // room for one grammar of about this size, not two
  auto svc = std::move(CompileService::Create(vocab_, o)).value();
  ASSERT_TRUE(svc->Get(Regex("x+")).ok());
  ASSERT_TRUE(svc->Get(Regex("y+")).ok());
  const CompileStats s = svc->stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_LE(s.bytes, o.max_bytes);
}

TEST_F(CompileServiceTest, SingleFlightSharesOneCompile) {
  CompileServiceOptions o;
  o.threads = 4;
  auto svc = std::move(CompileService::Create(vocab_, o)).value();
  // Many threads ask for the same new grammar at once: one compile, everyone gets it.
  constexpr int kThreads = 16;
  std::vector<std::thread> threads;
  std::vector<const CompiledConstraint*> got(kThreads, nullptr);
  std::atomic<int> ready{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      auto r = svc->Get(Regex("(ab|cd)*[0-9]{2,5}"));
      if (r.ok()) got[static_cast<size_t>(i)] = r->get();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], got[0]) << i;
  ASSERT_NE(got[0], nullptr);
  const CompileStats s = svc->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.local_compiles, 1u);
  EXPECT_EQ(s.hits + s.coalesced, static_cast<uint64_t>(kThreads - 1));
}

TEST_F(CompileServiceTest, ErrorsAreCachedBriefly) {
  CompileServiceOptions o;
  o.error_ttl_ms = 60'000;
  auto svc = std::move(CompileService::Create(vocab_, o)).value();
  auto a = svc->Get(Regex("(unclosed"));
  ASSERT_FALSE(a.ok());
  auto b = svc->Get(Regex("(unclosed"));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(a.status().code(), b.status().code());
  EXPECT_EQ(a.status().message(), b.status().message());
  CompileStats s = svc->stats();
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.error_hits, 1u);
  EXPECT_EQ(s.entries, 0u);

  o.error_ttl_ms = 0;  // not cached at all
  auto svc2 = std::move(CompileService::Create(vocab_, o)).value();
  EXPECT_FALSE(svc2->Get(Regex("(unclosed")).ok());
  EXPECT_FALSE(svc2->Get(Regex("(unclosed")).ok());
  EXPECT_EQ(svc2->stats().errors, 2u);
}

TEST_F(CompileServiceTest, AsyncCallbackAndMetrics) {
  auto svc = std::move(CompileService::Create(vocab_, {})).value();
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  svc->GetAsync(Regex("[a-f]{3}"), [&](const CompileResult& r) {
    EXPECT_TRUE(r.ok());
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  std::string m;
  svc->AppendMetrics(&m);
  EXPECT_NE(m.find("ladle_grammar_cache_misses_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ladle_grammar_compile_seconds_count 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ladle_grammar_cache_entries 1\n"), std::string::npos) << m;
}

TEST_F(CompileServiceTest, BadWorkerAddressIsRejected) {
  CompileServiceOptions o;
  o.workers = {"no-port"};
  EXPECT_FALSE(CompileService::Create(vocab_, o).ok());
}

// Issue 12: the schema that once threw inside a compile task (std::stoul on a $ref index) gets
// an answer, a second request for it gets the same answer (no dead flight), and the service
// shuts down.
TEST_F(CompileServiceTest, AHostileSchemaIsAnsweredAndDoesNotPoisonItsFlight) {
  auto svc = std::move(CompileService::Create(vocab_, {})).value();
  const auto spec = Schema(R"({"type":"object","properties":{"b":{"type":"array","prefixItems":[{"type":"integer"}]},)"
                           R"("c":{"$ref":"#/properties/b/prefixItems/99999999999999999999999"}}})");
  for (int i = 0; i < 2; ++i) {
    std::promise<CompileResult> p;
    svc->GetAsync(spec, [&](const CompileResult& r) { p.set_value(r); });
    auto f = p.get_future();
    ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "no answer, attempt " << i;
    const CompileResult r = f.get();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("does not resolve"), std::string::npos) << r.status().ToString();
  }
  EXPECT_TRUE(svc->Get(Regex("[0-9]+")).ok());  // the service still compiles
}

}  // namespace
}  // namespace ladle::structured
