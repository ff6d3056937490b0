// The grammar-worker protocol: a worker in this process on a free port, the compile service
// pointed at it, fallback when it is down, and the wire format.
#include "ladle/structured/grammar_worker.h"

#include <gtest/gtest.h>

#include "ladle/frontend/model_version.h"
#include "ladle/json/json.h"
#include "ladle/grammar/matcher.h"
#include "test_data.h"
#include "test_vocab.h"

namespace ladle::structured {
namespace {

ConstraintSpec Regex(std::string pattern) {
  ConstraintSpec s;
  s.kind = ConstraintKind::kRegex;
  s.payload = std::move(pattern);
  return s;
}

TEST(GrammarWorkerWire, EncodeDecodeRoundTrip) {
  auto vocab = testing_vocab::ByteVocabulary();
  auto c = CompileLocally(Regex("[a-c]{2}z"), vocab, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto copy = std::make_shared<CompiledConstraint>(**c);
  copy->report.approximations.push_back({"/format", "approximated for the test"});
  const std::string body = EncodeCompileResponse(*copy);
  auto back = DecodeCompileResponse(body, vocab, "w:1");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->compiled_by, "w:1");
  ASSERT_EQ((*back)->report.approximations.size(), 1u);
  EXPECT_EQ((*back)->report.approximations[0].path, "/format");
  grammar::GrammarMatcher m((*back)->grammar);
  EXPECT_TRUE(m.AcceptString("abz"));
  EXPECT_TRUE(m.CanTerminate());
  // A truncated or foreign body is a transport failure (the service then falls back).
  EXPECT_EQ(DecodeCompileResponse(body.substr(0, 6), vocab, "w").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(DecodeCompileResponse("HTTP garbage", vocab, "w").status().code(), StatusCode::kUnavailable);
}

TEST(GrammarWorkerClient, DownWorkerFallsBackToLocal) {
  CompileServiceOptions o;
  o.workers = {"127.0.0.1:1"};  // privileged port, never a grammar worker in a test
  o.worker_timeout_ms = 2000;
  auto svc = std::move(CompileService::Create(testing_vocab::ByteVocabulary(), o)).value();
  auto r = svc->Get(Regex("q+"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->compiled_by, "local");
  const CompileStats s = svc->stats();
  EXPECT_EQ(s.worker_failures, 1u);
  EXPECT_EQ(s.local_compiles, 1u);
  // Marked down: the next compile goes local without trying it again.
  ASSERT_TRUE(svc->Get(Regex("r+")).ok());
  EXPECT_EQ(svc->stats().worker_failures, 1u);
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::TokenizerPath();
    LADLE_REQUIRE_DATA(path);
    auto base = tokenizer::Tokenizer::FromFile(path);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    auto tok = frontend::TokenizerForVersion(*base, frontend::ModelVersion::kV32);
    ASSERT_TRUE(tok.ok());
    auto vocab = VocabularyFor(*tok, frontend::ModelVersion::kV32);
    ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
    vocab_ = *vocab;
    GrammarWorkerOptions wo;
    auto w = GrammarWorker::Create(wo, std::move(base).value());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    worker_ = std::move(w).value();
    worker_->Start();
    endpoint_ = "127.0.0.1:" + std::to_string(worker_->port());
  }
  std::shared_ptr<const grammar::TokenVocabulary> vocab_;
  std::unique_ptr<GrammarWorker> worker_;
  std::string endpoint_;
};

TEST_F(WorkerTest, CompilesRemotelyAndTheGrammarWorksHere) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kJsonSchema;
  spec.payload = R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false})";
  spec.whitespace = grammar::JsonSchemaOptions::Whitespace::kCompact;
  auto r = CompileRemote(endpoint_, spec, vocab_, 30000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->compiled_by, endpoint_);
  grammar::GrammarMatcher m((*r)->grammar);
  EXPECT_TRUE(m.AcceptString(R"({"n":42})"));
  EXPECT_TRUE(m.CanTerminate());
  grammar::GrammarMatcher bad((*r)->grammar);
  EXPECT_FALSE(bad.AcceptString(R"({"m")"));
  EXPECT_EQ(worker_->compiles_served(), 1u);
}

TEST_F(WorkerTest, CompileErrorsKeepTheirCode) {
  auto r = CompileRemote(endpoint_, Regex("(a"), vocab_, 30000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kJsonSchema;
  spec.payload = R"js({"type":"object","properties":{"a":{"type":"string","pattern":"(?=x)"}}})js";
  auto e = CompileRemote(endpoint_, spec, vocab_, 30000);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().code(), StatusCode::kUnavailable) << e.status().ToString();
}

TEST_F(WorkerTest, ServiceUsesTheWorker) {
  CompileServiceOptions o;
  o.workers = {endpoint_};
  auto svc = std::move(CompileService::Create(vocab_, o)).value();
  auto r = svc->Get(Regex("[0-9]{1,3}(\\.[0-9]{1,3}){3}"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->compiled_by, endpoint_);
  EXPECT_EQ(svc->stats().worker_compiles, 1u);
  EXPECT_EQ(svc->stats().local_compiles, 0u);
  // A compile error from the worker is the request's error, not a reason to fall back.
  EXPECT_FALSE(svc->Get(Regex("[z-a]")).ok());
  EXPECT_EQ(svc->stats().local_compiles, 0u);
  EXPECT_EQ(svc->stats().worker_failures, 0u);
  // The worker stops: the next compile falls back to this process.
  worker_->Stop();
  auto after = svc->Get(Regex("x{2}"));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ((*after)->compiled_by, "local");
  EXPECT_EQ(svc->stats().worker_failures, 1u);
}

}  // namespace
}  // namespace ladle::structured

namespace ladle::structured {
namespace {

TEST_F(WorkerTest, LazyToolConstraintCompilesWithTriggers) {
  // tool_choice auto: compiled here (several grammars), one trigger per opener of V3.2.
  frontend::Request req;
  frontend::Tool t;
  t.name = "lookup";
  t.parameters = *json::Parse(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]})");
  req.tools.push_back(t);
  req.tool_choice.mode = frontend::ToolChoice::Mode::kAuto;
  auto spec = SpecFromRequest(req, frontend::ModelVersion::kV32);
  ASSERT_TRUE(spec.ok() && spec->has_value());
  CompileServiceOptions o;
  o.workers = {endpoint_};
  auto svc = std::move(CompileService::Create(vocab_, o)).value();
  auto r = svc->Get(**spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE((*r)->triggers.empty());
  for (const auto& trig : (*r)->triggers) {
    EXPECT_TRUE(trig.token_id || !trig.text.empty());
    EXPECT_NE(trig.after, nullptr);
  }
  EXPECT_EQ(svc->stats().worker_compiles, 0u);
  EXPECT_EQ(svc->stats().local_compiles, 1u);
}

}  // namespace
}  // namespace ladle::structured
