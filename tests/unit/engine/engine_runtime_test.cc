// The engine runtime end to end on the fake model (tests/unit/engine/fake_model.h): outputs
// are checked against an independent greedy reference, async on/off, preemption, prefix
// cache, n > 1 forks, stop handling, masks, cancellation and admission errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "engine_test_util.h"
#include "fake_model.h"
#include "runtime_harness.h"
#include "ladle/engine/cost_model.h"
#include "ladle/engine/engine_config.h"

namespace ladle::engine {
namespace {

using testing::EngineTokenizer;
using testing::FakeLogits;
using testing::FakeModel;
using testing::FakeOptions;
using namespace testing;  // runtime_harness.h

class EngineRuntime : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }
};

TEST_F(EngineRuntime, GreedyMatchesIndependentReference) {
  for (bool async : {false, true}) {
    auto h = Make(FixedConfig(async));
    std::vector<Job> jobs;
    for (int len : {1, 5, 127, 128, 129, 300}) {
      Job j;
      j.prompt = Prompt(len, len);
      j.params.temperature = 0;
      j.params.max_tokens = 20;
      jobs.push_back(j);
    }
    auto res = RunJobs(*h.engine, jobs);
    for (size_t i = 0; i < jobs.size(); ++i) {
      EXPECT_EQ(res[i][0].tokens, RefGreedy(jobs[i].prompt, {}, 20)) << "async " << async << " job " << i;
      EXPECT_EQ(res[i][0].finish, FinishKind::kLength);
    }
    EXPECT_GT(h.model->max_batch.load(), 1);  // really batched
  }
}

TEST_F(EngineRuntime, AsyncOnAndOffGiveIdenticalOutputs) {
  auto off = Make(FixedConfig(false));
  auto on = Make(FixedConfig(true));
  auto a = RunJobs(*off.engine, MixedJobs());
  auto b = RunJobs(*on.engine, MixedJobs());
  ExpectSame(a, b);
  // And a second async run (different timing) agrees too.
  auto on2 = Make(FixedConfig(true));
  ExpectSame(a, RunJobs(*on2.engine, MixedJobs()));
}

TEST_F(EngineRuntime, TimeBudgetChunkingGivesTheSameOutputs) {
  const auto path = (std::filesystem::temp_directory_path() / "ladle_engine_rt_cost.txt").string();
  ASSERT_TRUE((CostModel{2000.0, 1.0, 2.0, 10000.0}).Save(path).ok());
  EngineConfig c = FixedConfig(true);
  c.chunk_policy = "time";
  c.cost_model_path = path;
  c.step_budget_ns = 300000;  // ~100-token chunks
  std::vector<StepRecord> records;
  std::mutex mu;
  c.on_step = [&](const StepRecord& r) {
    std::lock_guard lk(mu);
    records.push_back(r);
  };
  auto t = Make(c);
  auto ref = Make(FixedConfig(false));
  ExpectSame(RunJobs(*ref.engine, MixedJobs()), RunJobs(*t.engine, MixedJobs()));
  t.engine->Shutdown();
  std::lock_guard lk(mu);
  ASSERT_FALSE(records.empty());
  bool bound = false;
  for (const auto& r : records) {
    EXPECT_EQ(r.budget_ns, 300000.0);
    if (r.budget_bound) {
      bound = true;
      EXPECT_LE(r.predicted_ns, r.budget_ns + 1.0);  // the solver never overshoots its model
    }
  }
  EXPECT_TRUE(bound);
}

