// The engine reading prefix hits from the persistent store (EngineConfig::kv_store_read): a
// prompt primed by one engine hits from the store in another engine on a reopened store (a
// restart), with the exact replay giving the cold run's tokens bit for bit and the bounded
// replay measured against it; an ec:10+2 store that lost 2 domains still serves, one that lost
// 3 recomputes with the same output; a fetch past its deadline falls back to recompute and a
// late completion is harmless; other requests pass one that is loading; a block lost in the
// middle of the chain (a per-key miss, or a Get that misses the deadline) keeps only the
// contiguous prefix before it.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unistd.h>

#include "engine_test_util.h"
#include "store_wrappers.h"
#include "ladle/core/numbers.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/kv_hit_policy.h"
#include "ladle/engine/model.h"
#include "ladle/kvcache/fetcher.h"
#include "ladle/kvcache/fetcher_store.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::engine {
namespace {

struct Dir : testing::TempDir {
  Dir() : TempDir("engine-read") {}
};

using testing::Got;
std::vector<TokenId> Prompt(int len, int salt) { return testing::PatternPrompt(len, salt); }

// Delegates to a real store, but one block in the middle of the chain is lost: the key at chain
// position `hole` of the first Match (the engine matches the whole chain it lacks before any
// Get). kMiss: the Get that asks for it reports that key as a miss (kNotFound) and its buffer
// holds noise, the other keys of the same Get are served; kWithhold: the completion of the Get
// that asks for it is held until Release (never within the deadline), the other Gets complete.
class HoleStore final : public testing::ForwardingStore, public testing::HeldCompletions {
 public:
  enum class Mode { kMiss, kWithhold };
  HoleStore(std::shared_ptr<kvcache::KvStore> inner, size_t hole, Mode mode)
      : ForwardingStore(std::move(inner)), hole_(hole), mode_(mode) {}
  void Match(std::span<const kvcache::BlockKey> keys, MatchDone done) override {
    {
      std::lock_guard lk(mu_);
      if (!hole_key_ && keys.size() > hole_) hole_key_ = keys[hole_];
    }
    inner_->Match(keys, std::move(done));
  }
  void Get(std::span<const kvcache::BlockKey> keys, std::span<const kvcache::MutableBuffer> buffers,
           GetDone done) override {
    std::optional<size_t> at;
    {
      std::lock_guard lk(mu_);
      for (size_t i = 0; hole_key_ && i < keys.size(); ++i) {
        if (keys[i] == *hole_key_) at = i;
      }
      if (at) ++hole_gets_;
    }
    if (!at) {
      inner_->Get(keys, buffers, std::move(done));
      return;
    }
    // The buffers span is the caller's and may not outlive this call; the bytes it names do.
    const kvcache::MutableBuffer hb = buffers[*at];
    if (mode_ == Mode::kMiss) {
      inner_->Get(keys, buffers, [at = *at, hb, done = std::move(done)](std::vector<Result<size_t>> r) mutable {
        std::memset(hb.data, 0x5a, hb.capacity);  // what a use of the lost block would read
        r[at] = Status(StatusCode::kNotFound, "hole");
        done(std::move(r));
      });
      return;
    }
    inner_->Get(keys, buffers, Hold(std::move(done)));
  }
  // Gets that asked for the hole.
  size_t HoleGets() {
    std::lock_guard lk(mu_);
    return hole_gets_;
  }

