#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>

#include "ladle/tokenizer/tokenizer.h"
#include "test_data.h"

namespace ladle::testing {

// Loads the DeepSeek tokenizer once per test binary.
const tokenizer::Tokenizer* SharedTokenizer();

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LADLE_REQUIRE_DATA(TokenizerPath());
    tok_ = SharedTokenizer();
    ASSERT_NE(tok_, nullptr) << "tokenizer failed to load from " << TokenizerPath();
  }
  const tokenizer::Tokenizer& tok() const { return *tok_; }

 private:
  const tokenizer::Tokenizer* tok_ = nullptr;
};

// Appends the UTF-8 of cp.
void AppendUtf8(std::string* s, uint32_t cp);

// Random text over characters chosen to hit every pre-tokenizer rule: ASCII letters and
// punctuation, digits (ASCII and other \p{N}), every kind of whitespace, CJK and kana (incl.
// marks and the middle dot), Hangul, combining marks, emoji with ZWJ, format characters.
std::string RandomTrickyText(std::mt19937& rng, size_t chars);

}  // namespace ladle::testing
