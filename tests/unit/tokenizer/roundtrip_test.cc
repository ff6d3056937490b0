// Decode(Encode(x)) == x, and the streaming decoder agrees with Decode byte for byte.
#include "tokenizer_fixture.h"

namespace ladle::testing {
namespace {

using tokenizer::IncrementalDecoder;
using tokenizer::TokenId;

class RoundTripTest : public TokenizerTest {};

std::string RandomValidUtf8(std::mt19937& rng, size_t chars) {
  std::uniform_int_distribution<uint32_t> any(1, 0x10FFFF), small(1, 0x7FF), pick(0, 3);
  std::string s;
  for (size_t i = 0; i < chars; ++i) {
    uint32_t cp = pick(rng) == 0 ? any(rng) : small(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    AppendUtf8(&s, cp);
  }
  return s;
}

TEST_F(RoundTripTest, ValidUtf8RoundTrips) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = iter % 2 ? RandomValidUtf8(rng, 1 + iter % 100) : RandomTrickyText(rng, 1 + iter % 100);
    ASSERT_EQ(tok().Decode(tok().EncodePlain(s)).value(), s);
    ASSERT_EQ(tok().Decode(tok().EncodeTrusted(s)).value(), s);
  }
}

TEST_F(RoundTripTest, ArbitraryBytesRoundTrip) {
  std::mt19937 rng(12);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s(1 + iter % 50, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    ASSERT_EQ(tok().Decode(tok().EncodePlain(s)).value(), s);
  }
}

TEST_F(RoundTripTest, DecodeRejectsUnknownIds) {
  std::vector<TokenId> ids = {100, static_cast<TokenId>(tok().VocabSize()), 5};
  auto r = tok().Decode(ids);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  IncrementalDecoder dec(tok());
  std::string out;
  EXPECT_FALSE(dec.Push(static_cast<TokenId>(tok().VocabSize() + 7), &out).ok());
}

TEST_F(RoundTripTest, IncrementalDecoderIsByteExactAndEmitsWholeCodePoints) {
  std::mt19937 rng(13);
  size_t held_back = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s = RandomValidUtf8(rng, 1 + iter % 60) + "😀👍🏽中文";
    auto ids = tok().EncodeTrusted(s);
    IncrementalDecoder dec(tok());
    std::string streamed;
    for (TokenId id : ids) {
      std::string piece;
      ASSERT_TRUE(dec.Push(id, &piece).ok());
      ASSERT_TRUE(tokenizer::IsValidUtf8(piece)) << "emitted a partial code point";
      held_back += dec.pending_bytes() > 0;
      streamed += piece;
    }
    streamed += dec.Flush();
    ASSERT_EQ(streamed, tok().Decode(ids).value());
    ASSERT_EQ(streamed, s);
  }
  EXPECT_GT(held_back, 0u) << "no token ever split a code point: the test did not exercise holding";
}

TEST_F(RoundTripTest, IncrementalDecoderPassesInvalidBytesThrough) {
  // Ids of single bytes 0xE4 0xB8 (a truncated 中) then 'a': the lead bytes can no longer
  // complete, so they are emitted as they are, exactly as Decode returns them.
  std::vector<TokenId> ids = tok().EncodePlain(std::string("\xE4\xB8" "a\xFF" "b", 5));
  IncrementalDecoder dec(tok());
  std::string streamed;
  for (TokenId id : ids) ASSERT_TRUE(dec.Push(id, &streamed).ok());
  streamed += dec.Flush();
  EXPECT_EQ(streamed, tok().Decode(ids).value());
  EXPECT_EQ(streamed, std::string("\xE4\xB8" "a\xFF" "b", 5));
}

TEST(Utf8, EmitLength) {
  using tokenizer::Utf8EmitLength;
  EXPECT_EQ(Utf8EmitLength("abc"), 3u);
  EXPECT_EQ(Utf8EmitLength("a\xE4\xB8"), 1u);         // incomplete 中: hold 2 bytes
  EXPECT_EQ(Utf8EmitLength("a\xE4\xB8\xAD"), 4u);
  EXPECT_EQ(Utf8EmitLength("a\xF0\x9F"), 1u);
  EXPECT_EQ(Utf8EmitLength("a\xE4" "b"), 3u);          // cannot complete any more
  EXPECT_EQ(Utf8EmitLength("\xED\xA0"), 2u);           // surrogate prefix is never valid
  EXPECT_EQ(Utf8EmitLength("\xC0"), 1u);
  EXPECT_TRUE(tokenizer::IsValidUtf8("中文 ok"));
  EXPECT_FALSE(tokenizer::IsValidUtf8("\xE4\xB8"));
}

}  // namespace
}  // namespace ladle::testing
