// The engine RPC end to end on loopback: EngineServer in front of real engines (the built-in
// model at a small vocabulary), RoutedEngine driving them over gRPC. Every comparison is with
// a local engine of the same model running the same request, which is bit-identical by the
// model's batch invariance (docs/model.md).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "cluster/cluster_test_util.h"
#include "engine/engine_test_util.h"
#include "ladle/cluster/engine_server.h"
#include "ladle/cluster/routed_engine.h"
#include "ladle/engine/engine_config.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::cluster {
namespace {

using namespace test_util;  // NOLINT: the shared helpers (cluster_test_util.h)
using engine::testing::PatternPrompt;
using engine::TokenId;

class Cluster : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }
};

TEST_F(Cluster, RemoteEngineMatchesLocalBitForBit) {
  Node node(Role::kBoth, "both-0");
  auto local = MakeEngine(Ec());
  auto routed = Route({node.addr});
  WaitAlive(*routed, 1);
  ASSERT_NO_FATAL_FAILURE(ExpectMatchesLocal(*local, *routed));
  local->Shutdown();
  routed->Shutdown();
}

TEST_F(Cluster, SeededSamplesMatchLocal) {
  Node node(Role::kBoth, "both-0");
  auto local = MakeEngine(Ec());
  auto routed = Route({node.addr});
  WaitAlive(*routed, 1);
  engine::SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  p.n = 2;
  p.seed = 1234;
  p.max_tokens = 12;
  p.ignore_eos = true;
  Sink a(2), b(2);
  ASSERT_TRUE(local->Submit({PatternPrompt(40, 1), p, nullptr}, a.Fn()).ok());
  ASSERT_TRUE(routed->Submit({PatternPrompt(40, 1), p, nullptr}, b.Fn()).ok());
  ASSERT_TRUE(a.Wait());
  ASSERT_TRUE(b.Wait());
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(b.tokens[0], b.tokens[1]);
  local->Shutdown();
  routed->Shutdown();
}