 private:
  const size_t hole_;
  const Mode mode_;
  std::mutex mu_;
  std::optional<kvcache::BlockKey> hole_key_;
  size_t hole_gets_ = 0;
};

class EngineStoreRead : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }

  static ModelConfig Mc() {
    ModelConfig mc;
    mc.vocab_size = 8192;  // the built-in shape with a smaller LM head: quick on 2 cores
    return mc;
  }

  std::unique_ptr<Engine> Make(std::shared_ptr<kvcache::KvStore> store, bool exact, int64_t deadline_ms = 2000,
                               const std::function<void(EngineConfig&)>& tweak = nullptr) {
    auto m = Model::Create(Mc(), "");
    EXPECT_TRUE(m.ok());
    EngineConfig c;
    c.num_blocks = 48;
    c.max_running = 4;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 256;
    c.kv_store = std::move(store);
    c.exact_replay = exact;
    c.kv_fetch_deadline_base_ms = deadline_ms;
    c.kv_fetch_deadline_per_block_ms = 0;
    if (tweak) tweak(c);
    auto e = CreateEngine(c, std::move(m).value(), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static std::vector<Got> RunAll(Engine& e, const std::vector<std::vector<TokenId>>& prompts, int max_tokens) {
    return testing::RunGreedy(e, prompts, max_tokens);
  }

  static void WaitWrites(Engine& e, uint64_t want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (e.GetStats().kv_store_writes < want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GE(e.GetStats().kv_store_writes, want);
  }

  static std::shared_ptr<kvcache::KvStore> Open(const std::string& uri) {
    auto s = kvcache::KvStore::Open(uri);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::shared_ptr<kvcache::KvStore>(std::move(s).value()) : nullptr;
  }

  // Primes `prompt` through a fresh engine on a fresh handle of `uri` (then closed: what a
  // restart leaves behind) and returns the cold run.
  Got Prime(const std::string& uri, const std::vector<TokenId>& prompt, int max_tokens) {
    auto e = Make(Open(uri), false);
    auto cold = RunAll(*e, {prompt}, max_tokens);
    WaitWrites(*e, static_cast<uint64_t>((prompt.size() + max_tokens - 1) / 128));
    e->Shutdown();
    return cold[0];
  }
};

TEST_F(EngineStoreRead, ARestartHitsFromTheStoreAndExactReplayGivesTheColdTokens) {
  Dir d;
  const std::string uri = "fs:" + d.path;
  for (int len : {300, 700, 1100}) {  // 1 to 7 blocks under the L − 134 cap
    const auto prompt = Prompt(len, len);
    const Got cold = Prime(uri, prompt, 12);
    ASSERT_EQ(cold.tokens.size(), 12u) << cold.error;
    EXPECT_EQ(cold.cached, 0);
    auto e = Make(Open(uri), /*exact=*/true);
    const Got hit = RunAll(*e, {prompt}, 12)[0];
    const int64_t blocks = (len - 134) / 128;
    EXPECT_EQ(hit.cached, blocks * 128) << "len " << len;
    EXPECT_EQ(hit.tokens, cold.tokens) << "exact replay after a store hit must give the cold tokens (len " << len << ")";
    Stats s = e->GetStats();
    EXPECT_EQ(s.kv_store_fetches, 1u);
    EXPECT_EQ(s.kv_store_fetch_blocks, static_cast<uint64_t>(blocks));
    EXPECT_EQ(s.prefix_hit_tokens_store, static_cast<uint64_t>(blocks * 128));
    EXPECT_EQ(s.kv_store_fetch_timeouts, 0u);
    // Again in the same engine: now a pool hit, no second fetch.
    const Got again = RunAll(*e, {prompt}, 12)[0];
    EXPECT_EQ(again.tokens, cold.tokens);
    EXPECT_EQ(e->GetStats().kv_store_fetches, 1u);
    e->Shutdown();
  }
}

TEST_F(EngineStoreRead, BoundedReplayHitsAreMeasuredAgainstExactReplay) {
  // Encoder SWA Bounded Replay approximates the ring: report how often greedy agrees with the
  // exact replay over 64 tokens (no threshold is asserted: it is a measurement; the KL of the
  // next-token distribution is DefaultModelTest.EncoderBoundedReplayKl's).
  Dir d;
  const std::string uri = "fs:" + d.path;
  int agree = 0, total = 0, prompts = 0, identical = 0;
  for (int salt = 1; salt <= 3; ++salt) {
    const auto prompt = Prompt(640, salt * 13);
    const Got cold = Prime(uri, prompt, 64);
    auto e = Make(Open(uri), /*exact=*/false);
    const Got hit = RunAll(*e, {prompt}, 64)[0];
    EXPECT_EQ(hit.cached, 3 * 128 - 128) << "an SWA miss backs off one block and replays it";
    EXPECT_EQ(e->GetStats().kv_store_fetch_blocks, 3u);
    ASSERT_EQ(hit.tokens.size(), cold.tokens.size());
    size_t first_diff = 0;
    while (first_diff < hit.tokens.size() && hit.tokens[first_diff] == cold.tokens[first_diff]) ++first_diff;
    agree += static_cast<int>(first_diff);
    total += static_cast<int>(hit.tokens.size());
    identical += first_diff == hit.tokens.size() ? 1 : 0;
    ++prompts;
    e->Shutdown();
  }
  std::printf("[bounded replay] greedy tokens agreeing with the exact (cold) run before the first divergence: "
              "%d / %d over %d prompts of 640 tokens; %d prompts identical over 64 tokens\n",
              agree, total, prompts, identical);
}

TEST_F(EngineStoreRead, AnEcStoreServesWithTwoDomainsLostAndRecomputesWithThree) {
  Dir d;
  std::string uri = "ec:10+2:";
  std::vector<std::string> dirs;
  for (int i = 0; i < 12; ++i) {
    dirs.push_back(d.path + "/d" + std::to_string(i));
    std::filesystem::create_directories(dirs.back());
    uri += (i ? "," : "") + dirs.back();
  }
  const auto prompt = Prompt(800, 5);
  const Got cold = Prime(uri, prompt, 8);
  auto lose = [&](int i) {
    std::filesystem::remove_all(dirs[i]);
    std::filesystem::create_directories(dirs[i]);  // an empty replacement disk
  };
  lose(0);
  lose(11);
  {
    auto e = Make(Open(uri), true);
    const Got hit = RunAll(*e, {prompt}, 8)[0];
    EXPECT_EQ(hit.error, "");
    EXPECT_EQ(hit.cached, 5 * 128) << "2 of 12 domains lost: every block still decodes";
    EXPECT_EQ(hit.tokens, cold.tokens);
    e->Shutdown();
  }
  lose(1);
  lose(2);  // with 0 and 11 still empty: 4 lost (repair may have refilled some), beyond RS(10,2)
  lose(0);
  lose(11);
  {
    auto e = Make(Open(uri), true);
    const Got again = RunAll(*e, {prompt}, 8)[0];
    EXPECT_EQ(again.error, "");
    EXPECT_EQ(again.tokens, cold.tokens) << "lost blocks recompute, with the same output";
    EXPECT_EQ(e->GetStats().prefix_hit_tokens_store, 0u);
    e->Shutdown();
  }
}

TEST_F(EngineStoreRead, AStalledFetchHitsItsDeadlineRecomputesAndLetsOthersPass) {
  Dir d;
  const std::string uri = "fs:" + d.path;
  const auto prompt = Prompt(700, 9);
  const Got cold = Prime(uri, prompt, 8);
  auto stalling = std::make_shared<testing::StallingStore>(Open(uri));
  auto e = Make(stalling, true, /*deadline_ms=*/400);
  // A prompt the store does not know is submitted after the stalled one and finishes first.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> order;
  SamplingParams p;
  p.max_tokens = 8;
  p.temperature = 0;
  p.ignore_eos = true;
  std::vector<TokenId> stalled_tokens;
  int64_t stalled_cached = -1;
  auto sink = [&](const std::string& name, std::vector<TokenId>* out, int64_t* cached) {
    return [&, name, out, cached](const Output& o) {
      std::lock_guard lk(mu);
      if (out) for (const auto& ev : o.tokens) out->push_back(ev.token);
      if (o.finished) {
        if (cached) *cached = o.cached_tokens;
        order.push_back(name);
        cv.notify_all();
      }
    };
  };
  ASSERT_TRUE(e->Submit({prompt, p, nullptr}, sink("stalled", &stalled_tokens, &stalled_cached)).ok());
  ASSERT_TRUE(e->Submit({Prompt(100, 77), p, nullptr}, sink("other", nullptr, nullptr)).ok());
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return order.size() == 2; }));
  }
  EXPECT_EQ(order[0], "other") << "a loading request must not hold up the queue";
  EXPECT_EQ(stalled_tokens, cold.tokens);
  EXPECT_EQ(stalled_cached, 0) << "nothing arrived by the deadline: recomputed";
  Stats s = e->GetStats();
  EXPECT_EQ(s.kv_store_fetch_timeouts, 1u);
  EXPECT_EQ(s.kv_store_fetch_blocks, 0u);
  EXPECT_GT(stalling->Held(), 0u);
  e->Shutdown();
  e.reset();
  stalling->Release();  // the late completions find no engine: nothing breaks
}

