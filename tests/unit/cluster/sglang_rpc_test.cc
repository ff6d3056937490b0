// SMG's SglangScheduler protocol end to end on loopback: an EngineServer in front of a real
// engine (the built-in model at a small vocabulary), driven by a real gRPC SglangScheduler stub,
// as SMG's router drives an SGLang worker. Generation is compared with a local engine running
// the same request (bit-identical by the model's batch invariance, docs/model.md); KV events
// are checked against the chain keys the engine names its blocks by. Every wait is bounded.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "cluster/cluster_test_util.h"
#include "engine/engine_test_util.h"
#include "ladle/cluster/engine_server.h"
#include "ladle/cluster/kv_event_log.h"
#include "ladle/engine/block_manager.h"
#include "ladle/engine/engine_config.h"
#include "sglang_scheduler.grpc.pb.h"
#include "sglang_service.h"

namespace ladle::cluster {
namespace {

using namespace test_util;  // NOLINT: the shared helpers (cluster_test_util.h)
using engine::TokenId;
namespace sg = ::sglang::grpc::scheduler;
namespace common = ::smg::grpc::common;

std::chrono::system_clock::time_point In(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// Allows only a few tokens: what the test's mask factory builds for any constraint.
class AllowSet final : public engine::MaskProvider {
 public:
  explicit AllowSet(std::vector<TokenId> ids) : ids_(std::move(ids)) {}
  void FillMask(int, uint64_t* bits, size_t vocab) override {
    std::fill(bits, bits + (vocab + 63) / 64, 0);
    for (TokenId t : ids_) bits[t / 64] |= uint64_t{1} << (t % 64);
  }
  void Accept(int, TokenId) override {}

 private:
  std::vector<TokenId> ids_;
};
const std::vector<TokenId> kAllowed = {100, 200, 300};

// One `ladle engine` with KV events and a recording mask factory, and a stub to it.
struct SgNode {
  std::shared_ptr<KvEventLog> log;
  std::unique_ptr<engine::Engine> eng;
  std::unique_ptr<EngineServer> srv;
  std::unique_ptr<sg::SglangScheduler::Stub> stub;
  std::mutex mu;
  std::vector<RemoteConstraint> constraints;

  explicit SgNode(int num_blocks = 64, size_t log_entries = 16384) {
    log = std::make_shared<KvEventLog>(1, log_entries);
    EngineConfig c = Ec();
    c.num_blocks = num_blocks;
    c.on_block_event = KvEventLog::Hook(log, 0);
    eng = MakeEngine(c);
    EngineServerOptions o;
    o.info.name = "sg-0";
    o.info.key_extras = {{kvcache::ExtraTag::kModel, engine::ModelFingerprint(Mc())}};
    o.info.vocab_size = Mc().vocab_size;
    o.swa_pool = c.swa_pool;
    o.kv_events = log;
    o.mask_factory = [this](RemoteConstraint rc, MaskCallback done) {
      {
        std::lock_guard lock(mu);
        constraints.push_back(rc);
      }
      done(std::shared_ptr<engine::MaskProvider>(std::make_shared<AllowSet>(kAllowed)));
    };
    auto s = EngineServer::Start(std::move(o), {eng.get()});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    srv = std::move(s).value();
    stub = sg::SglangScheduler::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(srv->port()), grpc::InsecureChannelCredentials()));
  }
  ~SgNode() {
    if (srv) srv->Shutdown(1000);
    srv.reset();
    if (eng) eng->Shutdown();
  }
  // Waits (bounded) until the engine holds no request and no KV block.
  bool Idle(int seconds = 10) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < until) {
      const engine::Stats st = eng->GetStats();
      if (st.running == 0 && st.queue_depth == 0 && st.kv_blocks_used == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
};

sg::GenerateRequest Req(const std::string& rid, const std::vector<TokenId>& prompt, int max_new, bool stream) {
  sg::GenerateRequest r;
  r.set_request_id(rid);
  for (TokenId t : prompt) r.mutable_tokenized()->add_input_ids(t);
  sg::SamplingParams* p = r.mutable_sampling_params();
  p->set_temperature(0);
  p->set_max_new_tokens(static_cast<uint32_t>(max_new));
  p->set_ignore_eos(true);
  p->set_n(1);
  r.set_return_logprob(true);
  r.set_top_logprobs_num(0);
  r.set_logprob_start_len(-1);
  r.set_stream(stream);
  return r;
}

struct GenResult {
  grpc::Status status;
  std::vector<sg::GenerateResponse> msgs;
  // Per sample index: tokens and logprobs (from the chunks when streaming, else the complete).
  std::vector<std::vector<TokenId>> tokens;
  std::vector<std::vector<float>> logprobs;
  std::vector<sg::GenerateComplete> completes;
};

GenResult Collect(std::vector<sg::GenerateResponse> msgs, grpc::Status st, int n = 1) {
  GenResult r;
  r.status = std::move(st);
  r.tokens.resize(static_cast<size_t>(n));
  r.logprobs.resize(static_cast<size_t>(n));
  for (const auto& m : msgs) {
    if (m.has_chunk()) {
      const auto& c = m.chunk();
      if (c.index() >= static_cast<uint32_t>(n)) continue;
      for (uint32_t t : c.token_ids()) r.tokens[c.index()].push_back(t);
      for (float f : c.output_logprobs().token_logprobs()) r.logprobs[c.index()].push_back(f);
    } else if (m.has_complete()) {
      const auto& c = m.complete();
      r.completes.push_back(c);
      if (c.index() >= static_cast<uint32_t>(n)) continue;
      for (uint32_t t : c.output_ids()) r.tokens[c.index()].push_back(t);
      for (float f : c.output_logprobs().token_logprobs()) r.logprobs[c.index()].push_back(f);
    }
  }
  r.msgs = std::move(msgs);
  return r;
}

GenResult Gen(sg::SglangScheduler::Stub& stub, const sg::GenerateRequest& req, int n = 1, int seconds = 120) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(seconds));
  auto reader = stub.Generate(&ctx, req);
  std::vector<sg::GenerateResponse> msgs;
  sg::GenerateResponse m;
  while (reader->Read(&m)) msgs.push_back(m);
  return Collect(std::move(msgs), reader->Finish(), n);
}

