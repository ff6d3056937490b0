// The engine runtime on the real reference model (src/engine/model/): the block tables,
// ring resets/forks, chunked prefill and prefix hits it produces are accepted by the model,
// and greedy output does not depend on async scheduling, batching or chunk boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "engine_test_util.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"

namespace ladle::engine {
namespace {

struct Got {
  std::vector<std::vector<TokenId>> tokens;
  std::vector<FinishKind> finish;
  std::vector<std::string> errors;
  int64_t cached = -1;
};

class RefModelEngine : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }

  std::unique_ptr<Engine> Make(bool async, int64_t chunk, int num_blocks = 48, uint64_t swa_pool_bytes = 256ull << 20) {
    ModelConfig mc;
    auto m = Model::Create(mc, "");
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return nullptr;
    EngineConfig c;
    c.num_blocks = num_blocks;
    c.max_running = 8;
    c.chunk_policy = "fixed";
    c.chunk_tokens = chunk;
    c.async_scheduling = async;
    c.swa_pool_bytes = swa_pool_bytes;
    auto e = CreateEngine(c, std::move(m).value(), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // Submits all, waits for all; greedy unless `params` says otherwise.
  std::vector<Got> Run(Engine& e, const std::vector<std::vector<TokenId>>& prompts, SamplingParams p) {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Got> got(prompts.size());
    int done = 0, want = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      got[i].tokens.resize(p.n);
      got[i].finish.resize(p.n);
      got[i].errors.resize(p.n);
      want += p.n;
      auto id = e.Submit({prompts[i], p, nullptr}, [&, i](const Output& o) {
        std::lock_guard lk(mu);
        for (const auto& ev : o.tokens) got[i].tokens[ev.index].push_back(ev.token);
        if (o.finished) {
          got[i].finish[o.finished_index] = o.finish;
          got[i].errors[o.finished_index] = o.error;
          got[i].cached = o.cached_tokens;
          ++done;
          cv.notify_all();
        }
      });
      EXPECT_TRUE(id.ok()) << id.status().ToString();
    }
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(300), [&] { return done == want; }));
    return got;
  }

  static std::vector<TokenId> Prompt(int len, int salt) {
    std::vector<TokenId> p(len);
    for (int i = 0; i < len; ++i) p[i] = static_cast<TokenId>(100 + (i * 131 + salt * 977) % 50000);
    return p;
  }
};

TEST_F(RefModelEngine, GreedyIsTheSameAsyncOnOffBatchedAloneAndAcrossChunkings) {
  std::vector<std::vector<TokenId>> prompts;
  for (int len : {7, 128, 200, 333}) prompts.push_back(Prompt(len, len));
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 12;
  p.ignore_eos = true;
  auto sync = Make(false, 96);
  auto async = Make(true, 96);
  ASSERT_TRUE(sync && async);
  auto a = Run(*sync, prompts, p);
  auto b = Run(*async, prompts, p);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(a[i].finish[0], FinishKind::kLength) << a[i].errors[0];
    EXPECT_EQ(a[i].tokens[0].size(), 12u);
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "prompt " << i;
  }
  // Alone (batch of one) gives the same tokens: the model is batch-invariant.
  auto alone = Run(*async, {prompts[2]}, p);
  EXPECT_EQ(alone[0].tokens, a[2].tokens);
  // Other chunk boundaries: the same tokens (the model carries the window across chunks).
  auto other = Make(true, 64);
  ASSERT_TRUE(other);
  auto c = Run(*other, prompts, p);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(a[i].tokens, c[i].tokens) << "prompt " << i;
}

