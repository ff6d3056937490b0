// Test helpers for the engine runtime: the DeepSeek tokenizer (found the way test_data.h
// finds it, from this file's location so the engine_test target needs no extra defines).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

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
