// Where unit tests find data, and what they do when it is missing: skip on a developer's
// machine, fail in CI (CI=true), so a CI run can never pass by skipping.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ladle::testing {

inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

inline std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// $LADLE_TOKENIZER, else the set-up cache, else ../shared.
inline std::string TokenizerPath() {
  if (const char* v = std::getenv("LADLE_TOKENIZER")) return v;
  std::string cached = EnvOr("LADLE_CACHE", LADLE_TEST_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
  if (std::filesystem::exists(cached)) return cached;
  return EnvOr("LADLE_SHARED", LADLE_TEST_SHARED_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
}

inline std::string CorpusDir() {
  return EnvOr("LADLE_CORPUS_DIR", EnvOr("LADLE_CACHE", LADLE_TEST_CACHE_DIR) + "/corpus");
}

inline std::string SourceDir() { return LADLE_TEST_SOURCE_DIR; }

// True in the ASan+UBSan build. Exhaustive sweeps (every token id, every code point) run
// whole in the Release build and on a stride here: the sanitizer pass is there to catch
// memory and UB errors on the same paths, not to repeat 100k-iteration comparisons 10x slower.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace ladle::testing

// Skips (locally) or fails (CI) when `path` does not exist.
#define LADLE_REQUIRE_DATA(path)                                                        \
  do {                                                                                  \
    if (!std::filesystem::exists(path)) {                                               \
      if (::ladle::testing::InCi()) FAIL() << "test data missing in CI: " << (path);   \
      GTEST_SKIP() << "test data missing: " << (path) << " (run scripts/setup)";        \
    }                                                                                   \
  } while (0)