// A prompt of 6 hit blocks and a tail (950 tokens: the L − 134 cap is 816, 6 whole blocks) whose
// block 2 is lost between Match (which says all 6 are there) and Get: the Get of chunk 0 (blocks
// 0-3, kv_fetch_chunk_blocks 4) reports block 2 as a miss and serves 0, 1 and 3; chunk 1 (4, 5)
// arrives whole. Only blocks 0 and 1 may be installed, the rest recomputes.
//
// Why this fails if the engine used anything at or after the hole: the pool's prefix match (and
// so `cached`, prefix_hit_tokens and prefix_hit_tokens_store) stops at the first block not in the
// pool, so installing 3-5 around the missing 2 shows only in kv_store_fetch_blocks (blocks
// installed: 5, not 2); taking block 2's buffer as if it had arrived (ignoring its per-key
// status) makes `cached` 6 blocks, and since its buffer holds noise and exact replay reads the
// reused blocks' global KV, the tokens differ from the cold run's too. (Checked by mutating
// InstallFetched's contiguous-prefix loop both ways, then reverting: installing every block
// that arrived fails the kv_store_fetch_blocks checks; ignoring per-key status fails cached,
// tokens and every counter.)
TEST_F(EngineStoreRead, ABlockMissingMidChainKeepsOnlyTheContiguousPrefixBeforeIt) {
  Dir d;
  const std::string uri = "fs:" + d.path;
  constexpr int kLen = 950;
  constexpr size_t kHole = 2;
  const auto prompt = Prompt(kLen, 21);
  const Got cold = Prime(uri, prompt, 8);
  ASSERT_EQ(cold.tokens.size(), 8u) << cold.error;
  // The hit policy, as the engine applies it (its geometry: block 128, window 128, rollback 6):
  // the fetch asks for 6 blocks; 2 arrive; a fresh engine has no SWA entry, so DecideHit backs
  // off one window (hit 128, replaying block 1), and exact replay instead replays everything
  // through the encoder while reusing both blocks' global KV (reported cached: 256).
  const SwaGeometry g;
  ASSERT_EQ(DecideHit(g, kLen, kLen, nullptr).block_reused, 6 * 128);
  const HitDecision hd = DecideHit(g, kLen, static_cast<int64_t>(kHole) * 128, nullptr);
  ASSERT_EQ(hd.block_reused, 256);
  ASSERT_EQ(hd.hit, 128);
  {
    auto store = std::make_shared<HoleStore>(Open(uri), kHole, HoleStore::Mode::kMiss);
    auto e = Make(store, /*exact=*/true);
    const Got hit = RunAll(*e, {prompt}, 8)[0];
    EXPECT_EQ(hit.error, "");
    EXPECT_EQ(hit.cached, hd.block_reused) << "exact replay: the 2 blocks before the hole are reused";
    EXPECT_EQ(hit.tokens, cold.tokens) << "exact replay after a partial store hit must give the cold tokens";
    EXPECT_EQ(store->HoleGets(), 1u) << "the hole was asked for once, in chunk 0";
    const Stats s = e->GetStats();
    EXPECT_EQ(s.kv_store_fetches, 1u);
    EXPECT_EQ(s.kv_store_fetch_blocks, kHole) << "nothing at or after the hole is installed";
    EXPECT_EQ(s.prefix_hit_tokens_store, kHole * 128);
    EXPECT_EQ(s.prefix_hit_tokens, static_cast<uint64_t>(hd.block_reused));
    EXPECT_EQ(s.kv_store_fetch_timeouts, 0u) << "every Get completed: a miss is not a timeout";
    EXPECT_EQ(s.kv_loading, 0u);
    e->Shutdown();
  }
  {
    // Bounded replay on the same partial hit: the hit backs off one window.
    auto store = std::make_shared<HoleStore>(Open(uri), kHole, HoleStore::Mode::kMiss);
    auto e = Make(store, /*exact=*/false);
    const Got hit = RunAll(*e, {prompt}, 8)[0];
    EXPECT_EQ(hit.error, "");
    EXPECT_EQ(hit.cached, hd.hit) << "an SWA miss backs off one block from the 2 that arrived";
    EXPECT_EQ(hit.tokens.size(), 8u);
    const Stats s = e->GetStats();
    EXPECT_EQ(s.kv_store_fetch_blocks, kHole);
    EXPECT_EQ(s.prefix_hit_tokens_store, kHole * 128);
    EXPECT_EQ(s.prefix_hit_tokens, static_cast<uint64_t>(hd.hit));
    EXPECT_EQ(s.kv_store_fetch_timeouts, 0u);
    EXPECT_EQ(s.kv_loading, 0u);
    e->Shutdown();
  }
}

