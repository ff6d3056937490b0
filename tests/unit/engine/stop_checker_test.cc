#include "stop_checker.h"

#include <gtest/gtest.h>

#include "ladle/tokenizer/tokenizer.h"
#include "engine_test_util.h"

namespace ladle::engine {
namespace {

class StopCheckerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LADLE_REQUIRE_ENGINE_TOKENIZER();
    tok_.emplace(*testing::EngineTokenizer());
  }
  // Feeds the tokens of `text`; returns how many were pushed until a match (all: none) and it.
  std::pair<size_t, std::string> Feed(const std::string& text, std::vector<std::string> stops) {
    StopChecker c(*tok_, std::move(stops));
    const auto ids = tok_->EncodePlain(text);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto m = c.Push(ids[i]);
      EXPECT_TRUE(m.ok());
      if (m.ok() && !m->empty()) return {i + 1, *m};
    }
    return {ids.size(), ""};
  }
  // The first k such that the decoded first k tokens of `text` contain `stop`.
  size_t FirstCompleting(const std::string& text, const std::string& stop) {
    const auto ids = tok_->EncodePlain(text);
    for (size_t k = 1; k <= ids.size(); ++k) {
      if (tok_->Decode(std::span<const TokenId>(ids).first(k)).value().find(stop) != std::string::npos) return k;
    }
    return 0;
  }
  std::optional<tokenizer::Tokenizer> tok_;
};

TEST_F(StopCheckerTest, StopsAtTheTokenThatCompletesTheString) {
  const std::string text = "The answer is 42. END of story";
  auto [n, m] = Feed(text, {"END", "zzz"});
  EXPECT_EQ(m, "END");
  EXPECT_EQ(n, FirstCompleting(text, "END"));
}

TEST_F(StopCheckerTest, APartialMatchDoesNotStop) {
  const std::string text = "abc abx abd";
  auto [n, m] = Feed(text, {"abd!"});
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(n, tok_->EncodePlain(text).size());
}

TEST_F(StopCheckerTest, EarliestStopWins) {
  auto [n, m] = Feed("one two three", {"three", "two"});
  EXPECT_EQ(m, "two");
  EXPECT_EQ(n, FirstCompleting("one two three", "two"));
}

TEST_F(StopCheckerTest, StopAcrossManyTokensAndMultibyte) {
  const std::string text = "前言你好世界后记";
  auto [n, m] = Feed(text, {"世界"});
  EXPECT_EQ(m, "世界");
  EXPECT_EQ(n, FirstCompleting(text, "世界"));
}

TEST_F(StopCheckerTest, AStringSpanningThousandsOfTokensIsFoundWithABoundedTail) {
  // Only the tail that can still begin a match is kept, so a long generation costs no more per
  // token than a short one; a match that begins far back is still found.
  std::string text;
  for (int i = 0; i < 400; ++i) text += "lorem ipsum dolor ";
  text += "<<STOP>> after";
  auto [n, m] = Feed(text, {"<<STOP>>"});
  EXPECT_EQ(m, "<<STOP>>");
  EXPECT_EQ(n, FirstCompleting(text, "<<STOP>>"));
}

}  // namespace
}  // namespace ladle::engine
