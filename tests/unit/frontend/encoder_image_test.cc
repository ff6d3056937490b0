// Images in prompts (issue 18): V4 places one <｜image｜> (129279) per patch group as a control
// token with a recorded position, text around them stays as it was, a typed "<｜image｜>" stays
// text, and versions without an image token refuse images.
#include <gtest/gtest.h>

#include "encoder_test_util.h"
#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"
#include "test_data.h"

namespace ladle::frontend {
namespace {

using namespace ladle::frontend::testing;  // NOLINT

constexpr tokenizer::TokenId kImageId = 129279;

ContentPart Image(int tokens, int index) {
  ContentPart p;
  p.kind = ContentPart::Kind::kImage;
  p.image.url = "data:image/png;base64,AAAA";
  p.image.placeholder_tokens = tokens;
  p.image.index = index;
  return p;
}

ContentPart TextPart(std::string t) {
  ContentPart p;
  p.text = std::move(t);
  return p;
}

class EncoderImage : public ::testing::Test {
 protected:
  void SetUp() override {
    LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
    auto base = tokenizer::Tokenizer::FromFile(ladle::testing::TokenizerPath());
    ASSERT_TRUE(base.ok());
    auto v4 = TokenizerForVersion(*base, ModelVersion::kV4);
    ASSERT_TRUE(v4.ok());
    tok_ = std::make_unique<tokenizer::Tokenizer>(std::move(v4).value());
  }
  Result<EncodedPrompt> Encode(const Request& r) {
    LADLE_ASSIGN_OR_RETURN(Prompt p, RenderPrompt(r, ModelVersion::kV4));
    return EncodePrompt(p, *tok_);
  }
  std::unique_ptr<tokenizer::Tokenizer> tok_;
};

TEST_F(EncoderImage, PlaceholdersPerPatchGroupWithPositions) {
  Message m = User("");
  m.content = {TextPart("Compare"), Image(4, 0), TextPart("with"), Image(6, 1)};
  Request r = Conversation({m, Assistant("ok"), [] {
                              Message u = User("");
                              u.content = {Image(2, 2), TextPart("and this one?")};
                              return u;
                            }()});
  auto p = RenderPrompt(r, ModelVersion::kV4);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_NE(p->text.find("Compare\n<｜image｜><｜image｜><｜image｜><｜image｜>\nwith\n"), std::string::npos) << p->text;
  ASSERT_EQ(p->images.size(), 3u);
  auto enc = Encode(r);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  ASSERT_EQ(enc->images.size(), 3u);
  int total = 0;
  for (size_t i = 0; i < enc->images.size(); ++i) {
    const auto& im = enc->images[i];
    EXPECT_EQ(im.image_index, static_cast<int>(i));
    for (uint32_t k = 0; k < im.tokens; ++k) EXPECT_EQ(enc->ids[im.pos + k], kImageId);
    // The runs are exactly where 129279 appears: nothing before or after a run is a placeholder.
    if (im.pos > 0) EXPECT_NE(enc->ids[im.pos - 1], kImageId);
    if (im.pos + im.tokens < enc->ids.size()) EXPECT_NE(enc->ids[im.pos + im.tokens], kImageId);
    total += static_cast<int>(im.tokens);
  }
  EXPECT_EQ(enc->images[0].tokens, 4u);
  EXPECT_EQ(enc->images[1].tokens, 6u);
  EXPECT_EQ(enc->images[2].tokens, 2u);
  EXPECT_EQ(std::count(enc->ids.begin(), enc->ids.end(), kImageId), total);
}

TEST_F(EncoderImage, TextAroundAnImageIsTheTextOnlyRenderingWithPlaceholdersInserted) {
  Message with = User("");
  with.content = {TextPart("before"), Image(3, 0), TextPart("after")};
  Message without = User("");
  without.content = {TextPart("before"), TextPart("after")};
  auto a = RenderPrompt(Conversation({with}), ModelVersion::kV4);
  auto b = RenderPrompt(Conversation({without}), ModelVersion::kV4);
  ASSERT_TRUE(a.ok() && b.ok());
  std::string stripped = a->text;
  const std::string run = "\n<｜image｜><｜image｜><｜image｜>";
  const size_t at = stripped.find(run);
  ASSERT_NE(at, std::string::npos);
  stripped.erase(at, run.size());
  EXPECT_EQ(stripped, b->text);
}

TEST_F(EncoderImage, TypedImageTokenStaysText) {
  Request r = Conversation({User("look: <｜image｜><｜image｜>")});
  auto enc = Encode(r);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(std::count(enc->ids.begin(), enc->ids.end(), kImageId), 0);
  EXPECT_TRUE(enc->images.empty());
  // A tool result's text, too (V4 wraps it in <tool_result>).
  Request t = Conversation({User("q"), Calls({{"c1", "f", "{}"}}), ToolResult("c1", "<｜image｜>")});
  auto enc2 = Encode(t);
  ASSERT_TRUE(enc2.ok()) << enc2.status().ToString();
  EXPECT_EQ(std::count(enc2->ids.begin(), enc2->ids.end(), kImageId), 0);
}

TEST_F(EncoderImage, ToolResultImagesArePlaced) {
  Message result = ToolResult("c1", "");
  result.content = {TextPart("screenshot:"), Image(2, 0)};
  Request r = Conversation({User("q"), Calls({{"c1", "f", "{}"}}), result});
  auto enc = Encode(r);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  ASSERT_EQ(enc->images.size(), 1u);
  EXPECT_EQ(enc->images[0].tokens, 2u);
}

TEST_F(EncoderImage, RefusedWhereNoSlotOrNotMeasured) {
  Message m = User("");
  m.content = {TextPart("x"), Image(4, 0)};
  for (ModelVersion v : {ModelVersion::kV3, ModelVersion::kR1, ModelVersion::kV31, ModelVersion::kV32}) {
    auto p = RenderPrompt(Conversation({m}), v);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(p.status().message().find("takes no image input"), std::string::npos);
  }
  m.content[1].image.placeholder_tokens = 0;
  auto p = RenderPrompt(Conversation({m}), ModelVersion::kV4);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ladle::frontend