std::vector<TokenId> LocalRun(engine::Engine& e, const std::vector<TokenId>& prompt, engine::SamplingParams p,
                              std::vector<float>* logprobs = nullptr) {
  Sink s;
  EXPECT_TRUE(e.Submit({prompt, p, nullptr}, s.Fn()).ok());
  EXPECT_TRUE(s.Wait());
  if (logprobs) *logprobs = s.logprobs[0];
  return s.tokens[0];
}

class SglangRpc : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }
};

TEST_F(SglangRpc, GreedyGenerateMatchesLocalBitForBit) {
  SgNode node;
  auto local = MakeEngine(Ec());
  for (int len : {5, 130, 300}) {
    std::vector<float> lp;
    const auto want = LocalRun(*local, PatternPrompt(len, len), Greedy(16), &lp);
    for (bool stream : {false, true}) {
      const std::string rid = "greedy-" + std::to_string(len) + (stream ? "-s" : "");
      auto r = Gen(*node.stub, Req(rid, PatternPrompt(len, len), 16, stream));
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      EXPECT_EQ(r.tokens[0], want) << "len " << len << " stream " << stream;
      EXPECT_EQ(r.logprobs[0], lp) << "len " << len << " stream " << stream;
      ASSERT_EQ(r.completes.size(), 1u);
      const auto& c = r.completes[0];
      EXPECT_EQ(c.finish_reason(), "length");
      EXPECT_EQ(c.prompt_tokens(), static_cast<uint32_t>(len));
      EXPECT_EQ(c.completion_tokens(), 16u);
      EXPECT_EQ(c.index(), 0u);
      for (const auto& m : r.msgs) EXPECT_EQ(m.request_id(), rid);
      if (stream) {
        EXPECT_GT(r.msgs.size(), 1u) << "chunks, then the complete";
        EXPECT_EQ(c.output_ids_size(), 0) << "a stream's tokens travel in its chunks";
      } else {
        EXPECT_EQ(r.msgs.size(), 1u);
      }
    }
  }
  // A prompt seen before: part of it comes from the prefix cache (the hit policy's share), and
  // the protocol says so, as the local engine does.
  auto cached_locally = [&](const std::vector<TokenId>& prompt) {
    std::mutex mu;
    std::condition_variable cv;
    int64_t cached = -1;
    EXPECT_TRUE(local->Submit({prompt, Greedy(4), nullptr}, [&](const engine::Output& o) {
                       if (!o.finished) return;
                       std::lock_guard lock(mu);
                       cached = o.cached_tokens;
                       cv.notify_all();
                     }).ok());
    std::unique_lock lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return cached >= 0; }));
    return cached;
  };
  const auto long_prompt = PatternPrompt(700, 700);
  cached_locally(long_prompt);
  const int64_t want_cached = cached_locally(long_prompt);
  ASSERT_TRUE(Gen(*node.stub, Req("greedy-first", long_prompt, 4, false)).status.ok());
  auto again = Gen(*node.stub, Req("greedy-again", long_prompt, 4, true));
  ASSERT_TRUE(again.status.ok());
  ASSERT_EQ(again.completes.size(), 1u);
  EXPECT_GT(want_cached, 0);
  EXPECT_EQ(again.completes[0].cached_tokens(), static_cast<uint32_t>(want_cached));
  for (const auto& m : again.msgs) {
    if (m.has_chunk()) EXPECT_EQ(m.chunk().cached_tokens(), static_cast<uint32_t>(want_cached));
  }
  local->Shutdown();
}

