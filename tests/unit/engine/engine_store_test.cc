// The engine writing full blocks to the persistent store (EngineConfig::kv_store): prefill and
// decode blocks land under the store's chain keys with the exact bytes the model computed, in
// the request's traffic class, linked as one chain; under back-pressure they are dropped and
// counted, and the output does not change.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unistd.h>

#include "engine_test_util.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::engine {
namespace {

struct Dir : testing::TempDir {
  Dir() : TempDir("engine-store") {}
};

std::vector<TokenId> Prompt(int len) {
  std::vector<TokenId> p(len);
  for (int i = 0; i < len; ++i) p[i] = static_cast<TokenId>(100 + (i * 131) % 50000);
  return p;
}

class EngineStore : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }

  std::unique_ptr<Engine> Make(std::shared_ptr<kvcache::KvStore> store, int64_t max_inflight = 256ll << 20) {
    auto m = Model::Create(ModelConfig{}, "");
    EXPECT_TRUE(m.ok());
    EngineConfig c;
    c.num_blocks = 32;
    c.max_running = 4;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 512;  // one prefill chunk: the same shapes as the direct forward below
    c.kv_store = std::move(store);
    c.kv_store_max_inflight_bytes = max_inflight;
    auto e = CreateEngine(c, std::move(m).value(), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // Greedy, `max_tokens` new tokens; returns prompt + output.
  std::vector<TokenId> Run(Engine& e, const std::vector<TokenId>& prompt, int max_tokens, bool agent) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.temperature = 0;
    p.ignore_eos = true;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::vector<TokenId> all = prompt;
    SubmitRequest r{prompt, p, nullptr};
    r.agent_traffic = agent;
    auto id = e.Submit(std::move(r), [&](const Output& o) {
      std::lock_guard lk(mu);
      for (const auto& ev : o.tokens) all.push_back(ev.token);
      if (o.finished) {
        done = true;
        cv.notify_all();
      }
    });
    EXPECT_TRUE(id.ok());
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done; }));
    return all;
  }

  // Store completions arrive on the store's threads after the step: wait (bounded) for `want`.
  static Stats WaitWrites(Engine& e, uint64_t want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    Stats s = e.GetStats();
    while (s.kv_store_writes + s.kv_store_write_errors < want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      s = e.GetStats();
    }
    return s;
  }
};

TEST_F(EngineStore, PrefillAndDecodeBlocksLandWithTheModelsBytes) {
  Dir d;
  auto store = kvcache::KvStore::Open("fs:" + d.path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::shared_ptr<kvcache::KvStore> st(std::move(store).value());
  auto e = Make(st);
  ASSERT_NE(e, nullptr);
  // 300 prompt tokens (2 full blocks after prefill) + 100 decoded: 3 full blocks (384).
  const auto prompt = Prompt(300);
  auto all = Run(*e, prompt, 100, /*agent=*/true);
  ASSERT_EQ(all.size(), 400u);
  Stats s = WaitWrites(*e, 3);
  EXPECT_EQ(s.kv_store_writes, 3u);
  EXPECT_EQ(s.kv_store_writes_agent, 3u);
  EXPECT_EQ(s.kv_store_write_errors, 0u);
  EXPECT_EQ(s.kv_store_write_drops, 0u);
  // The store holds the chain under the keys the engine names blocks with.
  ModelConfig mc;
  std::vector<kvcache::ExtraKey> extras = {{kvcache::ExtraTag::kModel, ModelFingerprint(mc)}};
  std::vector<uint32_t> ids(all.begin(), all.end());
  auto keys = kvcache::ChainKeys(ids, extras);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(*st->MatchSync(keys), 3u);
  // Block 0's bytes are what the model computes for the prompt (one-shot prefill, same shapes).
  auto m = Model::Create(mc, "");
  ASSERT_TRUE(m.ok());
  auto kv = (*m)->NewKvStorage(4, 1);
  std::vector<int32_t> table = {0, 1, 2};
  SeqStep step;
  step.tokens = prompt;
  step.block_table = table;
  step.swa_slot = 0;
  step.prefill = true;
  std::vector<float> logits;
  ASSERT_TRUE((*m)->Forward(std::span<const SeqStep>(&step, 1), *kv, &logits).ok());
  std::vector<uint8_t> want(kv->block_bytes()), got(kv->block_bytes());
  ASSERT_TRUE(kv->ReadBlock(0, want));
  kvcache::MutableBuffer buf{got.data(), got.size()};
  auto r = st->GetSync(std::span(&keys[0], 1), std::span(&buf, 1))[0];
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, want.size());
  EXPECT_TRUE(got == want) << "the stored block is not the model's KV";
  e->Shutdown();
}

TEST_F(EngineStore, BackPressureDropsAndCountsAndChangesNothing) {
  Dir d;
  auto store = kvcache::KvStore::Open("fs:" + d.path);
  ASSERT_TRUE(store.ok());
  std::shared_ptr<kvcache::KvStore> st(std::move(store).value());
  auto with = Make(st, /*max_inflight=*/1);  // no block fits: every one is dropped
  auto without = Make(nullptr);
  ASSERT_NE(with, nullptr);
  ASSERT_NE(without, nullptr);
  const auto prompt = Prompt(290);
  auto a = Run(*with, prompt, 40, false);
  auto b = Run(*without, prompt, 40, false);
  EXPECT_EQ(a, b);
  Stats s = with->GetStats();
  EXPECT_EQ(s.kv_store_writes, 0u);
  EXPECT_EQ(s.kv_store_write_drops, 2u);
  EXPECT_EQ(st->Stat().puts, 0u);
}

}  // namespace
}  // namespace ladle::engine