TEST_F(RefModelEngine, ForksPrefixHitsAndPreemptionAreAcceptedByTheModel) {
  auto e = Make(true, 128);
  ASSERT_TRUE(e);
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 5;
  p.n = 3;
  p.max_tokens = 8;
  auto prompt = Prompt(420, 1);
  auto first = Run(*e, {prompt}, p);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(first[0].finish[i], FinishKind::kLength) << first[0].errors[i];
  // Same prompt again: a prefix hit ((420 − 134) / 128 = 2 blocks, back off one → 128) and
  // the ring rebuilt by replay; the model accepts the tables and the run completes.
  auto again = Run(*e, {prompt}, p);
  EXPECT_EQ(again[0].cached, 128);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(again[0].finish[i], FinishKind::kLength) << again[0].errors[i];
  EXPECT_EQ(e->GetStats().kv_blocks_used, 0u);
  // A pool too small for all four at once: preemption and recompute, and everything still
  // finishes (recompute replays the prefill path, so tokens may differ from an unpressed
  // run by the model's bounded-replay approximation; they are not compared).
  auto small = Make(true, 128, 10);
  ASSERT_TRUE(small);
  SamplingParams g;
  g.temperature = 0;
  g.ignore_eos = true;
  g.max_tokens = 100;
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(Prompt(200, 10 + i));
  auto res = Run(*small, prompts, g);
  for (auto& r : res) {
    EXPECT_EQ(r.finish[0], FinishKind::kLength) << r.errors[0];
    EXPECT_EQ(r.tokens[0].size(), 100u);
  }
  EXPECT_EQ(small->GetStats().kv_blocks_used, 0u);
}

// Regression: a prefix hit starts one block before the KV it reuses (the replayed block), so
// with a first chunk shorter than that block (time budget, min_chunk, a small fixed chunk) the
// step's kv_written lay past its end and the model rejected the whole batch ("kv_written
// outside [0, end]"). Both requests must finish, the second with a hit: the whole 2 blocks
// when the first left its SWA entry at 256 in the host pool, one block (and a replayed one)
// without the pool.
TEST_F(RefModelEngine, SharedPrefixHitWorksWithAnyChunkSize) {
  auto cat = [](std::vector<TokenId> a, const std::vector<TokenId>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const auto prefix = Prompt(320, 3);
  const auto first = cat(prefix, Prompt(60, 4));    // 380 tokens
  const auto second = cat(prefix, Prompt(90, 5));   // 410: (410 − 134) / 128 = 2 blocks can hit
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 4;
  for (int64_t chunk : {512, 128, 64, 16})
  for (bool swa : {true, false}) {
    auto e = Make(true, chunk, 48, swa ? 64ull << 20 : 0);
    ASSERT_TRUE(e);
    auto a = Run(*e, {first}, p);
    EXPECT_EQ(a[0].finish[0], FinishKind::kLength) << "chunk " << chunk << ": " << a[0].errors[0];
    auto b = Run(*e, {second}, p);
    EXPECT_EQ(b[0].finish[0], FinishKind::kLength) << "chunk " << chunk << ": " << b[0].errors[0];
    EXPECT_EQ(b[0].tokens[0].size(), 4u);
    EXPECT_EQ(b[0].cached, swa ? 256 : 128) << "chunk " << chunk;  // 2 shared blocks (SWA hit), or back off one
    EXPECT_EQ(e->GetStats().kv_blocks_used, 0u);
  }
}

// The same prompt twice at and one token past block multiples: the hit cap and the replayed
// block meet the prompt's end in every arrangement, and the model accepts each.
TEST_F(RefModelEngine, RepeatedPromptsAtBlockMultiplesHit) {
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 3;
  for (int64_t chunk : {512, 64}) {
    auto e = Make(true, chunk);
    ASSERT_TRUE(e);
    for (int len : {256, 257, 384, 385, 512, 513}) {
      const auto prompt = Prompt(len, 20 + len);
      auto a = Run(*e, {prompt}, p);
      EXPECT_EQ(a[0].finish[0], FinishKind::kLength) << len << "/" << chunk << ": " << a[0].errors[0];
      auto b = Run(*e, {prompt}, p);
      EXPECT_EQ(b[0].finish[0], FinishKind::kLength) << len << "/" << chunk << ": " << b[0].errors[0];
      EXPECT_EQ(b[0].tokens[0].size(), 3u);
      // Hit policy: at most (len − 134) / 128 whole blocks, then back off one.
      const int64_t hit_blocks = (len - 134) / 128;
      EXPECT_EQ(b[0].cached, std::max<int64_t>(0, hit_blocks - 1) * 128) << len << "/" << chunk;
    }
    EXPECT_EQ(e->GetStats().kv_blocks_used, 0u);
  }
}

}  // namespace
}  // namespace ladle::engine