TEST_F(SglangRpc, TwoSamplesStreamWithTheirIndex) {
  SgNode node;
  auto local = MakeEngine(Ec());
  const auto prompt = PatternPrompt(40, 9);
  const auto want = LocalRun(*local, prompt, Greedy(10));
  auto req = Req("n2", prompt, 10, true);
  req.mutable_sampling_params()->set_n(2);
  auto r = Gen(*node.stub, req, 2);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens[0], want);  // greedy: both samples are the local run
  EXPECT_EQ(r.tokens[1], want);
  ASSERT_EQ(r.completes.size(), 2u);
  std::set<uint32_t> idx;
  for (const auto& c : r.completes) {
    idx.insert(c.index());
    EXPECT_EQ(c.finish_reason(), "length");
    EXPECT_EQ(c.completion_tokens(), 10u);
  }
  EXPECT_EQ(idx, (std::set<uint32_t>{0, 1}));
  // Sampled: two different samples, each of the asked length.
  auto req2 = Req("n2-sampled", prompt, 12, false);
  req2.mutable_sampling_params()->set_n(2);
  req2.mutable_sampling_params()->set_temperature(1.0f);
  req2.mutable_sampling_params()->set_top_k(-1);
  auto r2 = Gen(*node.stub, req2, 2);
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();
  EXPECT_EQ(r2.tokens[0].size(), 12u);
  EXPECT_EQ(r2.tokens[1].size(), 12u);
  EXPECT_NE(r2.tokens[0], r2.tokens[1]);
  local->Shutdown();
}

