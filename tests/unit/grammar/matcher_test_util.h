// Shared fixtures for the grammar runtime tests: a small vocabulary with multi-byte, UTF-8
// split, special, EOS and non-token ids, hand-built grammars, and mask helpers.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::grammar::testing {

// The DeepSeek tokenizer at `path` and its vocabulary (EOS 1), loaded once per process; a
// test calls LADLE_REQUIRE_DATA(path) first. Null members when loading failed (reported).
struct DeepSeekData {
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::shared_ptr<const TokenVocabulary> vocab;
};
inline const DeepSeekData& LoadDeepSeek(const std::string& path) {
  static const DeepSeekData d = [&] {
    DeepSeekData out;
    auto tok = tokenizer::Tokenizer::FromFile(path);
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    if (!tok.ok()) return out;
    out.tok = std::make_shared<const tokenizer::Tokenizer>(std::move(*tok));
    auto vocab = TokenVocabulary::FromTokenizer(*out.tok, {1});
    EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
    if (vocab.ok()) out.vocab = *vocab;
    return out;
  }();
  return d;
}

// ids 0..: tokens below; kSpecialA/kSpecialB special; kEos EOS; ids >= kNumTokens up to
// kVocabSize are not tokens at all.
inline const std::vector<std::string>& SmallTokens() {
  static const std::vector<std::string> t = {
      "a", "b", "c", "x", "(", ")", "{", "}", "[", "]", "\"", ",", ":", " ", "\n", "0", "1", "9", "-", "\\",
      "ab", "abc", "aa", "ba", "\",", "\":", "{\"", "\"}", "})", "((", "12", "true", "fal", "se", "null",
      "é", "\xC3", "\xA9", "\xE4\xB8", "\xAD", "中", "a\"", " \"", "\n\n", "], ", "ccc", "x)"};
  return t;
}
inline constexpr TokenId kSpecialA = 47;
inline constexpr TokenId kSpecialB = 48;
inline constexpr TokenId kEos = 49;
inline constexpr size_t kNumTokens = 50;
inline constexpr size_t kVocabSize = 70;  // 50..69 are logit columns without a token

inline std::shared_ptr<const TokenVocabulary> SmallVocab() {
  std::vector<std::string> toks = SmallTokens();
  toks.resize(kNumTokens);
  toks[kSpecialA] = "<|A|>";
  toks[kSpecialB] = "<|B|>";
  toks[kEos] = "<|eos|>";
  auto v = TokenVocabulary::FromTokens(toks, {kSpecialA, kSpecialB}, {kEos}, kVocabSize);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return *v;
}

inline std::vector<uint64_t> Mask(GrammarMatcher& m, size_t vocab) {
  std::vector<uint64_t> bits((vocab + 63) / 64);
  m.FillNextTokenMask(bits.data());
  return bits;
}
inline bool Bit(const std::vector<uint64_t>& bits, TokenId id) { return (bits[id >> 6] >> (id & 63)) & 1; }
inline size_t Count(const std::vector<uint64_t>& bits) {
  size_t n = 0;
  for (uint64_t w : bits) n += __builtin_popcountll(w);
  return n;
}

// A JSON grammar split into recursive rules (value/object/array call each other), so masks
// exercise calls, pops and uncertain tokens.
inline Grammar JsonGrammar() {
  GrammarBuilder b;
  RuleId value = b.DeclareRule("value");
  RuleId ws = b.AddRule("ws", b.Repeat(b.Alt({b.Literal(" "), b.Literal("\n")}), 0, 2));
  ExprId esc = b.Seq({b.Literal("\\"), b.Alt({b.Literal("\""), b.Literal("\\"), b.Literal("n")})});
  ExprId ch = b.Alt({b.CodePoints({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true), esc});
  RuleId str = b.AddRule("string", b.Seq({b.Literal("\""), b.Star(ch), b.Literal("\"")}));
  RuleId num = b.AddRule("number", b.Seq({b.Optional(b.Literal("-")), b.Plus(b.ByteRange('0', '9'))}));
  ExprId member = b.Seq({b.Ref(str), b.Ref(ws), b.Literal(":"), b.Ref(ws), b.Ref(value)});
  ExprId sep = b.Seq({b.Ref(ws), b.Literal(","), b.Ref(ws)});
  RuleId obj = b.AddRule(
      "object", b.Seq({b.Literal("{"), b.Ref(ws), b.Optional(b.Seq({member, b.Star(b.Seq({sep, member}))})),
                       b.Ref(ws), b.Literal("}")}));
  RuleId arr = b.AddRule("array", b.Seq({b.Literal("["), b.Ref(ws),
                                         b.Optional(b.Seq({b.Ref(value), b.Star(b.Seq({sep, b.Ref(value)}))})),
                                         b.Ref(ws), b.Literal("]")}));
  b.DefineRule(value, b.Alt({b.Ref(obj), b.Ref(arr), b.Ref(str), b.Ref(num), b.Literal("true"),
                             b.Literal("false"), b.Literal("null")}));
  RuleId root = b.AddRule("root", b.Seq({b.Ref(ws), b.Ref(value), b.Ref(ws)}));
  auto g = b.Build(root);
  EXPECT_TRUE(g.ok());
  return *g;
}

// A string-heavy grammar: {"k": "<text>", "k": "<text>"...} with one flat rule.
inline Grammar StringHeavyGrammar() {
  GrammarBuilder b;
  ExprId ch = b.Alt({b.CodePoints({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true),
                     b.Seq({b.Literal("\\"), b.ByteRange('"', '"')})});
  ExprId s = b.Seq({b.Literal("\""), b.Star(ch), b.Literal("\"")});
  ExprId kv = b.Seq({s, b.Literal(": "), s});
  RuleId root = b.AddRule("root", b.Seq({b.Literal("{"), kv, b.Star(b.Seq({b.Literal(", "), kv})), b.Literal("}")}));
  auto g = b.Build(root);
  EXPECT_TRUE(g.ok());
  return *g;
}

}  // namespace ladle::grammar::testing