// Regression: a fitted constant e above the step budget (88.7 ms vs 50 ms in one run) left
// room only for the forced min_chunk, so prompts were admitted one at a time and 14 waited
// behind a batch of 1. Outputs must be unchanged and several prompts must share a step.
TEST_F(EngineRuntime, CostConstantAboveBudgetKeepsAdmitting) {
  const auto path = (std::filesystem::temp_directory_path() / "ladle_engine_rt_cost_big_e.txt").string();
  ASSERT_TRUE((CostModel{100000.0, 0.0, 0.0, 88.7e6}).Save(path).ok());
  EngineConfig c = FixedConfig(true);
  c.chunk_policy = "time";
  c.cost_model_path = path;
  c.step_budget_ns = 50'000'000;
  int most_prefills = 0, most_seqs = 0;
  std::mutex mu;
  c.on_step = [&](const StepRecord& r) {
    std::lock_guard lk(mu);
    most_prefills = std::max(most_prefills, r.prefills);
    most_seqs = std::max(most_seqs, r.prefills + r.decodes);
  };
  auto t = Make(c);
  auto ref = Make(FixedConfig(false));
  ExpectSame(RunJobs(*ref.engine, MixedJobs()), RunJobs(*t.engine, MixedJobs()));
  t.engine->Shutdown();
  std::lock_guard lk(mu);
  EXPECT_GT(most_prefills, 1);
  EXPECT_GT(most_seqs, 2);
}

TEST_F(EngineRuntime, PreemptionUnderMemoryPressureKeepsOutputsExact) {
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i) {
    Job j;
    j.prompt = Prompt(200 + i * 10, i);
    j.params.temperature = i % 2 ? 0.8f : 0.0f;
    j.params.seed = 7 + i;
    j.params.max_tokens = 200;
    jobs.push_back(j);
  }
  auto big = Make(FixedConfig(true));
  auto expected = RunJobs(*big.engine, jobs);
  for (bool async : {false, true}) {
    EngineConfig c = FixedConfig(async);
    c.num_blocks = 9;  // each sequence needs 4 blocks at the end
    auto small = Make(c);
    auto got = RunJobs(*small.engine, jobs);
    ExpectSame(expected, got);
    // Recompute-style preemption happened: more prefills from position 0 than sequences.
    EXPECT_GT(small.model->prefills_from_zero.load(), 6);
    for (auto& r : got) EXPECT_EQ(r[0].finish, FinishKind::kLength);
    EXPECT_EQ(small.engine->GetStats().kv_blocks_used, 0u);
  }
}

TEST_F(EngineRuntime, PromptsThatEachFitButNotTogetherDoNotDeadlock) {
  // Both are admitted on their first chunk's blocks, then grow until each holds half the pool
  // and neither can continue: the stall must be broken by preemption.
  std::vector<Job> jobs;
  for (int i = 0; i < 2; ++i) {
    Job j;
    j.prompt = Prompt(600, 20 + i);
    j.params.temperature = 0;
    j.params.max_tokens = 40;
    jobs.push_back(j);
  }
  for (bool async : {false, true}) {
    EngineConfig c = FixedConfig(async);
    c.num_blocks = 8;
    c.reserve_blocks = 0;
    auto h = Make(c);
    auto got = RunJobs(*h.engine, jobs);
    for (size_t i = 0; i < jobs.size(); ++i) {
      EXPECT_EQ(got[i][0].finish, FinishKind::kLength) << got[i][0].error;
      EXPECT_EQ(got[i][0].tokens, RefGreedy(jobs[i].prompt, {}, 40));
    }
  }
}

TEST_F(EngineRuntime, SequenceLargerThanThePoolFailsLoudly) {
  EngineConfig c = FixedConfig(false);
  c.num_blocks = 2;
  auto h = Make(c);
  Job j;
  j.prompt = Prompt(200, 1);
  j.params.max_tokens = 200;  // would need 4 blocks
  auto res = RunJobs(*h.engine, {j});
  EXPECT_EQ(res[0][0].finish, FinishKind::kError);
  EXPECT_NE(res[0][0].error.find("KV cache exhausted"), std::string::npos);
  // Every token the pool could hold was delivered: sampled at positions 200..256.
  EXPECT_EQ(res[0][0].tokens.size(), 57u);
}