// The same prompt with one block per Get (kv_fetch_chunk_blocks 1) and the Get of block 3 never
// completing within the 800 ms deadline (ample for the other Gets on a loaded machine), while
// the Gets of 4 and 5 (after it) complete: at the deadline the engine keeps blocks 0-2, the
// contiguous prefix that arrived, and counts a timeout;
// 4 and 5 arrived but lie past the hole (installing them shows in kv_store_fetch_blocks: 5, not
// 3; checked by mutation, as above). Block 3's bytes were read by the real store but its
// completion is held: a chunk still in flight is never read. Its late completion, after the
// engine is gone, is harmless.
TEST_F(EngineStoreRead, AMidChainGetPastTheDeadlineKeepsTheBlocksBeforeIt) {
  Dir d;
  const std::string uri = "fs:" + d.path;
  constexpr int kLen = 950;
  constexpr size_t kHole = 3;
  const auto prompt = Prompt(kLen, 22);
  const Got cold = Prime(uri, prompt, 8);
  ASSERT_EQ(cold.tokens.size(), 8u) << cold.error;
  auto store = std::make_shared<HoleStore>(Open(uri), kHole, HoleStore::Mode::kWithhold);
  auto e = Make(store, /*exact=*/true, /*deadline_ms=*/800, [](EngineConfig& c) { c.kv_fetch_chunk_blocks = 1; });
  const Got hit = RunAll(*e, {prompt}, 8)[0];
  EXPECT_EQ(hit.error, "");
  EXPECT_EQ(hit.cached, static_cast<int64_t>(kHole) * 128) << "exact replay reuses the 3 blocks before the hole";
  EXPECT_EQ(hit.tokens, cold.tokens);
  const Stats s = e->GetStats();
  EXPECT_EQ(s.kv_store_fetches, 1u);
  EXPECT_EQ(s.kv_store_fetch_timeouts, 1u);
  EXPECT_EQ(s.kv_store_fetch_blocks, kHole) << "blocks 4 and 5 arrived but lie past the hole";
  EXPECT_EQ(s.prefix_hit_tokens_store, kHole * 128);
  EXPECT_EQ(s.kv_loading, 0u);
  EXPECT_EQ(store->HoleGets(), 1u);
  EXPECT_EQ(store->Held(), 1u) << "only the hole's Get was held";
  e->Shutdown();
  e.reset();
  store->Release();  // the late completion finds no engine: nothing breaks
}

