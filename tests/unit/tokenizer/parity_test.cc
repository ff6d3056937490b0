// Exact parity with Hugging Face `tokenizers` on the generated corpus (tools/corpus). The
// expected ids were produced by tokenizers@0.23.2 and are stored as (count, sha256 of the ids
// as uint32 little-endian) per file and mode in tests/data/tokenizer_parity.json, so this test
// does not need the peer installed.
#include <openssl/evp.h>
#include <simdjson.h>

#include <fstream>
#include <sstream>

#include "tokenizer_fixture.h"

namespace ladle::testing {
namespace {

std::string Hex(const unsigned char* d, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s.push_back(kHex[d[i] >> 4]);
    s.push_back(kHex[d[i] & 15]);
  }
  return s;
}

std::string Sha256(const void* data, size_t n) {
  unsigned char out[32];
  unsigned int len = 0;
  EVP_Digest(data, n, out, &len, EVP_sha256(), nullptr);
  return Hex(out, len);
}

std::string IdsSha256(const std::vector<tokenizer::TokenId>& ids) {
  std::string bytes(ids.size() * 4, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int k = 0; k < 4; ++k) bytes[i * 4 + k] = static_cast<char>((ids[i] >> (8 * k)) & 0xFF);
  }
  return Sha256(bytes.data(), bytes.size());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ParityTest : public TokenizerTest {};

TEST_F(ParityTest, CorpusMatchesHuggingFace) {
  const std::string manifest_path = SourceDir() + "/tests/data/tokenizer_parity.json";
  ASSERT_TRUE(std::filesystem::exists(manifest_path)) << manifest_path;
  LADLE_REQUIRE_DATA(CorpusDir());
  simdjson::dom::parser parser;
  simdjson::dom::element manifest;
  ASSERT_EQ(parser.load(manifest_path).get(manifest), simdjson::SUCCESS);
  std::string_view tokenizer_sha;
  ASSERT_EQ(manifest["tokenizer_sha256"].get(tokenizer_sha), simdjson::SUCCESS);
  const std::string tok_bytes = ReadFile(TokenizerPath());
  ASSERT_EQ(Sha256(tok_bytes.data(), tok_bytes.size()), tokenizer_sha)
      << "the tokenizer is not the file the reference ids were made with";

  size_t files = 0, total_bytes = 0;
  for (simdjson::dom::element f : manifest["files"].get_array()) {
    std::string_view name = f["name"].get_string().value();
    const std::string path = CorpusDir() + "/" + std::string(name);
    LADLE_REQUIRE_DATA(path);
    const std::string text = ReadFile(path);
    ASSERT_EQ(Sha256(text.data(), text.size()), f["sha256"].get_string().value())
        << name << ": corpus file differs from the one the reference was made from (re-run scripts/corpus)";
    for (const char* mode : {"trusted", "plain"}) {
      auto ids = std::string_view(mode) == "trusted" ? tok().EncodeTrusted(text) : tok().EncodePlain(text);
      EXPECT_EQ(ids.size(), f[mode]["count"].get_uint64().value()) << name << " " << mode;
      EXPECT_EQ(IdsSha256(ids), f[mode]["ids_sha256"].get_string().value()) << name << " " << mode;
      // The serial path must agree with the (possibly parallel) default path.
      if (std::string_view(mode) == "plain") {
        EXPECT_EQ(tok().EncodePlainSerial(text), ids) << name;
      }
    }
    ++files;
    total_bytes += text.size();
  }
  EXPECT_GE(files, 10u);
  EXPECT_GE(total_bytes, 10u * 1000 * 1000) << "the parity corpus must be at least 10 MB";
  std::printf("[ parity ] %zu files, %.2f MB identical to tokenizers@0.23.2\n", files, total_bytes / 1e6);
}

// A few hand-checked vectors (ids from tokenizers@0.23.2), so a failure points at a rule.
TEST_F(ParityTest, KnownVectors) {
  const std::string s =
      "Hello world  123456 你好世界<｜User｜>x  \n\n  y カ・カ ①②③④ 😀👍🏽 e\xCC\x81";
  const std::vector<tokenizer::TokenId> trusted = {
      19923, 2058,  262,   6895,  18009, 223,   30594, 3427,  128803, 90,    6776,  223,   383,   223,
      15961, 4825,  15961, 223,   104894, 21686, 28650, 53769, 225,    92526, 40965, 124,   312,   17793};
  EXPECT_EQ(tok().EncodeTrusted(s), trusted);
  auto plain = tok().EncodePlain(s);
  for (auto id : plain) EXPECT_FALSE(tok().IsAddedToken(id));
  EXPECT_EQ(tok().Decode(plain).value(), s);
}

}  // namespace
}  // namespace ladle::testing