TEST_F(EngineRuntime, PrefixCacheHitFollowsTheHitPolicy) {
  auto h = Make(FixedConfig(true));
  Job j;
  j.prompt = Prompt(600, 3);
  j.params.temperature = 0;
  j.params.max_tokens = 5;
  auto first = RunJobs(*h.engine, {j});
  auto second = RunJobs(*h.engine, {j});
  EXPECT_EQ(first[0][0].cached, 0);
  // Cap L − 134 = 466 → 3 whole blocks hit; no SWA state kept → back off one: 256.
  EXPECT_EQ(second[0][0].cached, 256);
  EXPECT_EQ(first[0][0].tokens, second[0][0].tokens);
  EXPECT_EQ(first[0][0].tokens, RefGreedy(j.prompt, {}, 5));
  EXPECT_EQ(h.engine->GetStats().prefix_hit_tokens, 256u);
  // A prompt sharing only the first block hits nothing (the back-off eats it).
  Job k = j;
  for (size_t i = 200; i < k.prompt.size(); ++i) k.prompt[i] = 5;
  EXPECT_EQ(RunJobs(*h.engine, {k})[0][0].cached, 0);
  EXPECT_EQ(RunJobs(*h.engine, {k})[0][0].tokens, RefGreedy(k.prompt, {}, 5));
}

TEST_F(EngineRuntime, NSamplesShareThePromptAndForkTheRing) {
  auto h = Make(FixedConfig(true));
  Job j;
  j.prompt = Prompt(300, 9);
  j.params.temperature = 1.0f;
  j.params.seed = 42;
  j.params.max_tokens = 16;
  j.params.n = 3;
  auto res = RunJobs(*h.engine, {j});
  ASSERT_EQ(res[0].size(), 3u);
  for (auto& s : res[0]) {
    EXPECT_EQ(s.tokens.size(), 16u);
    EXPECT_EQ(s.finish, FinishKind::kLength);
  }
  EXPECT_NE(res[0][0].tokens, res[0][1].tokens);
  // The same request again: identical (per-request seed), and sample 0 alone matches.
  ExpectSame(res, RunJobs(*h.engine, {j}));
  Job one = j;
  one.params.n = 1;
  EXPECT_EQ(RunJobs(*h.engine, {one})[0][0].tokens, res[0][0].tokens);
  EXPECT_EQ(h.engine->GetStats().kv_blocks_used, 0u);
}

TEST_F(EngineRuntime, StopStringEndsTheSampleAtTheTokenThatCompletesIt) {
  const auto& tok = *EngineTokenizer();
  auto prompt = Prompt(40, 5);
  auto ref = RefGreedy(prompt, {}, 30);
  // Pick a stop string from the middle of the reference output's text.
  std::string full = tok.Decode(std::span<const TokenId>(ref).first(12)).value();
  std::string head = tok.Decode(std::span<const TokenId>(ref).first(8)).value();
  ASSERT_GT(full.size(), head.size() + 2);
  std::string stop = full.substr(head.size() > 1 ? head.size() - 1 : 0, 3);
  // The engine stops at the first token whose text completes the stop string; cutting the
  // text is the server's (StopFilter), so the engine reports tokens only.
  size_t k = 1;
  while (k <= ref.size() && tok.Decode(std::span<const TokenId>(ref).first(k)).value().find(stop) == std::string::npos) ++k;
  ASSERT_LE(k, 12u);
  const std::vector<TokenId> expect(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(k));
  for (bool async : {false, true}) {
    auto h = Make(FixedConfig(async));
    Job j;
    j.prompt = prompt;
    j.params.temperature = 0;
    j.params.max_tokens = 30;
    j.params.stop = {stop};
    auto res = RunJobs(*h.engine, {j});
    EXPECT_EQ(res[0][0].finish, FinishKind::kStopString);
    EXPECT_EQ(res[0][0].matched, stop);
    EXPECT_EQ(res[0][0].tokens, expect);
  }
}

