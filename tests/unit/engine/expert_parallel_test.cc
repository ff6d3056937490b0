// Expert parallelism in the reference model (src/engine/model/expert_parallel.cc): outputs
// bit-identical with and without EP under any placement and while placements change, the
// statistics the balancer plans from, live re-arrangement (bytes moved, switch at a step
// boundary), the router bias giving the balancer work, and the engine serving 32 streams
// while placements change every few steps.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>

#include "engine_test_util.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/eplb/placement.h"
#include "model/expert_parallel.h"
#include "model/ref_model.h"
#include "model/weights.h"

namespace ladle::engine {
namespace {

using model::ExpertParallel;
using model::RefModel;

// 8 experts top-2 over 4 MoE layers, small enough for milliseconds per step.
ModelConfig Small() {
  ModelConfig c;
  c.vocab_size = 1000;
  c.hidden = 64;
  c.heads = 2;
  c.head_dim = 32;
  c.experts = 8;
  c.experts_top_k = 2;
  c.expert_hidden = 64;
  c.window = 16;
  c.block_size = 16;
  c.swa_ring = 22;
  return c;
}

std::unique_ptr<Model> Make(const ModelConfig& c, const ExpertParallelConfig* ep, const std::string& dir = "") {
  auto m = Model::Create(c, dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return nullptr;
  if (ep != nullptr) {
    Status s = (*m)->ConfigureExpertParallel(*ep);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return nullptr;
  }
  return std::move(m).value();
}

ExpertParallel* Ep(Model& m) { return static_cast<RefModel&>(m).expert_parallel(); }

// Drives several sequences through prefill (in chunks) and decode, batched, feeding back a
// fixed token stream; returns every step's logits.
struct Driver {
  ModelConfig c;
  std::unique_ptr<KvStorage> kv;
  std::vector<std::vector<TokenId>> seqs;
  std::vector<int64_t> pos;
  std::vector<std::vector<int32_t>> tables;

  Driver(Model& m, int n, uint64_t seed) : c(m.config()) {
    kv = m.NewKvStorage(16 * n, n);
    std::mt19937_64 rng(seed);
    for (int i = 0; i < n; ++i) {
      std::vector<TokenId> t(static_cast<size_t>(40 + 9 * i));
      for (auto& x : t) x = static_cast<TokenId>(rng() % static_cast<uint64_t>(c.vocab_size));
      seqs.push_back(t);
      pos.push_back(0);
      std::vector<int32_t> tb;
      for (int b = 0; b < 16; ++b) tb.push_back(i * 16 + b);
      tables.push_back(tb);
    }
  }
  // One step: every sequence advances by a prefill chunk of up to 24 tokens, or one token
  // (its next token is a function of its position, the same for every model).
  std::vector<float> Step(Model& m, int step) {
    std::vector<SeqStep> batch;
    std::vector<std::vector<TokenId>> toks(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t left = static_cast<int64_t>(seqs[i].size()) - pos[i];
      SeqStep s;
      if (left > 0) {
        const int64_t n = std::min<int64_t>(24, left);
        toks[i].assign(seqs[i].begin() + pos[i], seqs[i].begin() + pos[i] + n);
        s.prefill = true;
      } else {
        toks[i] = {static_cast<TokenId>((pos[i] * 37 + static_cast<int64_t>(i) * 11 + step) % c.vocab_size)};
      }
      s.tokens = toks[i];
      s.start_pos = pos[i];
      s.block_table = tables[i];
      s.swa_slot = static_cast<int32_t>(i);
      s.kv_written = pos[i];
      batch.push_back(s);
    }
    std::vector<float> logits;
    Status st = m.Forward(batch, *kv, &logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (size_t i = 0; i < seqs.size(); ++i) pos[i] += static_cast<int64_t>(toks[i].size());
    return logits;
  }
};

void ExpectSameRun(Model& plain, Model& ep, int steps, const std::string& what) {
  Driver a(plain, 5, 7), b(ep, 5, 7);
  for (int t = 0; t < steps; ++t) {
    std::vector<float> la = a.Step(plain, t), lb = b.Step(ep, t);
    ASSERT_EQ(la.size(), lb.size());
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << what << ": step " << t;
    // Let the mover finish between some steps so placements switch mid-run.
    if (t % 3 == 0) {
      ASSERT_TRUE(Ep(ep)->WaitIdle(10000));
    }
  }
}

TEST(ExpertParallel, LogitsAreBitIdenticalWithAndWithoutEpUnderEveryPlacement) {
  ModelConfig c = Small();
  auto plain = Make(c, nullptr);
  ASSERT_TRUE(plain);
  for (int ranks : {1, 2, 4}) {
    for (int redundant : {0, 1, 3}) {
      for (const char* policy : {"round-robin", "least-loaded"}) {
        ExpertParallelConfig ep;
        ep.ranks = ranks;
        ep.redundant_per_rank = redundant;
        ep.replica_policy = policy;
        ep.window_steps = 2;
        ep.interval_steps = 2;  // a new placement every other step
        auto m = Make(c, &ep);
        ASSERT_TRUE(m);
        ExpectSameRun(*plain, *m, 14, fmt::format("EP{} +{} {}", ranks, redundant, policy));
        ExpertParallelStats st;
        ASSERT_TRUE(m->GetExpertParallelStats(&st));
        EXPECT_EQ(st.steps, 14u);
        EXPECT_GT(st.rearrangements, 0u) << "placements must really change during the run";
      }
    }
  }
}

TEST(ExpertParallel, LoadedWeightsAndTheLayerBudgetPolicyStayBitIdentical) {
  // Safetensors weights are mmapped (any alignment); the ranks' copies are aligned buffers.
  ModelConfig c = Small();
  auto dir = std::filesystem::temp_directory_path() / fmt::format("ladle_ep_{}", ::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(model::ModelWeights::Seeded(c)->Save(dir.string()).ok());
  auto plain = Make(c, nullptr, dir.string());
  ExpertParallelConfig ep;
  ep.ranks = 4;
  ep.redundant_per_rank = 2;
  ep.placement_policy = "layer-budget";
  ep.window_steps = 3;
  ep.interval_steps = 3;
  auto m = Make(c, &ep, dir.string());
  ASSERT_TRUE(plain && m);
  ExpectSameRun(*plain, *m, 12, "loaded, layer budget");
  std::filesystem::remove_all(dir);
}

TEST(ExpertParallel, PaddingShapesAndBadConfigs) {
  ModelConfig c = Small();  // 8 experts
  auto m = Make(c, nullptr);
  ASSERT_TRUE(m);
  ExpertParallelConfig ep;
  ep.ranks = 3;  // 8 + 0 padded to 9: 3 slots per rank
  ASSERT_TRUE(m->ConfigureExpertParallel(ep).ok());
  ExpertParallelStats st;
  ASSERT_TRUE(m->GetExpertParallelStats(&st));
  EXPECT_EQ(st.slots_per_rank, 3);
  eplb::Placement p = Ep(*m)->CurrentPlacement();
  ASSERT_EQ(p.layers.size(), 4u);
  EXPECT_EQ(p.layers[0].phy2log.size(), 9u);
  EXPECT_TRUE(eplb::ValidatePlacement(p, 8).ok());
  ep.ranks = 4;
  ep.redundant_per_rank = 1;  // 8 + 4 = 12: 3 per rank
  ASSERT_TRUE(m->ConfigureExpertParallel(ep).ok());
  ASSERT_TRUE(m->GetExpertParallelStats(&st));
  EXPECT_EQ(st.slots_per_rank, 3);

  ExpertParallelConfig bad = ep;
  bad.num_nodes = 3;  // does not divide 4 ranks
  EXPECT_EQ(m->ConfigureExpertParallel(bad).code(), StatusCode::kInvalidArgument);
  bad = ep;
  bad.num_groups = 3;  // does not divide 8 experts
  EXPECT_EQ(m->ConfigureExpertParallel(bad).code(), StatusCode::kInvalidArgument);
  bad = ep;
  bad.replica_policy = "random";
  EXPECT_EQ(m->ConfigureExpertParallel(bad).code(), StatusCode::kInvalidArgument);
  bad = ep;
  bad.placement_policy = "magic";
  EXPECT_EQ(m->ConfigureExpertParallel(bad).code(), StatusCode::kInvalidArgument);
  bad = ep;
  bad.window_steps = 0;
  EXPECT_EQ(m->ConfigureExpertParallel(bad).code(), StatusCode::kInvalidArgument);
  ep.ranks = 0;  // off again
  ASSERT_TRUE(m->ConfigureExpertParallel(ep).ok());
  EXPECT_FALSE(m->GetExpertParallelStats(&st));
}

TEST(ExpertParallel, SkewedRoutingIsRebalancedAndMovesWeightsLive) {
  // With the router bias, a few experts take most tokens; the contiguous layout (no EPLB) is
  // then unbalanced, and the placement the window yields must do better on the same tokens.
  ModelConfig c = Small();
  c.experts = 16;
  ExpertParallelConfig ep;
  ep.ranks = 4;
  ep.redundant_per_rank = 2;
  ep.window_steps = 10;
  ep.interval_steps = 10;
  ep.router_skew = 1.2;
  ep.router_skew_half_life = 1'000'000;  // a stable hot set
  auto m = Make(c, &ep);
  ASSERT_TRUE(m);
  Driver d(*m, 6, 3);
  const eplb::Placement first = Ep(*m)->CurrentPlacement();
  for (int t = 0; t < 10; ++t) d.Step(*m, t);  // step 10 plans from steps 1..10
  ASSERT_TRUE(Ep(*m)->WaitIdle(10'000));
  ExpertParallelStats before;
  ASSERT_TRUE(m->GetExpertParallelStats(&before));
  EXPECT_EQ(before.rearrangements, 0u) << "a placement is switched in only at the next step boundary";
  d.Step(*m, 10);  // switches in at its start
  ExpertParallelStats st;
  ASSERT_TRUE(m->GetExpertParallelStats(&st));
  EXPECT_EQ(st.rearrangements, 1u);
  EXPECT_EQ(st.last_rearrange_step, 10u);
  EXPECT_GT(st.bytes_moved + st.bytes_copied_local, 0u);
  EXPECT_EQ((st.bytes_moved + st.bytes_copied_local) % (3ull * 64 * 64 * sizeof(float)), 0u)
      << "whole experts are copied";
  EXPECT_NE(Ep(*m)->CurrentPlacement().layers[0].phy2log, first.layers[0].phy2log);
  // Ten more steps under the new placement: the recent window holds them only.
  for (int t = 11; t < 111; ++t) d.Step(*m, t);
  ASSERT_TRUE(m->GetExpertParallelStats(&st));
  EXPECT_EQ(st.recent_steps, 100u);
  EXPECT_GT(st.moe_lb_static, 1.3) << "the router bias must skew the load";
  EXPECT_LT(st.moe_lb_mean, st.moe_lb_static) << "EPLB must beat the contiguous layout on the same tokens";
  EXPECT_GE(st.moe_lb_max, st.moe_lb_mean);
  EXPECT_GE(st.moe_lb_wall, 1.0);
  ASSERT_EQ(st.moe_lb_per_layer.size(), 4u);
}

TEST(ExpertParallel, WithoutTheBiasOutputsDoNotDependOnTheStep) {
  // The bias is the only step-dependent input; off (the default), a sequence run later, after
  // other traffic and re-arrangements, gets the same logits.
  ModelConfig c = Small();
  ExpertParallelConfig ep;
  ep.ranks = 2;
  ep.redundant_per_rank = 1;
  ep.window_steps = 1;
  ep.interval_steps = 1;
  auto m = Make(c, &ep);
  ASSERT_TRUE(m);
  Driver warm(*m, 3, 99);
  for (int t = 0; t < 7; ++t) warm.Step(*m, t);
  Driver a(*m, 2, 5);
  auto plain = Make(c, nullptr);
  Driver b(*plain, 2, 5);
  for (int t = 0; t < 5; ++t) {
    auto la = a.Step(*m, t), lb = b.Step(*plain, t);
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "step " << t;
  }
}

// --- The engine: 32 concurrent streams while placements change every few steps. ------------

std::vector<std::vector<TokenId>> RunAll(Engine& e, const std::vector<std::vector<TokenId>>& prompts, int max_tokens) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<TokenId>> got(prompts.size());
  std::vector<std::string> errors(prompts.size());
  size_t done = 0;
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = e.Submit({prompts[i], p, nullptr}, [&, i](const Output& o) {
      std::lock_guard lk(mu);
      for (const auto& ev : o.tokens) got[i].push_back(ev.token);
      if (o.finished) {
        errors[i] = o.error;
        ++done;
        cv.notify_all();
      }
    });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
  }
  std::unique_lock lk(mu);
  EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(300), [&] { return done == prompts.size(); }));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(errors[i], "") << "stream " << i;
  return got;
}

TEST(ExpertParallelEngine, ThirtyTwoStreamsWhilePlacementsChangeGiveTheSameGreedyOutput) {
  LADLE_REQUIRE_ENGINE_TOKENIZER();
  ModelConfig mc;
  mc.vocab_size = 8192;  // the rest of the built-in shape; a smaller LM head keeps it quick
  auto make = [&](bool with_ep) -> std::unique_ptr<Engine> {
    ExpertParallelConfig ep;
    ep.ranks = 4;
    ep.redundant_per_rank = 4;
    ep.window_steps = 3;
    ep.interval_steps = 3;
    auto m = Make(mc, with_ep ? &ep : nullptr);
    if (!m) return nullptr;
    EngineConfig c;
    c.num_blocks = 128;
    c.max_running = 32;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 64;
    auto e = CreateEngine(c, std::move(m), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  };
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<TokenId> p(static_cast<size_t>(20 + (i * 7) % 50));
    for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<TokenId>(100 + (j * 131 + i * 977) % 8000);
    prompts.push_back(p);
  }
  auto plain = make(false);
  auto ep = make(true);
  ASSERT_TRUE(plain && ep);
  auto a = RunAll(*plain, prompts, 12);
  auto b = RunAll(*ep, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(a[i].size(), 12u);
    EXPECT_EQ(a[i], b[i]) << "stream " << i;
  }
  Stats s = ep->GetStats();
  EXPECT_TRUE(s.expert_parallel);
  EXPECT_GT(s.ep.rearrangements, 1u) << "placements must change while the streams run";
  EXPECT_GT(s.ep.bytes_moved + s.ep.bytes_copied_local, 0u) << "a switched-in placement must have moved weights";
  EXPECT_GT(s.ep.steps, 12u);
}

}  // namespace
}  // namespace ladle::engine