TEST_F(EngineStoreRead, SixtyFourStreamsWithSharedPrefixesHitAndFetchConcurrently) {
  // 8 prefixes primed by one engine; 64 requests (8 per prefix, each with its own suffix) at
  // once on a restarted engine: every one finishes without error, the store serves the
  // prefixes, and with exact replay every output equals an engine's without any store.
  Dir d;
  const std::string uri = "fs:" + d.path;
  std::vector<std::vector<TokenId>> prefixes;
  for (int i = 0; i < 8; ++i) prefixes.push_back(Prompt(420, 100 + i));
  {
    auto e = Make(Open(uri), false);
    RunAll(*e, prefixes, 1);
    WaitWrites(*e, 8 * 3);
    e->Shutdown();
  }
  // 64 in Release; under the sanitizers (several times slower) 16, the same paths.
#ifdef __SANITIZE_ADDRESS__
  constexpr int kStreams = 16;
#else
  constexpr int kStreams = 64;
#endif
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < kStreams; ++i) {
    auto p = prefixes[static_cast<size_t>(i % 8)];
    for (int j = 0; j < 16; ++j) p.push_back(static_cast<TokenId>(200 + (i * 37 + j * 11) % 7000));
    prompts.push_back(std::move(p));
  }
  auto make = [&](std::shared_ptr<kvcache::KvStore> store) {
    auto m = Model::Create(Mc(), "");
    EngineConfig c;
    c.num_blocks = 160;
    c.max_running = 16;
    c.max_queue = 128;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 256;
    c.kv_store = std::move(store);
    c.exact_replay = true;
    c.prefix_cache = true;
    auto e = CreateEngine(c, std::move(m).value(), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  };
  auto plain = make(nullptr);
  auto want = RunAll(*plain, prompts, 4);
  plain->Shutdown();
  auto e = make(Open(uri));
  auto got = RunAll(*e, prompts, 4);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].error, "") << "stream " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "stream " << i;
  }
  Stats s = e->GetStats();
  EXPECT_GE(s.kv_store_fetches, 8u);
  EXPECT_GE(s.kv_store_fetch_blocks, 8u * 2);
  EXPECT_GE(s.prefix_hit_tokens_store, 8u * 2 * 128);
  EXPECT_EQ(s.kv_store_fetch_timeouts, 0u);
  EXPECT_EQ(s.kv_blocks_used, 0u) << "every block released";
  e->Shutdown();
  e.reset();  // closes the store: the fetcher opens it next

  // The same streams through a fetcher whose shm pool holds only 12 blocks (fewer than the 16
  // the 8 prefixes need at once): pins bound it, a fetch that finds no slot recomputes, the
  // outputs stay the same, and every pin is released at the end.
  kvcache::FetcherOptions fo;
  fo.store_uri = uri;
  fo.socket_path = d.path + ".sock";
  fo.block_bytes = Model::Create(Mc(), "").value()->NewKvStorage(1, 1)->block_bytes();
  fo.shm_bytes = 12 * fo.block_bytes;
  auto srv = kvcache::FetcherServer::Start(fo);
  ASSERT_TRUE(srv.ok()) << srv.status().ToString();
  auto fetcher = kvcache::FetcherStore::Create(
      [sock = fo.socket_path] { return kvcache::FetcherClient::Connect(sock, std::chrono::seconds(5)); });
  ASSERT_TRUE(fetcher.ok());
  auto f = make(*fetcher);
  auto via = RunAll(*f, prompts, 4);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(via[i].error, "") << "stream " << i;
    EXPECT_EQ(via[i].tokens, want[i].tokens) << "stream " << i;
  }
  EXPECT_GE(f->GetStats().kv_store_fetch_blocks, 8u);
  f->Shutdown();
  const kvcache::FetcherStats fs = (*srv)->Stats();  // also checks the pool's invariants
  EXPECT_EQ(fs.slots, 12u);
  EXPECT_EQ(fs.slots_pinned, 0u) << "every pin released";
  EXPECT_LE(fs.slots_used, fs.slots);
  EXPECT_EQ(fs.store_errors, 0u);
}