TEST_F(EngineRuntime, EosStopTokenAndLength) {
  auto prompt = Prompt(20, 2);
  FakeOptions o;
  o.eos_at_len = 30;
  auto h = Make(FixedConfig(true), o);
  Job j;
  j.prompt = prompt;
  j.params.temperature = 0;
  j.params.max_tokens = 50;
  auto res = RunJobs(*h.engine, {j});
  EXPECT_EQ(res[0][0].finish, FinishKind::kEos);
  ASSERT_EQ(res[0][0].tokens.size(), 11u);  // 10 tokens, then EOS (reported, no text)
  EXPECT_EQ(res[0][0].tokens.back(), 1u);
  j.params.ignore_eos = true;
  res = RunJobs(*h.engine, {j});
  EXPECT_EQ(res[0][0].finish, FinishKind::kLength);
  EXPECT_EQ(res[0][0].tokens.size(), 50u);
  auto ref = RefGreedy(prompt, {}, 10);
  j.params.ignore_eos = false;
  j.params.stop_token_ids = {ref[4]};
  res = RunJobs(*h.engine, {j});
  EXPECT_EQ(res[0][0].finish, FinishKind::kStopToken);
  EXPECT_EQ(res[0][0].tokens.back(), ref[4]);
}

class EvenOnly : public MaskProvider {
 public:
  void FillMask(int, uint64_t* bits, size_t vocab) override {
    for (size_t i = 0; i < vocab; i += 2) bits[i / 64] |= 1ull << (i % 64);
  }
  void Accept(int, TokenId t) override {
    accepted++;
    if (t % 2) odd++;
  }
  std::atomic<int> accepted{0}, odd{0};
};

TEST_F(EngineRuntime, MaskProviderConstrainsEveryToken) {
  auto h = Make(FixedConfig(false));
  auto mask = std::make_shared<EvenOnly>();
  Collector c(1);
  SamplingParams p;
  p.max_tokens = 25;
  p.seed = 3;
  ASSERT_TRUE(h.engine->Submit({Prompt(50, 1), p, mask}, c.Sink()).ok());
  ASSERT_TRUE(c.Wait());
  auto r = c.results()[0];
  ASSERT_EQ(r.tokens.size(), 25u);
  for (auto t : r.tokens) EXPECT_EQ(t % 2, 0u);
  EXPECT_EQ(mask->accepted.load(), 25);  // synchronous: no speculative extra step
  EXPECT_EQ(mask->odd.load(), 0);
}

// Sample i's k-th token must be 10 + 7 * i + k: a mask filled before Accept(i) of the previous
// token (or for the wrong index) allows a different single token. FillMask runs on the mask
// pool for several indices at once, so the state is per index and the checks are atomic.
class Sequence : public MaskProvider {
 public:
  explicit Sequence(int n) : next_(n) {}
  void FillMask(int i, uint64_t* bits, size_t vocab) override {
    const size_t t = Want(i, next_[i].load());
    if (t < vocab) bits[t / 64] |= 1ull << (t % 64);
    fills.fetch_add(1);
  }
  void Accept(int i, TokenId t) override {
    const int k = next_[i].load();
    if (t != Want(i, k)) wrong.fetch_add(1);
    next_[i].store(k + 1);
  }
  static size_t Want(int i, int k) { return 10 + 7 * static_cast<size_t>(i) + static_cast<size_t>(k); }
  std::atomic<int> wrong{0}, fills{0};

 private:
  std::vector<std::atomic<int>> next_;
};

