// Segment-parallel encoding must equal the serial result for every input. Two proofs: every
// boundary the pre-tokenizer calls safe really is (encode both halves, compare), and the
// parallel encoder, forced to cut as often as it can, agrees with the serial one.
#include "impl.h"
#include "ladle/core/thread_pool.h"
#include "tokenizer_fixture.h"

namespace ladle::testing {
namespace {

using tokenizer::EncodeOptions;
using tokenizer::TokenId;

class ParallelTest : public TokenizerTest {};

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Text dense in the boundaries the splitter uses and in near misses next to them.
std::string AdversarialText(std::mt19937& rng, size_t chars) {
  static const std::vector<std::string> kParts = {
      "a", "Z", " ", "  ", "\n", "\n\n", " \n", "\r\n", "\t", "1", "22", "333", "4444", "中", "文字",
      "カ", "・", "ー", "、", "。", "，", "!", ".", ".x", "'s", " (", "\xC2\xA0", "\xE3\x80\x80",
      "\xCC\x81", "\xE2\x80\x8D", "\xF0\x9F\x98\x80", "\xD9\xA1", "\xE2\x91\xA0", "\xC3\xA9", "\xD0\x96"};
  std::uniform_int_distribution<size_t> pick(0, kParts.size() - 1);
  std::string s;
  while (s.size() < chars) s += kParts[pick(rng)];
  return s;
}

TEST_F(ParallelTest, EverySafeBoundaryIsSafe) {
  const auto& pre = tok().impl().pre;
  ASSERT_TRUE(pre.fast_path());
  std::mt19937 rng(42);
  size_t safe_points = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string s = iter % 2 ? AdversarialText(rng, 60) : RandomTrickyText(rng, 40);
    const auto whole = tok().EncodePlainSerial(s);
    for (size_t p = 1; p < s.size(); ++p) {
      if (!pre.IsSafeSplit(s, p)) continue;
      ++safe_points;
      ASSERT_EQ(Concat(tok().EncodePlainSerial(std::string_view(s).substr(0, p)),
                       tok().EncodePlainSerial(std::string_view(s).substr(p))),
                whole)
          << "unsafe split at byte " << p << " of '" << s << "'";
    }
  }
  EXPECT_GT(safe_points, 2000u);
}

TEST_F(ParallelTest, ParallelEqualsSerialWithTinyChunks) {
  ThreadPool pool(3);
  std::mt19937 rng(99);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s = iter % 3 == 0 ? RandomTrickyText(rng, 200 + iter) : AdversarialText(rng, 300 + iter * 7);
    EncodeOptions opts;
    opts.pool = &pool;
    opts.parallel_min_bytes = 0;
    opts.chunk_bytes = 1 + iter % 17;  // cut at (nearly) every safe point
    ASSERT_EQ(tok().EncodePlain(s, opts), tok().EncodePlainSerial(s)) << s;
    ASSERT_EQ(tok().EncodeTrusted(s + "<｜User｜>" + s, opts),
              tok().EncodeTrusted(s + "<｜User｜>" + s, EncodeOptions{}));
  }
}

TEST_F(ParallelTest, LargeInputsAndSegments) {
  std::mt19937 rng(5);
  std::string big;
  while (big.size() < 3 * 1024 * 1024) big += AdversarialText(rng, 4096) + "\nThe quick brown fox. ";
  EncodeOptions opts;
  opts.parallel_min_bytes = 0;
  opts.chunk_bytes = 64 * 1024;
  const auto serial = tok().EncodePlainSerial(big);
  EXPECT_EQ(tok().EncodePlain(big, opts), serial);
  // Segments: several long texts around special tokens, positions recorded.
  std::vector<tokenizer::Segment> segs = {tokenizer::Segment::Special(0), tokenizer::Segment::Text(big),
                                          tokenizer::Segment::Special(128803), tokenizer::Segment::Text(big),
                                          tokenizer::Segment::Text(""), tokenizer::Segment::Special(1)};
  auto enc = tok().EncodeSegments(segs, opts);
  ASSERT_TRUE(enc.ok());
  ASSERT_EQ(enc->ids.size(), 2 * serial.size() + 3);
  EXPECT_EQ(enc->special_positions, (std::vector<uint32_t>{0, uint32_t(serial.size() + 1),
                                                           uint32_t(2 * serial.size() + 2)}));
  EXPECT_TRUE(std::equal(serial.begin(), serial.end(), enc->ids.begin() + 1));
}

TEST_F(ParallelTest, TextWithoutSafePointsStillEncodes) {
  // One enormous "word": nothing can be split, so it is encoded in one piece.
  std::string s(300000, 'a');
  EncodeOptions opts;
  opts.parallel_min_bytes = 0;
  opts.chunk_bytes = 1000;
  EXPECT_EQ(tok().EncodePlain(s, opts), tok().EncodePlainSerial(s));
}

}  // namespace
}  // namespace ladle::testing
