// tokenizer.json variants Ladle cannot reproduce exactly must fail with a message naming the
// part, never load as an approximation.
#include "tokenizer_fixture.h"

namespace ladle::testing {
namespace {

using tokenizer::Tokenizer;

// A minimal, complete byte-level BPE file: 256 byte tokens, merges "a b" → "ab", "ab c" → "abc".
std::string MiniJson(const std::string& normalizer = "null",
                     const std::string& pre = R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":false})",
                     const std::string& model_type = "BPE", const std::string& added = "[]") {
  // GPT-2 byte alphabet, in the order of bytes 0..255.
  std::vector<uint32_t> cps(256);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cps[b] = printable ? b : next++;
  }
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string key;
    AppendUtf8(&key, cps[b]);
    if (key == "\"" || key == "\\") key = "\\" + key;
    vocab += "\"" + key + "\":" + std::to_string(b) + ",";
  }
  vocab += "\"ab\":256,\"abc\":257";
  return R"({"version":"1.0","added_tokens":)" + added + R"(,"normalizer":)" + normalizer +
         R"(,"pre_tokenizer":)" + pre + R"(,"post_processor":null,"decoder":{"type":"ByteLevel"},)" +
         R"("model":{"type":")" + model_type + R"(","dropout":null,"unk_token":null,"vocab":{)" + vocab +
         R"(},"merges":["a b","ab c"]}})";
}

TEST(Loader, MiniFileLoadsAndEncodes) {
  auto tok = Tokenizer::FromJson(MiniJson());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(tok->EncodePlain("abcab"), (std::vector<tokenizer::TokenId>{257, 256}));
  EXPECT_EQ(tok->EncodePlain("xab"), (std::vector<tokenizer::TokenId>{'x', 256}));
  EXPECT_EQ(tok->Decode(std::vector<tokenizer::TokenId>{257, 0x20}).value(), "abc ");
  EXPECT_EQ(tok->TokenToId("ab"), 256u);
  EXPECT_EQ(tok->IdToToken(0x20), "Ġ");
}

TEST(Loader, AddedTokensWithFlags) {
  auto tok = Tokenizer::FromJson(MiniJson(
      "null", R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":false})", "BPE",
      R"([{"id":300,"content":"<s>","special":true,"normalized":false,"lstrip":true,"rstrip":false,"single_word":false},
          {"id":301,"content":"[x]","special":false,"normalized":true,"lstrip":false,"rstrip":true,"single_word":false}])"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // lstrip swallows the spaces before <s>; rstrip the spaces after [x].
  EXPECT_EQ(tok->EncodeTrusted("ab  <s>[x]  c"), (std::vector<tokenizer::TokenId>{256, 300, 301, 'c'}));
  EXPECT_EQ(tok->EncodePlain("<s>").size(), 3u);
}

void ExpectUnsupported(const std::string& json, const std::string& part) {
  auto tok = Tokenizer::FromJson(json);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kUnsupported) << tok.status().ToString();
  EXPECT_NE(tok.status().message().find(part), std::string::npos) << tok.status().ToString();
}

TEST(Loader, RejectsWhatItCannotReproduce) {
  ExpectUnsupported(MiniJson(R"({"type":"NFC"})"), "normalizer");
  ExpectUnsupported(MiniJson("null", R"({"type":"Whitespace"})"), "Whitespace");
  ExpectUnsupported(MiniJson("null", R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":false})"),
                    "add_prefix_space");
  ExpectUnsupported(MiniJson("null", R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"a"},"behavior":"Removed","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})"),
                    "Removed");
  ExpectUnsupported(MiniJson("null", R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":false})", "WordPiece"),
                    "WordPiece");
}

TEST(Loader, ErrorsForBrokenInput) {
  auto a = Tokenizer::FromJson("{not json");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kParseError);
  auto b = Tokenizer::FromFile("/nonexistent/tokenizer.json");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  std::string bad_merge = MiniJson();
  bad_merge.replace(bad_merge.find("\"ab c\""), 6, "\"zz q\"");
  auto c = Tokenizer::FromJson(bad_merge);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("merges"), std::string::npos) << c.status().ToString();
}

}  // namespace
}  // namespace ladle::testing
