// The two merge loops (quadratic for short words, heap for long) and the whole-word shortcut
// must all give what the plain merge loop gives.
#include "impl.h"
#include "tokenizer_fixture.h"

namespace ladle::testing {
namespace {

using tokenizer::TokenId;

class BpeTest : public TokenizerTest {};

TEST_F(BpeTest, HeapAndSmallLoopsAgreeOnEveryVocabularyEntry) {
  const auto& bpe = tok().impl().bpe;
  size_t compared = 0;
  for (TokenId id = 0; id < tok().VocabSize(); ++id) {
    if (!tok().IsValidId(id) || tok().IsAddedToken(id)) continue;
    std::string bytes = tok().Decode(std::vector<TokenId>{id}).value();
    if (bytes.size() > 48) continue;
    std::vector<TokenId> a, b;
    bpe.MergeWord(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &a, false);
    bpe.MergeWord(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &b, true);
    ASSERT_EQ(a, b) << "token " << id;
    ++compared;
  }
  EXPECT_GT(compared, 127000u);
}

TEST_F(BpeTest, HeapAndSmallLoopsAgreeOnRandomWords) {
  const auto& bpe = tok().impl().bpe;
  std::mt19937 rng(3);
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxz";
  for (int iter = 0; iter < 20000; ++iter) {
    std::string w;
    size_t n = 2 + iter % 46;
    for (size_t i = 0; i < n; ++i) w.push_back(letters[rng() % (iter % 2 ? 5 : letters.size())]);
    std::vector<TokenId> a, b;
    bpe.MergeWord(reinterpret_cast<const unsigned char*>(w.data()), w.size(), &a, false);
    bpe.MergeWord(reinterpret_cast<const unsigned char*>(w.data()), w.size(), &b, true);
    ASSERT_EQ(a, b) << w;
    ASSERT_EQ(tok().Decode(a).value(), w);
  }
}

TEST_F(BpeTest, WholeWordShortcutOnlyWhereMergesAgree) {
  // The shortcut is disabled exactly for entries whose own bytes do not merge back to them.
  const auto& bpe = tok().impl().bpe;
  size_t shortcut_differs = 0;
  for (TokenId id = 0; id < tok().VocabSize(); ++id) {
    if (!tok().IsValidId(id) || tok().IsAddedToken(id)) continue;
    std::string bytes = tok().Decode(std::vector<TokenId>{id}).value();
    std::vector<TokenId> merged, encoded;
    bpe.MergeWord(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &merged);
    bpe.EncodeWord(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &encoded);
    ASSERT_EQ(merged, encoded) << "token " << id;
    shortcut_differs += merged.size() != 1;
  }
  EXPECT_EQ(shortcut_differs, bpe.unreachable_entries());
  std::printf("[ bpe ] %zu vocabulary entries do not merge back to themselves\n", shortcut_differs);
}

TEST_F(BpeTest, LongRunsUseTheHeapPath) {
  for (size_t n : {49u, 100u, 1000u, 100000u}) {
    std::string s(n, '=');
    auto ids = tok().EncodePlain(s);
    EXPECT_EQ(tok().Decode(ids).value(), s);
    EXPECT_LT(ids.size(), n / 4);
  }
}

}  // namespace
}  // namespace ladle::testing