TEST_F(Cluster, CancelFreesTheEnginesRequest) {
  Node node(Role::kBoth, "both-0");
  auto routed = Route({node.addr});
  WaitAlive(*routed, 1);
  Sink s;
  auto id = routed->Submit({PatternPrompt(50, 2), Greedy(60000), nullptr}, s.Fn());
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 400 && s.Count() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(s.Count(), 2u);
  routed->Cancel(*id);
  ASSERT_TRUE(s.Wait(10));
  EXPECT_EQ(s.finish[0], engine::FinishKind::kCancelled);
  // The stream reset reaches the engine server, which cancels the engine request.
  bool freed = false;
  for (int i = 0; i < 500 && !freed; ++i) {
    const engine::Stats st = node.eng->GetStats();
    freed = st.running == 0 && st.queue_depth == 0;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(freed);
  routed->Shutdown();
}

TEST_F(Cluster, NoEngineAliveIsUnavailable) {
  RoutedEngineOptions o;
  o.engines = {"127.0.0.1:1"};  // nothing listens there
  auto r = RoutedEngine::Create(o, 0);
  ASSERT_TRUE(r.ok());
  Sink s;
  auto id = (*r)->Submit({PatternPrompt(5, 3), Greedy(4), nullptr}, s.Fn());
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
  (*r)->Shutdown();
}

// An engine dies mid-stream: the request resumes on the other with the prompt plus what was
// generated. Nothing is lost or repeated, and the continuation is what an engine given that
// prompt produces.
TEST_F(Cluster, RunningRequestResumesOnAnotherEngine) {
  auto a = std::make_unique<Node>(Role::kBoth, "both-a");
  auto b = std::make_unique<Node>(Role::kBoth, "both-b");
  auto routed = Route({a->addr, b->addr});
  WaitAlive(*routed, 2);
  const int total = 48;
  const auto prompt = PatternPrompt(60, 4);
  Sink s;
  ASSERT_TRUE(routed->Submit({prompt, Greedy(total), nullptr}, s.Fn()).ok());
  for (int i = 0; i < 1000 && s.Count() < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(s.Count(), 6u);
  // Kill whichever holds it.
  auto st = routed->GetClusterStats();
  Node* victim = st.engines[0].in_flight > 0 ? a.get() : b.get();
  victim->Kill();
  ASSERT_TRUE(s.Wait());
  EXPECT_EQ(s.error, "");
  ASSERT_EQ(s.tokens[0].size(), static_cast<size_t>(total));
  EXPECT_EQ(s.finish[0], engine::FinishKind::kLength);
  EXPECT_GE(routed->GetClusterStats().reroutes, 1u);
  // The reference: the unfaulted run up to where the stream moved, then an engine given the
  // prompt plus those tokens.
  auto local = MakeEngine(Ec());
  Sink full;
  ASSERT_TRUE(local->Submit({prompt, Greedy(total), nullptr}, full.Fn()).ok());
  ASSERT_TRUE(full.Wait());
  size_t same = 0;
  while (same < static_cast<size_t>(total) && s.tokens[0][same] == full.tokens[0][same]) ++same;
  ASSERT_GE(same, 6u) << "tokens before the fault must be the unfaulted run's";
  // Where the second engine took over (at or after the 6th token), it continued correctly.
  for (size_t cut = 6; cut < static_cast<size_t>(total); ++cut) {
    std::vector<TokenId> p2 = prompt;
    p2.insert(p2.end(), s.tokens[0].begin(), s.tokens[0].begin() + static_cast<long>(cut));
    Sink rest;
    ASSERT_TRUE(local->Submit({p2, Greedy(total - static_cast<int>(cut)), nullptr}, rest.Fn()).ok());
    ASSERT_TRUE(rest.Wait());
    if (std::equal(rest.tokens[0].begin(), rest.tokens[0].end(), s.tokens[0].begin() + static_cast<long>(cut))) {
      SUCCEED() << "resumed at token " << cut;
      local->Shutdown();
      routed->Shutdown();
      return;
    }
    if (cut >= same) break;  // past the first divergence no later cut can explain it
  }
  ADD_FAILURE() << "the resumed stream is not an engine's continuation of the tokens before it";
  local->Shutdown();
  routed->Shutdown();
}

// PD: prefill on one engine, decode on another. The full blocks go through the shared store,
// the rest of the prefill's state (rings, partial block, sampler) engine to engine: the output is
// bit-identical to one engine doing the whole request.
TEST_F(Cluster, PrefillThenDecodeIsExact) {
  engine::testing::TempDir dir("cluster-pd");
  auto store = kvcache::KvStore::Open("fs:" + dir.path, kvcache::StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::shared_ptr<kvcache::KvStore> shared(std::move(store).value());
  Node p(Role::kPrefill, "prefill-0", shared);
  Node d(Role::kDecode, "decode-0", shared);
  auto routed = Route({p.addr, d.addr}, shared);
  WaitAlive(*routed, 2);
  auto local = MakeEngine(Ec());
  int handoffs = 0;
  for (int len : {40, 128, 300, 700}) {
    const auto prompt = PatternPrompt(len, 100 + len);  // no prefix shared between lengths
    Sink a, b;
    ASSERT_TRUE(local->Submit({prompt, Greedy(12), nullptr}, a.Fn()).ok());
    ASSERT_TRUE(routed->Submit({prompt, Greedy(12), nullptr}, b.Fn()).ok());
    ASSERT_TRUE(a.Wait());
    ASSERT_TRUE(b.Wait());
    ++handoffs;
    EXPECT_EQ(b.error, "");
    EXPECT_EQ(a.tokens, b.tokens) << "len " << len;
    EXPECT_EQ(a.logprobs, b.logprobs) << "len " << len;
  }
  const auto cs = routed->GetClusterStats();
  EXPECT_EQ(cs.handoffs, static_cast<uint64_t>(handoffs));
  EXPECT_EQ(cs.handoff_ms.size(), static_cast<size_t>(handoffs));
  // The figure docs/cluster.md quotes: prefill's last token to the decode engine's first.
  std::cout << "hand-off ms (prefill done -> first decode token), in prompt order:";
  for (double ms : cs.handoff_ms) std::cout << " " << ms;
  std::cout << "\n";
  // The same latencies as /metrics' ladle_handoff_latency_seconds histogram: one count each, in
  // the bucket of its value, and their sum.
  const engine::Stats rs = routed->GetStats();
  ASSERT_EQ(rs.handoff_latency_buckets.size(), std::size(engine::kHandoffLatencyBoundsS) + 1);
  uint64_t counted = 0;
  double sum_ms = 0;
  for (uint64_t c : rs.handoff_latency_buckets) counted += c;
  for (double ms : cs.handoff_ms) {
    sum_ms += ms;
    const auto& b = engine::kHandoffLatencyBoundsS;
    const size_t bucket = static_cast<size_t>(std::lower_bound(std::begin(b), std::end(b), ms / 1e3) - std::begin(b));
    EXPECT_GE(rs.handoff_latency_buckets[bucket], 1u) << ms << " ms";
  }
  EXPECT_EQ(counted, static_cast<uint64_t>(handoffs));
  // Every prefill was charged its compute-quota on the prefill rank (a counter), none is
  // outstanding now, and the decode rank was charged none.
  ASSERT_EQ(rs.rank_loads.size(), 2u);
  for (const auto& rl : rs.rank_loads) {
    EXPECT_EQ(rl.requests, 0) << rl.engine;
    EXPECT_EQ(rl.quota_seconds, 0.0) << rl.engine;
    if (rl.role == "prefill") EXPECT_GT(rl.quota_seconds_total, 0.0);
    if (rl.role == "decode") EXPECT_EQ(rl.quota_seconds_total, 0.0);
  }
  EXPECT_NEAR(rs.handoff_latency_seconds_total, sum_ms / 1e3, 1e-6);
  EXPECT_EQ(cs.handoff_store_waits_timed_out, 0u);
  const engine::Stats ps = p.eng->GetStats(), ds = d.eng->GetStats();
  EXPECT_EQ(ps.handoff_exports, static_cast<uint64_t>(handoffs));
  EXPECT_EQ(ds.handoff_imports, static_cast<uint64_t>(handoffs)) << "every decode continued from the export";
  EXPECT_EQ(ds.handoff_fallbacks, 0u);
  EXPECT_GT(ds.prefix_hit_tokens_store, 0u) << "the decode engine reads the prefill's blocks from the store";
  local->Shutdown();
  routed->Shutdown();
}

// The next turn of a conversation: its prefill engine has no SWA entry of its own for the
// prefix (the decode engine made it at the end of turn 1), so it fetches it from the decode
// engine, named by the entrypoint's directory, and skips the whole prefix exactly.
TEST_F(Cluster, NextTurnFetchesTheSwaEntryFromTheDecodeEngine) {
  engine::testing::TempDir dir("cluster-turn");
  auto store = kvcache::KvStore::Open("fs:" + dir.path, kvcache::StoreOptions{});
  ASSERT_TRUE(store.ok());
  std::shared_ptr<kvcache::KvStore> shared(std::move(store).value());
  Node p(Role::kPrefill, "prefill-0", shared);
  Node d(Role::kDecode, "decode-0", shared);
  auto routed = Route({p.addr, d.addr}, shared);
  WaitAlive(*routed, 2);
  auto local = MakeEngine(Ec());
  auto turn1 = PatternPrompt(300, 7);
  Sink a1, b1;
  ASSERT_TRUE(local->Submit({turn1, Greedy(200), nullptr}, a1.Fn()).ok());
  ASSERT_TRUE(routed->Submit({turn1, Greedy(200), nullptr}, b1.Fn()).ok());
  ASSERT_TRUE(a1.Wait());
  ASSERT_TRUE(b1.Wait());
  ASSERT_EQ(a1.tokens, b1.tokens);
  // Turn 2: the prompt, the answer, a new question.
  auto turn2 = turn1;
  turn2.insert(turn2.end(), b1.tokens[0].begin(), b1.tokens[0].end());
  const auto q = PatternPrompt(60, 8);
  turn2.insert(turn2.end(), q.begin(), q.end());
  // The decode engine's end-of-request entry reaches the entrypoint's directory with a report
  // (polled every poll_ms; 10 s deadline), next to the prefill's entry at turn 1's hit anchor.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (routed->GetClusterStats().swa_directory_entries < 2 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(routed->GetClusterStats().swa_directory_entries, 2u);
  Sink a2, b2;
  ASSERT_TRUE(local->Submit({turn2, Greedy(12), nullptr}, a2.Fn()).ok());
  ASSERT_TRUE(routed->Submit({turn2, Greedy(12), nullptr}, b2.Fn()).ok());
  ASSERT_TRUE(a2.Wait());
  ASSERT_TRUE(b2.Wait());
  EXPECT_EQ(a2.tokens, b2.tokens);
  EXPECT_EQ(a2.logprobs, b2.logprobs);
  const engine::Stats ps = p.eng->GetStats();
  EXPECT_GE(ps.swa_hits, 1u) << "the prefill engine restored the entry it fetched";
  EXPECT_EQ(ps.replayed_tokens, 0u);
  local->Shutdown();
  routed->Shutdown();
}

// What an engine counts reaches the entrypoint's Stats (and so its /metrics) over GetQuota: the
// speculative-decoding counters and histogram, summed over ranks, and every rank's load.
class CountingEngine final : public engine::Engine {
 public:
  explicit CountingEngine(uint64_t k) : k_(k) {}
  Result<engine::RequestId> Submit(engine::SubmitRequest, engine::OutputSink) override {
    return Status(StatusCode::kUnavailable, "counters only");
  }
  void Cancel(engine::RequestId) override {}
  engine::Stats GetStats() const override {
    engine::Stats s;
    s.spec_draft_tokens = 10 * k_;
    s.spec_accepted_tokens = 6 * k_;
    s.spec_verify_tokens = 14 * k_;
    s.spec_verify_lengths = {k_, 2 * k_, 3 * k_};
    s.running = k_;
    return s;
  }
  void Shutdown() override {}

 private:
  uint64_t k_;
};

TEST_F(Cluster, EngineCountersReachTheEntrypoint) {
  CountingEngine r0(1), r1(2);
  EngineServerOptions o;
  o.info.name = "decode-x";
  o.info.role = Role::kDecode;
  o.info.key_extras = {{kvcache::ExtraTag::kModel, engine::ModelFingerprint(Mc())}};
  o.info.vocab_size = Mc().vocab_size;
  auto srv = EngineServer::Start(std::move(o), {&r0, &r1});
  ASSERT_TRUE(srv.ok()) << srv.status().ToString();
  auto routed = Route({"127.0.0.1:" + std::to_string((*srv)->port())});
  WaitAlive(*routed, 1);
  engine::Stats s;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    s = routed->GetStats();
    if (s.spec_draft_tokens == 30) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < until);
  EXPECT_EQ(s.spec_draft_tokens, 30u);
  EXPECT_EQ(s.spec_accepted_tokens, 18u);
  EXPECT_EQ(s.spec_verify_tokens, 42u);
  EXPECT_EQ(s.spec_verify_lengths, (std::vector<uint64_t>{3, 6, 9}));
  ASSERT_EQ(s.rank_loads.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(s.rank_loads[static_cast<size_t>(i)].engine, "decode-x");
    EXPECT_EQ(s.rank_loads[static_cast<size_t>(i)].role, "decode");
    EXPECT_EQ(s.rank_loads[static_cast<size_t>(i)].rank, i);
    EXPECT_EQ(s.rank_loads[static_cast<size_t>(i)].running, i + 1) << "as the rank reported";
  }
  routed->Shutdown();
  (*srv)->Shutdown(1000);
}

// Two entrypoints share one SWA directory, sharded by key: turn 1 goes through one, turn 2
// through the other, and the prefill engine still fetches the decode engine's SWA entry, from
// whichever entrypoint owns its key. Then the owner of that key leaves: the next turn through
// the survivor is a miss that replays (correct output, no error).
TEST_F(Cluster, TheSwaDirectoryIsShardedAcrossEntrypoints) {
  engine::testing::TempDir dir("cluster-shard");
  auto store = kvcache::KvStore::Open("fs:" + dir.path, kvcache::StoreOptions{});
  ASSERT_TRUE(store.ok());
  std::shared_ptr<kvcache::KvStore> shared(std::move(store).value());
  Node p(Role::kPrefill, "prefill-0", shared);
  Node d(Role::kDecode, "decode-0", shared);
  auto make = [&](const std::string& name) {
    RoutedEngineOptions o;
    o.engines = {p.addr, d.addr};
    o.name = name;
    o.poll_ms = 50;
    o.dead_after_ms = 500;
    o.store = shared;
    o.directory_listen = "127.0.0.1:0";
    auto r = RoutedEngine::Create(o, 10'000);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  };
  auto ea = make("ep-a"), eb = make("ep-b");
  ea->AddDirectoryPeer(eb->directory_member());
  eb->AddDirectoryPeer(ea->directory_member());
  WaitAlive(*ea, 2);
  WaitAlive(*eb, 2);
  const auto until_ring = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((ea->GetClusterStats().directory_members.size() < 2 || eb->GetClusterStats().directory_members.size() < 2) &&
         std::chrono::steady_clock::now() < until_ring) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ea->GetClusterStats().directory_members.size(), 2u);
  auto local = MakeEngine(Ec());
  auto next_turn = [](std::vector<TokenId> prev, const std::vector<uint32_t>& answer, uint32_t seed) {
    prev.insert(prev.end(), answer.begin(), answer.end());
    const auto q = PatternPrompt(60, seed);
    prev.insert(prev.end(), q.begin(), q.end());
    return prev;
  };
  auto entries = [&] { return ea->GetClusterStats().swa_directory_entries + eb->GetClusterStats().swa_directory_entries; };
  // Turn 1 through entrypoint A.
  auto turn1 = PatternPrompt(300, 17);
  Sink a1, b1;
  ASSERT_TRUE(local->Submit({turn1, Greedy(200), nullptr}, a1.Fn()).ok());
  ASSERT_TRUE(ea->Submit({turn1, Greedy(200), nullptr}, b1.Fn()).ok());
  ASSERT_TRUE(a1.Wait());
  ASSERT_TRUE(b1.Wait());
  ASSERT_EQ(a1.tokens, b1.tokens);
  // The decode engine's end-of-request entry reaches its owner's shard with a report.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (entries() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(entries(), 2u);
  // Turn 2 through entrypoint B: a hit on the fetched entry, nothing replayed, exact output.
  const auto turn2 = next_turn(turn1, b1.tokens[0], 18);
  Sink a2, b2;
  ASSERT_TRUE(local->Submit({turn2, Greedy(12), nullptr}, a2.Fn()).ok());
  ASSERT_TRUE(eb->Submit({turn2, Greedy(12), nullptr}, b2.Fn()).ok());
  ASSERT_TRUE(a2.Wait());
  ASSERT_TRUE(b2.Wait());
  EXPECT_EQ(b2.error, "");
  EXPECT_EQ(a2.tokens, b2.tokens);
  EXPECT_EQ(a2.logprobs, b2.logprobs);
  engine::Stats ps = p.eng->GetStats();
  EXPECT_GE(ps.swa_hits, 1u) << "the prefill engine restored the entry the directory named";
  EXPECT_EQ(ps.replayed_tokens, 0u);
  const auto sa = ea->GetClusterStats(), sb = eb->GetClusterStats();
  EXPECT_GT(sa.directory_remote_lookups + sb.directory_remote_lookups, 0u) << "each asked the other's shard";
  EXPECT_EQ(sa.directory_remote_failures + sb.directory_remote_failures, 0u);
  // Entrypoint A leaves. Turn 3 through B: keys A owned are misses now (a replay), the output
  // is still exact, and nothing fails.
  ea->Shutdown();
  ea.reset();
  const auto turn3 = next_turn(turn2, b2.tokens[0], 19);
  Sink a3, b3;
  ASSERT_TRUE(local->Submit({turn3, Greedy(12), nullptr}, a3.Fn()).ok());
  ASSERT_TRUE(eb->Submit({turn3, Greedy(12), nullptr}, b3.Fn()).ok());
  ASSERT_TRUE(a3.Wait());
  ASSERT_TRUE(b3.Wait());
  EXPECT_EQ(b3.error, "");
  EXPECT_EQ(a3.tokens, b3.tokens);
  const auto until_alone = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (eb->GetClusterStats().directory_members.size() != 1 && std::chrono::steady_clock::now() < until_alone) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(eb->GetClusterStats().directory_members, std::vector<std::string>{eb->directory_member()});
  local->Shutdown();
  eb->Shutdown();
}

}  // namespace
}  // namespace ladle::cluster
