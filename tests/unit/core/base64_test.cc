// Base64 (core/base64.h): RFC 4648's test vectors, every byte value, and malformed input
// refused without an exception.
#include "ladle/core/base64.h"

#include <gtest/gtest.h>

#include <string>

namespace ladle {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> v[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                   {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                   {"foobar", "Zm9vYmFy"}};
  for (const auto& [raw, enc] : v) {
    EXPECT_EQ(Base64Encode(raw), enc);
    auto d = Base64Decode(enc);
    ASSERT_TRUE(d.has_value()) << enc;
    EXPECT_EQ(*d, raw);
  }
  EXPECT_EQ(Base64Encode("/ladle/engines/"), "L2xhZGxlL2VuZ2luZXMv");
}

TEST(Base64, EveryByteRoundTrips) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (size_t n = 0; n <= all.size(); n += 37) {
    const std::string s = all.substr(0, n) + all.substr(all.size() - n % 3);
    auto d = Base64Decode(Base64Encode(s));
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(*d, s);
  }
}

TEST(Base64, UnpaddedAndMalformed) {
  EXPECT_EQ(Base64Decode("Zg").value_or("?"), "f");
  EXPECT_EQ(Base64Decode("Zm8").value_or("?"), "fo");
  EXPECT_FALSE(Base64Decode("Z").has_value());       // no encoding has this length
  EXPECT_FALSE(Base64Decode("Zm9v!").has_value());   // outside the alphabet
  EXPECT_FALSE(Base64Decode("Zg=a").has_value());    // padding in the middle
  EXPECT_FALSE(Base64Decode("Zh==").has_value());    // bits after the last byte
  EXPECT_FALSE(Base64Decode("Zm9v\n").has_value());  // no whitespace
  EXPECT_FALSE(Base64Decode("====").has_value());
}

}  // namespace
}  // namespace ladle
