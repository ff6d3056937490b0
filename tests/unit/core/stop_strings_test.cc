#include "ladle/core/stop_strings.h"

#include <gtest/gtest.h>

namespace ladle {
namespace {

TEST(StopStrings, EarliestMatchWinsAndAtOneStartTheLongest) {
  StopStrings s({"three", "two", "tw", ""});
  EXPECT_EQ(s.strings().size(), 3u) << "the empty string is dropped";
  auto r = s.Find("one two three");
  ASSERT_NE(r.matched, nullptr);
  EXPECT_EQ(r.cut, 4u);
  EXPECT_EQ(*r.matched, "two");
}

TEST(StopStrings, KeepsTheLongestSuffixThatCouldBeginAMatch) {
  StopStrings s({"abd!", "xyz"});
  auto r = s.Find("abc abx abd");
  EXPECT_EQ(r.matched, nullptr);
  EXPECT_EQ(r.keep, 3u);  // "abd" may become "abd!"
  EXPECT_EQ(s.Find("abc x").keep, 1u);
  EXPECT_EQ(s.Find("abc").keep, 0u);
  EXPECT_EQ(s.Find("").keep, 0u);
}

TEST(StopStrings, AMatchAtTheEndAndAgreesWithABruteForceScan) {
  const std::vector<std::string> stops = {"ab", "aba", "ba", "bb"};
  StopStrings s(stops);
  // Every string over {a, b} of length < 8: the cut is the smallest index where some stop
  // string occurs, and keep the longest proper-prefix suffix when none does.
  for (int len = 0; len < 8; ++len) {
    for (int bits = 0; bits < (1 << len); ++bits) {
      std::string t;
      for (int i = 0; i < len; ++i) t += (bits >> i) & 1 ? 'b' : 'a';
      size_t cut = std::string::npos, best_len = 0;
      for (const auto& x : stops) {
        const size_t at = t.find(x);
        if (at != std::string::npos && (at < cut || (at == cut && x.size() > best_len))) cut = at, best_len = x.size();
      }
      size_t keep = 0;
      if (cut == std::string::npos) {
        for (const auto& x : stops)
          for (size_t k = 1; k < x.size() && k <= t.size(); ++k)
            if (t.compare(t.size() - k, k, x, 0, k) == 0) keep = std::max(keep, k);
      }
      const auto r = s.Find(t);
      EXPECT_EQ(r.cut, cut) << t;
      if (cut != std::string::npos) EXPECT_EQ(r.matched->size(), best_len) << t;
      EXPECT_EQ(r.keep, keep) << t;
    }
  }
}

}  // namespace
}  // namespace ladle