TEST_F(SglangRpc, StopStringAndStopTokenEndTheSample) {
  SgNode node;
  auto local = MakeEngine(Ec());
  const auto& tok = *engine::testing::EngineTokenizer();
  const auto prompt = PatternPrompt(40, 5);
  const auto ref = LocalRun(*local, prompt, Greedy(30));
  std::string full = tok.Decode(std::span<const TokenId>(ref).first(12)).value();
  std::string head = tok.Decode(std::span<const TokenId>(ref).first(8)).value();
  ASSERT_GT(full.size(), head.size() + 2);
  // Three bytes from the middle that are whole UTF-8 characters (the protocol's strings are UTF-8).
  auto utf8 = [](const std::string& t) {
    for (size_t i = 0; i < t.size();) {
      const auto c = static_cast<unsigned char>(t[i]);
      const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + n > t.size()) return false;
      for (size_t j = 1; j < n; ++j) {
        if ((static_cast<unsigned char>(t[i + j]) >> 6) != 2) return false;
      }
      i += n;
    }
    return true;
  };
  std::string stop;
  for (size_t at = head.size() > 1 ? head.size() - 1 : 0; at + 3 <= full.size() && stop.empty(); ++at) {
    for (size_t len = 3; len <= 6 && at + len <= full.size() && stop.empty(); ++len) {
      if (utf8(full.substr(at, len))) stop = full.substr(at, len);
    }
  }
  ASSERT_FALSE(stop.empty());
  size_t k = 1;
  while (k <= ref.size() && tok.Decode(std::span<const TokenId>(ref).first(k)).value().find(stop) == std::string::npos) ++k;
  ASSERT_LE(k, 12u);
  auto req = Req("stop-str", prompt, 30, true);
  req.mutable_sampling_params()->add_stop(stop);
  auto r = Gen(*node.stub, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens[0], std::vector<TokenId>(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(k)));
  ASSERT_EQ(r.completes.size(), 1u);
  EXPECT_EQ(r.completes[0].finish_reason(), "stop");
  EXPECT_EQ(r.completes[0].matched_stop_str(), stop);
  // A stop token: the sample ends at its first occurrence, which the complete names.
  const TokenId stop_id = ref[5];
  size_t first = 0;
  while (ref[first] != stop_id) ++first;
  auto req2 = Req("stop-tok", prompt, 30, false);
  req2.mutable_sampling_params()->add_stop_token_ids(stop_id);
  auto r2 = Gen(*node.stub, req2);
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();
  ASSERT_EQ(r2.completes.size(), 1u);
  EXPECT_EQ(r2.completes[0].finish_reason(), "stop");
  EXPECT_EQ(r2.completes[0].matched_token_id(), stop_id);
  EXPECT_EQ(r2.tokens[0], std::vector<TokenId>(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  local->Shutdown();
}

// The constraint reaches the engine server's mask factory as the VllmEngine path passes it
// (kind and payload), and the mask it builds is what the engine samples under.
TEST_F(SglangRpc, JsonSchemaConstraintGoesThroughTheMaskFactory) {
  SgNode node;
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  auto req = Req("json", PatternPrompt(20, 3), 8, true);
  req.mutable_sampling_params()->set_json_schema(schema);
  auto r = Gen(*node.stub, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.tokens[0].size(), 8u);
  for (TokenId t : r.tokens[0]) EXPECT_TRUE(std::count(kAllowed.begin(), kAllowed.end(), t)) << t;
  {
    std::lock_guard lock(node.mu);
    ASSERT_EQ(node.constraints.size(), 1u);
    EXPECT_EQ(node.constraints[0].kind, "json_schema");
    EXPECT_EQ(node.constraints[0].payload, schema);
    EXPECT_EQ(node.constraints[0].max_tokens, 8);
  }
  auto rx = Req("regex", PatternPrompt(20, 3), 4, false);
  rx.mutable_sampling_params()->set_regex("[0-9]+");
  ASSERT_TRUE(Gen(*node.stub, rx).status.ok());
  auto eb = Req("ebnf", PatternPrompt(20, 3), 4, false);
  eb.mutable_sampling_params()->set_ebnf_grammar("root ::= \"a\"");
  ASSERT_TRUE(Gen(*node.stub, eb).status.ok());
  std::lock_guard lock(node.mu);
  ASSERT_EQ(node.constraints.size(), 3u);
  EXPECT_EQ(node.constraints[1].kind, "regex");
  EXPECT_EQ(node.constraints[2].kind, "grammar");
  EXPECT_EQ(node.constraints[2].payload, "root ::= \"a\"");
}

TEST_F(SglangRpc, AbortEndsTheStreamAndFreesTheKv) {
  SgNode node;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(60));
  auto reader = node.stub->Generate(&ctx, Req("long", PatternPrompt(200, 2), 60000, true));
  sg::GenerateResponse m;
  int chunks = 0;
  while (chunks < 2 && reader->Read(&m)) chunks += m.has_chunk();
  ASSERT_EQ(chunks, 2);
  EXPECT_GT(node.eng->GetStats().kv_blocks_used, 0u);
  {
    grpc::ClientContext actx;
    actx.set_deadline(In(10));
    sg::AbortRequest a;
    a.set_request_id("long");
    a.set_reason("test");
    sg::AbortResponse ar;
    ASSERT_TRUE(node.stub->Abort(&actx, a, &ar).ok());
    EXPECT_TRUE(ar.success());
  }
  std::string finish;
  while (reader->Read(&m)) {
    if (m.has_complete()) finish = m.complete().finish_reason();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(finish, "abort");
  EXPECT_TRUE(node.Idle()) << "the aborted request's KV is freed";
  // Aborting an id nobody runs says so.
  grpc::ClientContext actx;
  actx.set_deadline(In(10));
  sg::AbortRequest a;
  a.set_request_id("nobody");
  sg::AbortResponse ar;
  ASSERT_TRUE(node.stub->Abort(&actx, a, &ar).ok());
  EXPECT_FALSE(ar.success());
}

TEST_F(SglangRpc, ClientCancelFreesTheKv) {
  SgNode node;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(60));
  auto reader = node.stub->Generate(&ctx, Req("dropped", PatternPrompt(200, 4), 60000, true));
  sg::GenerateResponse m;
  int chunks = 0;
  while (chunks < 2 && reader->Read(&m)) chunks += m.has_chunk();
  ASSERT_EQ(chunks, 2);
  ctx.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(node.Idle()) << "the dropped stream's engine request is cancelled";
}

