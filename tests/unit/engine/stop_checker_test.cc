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
  // Feeds the tokens of `text`; returns what was emitted and the match.
  std::pair<std::string, std::string> Feed(const std::string& text, std::vector<std::string> stops,
                                           std::vector<std::string>* chunks = nullptr) {
    StopChecker c(*tok_, std::move(stops));
    std::string out, matched;
    for (auto id : tok_->EncodePlain(text)) {
      std::string piece;
      EXPECT_TRUE(c.Push(id, &piece, &matched).ok());
      if (chunks) chunks->push_back(piece);
      out += piece;
      if (!matched.empty()) return {out, matched};
    }
    return {out + c.Finish(), matched};
  }
  std::optional<tokenizer::Tokenizer> tok_;
};

TEST_F(StopCheckerTest, NoStopsPassesEverythingThrough) {
  auto [out, m] = Feed("Hello, world! héllo 你好", {});
  EXPECT_EQ(out, "Hello, world! héllo 你好");
  EXPECT_TRUE(m.empty());
}

TEST_F(StopCheckerTest, StopsBeforeTheStopStringAndNeverEmitsIt) {
  std::vector<std::string> chunks;
  auto [out, m] = Feed("The answer is 42. END of story", {"END", "zzz"}, &chunks);
  EXPECT_EQ(out, "The answer is 42. ");
  EXPECT_EQ(m, "END");
  for (const auto& c : chunks) EXPECT_EQ(c.find("EN"), std::string::npos);
}

TEST_F(StopCheckerTest, PartialMatchIsHeldThenReleased) {
  std::vector<std::string> chunks;
  auto [out, m] = Feed("abc abx abd", {"abd!"}, &chunks);
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(out, "abc abx abd");  // held "abd" released at the end
}

TEST_F(StopCheckerTest, EarliestStopWins) {
  auto [out, m] = Feed("one two three", {"three", "two"});
  EXPECT_EQ(out, "one ");
  EXPECT_EQ(m, "two");
}

TEST_F(StopCheckerTest, StopAcrossManyTokensAndMultibyte) {
  auto [out, m] = Feed("前言你好世界后记", {"世界"});
  EXPECT_EQ(out, "前言你好");
  EXPECT_EQ(m, "世界");
}

}  // namespace
}  // namespace ladle::engine
