// Helpers shared by the cluster tests: the built-in model at a small vocabulary, engines and
// their gRPC servers in this process (Node), a sink that collects a request's outputs, and a
// routed engine over given addresses.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_test_util.h"
#include "ladle/cluster/engine_server.h"
#include "ladle/cluster/routed_engine.h"
#include "ladle/engine/engine_config.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::cluster::test_util {

using engine::EngineConfig;
using engine::ModelConfig;
using engine::testing::PatternPrompt;
using engine::TokenId;

inline ModelConfig Mc() {
  ModelConfig mc;
  mc.vocab_size = 8192;
  return mc;
}

inline EngineConfig Ec(std::shared_ptr<kvcache::KvStore> store = nullptr) {
  EngineConfig c;
  c.num_blocks = 64;
  c.max_running = 8;
  c.chunk_policy = "fixed";
  c.chunk_tokens = 256;
  c.kv_store = std::move(store);
  c.kv_fetch_deadline_base_ms = 5000;
  c.swa_pool = std::make_shared<engine::SwaPool>();
  return c;
}

inline std::unique_ptr<engine::Engine> MakeEngine(EngineConfig c) {
  auto m = engine::Model::Create(Mc(), "");
  EXPECT_TRUE(m.ok());
  auto e = engine::CreateEngine(c, std::move(m).value(), *engine::testing::EngineTokenizer());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// One `ladle engine` in this process: an engine and its server.
struct Node {
  std::unique_ptr<engine::Engine> eng;
  std::shared_ptr<ForwardingSwaDirectory> dir = std::make_shared<ForwardingSwaDirectory>();
  std::unique_ptr<EngineServer> srv;
  std::string addr;

  Node(Role role, const std::string& name, std::shared_ptr<kvcache::KvStore> store = nullptr) {
    EngineConfig c = Ec(std::move(store));
    c.swa_directory = dir;
    c.swa_holder = name;
    eng = MakeEngine(c);
    EngineServerOptions o;
    o.info.name = name;
    o.info.role = role;
    o.info.key_extras = {{kvcache::ExtraTag::kModel, engine::ModelFingerprint(Mc())}};
    o.info.vocab_size = Mc().vocab_size;
    o.swa_pool = c.swa_pool;
    auto s = EngineServer::Start(std::move(o), {eng.get()});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    srv = std::move(s).value();
    dir->Attach(srv.get());
    addr = "127.0.0.1:" + std::to_string(srv->port());
  }
  void Kill() {
    dir->Attach(nullptr);
    srv->Shutdown(0);
  }
  ~Node() {
    dir->Attach(nullptr);
    if (srv) srv->Shutdown(1000);
    srv.reset();
    if (eng) eng->Shutdown();
  }
};

// Collects one request's outputs.
struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<TokenId>> tokens;
  std::vector<std::vector<float>> logprobs;
  std::vector<engine::FinishKind> finish;
  std::string error;
  int finished = 0, n = 1;
  explicit Sink(int samples = 1) : tokens(samples), logprobs(samples), finish(samples), n(samples) {}
  engine::OutputSink Fn() {
    return [this](const engine::Output& o) {
      std::lock_guard lock(mu);
      for (const auto& t : o.tokens) {
        tokens[static_cast<size_t>(t.index)].push_back(t.token);
        logprobs[static_cast<size_t>(t.index)].push_back(t.logprob);
      }
      if (o.finished) {
        finish[static_cast<size_t>(o.finished_index)] = o.finish;
        if (!o.error.empty()) error = o.error;
        ++finished;
        cv.notify_all();
      }
    };
  }
  bool Wait(int seconds = 120) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(seconds), [&] { return finished >= n; });
  }
  size_t Count(int i = 0) {
    std::lock_guard lock(mu);
    return tokens[static_cast<size_t>(i)].size();
  }
};

inline engine::SamplingParams Greedy(int max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  p.top_logprobs = 0;
  return p;
}

inline std::unique_ptr<RoutedEngine> Route(std::vector<std::string> engines, std::shared_ptr<kvcache::KvStore> store = nullptr) {
  RoutedEngineOptions o;
  o.engines = std::move(engines);
  o.poll_ms = 50;
  o.dead_after_ms = 500;
  o.store = std::move(store);
  auto r = RoutedEngine::Create(o, 10'000);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

// Greedy prompts of 5, 130 and 300 tokens through `routed` give the tokens and logprobs `local`
// gives, and finish by length. Call with ASSERT_NO_FATAL_FAILURE.
inline void ExpectMatchesLocal(engine::Engine& local, engine::Engine& routed) {
  for (int len : {5, 130, 300}) {
    Sink a, b;
    ASSERT_TRUE(local.Submit({PatternPrompt(len, len), Greedy(16), nullptr}, a.Fn()).ok());
    ASSERT_TRUE(routed.Submit({PatternPrompt(len, len), Greedy(16), nullptr}, b.Fn()).ok());
    ASSERT_TRUE(a.Wait());
    ASSERT_TRUE(b.Wait());
    EXPECT_EQ(b.error, "");
    EXPECT_EQ(a.tokens, b.tokens) << "len " << len;
    EXPECT_EQ(a.logprobs, b.logprobs) << "len " << len;
    EXPECT_EQ(b.finish[0], engine::FinishKind::kLength);
  }
}

// Waits until every engine is known and alive (roles learned).
inline void WaitAlive(RoutedEngine& r, size_t n) {
  for (int i = 0; i < 200; ++i) {
    auto s = r.GetClusterStats();
    size_t alive = 0;
    for (const auto& e : s.engines) alive += e.alive;
    if (alive >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  FAIL() << "engines did not come alive";
}

}  // namespace ladle::cluster::test_util
