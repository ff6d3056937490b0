// Test helpers for the engine runtime: the DeepSeek tokenizer (found the way test_data.h
// finds it, from this file's location so the engine_test target needs no extra defines).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ladle/engine/engine.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::engine::testing {

// A fresh directory under $TMPDIR (default /tmp), named by `tag`, the pid and the object, and
// removed with it.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag) {
    const char* base = std::getenv("TMPDIR");
    path = std::string(base ? base : "/tmp") + "/ladle-" + tag + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(reinterpret_cast<uintptr_t>(this));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline std::string EngineTokenizerPath() {
  if (const char* v = std::getenv("LADLE_TOKENIZER")) return v;
  const auto root = std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "..";
  const char* cache = std::getenv("LADLE_CACHE");
  auto cached = (cache ? std::filesystem::path(cache) : root / ".cache") / "tokenizers/deepseek-v3/tokenizer.json";
  if (std::filesystem::exists(cached)) return cached.string();
  const char* shared = std::getenv("LADLE_SHARED");
  return ((shared ? std::filesystem::path(shared) : root / ".." / "shared") / "tokenizers/deepseek-v3/tokenizer.json")
      .string();
}

// Loaded once per binary; null if missing.
inline const tokenizer::Tokenizer* EngineTokenizer() {
  static std::optional<tokenizer::Tokenizer> tok = []() -> std::optional<tokenizer::Tokenizer> {
    auto t = tokenizer::Tokenizer::FromFile(EngineTokenizerPath());
    if (!t.ok()) return std::nullopt;
    return std::move(t).value();
  }();
  return tok ? &*tok : nullptr;
}

// The reference model small enough that a test runs in milliseconds, shaped so that windows,
// rings and blocks all wrap within a few dozen tokens: window 16, ring 22 (6 spare), blocks of 16.
inline ModelConfig TinyModelConfig(int vocab_size) {
  ModelConfig c;
  c.vocab_size = vocab_size;
  c.hidden = 64;
  c.heads = 2;
  c.head_dim = 32;
  c.experts = 4;
  c.experts_top_k = 2;
  c.expert_hidden = 64;
  c.window = 16;
  c.block_size = 16;
  c.swa_ring = 22;
  return c;
}

// A prompt of `len` ids in [100, 8100) that differs by `salt` (fits an 8192-token vocabulary).
inline std::vector<TokenId> PatternPrompt(int len, int salt) {
  std::vector<TokenId> p(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i) p[static_cast<size_t>(i)] = static_cast<TokenId>(100 + (i * 131 + salt * 7919) % 8000);
  return p;
}

// One request's outcome: its tokens and their logprobs, cached prompt tokens, error.
struct Got {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  int64_t cached = -1;
  std::string error;
};

// Submits every prompt at once (greedy, EOS ignored) and waits up to two minutes for all.
inline std::vector<Got> RunGreedy(Engine& e, const std::vector<std::vector<TokenId>>& prompts, int max_tokens) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.temperature = 0;
  p.ignore_eos = true;
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::vector<Got> got(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = e.Submit({prompts[i], p, nullptr}, [&, i](const Output& o) {
      std::lock_guard lk(mu);
      for (const auto& ev : o.tokens) {
        got[i].tokens.push_back(ev.token);
        got[i].logprobs.push_back(ev.logprob);
      }
      if (o.finished) {
        got[i].cached = o.cached_tokens;
        got[i].error = o.error;
        ++done;
        cv.notify_all();
      }
    });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return got;
  }
  std::unique_lock lk(mu);
  EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done == prompts.size(); }));
  return got;
}

}  // namespace ladle::engine::testing

// Skips locally, fails in CI (CI=true), as LADLE_REQUIRE_DATA does.
#define LADLE_REQUIRE_ENGINE_TOKENIZER()                                                              \
  do {                                                                                                \
    if (!::ladle::engine::testing::EngineTokenizer()) {                                               \
      const char* ci = std::getenv("CI");                                                             \
      if (ci && std::string(ci) == "true") FAIL() << "tokenizer missing in CI";                       \
      GTEST_SKIP() << "tokenizer missing: " << ::ladle::engine::testing::EngineTokenizerPath();       \
    }                                                                                                 \
  } while (0)