// Issue 14's concurrency soak: streams with shared prefixes kept in flight (64; 16 under the
// sanitizers) through a fetcher whose shm pool holds fewer blocks than they need at once, for
// LADLE_SOAK_SECONDS (4 by default, the CI form; 60 is the long form). Every stream
// finishes whole with no error, resident memory is flat after a warm-up (within 64 MiB: a leak
// of a request's KV or of a fetch's buffers would pass that within seconds), the pool stays
// within its slots, and every pin and KV block is released at the end.
TEST_F(EngineStoreRead, SoakOfSharedPrefixStreamsThroughAFetcherKeepsMemoryFlat) {
  int seconds = 4;
  if (const char* env = std::getenv("LADLE_SOAK_SECONDS")) {
    if (auto v = ParseI64(env); v && *v > 0) seconds = static_cast<int>(*v);
  }
#ifdef __SANITIZE_ADDRESS__
  constexpr int kStreams = 16;
#else
  constexpr int kStreams = 64;
#endif
  constexpr int kTokens = 4;
  Dir d;
  const std::string uri = "fs:" + d.path;
  std::vector<std::vector<TokenId>> prefixes;
  for (int i = 0; i < 8; ++i) prefixes.push_back(Prompt(420, 300 + i));
  {
    auto e = Make(Open(uri), false);
    RunAll(*e, prefixes, 1);
    WaitWrites(*e, 8 * 3);
    e->Shutdown();
  }
  kvcache::FetcherOptions fo;
  fo.store_uri = uri;
  fo.socket_path = d.path + ".sock";
  fo.block_bytes = Model::Create(Mc(), "").value()->NewKvStorage(1, 1)->block_bytes();
  fo.shm_bytes = 12 * fo.block_bytes;
  auto srv = kvcache::FetcherServer::Start(fo);
  ASSERT_TRUE(srv.ok()) << srv.status().ToString();
  auto fetcher = kvcache::FetcherStore::Create(
      [sock = fo.socket_path] { return kvcache::FetcherClient::Connect(sock, std::chrono::seconds(5)); });
  ASSERT_TRUE(fetcher.ok());
  EngineConfig c;
  c.num_blocks = 160;
  c.max_running = 16;
  c.max_queue = 256;
  c.chunk_policy = "fixed";
  c.chunk_tokens = 256;
  c.kv_store = *fetcher;
  c.prefix_cache = true;
  auto created = CreateEngine(c, Model::Create(Mc(), "").value(), *testing::EngineTokenizer());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto e = std::move(created).value();

  auto rss_mib = [] {
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
      std::fclose(f);
    }
    return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
  };
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  uint64_t submitted = 0, finished = 0, errors = 0, short_streams = 0;
  SamplingParams sp;
  sp.max_tokens = kTokens;
  sp.temperature = 0;
  sp.ignore_eos = true;
  auto submit = [&](uint64_t n) {
    std::vector<TokenId> p = prefixes[n % 8];
    for (int j = 0; j < 16; ++j) p.push_back(static_cast<TokenId>(200 + (n * 37 + static_cast<uint64_t>(j) * 11) % 7000));
    auto count = std::make_shared<int>(0);
    auto id = e->Submit({std::move(p), sp, nullptr}, [&, count](const Output& o) {
      std::lock_guard lk(mu);
      *count += static_cast<int>(o.tokens.size());
      if (!o.finished) return;
      --in_flight;
      ++finished;
      if (!o.error.empty()) ++errors;
      if (*count != kTokens) ++short_streams;
      cv.notify_all();
    });
    if (!id.ok()) {
      std::lock_guard lk(mu);
      --in_flight;
      ++errors;
    }
  };
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto until = start + std::chrono::seconds(seconds);
  const auto warm = start + std::chrono::milliseconds(seconds * 250);
  double rss_warm = 0, rss_peak = 0;
  while (Clock::now() < until) {
    int want = 0;
    {
      std::unique_lock lk(mu);
      cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return in_flight < kStreams; });
      want = kStreams - in_flight;
      in_flight += want;
    }
    for (int i = 0; i < want; ++i) submit(submitted++);
    const double rss = rss_mib();
    if (rss_warm == 0 && Clock::now() >= warm) rss_warm = rss;
    if (rss_warm > 0) rss_peak = std::max(rss_peak, rss);
  }
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return in_flight == 0; })) << in_flight << " streams hang";
  }
  const double rss_end = rss_mib();
  std::printf("[soak] %d s, %d streams in flight: %llu finished, %llu errors, %llu short; RSS after warm-up %.1f MiB, "
              "peak %.1f, end %.1f\n",
              seconds, kStreams, static_cast<unsigned long long>(finished), static_cast<unsigned long long>(errors),
              static_cast<unsigned long long>(short_streams), rss_warm, rss_peak, rss_end);
  EXPECT_EQ(errors, 0u);
  EXPECT_EQ(short_streams, 0u);
  EXPECT_EQ(finished, submitted);
  EXPECT_GE(finished, static_cast<uint64_t>(kStreams));
#ifndef __SANITIZE_ADDRESS__
  // (Under ASan freed memory waits in its quarantine, 256 MiB by default, so resident memory
  // says nothing there; LeakSanitizer checks leaks in that build.)
  EXPECT_LT(rss_peak - rss_warm, 64.0) << "resident memory grows while the load is steady";
#endif
  const Stats st = e->GetStats();
  EXPECT_EQ(st.kv_blocks_used, 0u) << "every block released";
  EXPECT_EQ(st.kv_loading, 0u);
  e->Shutdown();
  const kvcache::FetcherStats fs = (*srv)->Stats();
  EXPECT_EQ(fs.slots, 12u);
  EXPECT_LE(fs.slots_used, fs.slots);
  EXPECT_EQ(fs.slots_pinned, 0u) << "every pin released";
  EXPECT_EQ(fs.store_errors, 0u);
}

}  // namespace
}  // namespace ladle::engine
