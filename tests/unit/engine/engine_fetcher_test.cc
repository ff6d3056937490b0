// The engine on a store owned by a fetcher process (kvcache::FetcherStore over FetcherClient):
// blocks go to the store through the fetcher's staging slots; a restarted engine hits them
// through the fetcher's shared memory (a store read the first time, an shm hit the next) with
// the cold run's tokens (exact replay); a fetcher killed with SIGKILL while a fetch is in flight
// leaves the request to recompute the same tokens, nothing hangs, and once a fetcher is back
// the engine reconnects and hits from the store again.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "engine_test_util.h"
#include "fault_target.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/kvcache/fetcher.h"
#include "ladle/kvcache/fetcher_store.h"

namespace ladle::engine {
namespace {

using testing::Got;
using testing::PatternPrompt;
using testing::RunGreedy;
using Ms = std::chrono::milliseconds;

class EngineFetcher : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }

  static ModelConfig Mc() {
    ModelConfig mc;
    mc.vocab_size = 8192;
    return mc;
  }
  // The model's block size, from one model made once (each Model::Create initialises weights).
  static size_t BlockBytes() {
    static const size_t bytes = [] {
      auto m = Model::Create(Mc(), "");
      return m.ok() ? (*m)->NewKvStorage(1, 1)->block_bytes() : size_t{0};
    }();
    return bytes;
  }