TEST_F(SglangRpc, HealthModelServerInfoAndLoads) {
  SgNode node;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(10));
    sg::HealthCheckResponse r;
    ASSERT_TRUE(node.stub->HealthCheck(&ctx, {}, &r).ok());
    EXPECT_TRUE(r.healthy());
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(10));
    sg::GetModelInfoResponse r;
    ASSERT_TRUE(node.stub->GetModelInfo(&ctx, {}, &r).ok());
    EXPECT_TRUE(r.is_generation());
    EXPECT_EQ(r.vocab_size(), Mc().vocab_size);
    EXPECT_EQ(r.served_model_name(), "ladle");
    EXPECT_EQ(r.max_context_length(), 65536);
    ASSERT_EQ(r.eos_token_ids_size(), 1);
    EXPECT_EQ(r.eos_token_ids(0), 1);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(10));
    sg::GetServerInfoResponse r;
    ASSERT_TRUE(node.stub->GetServerInfo(&ctx, {}, &r).ok());
    EXPECT_EQ(r.server_type(), "grpc");
    EXPECT_EQ(r.max_total_num_tokens(), 64 * 128);
    EXPECT_EQ(r.server_args().fields().at("dp_size").number_value(), 1.0);
    EXPECT_EQ(r.server_args().fields().at("page_size").number_value(), 128.0);
  }
  // Loads while a request runs, and after.
  grpc::ClientContext gctx;
  gctx.set_deadline(In(60));
  auto reader = node.stub->Generate(&gctx, Req("busy", PatternPrompt(200, 6), 60000, true));
  sg::GenerateResponse m;
  int chunks = 0;
  while (chunks < 1 && reader->Read(&m)) chunks += m.has_chunk();
  ASSERT_EQ(chunks, 1);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(10));
    sg::GetLoadsRequest q;
    q.add_include("all");
    sg::GetLoadsResponse r;
    ASSERT_TRUE(node.stub->GetLoads(&ctx, q, &r).ok());
    EXPECT_EQ(r.dp_rank_count(), 1);
    EXPECT_FALSE(r.timestamp().empty());
    ASSERT_EQ(r.loads_size(), 1);
    const auto& l = r.loads(0);
    EXPECT_EQ(l.dp_rank(), 0);
    EXPECT_EQ(l.num_running_reqs(), 1);
    EXPECT_EQ(l.num_waiting_reqs(), 0);
    EXPECT_GE(l.num_used_tokens(), 2 * 128) << "the running request's blocks";
    EXPECT_EQ(l.max_total_num_tokens(), 64 * 128);
    EXPECT_GT(l.token_usage(), 0.0);
    EXPECT_EQ(l.memory().token_capacity(), 64 * 128);
    EXPECT_EQ(r.aggregate().total_running_reqs(), 1);
  }
  gctx.TryCancel();
  while (reader->Read(&m)) {
  }
  reader->Finish();
  ASSERT_TRUE(node.Idle());
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(10));
    sg::GetLoadsResponse r;
    ASSERT_TRUE(node.stub->GetLoads(&ctx, {}, &r).ok());
    ASSERT_EQ(r.loads_size(), 1);
    EXPECT_EQ(r.loads(0).num_running_reqs(), 0);
    EXPECT_EQ(r.loads(0).num_used_tokens(), 0);
    EXPECT_FALSE(r.loads(0).has_memory()) << "core fields only unless asked";
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(10));
    sg::GetLoadsRequest q;
    q.set_dp_rank(3);
    sg::GetLoadsResponse r;
    EXPECT_EQ(node.stub->GetLoads(&ctx, q, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_F(SglangRpc, BadRequestsAreRefusedWithTheirCode) {
  SgNode node;
  auto code = [&](sg::GenerateRequest req) {
    auto r = Gen(*node.stub, req, 1, 30);
    EXPECT_TRUE(r.msgs.empty());
    return r.status.error_code();
  };
  const auto prompt = PatternPrompt(10, 1);
  EXPECT_EQ(code(Req("", prompt, 4, false)), grpc::StatusCode::INVALID_ARGUMENT) << "no request_id";
  EXPECT_EQ(code(Req("empty", {}, 4, false)), grpc::StatusCode::INVALID_ARGUMENT) << "no tokens";
  EXPECT_EQ(code(Req("bad-id", {5, 999999, 7}, 4, false)), grpc::StatusCode::INVALID_ARGUMENT) << "token id past the vocabulary";
  auto r = Req("rank", prompt, 4, false);
  r.set_data_parallel_rank(5);
  EXPECT_EQ(code(r), grpc::StatusCode::INVALID_ARGUMENT) << "no such DP rank";
  r = Req("topk", prompt, 4, false);
  r.mutable_sampling_params()->set_top_k(-5);
  EXPECT_EQ(code(r), grpc::StatusCode::INVALID_ARGUMENT);
  r = Req("temp", prompt, 4, false);
  r.mutable_sampling_params()->set_temperature(-1);
  EXPECT_EQ(code(r), grpc::StatusCode::INVALID_ARGUMENT);
  r = Req("tag", prompt, 4, false);
  r.mutable_sampling_params()->set_structural_tag("{}");
  EXPECT_EQ(code(r), grpc::StatusCode::INVALID_ARGUMENT);
  r = Req("lora", prompt, 4, false);
  r.set_lora_id("x");
  EXPECT_EQ(code(r), grpc::StatusCode::INVALID_ARGUMENT);
  r = Req("bias", prompt, 4, false);
  (*r.mutable_sampling_params()->mutable_logit_bias())["5"] = 1.0f;
  EXPECT_EQ(code(r), grpc::StatusCode::INVALID_ARGUMENT);
  r = Req("prompt-lp", prompt, 4, false);
  r.set_logprob_start_len(0);
  EXPECT_EQ(code(r), grpc::StatusCode::INVALID_ARGUMENT) << "prompt logprobs";
  r = Req("mm", prompt, 4, false);
  r.mutable_mm_inputs()->add_image_urls("http://x/y.png");
  EXPECT_EQ(code(r), grpc::StatusCode::INVALID_ARGUMENT);
  // What is not served says so.
  grpc::ClientContext ctx;
  ctx.set_deadline(In(10));
  sg::EmbedResponse er;
  EXPECT_EQ(node.stub->Embed(&ctx, {}, &er).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  grpc::ClientContext fctx;
  fctx.set_deadline(In(10));
  common::FlushCacheResponse fr;
  EXPECT_EQ(node.stub->FlushCache(&fctx, {}, &fr).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  grpc::ClientContext tctx;
  tctx.set_deadline(In(10));
  auto tr = node.stub->GetTokenizer(&tctx, {});
  common::GetTokenizerChunk chunk;
  EXPECT_FALSE(tr->Read(&chunk));
  EXPECT_EQ(tr->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_TRUE(node.Idle());
}

// --- KV events --------------------------------------------------------------------------

// A subscription read on this thread: every Read is bounded by the stream's deadline.
struct Subscription {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<common::KvEventBatch>> reader;
  std::vector<common::KvEventBatch> got;
  Subscription(sg::SglangScheduler::Stub& stub, uint64_t start, int seconds = 60) {
    ctx.set_deadline(In(seconds));
    common::SubscribeKvEventsRequest req;
    req.set_start_sequence_number(start);
    reader = stub.SubscribeKvEvents(&ctx, req);
  }
  // Reads until `done` holds for what was read; false if the stream ended first.
  template <typename F>
  bool ReadUntil(F done) {
    common::KvEventBatch b;
    while (!done(got)) {
      if (!reader->Read(&b)) return false;
      got.push_back(b);
    }
    return true;
  }
  grpc::Status Close() {
    ctx.TryCancel();
    common::KvEventBatch b;
    while (reader->Read(&b)) {
    }
    return reader->Finish();
  }
};

kvcache::BlockKey ChainKey(const std::vector<TokenId>& prompt, size_t block) {
  const std::vector<kvcache::ExtraKey> extras = {{kvcache::ExtraTag::kModel, engine::ModelFingerprint(Mc())}};
  kvcache::BlockKey k{};
  for (size_t i = 0; i <= block; ++i) {
    const auto toks = std::span<const TokenId>(prompt).subspan(i * 128, 128);
    k = engine::HashBlock(i == 0 ? nullptr : &k, toks, extras);
  }
  return k;
}
std::string Bytes(const kvcache::BlockKey& k) {
  std::string out;
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>(k.hi >> (8 * i)));
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>(k.lo >> (8 * i)));
  return out;
}

// Every stored block (64-bit hash → its tokens and the batch it came in) seen so far.
struct Seen {
  std::map<int64_t, std::vector<uint32_t>> tokens;
  std::map<int64_t, uint64_t> seq;
  std::map<int64_t, std::optional<int64_t>> parent;
  std::set<std::string> group_keys;
  std::set<int64_t> removed;
  int cleared = 0;
};
Seen Scan(const std::vector<common::KvEventBatch>& batches) {
  Seen s;
  for (const auto& b : batches) {
    for (const auto& e : b.events()) {
      if (e.has_stored()) {
        for (int i = 0; i < e.stored().blocks_size(); ++i) {
          const auto& blk = e.stored().blocks(i);
          s.tokens[blk.block_hash()].assign(blk.token_ids().begin(), blk.token_ids().end());
          s.seq[blk.block_hash()] = b.sequence_number();
          if (i == 0) {
            s.parent[blk.block_hash()] =
                e.stored().has_parent_block_hash() ? std::optional<int64_t>(e.stored().parent_block_hash()) : std::nullopt;
          } else {
            s.parent[blk.block_hash()] = e.stored().blocks(i - 1).block_hash();
          }
        }
      }
      if (e.has_removed()) s.removed.insert(e.removed().block_hashes().begin(), e.removed().block_hashes().end());
      if (e.has_cleared()) ++s.cleared;
    }
    for (const auto& g : b.group_events()) {
      if (g.operation() == common::KvGroupEvent::STORE) s.group_keys.insert(g.block_hashes().begin(), g.block_hashes().end());
    }
  }
  return s;
}

TEST_F(SglangRpc, KvEventsNameTheStoredBlocksAndResume) {
  SgNode node;
  Subscription sub(*node.stub, 0);
  ASSERT_TRUE(sub.ReadUntil([](const auto& g) { return !g.empty(); }));
  EXPECT_EQ(sub.got[0].sequence_number(), 1u);
  ASSERT_EQ(sub.got[0].events_size(), 1);
  EXPECT_TRUE(sub.got[0].events(0).has_cleared()) << "batch 1: the rank starts empty";
  EXPECT_EQ(sub.got[0].dp_rank(), 0);

  const auto prompt = PatternPrompt(300, 21);  // two full prompt blocks
  ASSERT_TRUE(Gen(*node.stub, Req("kv-1", prompt, 8, false)).status.ok());
  const kvcache::BlockKey k0 = ChainKey(prompt, 0), k1 = ChainKey(prompt, 1);
  const int64_t h0 = static_cast<int64_t>(k0.hi), h1 = static_cast<int64_t>(k1.hi);
  ASSERT_TRUE(sub.ReadUntil([&](const auto& g) {
    const Seen s = Scan(g);
    return s.tokens.count(h0) && s.tokens.count(h1);
  }));
  const Seen s = Scan(sub.got);
  EXPECT_EQ(s.tokens.at(h0), std::vector<uint32_t>(prompt.begin(), prompt.begin() + 128));
  EXPECT_EQ(s.tokens.at(h1), std::vector<uint32_t>(prompt.begin() + 128, prompt.begin() + 256));
  EXPECT_EQ(s.parent.at(h0), std::nullopt) << "the prompt's first block has no parent";
  EXPECT_EQ(s.parent.at(h1), std::optional<int64_t>(h0));
  EXPECT_TRUE(s.group_keys.count(Bytes(k0)) && s.group_keys.count(Bytes(k1))) << "the full 128-bit chain keys";
  for (const auto& b : sub.got) {
    for (const auto& e : b.events()) {
      if (e.has_stored()) {
        for (const auto& blk : e.stored().blocks()) EXPECT_EQ(blk.block_size(), 128);
      }
    }
  }
  // Batches are numbered 1, 2, ... without gaps.
  for (size_t i = 0; i < sub.got.size(); ++i) EXPECT_EQ(sub.got[i].sequence_number(), i + 1);
  EXPECT_TRUE(sub.Close().error_code() == grpc::StatusCode::CANCELLED);

  // Resume from the batch that stored k0: the same batches again, from that one.
  const uint64_t from = s.seq.at(h0);
  Subscription again(*node.stub, from);
  ASSERT_TRUE(again.ReadUntil([&](const auto& g) { return g.size() >= sub.got.size() - (from - 1); }));
  EXPECT_EQ(again.got[0].sequence_number(), from);
  for (size_t i = 0; i < again.got.size(); ++i) {
    EXPECT_EQ(again.got[i].SerializeAsString(), sub.got[from - 1 + i].SerializeAsString()) << i;
  }
  // A live event reaches the resumed stream: a new prompt's block.
  const auto prompt2 = PatternPrompt(140, 22);
  ASSERT_TRUE(Gen(*node.stub, Req("kv-2", prompt2, 2, false)).status.ok());
  const int64_t h2 = static_cast<int64_t>(ChainKey(prompt2, 0).hi);
  ASSERT_TRUE(again.ReadUntil([&](const auto& g) { return Scan(g).tokens.count(h2) > 0; }));
  again.Close();

  // Past the next number: the engine restarted (or the client is confused).
  Subscription ahead(*node.stub, node.log->Range(0).second + 5, 10);
  common::KvEventBatch b;
  EXPECT_FALSE(ahead.reader->Read(&b));
  EXPECT_EQ(ahead.reader->Finish().error_code(), grpc::StatusCode::OUT_OF_RANGE);
}

// A small pool: a third prompt evicts blocks the first two stored, and the subscriber hears of
// it. A small log: a subscriber too far behind is told DATA_LOSS.
TEST_F(SglangRpc, KvEventsReportEvictionAndLoss) {
  SgNode node(/*num_blocks=*/8, /*log_entries=*/4);
  Subscription sub(*node.stub, 0);
  std::set<int64_t> stored;
  for (int i = 0; i < 4; ++i) {
    const auto prompt = PatternPrompt(300, 40 + i);
    ASSERT_TRUE(Gen(*node.stub, Req("ev-" + std::to_string(i), prompt, 4, false)).status.ok()) << i;
    stored.insert(static_cast<int64_t>(ChainKey(prompt, 0).hi));
    stored.insert(static_cast<int64_t>(ChainKey(prompt, 1).hi));
  }
  // 4 prompts × 3 blocks in a pool of 8: the later prompts evicted earlier blocks.
  ASSERT_TRUE(sub.ReadUntil([&](const auto& g) { return !Scan(g).removed.empty(); }));
  for (int64_t h : Scan(sub.got).removed) EXPECT_TRUE(stored.count(h)) << "an evicted block was a stored one";
  sub.Close();
  // The log keeps 4 batches: resuming after batch 1 lost some.
  const auto [oldest, next] = node.log->Range(0);
  ASSERT_GE(oldest, 3u);
  Subscription late(*node.stub, 1, 10);
  common::KvEventBatch b;
  EXPECT_FALSE(late.reader->Read(&b));
  EXPECT_EQ(late.reader->Finish().error_code(), grpc::StatusCode::DATA_LOSS);
  // A subscriber that had applied the batch before the oldest kept misses nothing.
  Subscription edge(*node.stub, oldest - 1);
  ASSERT_TRUE(edge.ReadUntil([](const auto& g) { return !g.empty(); }));
  EXPECT_EQ(edge.got[0].sequence_number(), oldest);
  edge.Close();
  (void)next;
}

// `ladle entrypoint --engine sglang://host:port`: the routed engine drives an SGLang worker
// through the in-process bridge (sglang_bridge.h), bit-identical to a local engine; a cancel
// reaches the worker and frees its KV.
TEST_F(SglangRpc, TheEntrypointDrivesAnSglangWorker) {
  SgNode node;
  auto local = MakeEngine(Ec());
  auto routed = Route({"sglang://127.0.0.1:" + std::to_string(node.srv->port())});
  WaitAlive(*routed, 1);
  ASSERT_NO_FATAL_FAILURE(ExpectMatchesLocal(*local, *routed));
  Sink s;
  auto id = routed->Submit({PatternPrompt(50, 2), Greedy(60000), nullptr}, s.Fn());
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 400 && s.Count() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(s.Count(), 2u);
  routed->Cancel(*id);
  ASSERT_TRUE(s.Wait(10));
  EXPECT_EQ(s.finish[0], engine::FinishKind::kCancelled);
  EXPECT_TRUE(node.Idle()) << "the worker's request is cancelled through the bridge";
  local->Shutdown();
  routed->Shutdown();
}

// A worker that serves only SglangScheduler (as an SGLang worker does), named without a scheme:
// the entrypoint finds out (VllmEngine UNIMPLEMENTED, SglangScheduler answering) and drives it
// through the bridge.
TEST_F(SglangRpc, AnSglangOnlyWorkerIsFoundWithoutAScheme) {
  SgNode node;
  EngineServerOptions o;
  o.info.name = "sglang-only";
  o.info.vocab_size = Mc().vocab_size;
  auto svc = MakeSglangService(o, {node.eng.get()}, [] { return false; });
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(svc.get());
  auto server = b.BuildAndStart();
  ASSERT_TRUE(server && port > 0);
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  auto local = MakeEngine(Ec());
  auto routed = Route({addr});
  WaitAlive(*routed, 1);
  Sink a, r;
  ASSERT_TRUE(local->Submit({PatternPrompt(130, 8), Greedy(12), nullptr}, a.Fn()).ok());
  ASSERT_TRUE(routed->Submit({PatternPrompt(130, 8), Greedy(12), nullptr}, r.Fn()).ok());
  ASSERT_TRUE(a.Wait());
  ASSERT_TRUE(r.Wait());
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(a.tokens, r.tokens);
  EXPECT_EQ(a.logprobs, r.logprobs);
  bool found = false;
  for (const auto& e : routed->GetClusterStats().engines) found |= e.alive && e.name == "sglang://" + addr;
  EXPECT_TRUE(found);
  local->Shutdown();
  routed->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->Wait();
}

}  // namespace
}  // namespace ladle::cluster
