// The SWA KVCache host pool through the engine (recipe "SWA KVCache", "Hit policy"): a prompt
// that extends an earlier one hits the block KV at L1 and the SWA entry anchored there, so the
// whole prefix is skipped and the output is bit for bit a cold run's (tokens and logprobs),
// for 1 to 40 blocks of prefix, suffixes from a ring's length up, and chunked or one-shot
// prefill; the decode copy area's last copy serves the next turn; an expired entry falls back
// to the bounded replay; the swap-in's copies are counted and the loading state reported.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "engine_test_util.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"

namespace ladle::engine {
namespace {

using testing::Got;
using testing::PatternPrompt;
using testing::RunGreedy;

class EngineSwa : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }

  // swa_bytes 0: no SWA pool; prefix_cache false: every request cold.
  static std::unique_ptr<Engine> Make(bool prefix_cache, uint64_t swa_bytes = 64ull << 20, int64_t chunk = 256,
                                      int64_t ttl_ms = 180'000, int blocks = 96) {
    ModelConfig mc;
    mc.vocab_size = 8192;  // the built-in shape with a smaller LM head: quick on 2 cores
    auto m = Model::Create(mc, "");
    EXPECT_TRUE(m.ok());
    EngineConfig c;
    c.num_blocks = blocks;
    c.max_running = 4;
    c.chunk_policy = "fixed";
    c.chunk_tokens = chunk;
    c.prefix_cache = prefix_cache;
    c.swa_pool_bytes = swa_bytes;
    c.swa_ttl_ms = ttl_ms;
    auto e = CreateEngine(c, std::move(m).value(), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static void ExpectSame(const Got& hit, const Got& cold) {
    EXPECT_TRUE(hit.error.empty()) << hit.error;
    EXPECT_EQ(hit.tokens, cold.tokens);
    ASSERT_EQ(hit.logprobs.size(), cold.logprobs.size());
    for (size_t i = 0; i < hit.logprobs.size(); ++i) {
      EXPECT_EQ(std::memcmp(&hit.logprobs[i], &cold.logprobs[i], sizeof(float)), 0) << "logprob " << i << " differs";
    }
  }
};

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Prefix of k blocks (+ a partial block, so the priming prompt's anchor is k·128), then a
// suffix: the second prompt's L1 is k·128, where the first stored its entry.
TEST_F(EngineSwa, AnExtendedPromptHitsTheSwaEntryAndMatchesAColdRunBitForBit) {
  auto cold_engine = Make(false, 0);
  struct Case {
    int blocks, suffix;
    int64_t chunk;
  };
  // 1 to 40 blocks of prefix; suffixes of a ring (134) and longer; one-shot and chunked. Under
  // the sanitizers (10x slower) the 40-block case is left to the Release run.
  std::vector<Case> cases = {{1, 134, 256}, {2, 200, 100}, {3, 300, 256}};
#ifndef __SANITIZE_ADDRESS__
  cases.push_back({40, 134, 512});
#endif
  for (const Case& c : cases) {
    SCOPED_TRACE("blocks " + std::to_string(c.blocks) + " suffix " + std::to_string(c.suffix) + " chunk " +
                 std::to_string(c.chunk));
    auto e = Make(true, 64ull << 20, c.chunk);
    const auto base = PatternPrompt(c.blocks * 128 + 40, c.blocks);
    (void)RunGreedy(*e, {base}, 2);
    const auto second = Concat(base, PatternPrompt(c.suffix, 1000 + c.blocks));
    const Got hit = RunGreedy(*e, {second}, 8)[0];
    const Got cold = RunGreedy(*cold_engine, {second}, 8)[0];
    EXPECT_EQ(hit.cached, c.blocks * 128) << "the whole prefix is skipped";
    ExpectSame(hit, cold);
    const Stats st = e->GetStats();
    EXPECT_EQ(st.swa_hits, 1u);
    EXPECT_EQ(st.replayed_tokens, 0u);
    EXPECT_GE(st.swa_pool_entries, 2u);  // both prompts' prefill anchors
    EXPECT_GE(st.swap_in_copies, 1u);    // the entry was copied in by the swap-in thread
    EXPECT_LE(st.swap_in_exposed_seconds_total, st.swap_in_copy_seconds_total);
  }
}

// The next turn of a conversation: prompt + answer + new text. The answer crossed a block
// boundary during decode, so the copy area's last copy (stored at request end) is the entry at
// L1.
TEST_F(EngineSwa, TheDecodeCopyAreaServesTheNextTurn) {
  auto e = Make(true);
  auto cold_engine = Make(false, 0);
  const auto turn1 = PatternPrompt(200, 7);
  const Got a = RunGreedy(*e, {turn1}, 70)[0];  // 200 + 70 = 270: crosses 256 while decoding
  ASSERT_EQ(a.tokens.size(), 70u);
  const auto turn2 = Concat(Concat(turn1, a.tokens), PatternPrompt(150, 8));
  const Got hit = RunGreedy(*e, {turn2}, 8)[0];
  const Got cold = RunGreedy(*cold_engine, {turn2}, 8)[0];
  EXPECT_EQ(hit.cached, 256);
  ExpectSame(hit, cold);
  EXPECT_EQ(e->GetStats().swa_hits, 1u);
}

// Without the entry (expired, or never stored) the same hit backs off one window and replays
// it: cached L1 − 128, 128 tokens replayed, and the answer the bounded replay gives.
TEST_F(EngineSwa, AnExpiredEntryFallsBackToTheBoundedReplay) {
  auto e = Make(true, 64ull << 20, 256, /*ttl_ms=*/1);
  const auto base = PatternPrompt(3 * 128 + 40, 3);
  (void)RunGreedy(*e, {base}, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const Got hit = RunGreedy(*e, {Concat(base, PatternPrompt(200, 9))}, 4)[0];
  EXPECT_TRUE(hit.error.empty()) << hit.error;
  EXPECT_EQ(hit.cached, 3 * 128 - 128);
  const Stats st = e->GetStats();
  EXPECT_EQ(st.swa_hits, 0u);
  EXPECT_EQ(st.swa_misses, 1u);
  EXPECT_EQ(st.replayed_tokens, 128u);
  EXPECT_GE(st.swa_pool_expired, 1u);
}

// A pool too small for one entry stores nothing, and every hit replays; requests still serve.
TEST_F(EngineSwa, APoolTooSmallForAnEntryStoresNothing) {
  auto e = Make(true, /*swa_bytes=*/1024);
  const auto base = PatternPrompt(2 * 128 + 40, 4);
  (void)RunGreedy(*e, {base}, 2);
  const Got hit = RunGreedy(*e, {Concat(base, PatternPrompt(200, 10))}, 4)[0];
  EXPECT_TRUE(hit.error.empty()) << hit.error;
  EXPECT_EQ(hit.cached, 128);
  EXPECT_EQ(e->GetStats().swa_pool_entries, 0u);
}

}  // namespace
}  // namespace ladle::engine