TEST_F(EngineRuntime, MasksFilledOnThePoolSeeEveryEarlierAccept) {
  for (bool overlap : {true, false}) {
    for (bool async : {false, true}) {
      EngineConfig cfg = FixedConfig(async);
      cfg.overlap_masks = overlap;
      auto h = Make(cfg);
      std::vector<std::shared_ptr<Sequence>> masks;
      std::vector<std::unique_ptr<Collector>> cs;
      for (int r = 0; r < 6; ++r) {
        SamplingParams p;
        p.max_tokens = 12 + r;
        p.n = 1 + r % 3;
        p.temperature = 1.0f;
        p.seed = 40 + r;
        masks.push_back(std::make_shared<Sequence>(p.n));
        cs.push_back(std::make_unique<Collector>(p.n));
        ASSERT_TRUE(h.engine->Submit({Prompt(20 + r * 9, r), p, masks.back()}, cs.back()->Sink()).ok());
      }
      for (int r = 0; r < 6; ++r) {
        ASSERT_TRUE(cs[r]->Wait());
        auto res = cs[r]->results();
        for (size_t i = 0; i < res.size(); ++i) {
          ASSERT_EQ(res[i].tokens.size(), static_cast<size_t>(12 + r)) << "overlap " << overlap << " async " << async;
          for (size_t k = 0; k < res[i].tokens.size(); ++k) {
            EXPECT_EQ(res[i].tokens[k], Sequence::Want(static_cast<int>(i), static_cast<int>(k)))
                << "request " << r << " sample " << i << " token " << k << " overlap " << overlap << " async " << async;
          }
        }
        EXPECT_EQ(masks[r]->wrong.load(), 0);
      }
    }
  }
}

class Nothing : public MaskProvider {
 public:
  void FillMask(int, uint64_t*, size_t) override {}
  void Accept(int, TokenId) override {}
};

class NothingBecause : public Nothing {
 public:
  std::string Failure(int index) override { return "grammar gave up on sample " + std::to_string(index); }
};

TEST_F(EngineRuntime, MaskAllowingNothingFinishesWithAnError) {
  auto h = Make(FixedConfig(true));
  Collector c(1);
  SamplingParams p;
  ASSERT_TRUE(h.engine->Submit({Prompt(5, 1), p, std::make_shared<Nothing>()}, c.Sink()).ok());
  ASSERT_TRUE(c.Wait());
  auto r = c.results()[0];
  EXPECT_EQ(r.finish, FinishKind::kError);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.error, "no token allowed by the mask");
  // The provider's own reason, when it has one, is the request's error.
  Collector c2(1);
  ASSERT_TRUE(h.engine->Submit({Prompt(5, 2), p, std::make_shared<NothingBecause>()}, c2.Sink()).ok());
  ASSERT_TRUE(c2.Wait());
  EXPECT_EQ(c2.results()[0].finish, FinishKind::kError);
  EXPECT_EQ(c2.results()[0].error, "grammar gave up on sample 0");
}

