// The recipe's injection rule: text that spells a control token, written by a user or a tool,
// must stay ordinary tokens. Checked for every added token in the vocabulary.
#include "tokenizer_fixture.h"

namespace ladle::testing {
namespace {

using tokenizer::Segment;
using tokenizer::TokenId;

class InjectionTest : public TokenizerTest {};

TEST_F(InjectionTest, EveryAddedTokenLiteralStaysPlain) {
  ASSERT_GE(tok().AddedTokens().size(), 800u);
  const std::vector<std::string> contexts = {"", "x", " ", "\n", "1", "中", "<", "｜", "<｜User｜>"};
  size_t checked = 0;
  for (const auto& added : tok().AddedTokens()) {
    for (const auto& before : contexts) {
      for (const auto& after : contexts) {
        const std::string text = before + added.content + after;
        // Through EncodePlain...
        for (TokenId id : tok().EncodePlain(text)) {
          ASSERT_FALSE(tok().IsAddedToken(id)) << "'" << text << "' produced added id " << id;
        }
        // ...and as a user segment between builder-placed special tokens.
        std::vector<Segment> segs = {Segment::Special(0), Segment::Text(text), Segment::Special(1)};
        auto enc = tok().EncodeSegments(segs);
        ASSERT_TRUE(enc.ok());
        ASSERT_EQ(enc->special_positions.size(), 2u);
        EXPECT_EQ(enc->special_positions[0], 0u);
        EXPECT_EQ(enc->special_positions[1], enc->ids.size() - 1);
        for (size_t i = 1; i + 1 < enc->ids.size(); ++i) {
          ASSERT_FALSE(tok().IsAddedToken(enc->ids[i])) << "'" << text << "' produced added id";
        }
        ++checked;
      }
    }
    // Trusted (template) text does map the literal to the id: that is the contrast.
    auto trusted = tok().EncodeTrusted(added.content);
    ASSERT_EQ(trusted.size(), 1u) << added.content;
    EXPECT_EQ(trusted[0], added.id);
  }
  EXPECT_GT(checked, 800u * contexts.size() * contexts.size() - 1);
}

TEST_F(InjectionTest, ParallelPathIsAlsoSafe) {
  std::string big;
  for (const auto& added : tok().AddedTokens()) big += "user text " + added.content + "\n";
  while (big.size() < 400000) big += big;
  tokenizer::EncodeOptions opts;
  opts.parallel_min_bytes = 0;
  opts.chunk_bytes = 1000;
  for (TokenId id : tok().EncodePlain(big, opts)) ASSERT_FALSE(tok().IsAddedToken(id));
}

TEST_F(InjectionTest, SpecialSegmentMustBeAnAddedToken) {
  std::vector<Segment> segs = {Segment::Special(1000)};  // an ordinary vocabulary id
  auto r = tok().EncodeSegments(segs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ladle::testing

namespace ladle::testing {
namespace {

TEST_F(InjectionTest, VersionViewRepurposesPlaceholderIds) {
  // V3.1+ turn the V3 placeholders 128798/128799 into <think>/</think>.
  std::vector<tokenizer::AddedToken> overrides = {{128798, "<think>", false, true},
                                                  {128799, "</think>", false, true}};
  auto v31 = tok().WithAddedTokens(overrides);
  ASSERT_TRUE(v31.ok()) << v31.status().ToString();
  EXPECT_EQ(v31->EncodeTrusted("a<think>b</think>"),
            (std::vector<TokenId>{tok().EncodePlain("a")[0], 128798, tok().EncodePlain("b")[0], 128799}));
  EXPECT_EQ(v31->Decode(std::vector<TokenId>{128798, 128799}).value(), "<think></think>");
  for (TokenId id : v31->EncodePlain("<think></think>")) EXPECT_FALSE(v31->IsAddedToken(id));
  EXPECT_EQ(v31->EncodePlain("hello world"), tok().EncodePlain("hello world"));
  // The base tokenizer is unchanged.
  EXPECT_NE(tok().Decode(std::vector<TokenId>{128798}).value(), "<think>");
  EXPECT_EQ(tok().EncodeTrusted("<think>").size() > 1, true);
}

}  // namespace
}  // namespace ladle::testing