  static std::unique_ptr<Engine> Make(std::shared_ptr<kvcache::KvStore> store, int64_t deadline_ms = 5000) {
    auto m = Model::Create(Mc(), "");
    EXPECT_TRUE(m.ok());
    EngineConfig c;
    c.num_blocks = 48;
    c.max_running = 4;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 256;
    c.kv_store = std::move(store);
    c.exact_replay = true;  // a hit then gives the cold run's tokens
    c.kv_fetch_deadline_base_ms = deadline_ms;
    c.kv_fetch_deadline_per_block_ms = 0;
    c.kv_fetch_deadline_max_ms = deadline_ms;
    auto e = CreateEngine(c, std::move(m).value(), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static std::shared_ptr<kvcache::FetcherStore> Through(const std::string& sock) {
    auto s = kvcache::FetcherStore::Create([sock] { return kvcache::FetcherClient::Connect(sock, Ms(5000)); },
                                           {.reconnect_every = Ms(50)});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : nullptr;
  }

  static std::unique_ptr<kvcache::FetcherServer> Serve(const std::string& uri, const std::string& sock) {
    kvcache::FetcherOptions o;
    o.store_uri = uri;
    o.socket_path = sock;
    o.block_bytes = BlockBytes();
    o.shm_bytes = 64 * o.block_bytes;
    auto srv = kvcache::FetcherServer::Start(o);
    EXPECT_TRUE(srv.ok()) << srv.status().ToString();
    return srv.ok() ? std::move(srv).value() : nullptr;
  }

  static void WaitPuts(kvcache::FetcherServer& srv, uint64_t want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (srv.Stats().puts < want && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(Ms(5));
    ASSERT_GE(srv.Stats().puts, want);
  }
};

TEST_F(EngineFetcher, ARestartHitsThroughTheFetcherFromTheStoreThenFromShm) {
  testing::TempDir d("engine-fetcher");
  const std::string uri = "fs:" + d.path + "/store", sock = d.path + "/f.sock";
  std::filesystem::create_directories(d.path + "/store");
  auto srv = Serve(uri, sock);
  ASSERT_TRUE(srv);
  const auto prompt = PatternPrompt(3 * 128 + 140, 1);
  Got cold;
  {
    auto e = Make(Through(sock));
    cold = RunGreedy(*e, {prompt}, 8)[0];
    ASSERT_TRUE(cold.error.empty()) << cold.error;
    WaitPuts(*srv, 3);
    e->Shutdown();
  }
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "store read" : "shm hit");
    auto e = Make(Through(sock));
    const auto before = srv->Stats();
    const Got hit = RunGreedy(*e, {prompt}, 8)[0];
    EXPECT_TRUE(hit.error.empty()) << hit.error;
    EXPECT_EQ(hit.tokens, cold.tokens);
    EXPECT_EQ(hit.cached, 3 * 128);
    const Stats st = e->GetStats();
    EXPECT_EQ(st.kv_store_fetch_blocks, 3u);
    EXPECT_EQ(st.prefix_hit_tokens_store, 3u * 128);
    EXPECT_EQ(st.swap_in_copies, 3u);  // straight from shm into the KV storage
    const auto after = srv->Stats();
    if (round == 0) {
      EXPECT_EQ(after.store_reads - before.store_reads, 3u);
    } else {
      EXPECT_EQ(after.shm_hits - before.shm_hits, 3u);
      EXPECT_EQ(after.store_reads, before.store_reads);
      // The engine's view of the fetcher (for /metrics) catches up within its refresh period.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (e->GetStats().kv_fetcher_shm_hit_blocks < after.shm_hits && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(Ms(20));
      EXPECT_TRUE(e->GetStats().kv_fetcher && e->GetStats().kv_fetcher_connected);
      EXPECT_EQ(e->GetStats().kv_fetcher_shm_hit_blocks, after.shm_hits);
      EXPECT_EQ(e->GetStats().kv_fetcher_slots, srv->slots());
    }
    e->Shutdown();
    EXPECT_EQ(srv->Stats().slots_pinned, 0u) << "every pin released after the copy";
  }
}

TEST_F(EngineFetcher, AFetcherKilledMidFetchLeavesTheRequestToRecomputeAndTheEngineReconnects) {
  testing::TempDir d("engine-fetcher-kill");
  const std::string dir = d.path + "/store", sock = d.path + "/f.sock";
  std::filesystem::create_directories(dir);
  const auto prompt = PatternPrompt(3 * 128 + 140, 2);
  Got cold;
  {
    auto srv = Serve("fs:" + dir, sock);
    ASSERT_TRUE(srv);
    auto e = Make(Through(sock));
    cold = RunGreedy(*e, {prompt}, 8)[0];
    WaitPuts(*srv, 3);
    e->Shutdown();
  }
  // The fetcher, in a child: every store read takes 20 s, so a fetch is in flight when it dies.
  const std::string fault = "engine-kill-" + std::to_string(::getpid());
  const size_t block_bytes = BlockBytes();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    kvcache::FaultControl::Named(fault)->delay_ms = 20000;
    kvcache::StoreOptions so;
    so.gc_in_process = false;
    so.domain_timeout = Ms(60000);
    auto s = kvcache::KvStore::Open("fs:fault:" + fault + ":" + dir, so);
    if (!s.ok()) ::_exit(2);
    kvcache::FetcherOptions o;
    o.store = std::move(s).value();
    o.socket_path = sock;
    o.block_bytes = block_bytes;
    o.shm_bytes = 64 * block_bytes;
    auto srv = kvcache::FetcherServer::Start(o);
    if (!srv.ok()) ::_exit(3);
    for (;;) ::pause();
  }
  auto store = Through(sock);
  ASSERT_TRUE(store) << "child fetcher did not come up";
  auto e = Make(store, /*deadline_ms=*/30000);  // the deadline must not be what ends the fetch
  std::thread killer([&] {
    // Kill once the fetch is in the store.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      auto st = store->FetcherStat(Ms(500));
      if (st.ok() && st->store_reads > 0) break;
      std::this_thread::sleep_for(Ms(5));
    }
    ::kill(pid, SIGKILL);
    int status;
    ::waitpid(pid, &status, 0);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const Got got = RunGreedy(*e, {prompt}, 8)[0];
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  killer.join();
  EXPECT_TRUE(got.error.empty()) << got.error;
  EXPECT_EQ(got.tokens, cold.tokens) << "recomputed";
  EXPECT_LT(s, 15.0) << "the request waited for the dead fetcher";
  EXPECT_EQ(e->GetStats().kv_store_fetch_blocks, 0u);
  // A fetcher is back (here in-process, on the real store): the engine reconnects by itself and
  // the next new prompt whose blocks the store holds hits. (The first prompt is in the pool now.)
  auto srv = Serve("fs:" + dir, sock);
  ASSERT_TRUE(srv);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!store->stats().connected && std::chrono::steady_clock::now() < deadline) {
    store->Match({}, [](Result<size_t>) {});  // a call notices the dead client and asks for a reconnect
    std::this_thread::sleep_for(Ms(20));
  }
  ASSERT_TRUE(store->stats().connected);
  EXPECT_GE(store->stats().reconnects, 1u);
  const auto p2 = PatternPrompt(2 * 128 + 140, 3);
  {
    auto prime = Make(Through(sock));
    (void)RunGreedy(*prime, {p2}, 2);
    WaitPuts(*srv, 2);
    prime->Shutdown();
  }
  const Got hit = RunGreedy(*e, {p2}, 2)[0];
  EXPECT_TRUE(hit.error.empty()) << hit.error;
  EXPECT_EQ(hit.cached, 2 * 128);
  EXPECT_EQ(e->GetStats().kv_store_fetch_blocks, 2u);
  e->Shutdown();
}

}  // namespace
}  // namespace ladle::engine