TEST_F(EngineRuntime, CancelFreesBlocksAtOnce) {
  FakeOptions o;
  o.ns_per_step = 2e6;  // slow steps: the request is surely mid-generation
  for (bool async : {false, true}) {
    auto h = Make(FixedConfig(async), o);
    Collector c(1);
    SamplingParams p;
    p.max_tokens = 5000;
    auto id = h.engine->Submit({Prompt(300, 1), p, nullptr}, c.Sink());
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(c.WaitFirst());
    EXPECT_GE(h.engine->GetStats().kv_blocks_used, 3u);
    h.engine->Cancel(*id);
    ASSERT_TRUE(c.Wait(5000));
    EXPECT_EQ(c.results()[0].finish, FinishKind::kCancelled);
    size_t used = 1;
    for (int i = 0; i < 200 && used; ++i) {
      used = h.engine->GetStats().kv_blocks_used;
      if (used) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(used, 0u);
    EXPECT_EQ(h.engine->GetStats().running, 0u);
  }
}

// Host work per step (here: a sink that takes ~0.6 ms per step) leaves the device idle when
// scheduling is synchronous; the async pipeline overlaps it with the next forward.
// Device idle time with async scheduling on and off is a timing measurement, so it lives in
// bench/engine (engine_bench --fake --host-us 100), not here: on shared CI cores it would flake.

TEST_F(EngineRuntime, SubmitValidatesAndBoundsTheQueue) {
  FakeOptions o;
  o.ns_per_step = 2e6;
  EngineConfig c = FixedConfig(true);
  c.max_running = 1;
  c.max_queue = 1;
  c.max_model_len = 4096;
  auto h = Make(c, o);
  SamplingParams p;
  EXPECT_EQ(h.engine->Submit({{}, p, nullptr}, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.engine->Submit({{5, 1000}, p, nullptr}, nullptr).status().code(), StatusCode::kInvalidArgument);
  SamplingParams big_n;
  big_n.n = 2;
  EXPECT_EQ(h.engine->Submit({{5}, big_n, nullptr}, nullptr).status().code(), StatusCode::kInvalidArgument);
  SamplingParams too_long;
  too_long.max_tokens = 4096;
  EXPECT_EQ(h.engine->Submit({{5}, too_long, nullptr}, nullptr).status().code(), StatusCode::kInvalidArgument);
  p.max_tokens = 3000;
  Collector a(1), b(1);
  auto ida = h.engine->Submit({Prompt(10, 1), p, nullptr}, a.Sink());
  ASSERT_TRUE(ida.ok());
  ASSERT_TRUE(a.WaitFirst());  // admitted: the queue is empty again
  auto idb = h.engine->Submit({Prompt(10, 2), p, nullptr}, b.Sink());
  ASSERT_TRUE(idb.ok());
  EXPECT_EQ(h.engine->Submit({Prompt(10, 3), p, nullptr}, nullptr).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(h.engine->GetStats().queue_depth, 1u);
  h.engine->Cancel(*ida);
  h.engine->Cancel(*idb);
  EXPECT_TRUE(a.Wait(5000));
  EXPECT_TRUE(b.Wait(5000));
}

TEST_F(EngineRuntime, ShutdownCancelsAtTheDeadline) {
  FakeOptions o;
  o.ns_per_step = 1e6;
  EngineConfig c = FixedConfig(true);
  c.shutdown_deadline_ms = 50;
  c.max_model_len = 200000;
  auto h = Make(c, o);
  Collector col(1);
  SamplingParams p;
  p.max_tokens = 100000;
  ASSERT_TRUE(h.engine->Submit({Prompt(10, 1), p, nullptr}, col.Sink()).ok());
  ASSERT_TRUE(col.WaitFirst());
  h.engine->Shutdown();
  ASSERT_TRUE(col.Wait(1000));
  EXPECT_EQ(col.results()[0].finish, FinishKind::kCancelled);
  EXPECT_EQ(h.engine->Submit({Prompt(10, 1), p, nullptr}, nullptr).status().code(), StatusCode::kUnavailable);
}

TEST_F(EngineRuntime, ProfilesFitsAndSavesTheCostModel) {
  const auto path = (std::filesystem::temp_directory_path() / "ladle_engine_profile_cost.txt").string();
  std::filesystem::remove(path);
  FakeOptions o;
  o.ns_per_step = 200000;
  o.ns_per_token = 5000;
  EngineConfig c = FixedConfig(true);
  c.chunk_policy = "time";
  c.cost_model_path = path;
  c.profile_max_q = 256;
  c.profile_repeats = 5;
  auto h = Make(c, o);
  ASSERT_TRUE(h.engine);
  auto m = CostModel::Load(path);
  ASSERT_TRUE(m.ok());
  // Busy-wait timings on a shared machine are noisy; the fitted cost must still be in the
  // right range where it is used (true cost: 200 µs + 5 µs per token).
  EXPECT_GT(m->Cost(256, 0), 0.6 * 1.48e6);
  EXPECT_LT(m->Cost(256, 0), 2.0 * 1.48e6);
  EXPECT_GT(m->Cost(16, 0), 0.5 * 0.28e6);
  EXPECT_LT(m->Cost(16, 0), 3.0 * 0.28e6);
  auto res = RunJobs(*h.engine, MixedJobs());
  EXPECT_EQ(res.size(), MixedJobs().size());
}

}  // namespace
}  // namespace ladle::engine
