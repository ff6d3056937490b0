// GrammarMatcher masks against brute force: for every id, bit set <=> a fresh matcher replaying
// the same prefix accepts the id <=> the reference recognizer (Earley over the IR) says the
// prefix plus the token is a prefix of the language. Random mask-respecting walks cover deep
// states; special tokens, EOS and non-token ids are checked by kind.
#include <gtest/gtest.h>

#include <random>

#include "ladle/grammar/matcher.h"
#include "ladle/tokenizer/tokenizer.h"
#include "mask_cache.h"
#include "matcher_test_util.h"
#include "reference_recognizer.h"
#include "test_data.h"

namespace ladle::grammar {
namespace {

using testing::Bit;
using testing::Mask;

std::vector<Symbol> Symbols(const TokenVocabulary& v, const std::vector<TokenId>& ids) {
  std::vector<Symbol> out;
  for (TokenId id : ids) {
    if (v.IsSpecial(id)) {
      out.push_back(SpecialSymbol(id));
    } else {
      for (char c : v.TokenBytes(id)) out.push_back(ByteSymbol(static_cast<uint8_t>(c)));
    }
  }
  return out;
}

bool IsEos(const TokenVocabulary& v, TokenId id) {
  for (TokenId e : v.eos()) {
    if (e == id) return true;
  }
  return false;
}

// Checks one step exhaustively; returns the mask.
std::vector<uint64_t> CheckStep(const std::shared_ptr<const CompiledGrammar>& cg, const ReferenceRecognizer& ref,
                                const std::vector<TokenId>& prefix, GrammarMatcher& m) {
  const TokenVocabulary& v = cg->vocab();
  auto bits = Mask(m, v.vocab_size());
  std::vector<Symbol> base = Symbols(v, prefix);
  for (TokenId id = 0; id < v.vocab_size(); ++id) {
    GrammarMatcher fresh(cg);
    for (TokenId p : prefix) EXPECT_TRUE(fresh.AcceptToken(p));
    const bool accepted = fresh.AcceptToken(id);
    bool expect;
    if (IsEos(v, id)) {
      expect = ref.Matches(base);
    } else if (v.IsSpecial(id)) {
      std::vector<Symbol> s = base;
      s.push_back(SpecialSymbol(id));
      expect = ref.IsPrefix(s);
    } else if (v.TokenBytes(id).empty()) {
      expect = false;  // not a token
    } else {
      std::vector<Symbol> s = base;
      for (char c : v.TokenBytes(id)) s.push_back(ByteSymbol(static_cast<uint8_t>(c)));
      expect = ref.IsPrefix(s);
    }
    EXPECT_EQ(Bit(bits, id), accepted) << "id " << id << " after " << prefix.size() << " tokens";
    EXPECT_EQ(Bit(bits, id), expect) << "id " << id << " '" << v.TokenBytes(id) << "' after " << prefix.size()
                                     << " tokens";
  }
  return bits;
}

// SmallVocab plus tokens longer than kShortTokenBytes (classified per state and merged with
// the shared short-token entry) and trie nodes of 8+ tokens (bulk acceptance), including
// long runs that cross string and array boundaries.
std::shared_ptr<const TokenVocabulary> LongVocab() {
  std::vector<std::string> t = testing::SmallTokens();
  t.resize(testing::kNumTokens);  // keep the small vocabulary's ids (specials, EOS) in place
  for (const char* x : {"aaaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaa\"", "abcabcabcabcabcabcabc", "abcabcabcabcabcabc\",",
                        "                    ", "                  \n", "1234567890123456789", "[1, 2, 3, 4, 5, 6, 7, 8]",
                        "{\"a\": \"bbbbbbbbbbbbbbbb\"}", "\", \"aaaaaaaaaaaaaaaa", "a1", "a2", "a3", "a4", "a5", "a6", "a7",
                        "a8", "a9", "ac", "aca", "acab", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9", "bb",
                        "bbb", "bbbb", "bbbbbbbb", "bbbbbbbbbbbbbbbbbb\"}"}) {
    t.emplace_back(x);
  }
  return *TokenVocabulary::FromTokens(t, {testing::kSpecialA, testing::kSpecialB}, {testing::kEos}, t.size() + 5);
}

void RandomWalks(const Grammar& g, int walks, int steps, uint32_t seed,
                 std::shared_ptr<const TokenVocabulary> vocab = testing::SmallVocab()) {
  auto cg = CompiledGrammar::Compile(g, vocab);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  auto ref = ReferenceRecognizer::Create(g);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  std::mt19937 rng(seed);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(*cg);
    std::vector<TokenId> prefix;
    for (int s = 0; s < steps && !m.IsTerminated(); ++s) {
      auto bits = CheckStep(*cg, *ref, prefix, m);
      std::vector<TokenId> allowed;
      for (TokenId id = 0; id < vocab->vocab_size(); ++id) {
        if (Bit(bits, id)) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      TokenId pick = allowed[rng() % allowed.size()];
      // Prefer continuing over stopping so walks get deep.
      if (IsEos(*vocab, pick) && allowed.size() > 1 && rng() % 4) pick = allowed[(rng() % (allowed.size() - 1))];
      ASSERT_TRUE(m.AcceptToken(pick));
      prefix.push_back(pick);
      if (IsEos(*vocab, pick)) {
        EXPECT_TRUE(m.IsTerminated());
        auto after = Mask(m, vocab->vocab_size());
        EXPECT_EQ(testing::Count(after), 1u);
        EXPECT_TRUE(Bit(after, testing::kEos));
      }
    }
  }
}

TEST(Matcher, JsonMasksMatchBruteForce) { RandomWalks(testing::JsonGrammar(), 12, 30, 1); }

TEST(Matcher, LongTokensAndBulkGroupsMatchBruteForce) {
  RandomWalks(testing::JsonGrammar(), 12, 30, 11, LongVocab());
  RandomWalks(testing::StringHeavyGrammar(), 8, 25, 12, LongVocab());
  GrammarBuilder b;
  RuleId r = b.AddRule("r", b.Seq({b.Literal("\""), b.Repeat(b.ByteRange('a', 'c'), 3, 30), b.Literal("\""),
                                  b.Optional(b.Literal(", "))}));
  RandomWalks(*b.Build(r), 10, 25, 13, LongVocab());
}

TEST(Matcher, StringHeavyMasksMatchBruteForce) { RandomWalks(testing::StringHeavyGrammar(), 8, 25, 2); }

TEST(Matcher, NestedRecursionMasksMatchBruteForce) {
  GrammarBuilder b;
  RuleId r = b.DeclareRule("root");
  b.DefineRule(r, b.Alt({b.Seq({b.Literal("("), b.Ref(r), b.Literal(")")}), b.Literal("x")}));
  auto g = b.Build(r);
  ASSERT_TRUE(g.ok());
  RandomWalks(*g, 10, 20, 3);
}

TEST(Matcher, NullableCallsAndSpecialTokens) {
  GrammarBuilder b;
  RuleId a = b.AddRule("as", b.Star(b.Literal("a")));
  RuleId bb = b.AddRule("maybe_b", b.Optional(b.Literal("b")));
  RuleId tail = b.DeclareRule("tail");
  b.DefineRule(tail, b.Alt({b.Empty(), b.Seq({b.Literal("c"), b.Ref(tail)})}));
  RuleId root = b.AddRule("root", b.Seq({b.Ref(a), b.Ref(bb), b.SpecialToken(testing::kSpecialA), b.Ref(tail),
                                         b.Optional(b.SpecialToken(testing::kSpecialB))}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  RandomWalks(*g, 10, 15, 4);
}

TEST(Matcher, CodePointsAcrossTokenBoundaries) {
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Plus(b.CodePoints({{0xE9, 0xE9}, {0x4E2D, 0x4E2D}, {'a', 'c'}})));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  RandomWalks(*g, 10, 12, 5);
}

// A counted repeat large enough to become its own unit is layered, and its boundary states
// take the layer slice (entries shared by layers left), which must not change any mask.
TEST(Matcher, CountedRepeatMasksMatchBruteForce) {
  GrammarBuilder b;
  ExprId ch = b.Alt({b.ByteRange('a', 'c'), b.CodePoints({{0xE9, 0xE9}, {0x4E2D, 0x4E2D}})});
  RuleId root = b.AddRule("root", b.Seq({b.Literal("\""), b.Repeat(ch, 0, 300), b.Literal("\""),
                                         b.Optional(b.Seq({b.Literal(","), b.Repeat(ch, 2, 5)}))}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  const auto before = GetSharedMaskCacheStats();
  RandomWalks(*g, 6, 40, 6);
  EXPECT_GT(GetSharedMaskCacheStats().layer_slices, before.layer_slices);
  // A short bound the walks run into: states near it must not borrow far states' entries.
  GrammarBuilder b2;
  ExprId ch2 = b2.Alt({b2.ByteRange('a', 'c'), b2.CodePoints({{0xE9, 0xE9}, {0x4E2D, 0x4E2D}})});
  RuleId root2 = b2.AddRule("root", b2.Seq({b2.Literal("\""), b2.Repeat(ch2, 0, 14), b2.Literal("\"")}));
  auto g2 = b2.Build(root2);
  ASSERT_TRUE(g2.ok());
  RandomWalks(*g2, 12, 20, 7);
}

TEST(Matcher, NonTokensAndSpecialsNeverMatchBytes) {
  auto vocab = testing::SmallVocab();
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Star(b.AnyCodePoint()));
  auto cg = CompiledGrammar::Compile(*b.Build(root), vocab);
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  auto bits = Mask(m, vocab->vocab_size());
  for (TokenId id = testing::kNumTokens; id < testing::kVocabSize; ++id) EXPECT_FALSE(Bit(bits, id));
  EXPECT_FALSE(Bit(bits, testing::kSpecialA));
  EXPECT_FALSE(Bit(bits, testing::kSpecialB));
  EXPECT_TRUE(Bit(bits, testing::kEos));
  EXPECT_FALSE(m.AcceptToken(testing::kSpecialA));
  EXPECT_FALSE(m.AcceptToken(testing::kVocabSize - 1));
  EXPECT_FALSE(m.AcceptToken(1000000));
  EXPECT_TRUE(Bit(bits, 36));  // "\xC3" alone is a prefix of a code point
  (void)bits;
}

TEST(Matcher, EosExactlyWhenTheGrammarCanEnd) {
  auto vocab = testing::SmallVocab();
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Seq({b.Literal("ab"), b.Optional(b.Literal("c"))}));
  auto cg = CompiledGrammar::Compile(*b.Build(root), vocab);
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  EXPECT_FALSE(m.CanTerminate());
  EXPECT_FALSE(m.AcceptToken(testing::kEos));
  ASSERT_TRUE(m.AcceptToken(20));  // "ab"
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_TRUE(Bit(Mask(m, vocab->vocab_size()), testing::kEos));
  ASSERT_TRUE(m.AcceptToken(2));  // "c"
  EXPECT_TRUE(m.CanTerminate());
  auto bits = Mask(m, vocab->vocab_size());
  EXPECT_EQ(testing::Count(bits), 1u);
  ASSERT_TRUE(m.AcceptToken(testing::kEos));
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_FALSE(m.AcceptToken(0));
}

// A `<[id]>` terminal is the token `id` only if the vocabulary has such a token: an added /
// special token, or a normal token (which may then take either path). An id without bytes that
// is not special (a hole, or a logit column past the tokenizer), an EOS id (EOS only ends the
// grammar) and an id past vocab_size are never allowed, whatever the grammar names: the mask
// and AcceptToken agree with the reference. ebnf_fuzz found `root ::= "call" <[299]> [a-z]+`
// (299 has no bytes in its vocabulary) allowing 299 after "call".
TEST(Matcher, SpecialTerminalNamingANonTokenIsNeverAllowed) {
  auto vocab = testing::SmallVocab();
  const TokenId hole = 55;  // 50..69: logit columns without a token
  ASSERT_TRUE(vocab->TokenBytes(hole).empty());
  ASSERT_FALSE(vocab->IsSpecial(hole));
  auto g = EbnfGrammar("root ::= \"call\" <[55]> [a-z]+");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto cg = CompiledGrammar::Compile(*g, vocab);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  GrammarMatcher m(*cg);
  ASSERT_TRUE(m.AcceptString("call"));
  auto bits = Mask(m, vocab->vocab_size());
  EXPECT_FALSE(Bit(bits, hole));
  EXPECT_EQ(testing::Count(bits), 0u);  // nothing the vocabulary has continues "call"
  EXPECT_FALSE(m.AcceptToken(hole));
  EXPECT_FALSE(m.CanTerminate());
  // Nothing to complete with: no plan naming the hole.
  EXPECT_FALSE(m.ShortestCompletion().has_value());

  // EOS, an id past vocab_size, and a hole next to usable specials and a normal id named as a
  // special (either path): only the last two kinds are allowed.
  const std::string text = "root ::= \"ab\" (<[" + std::to_string(testing::kEos) + "]> | <[1000]> | <[" +
                           std::to_string(hole) + "]> | <[" + std::to_string(testing::kSpecialA) +
                           "]> | <[2]>) \"b\"";
  auto g2 = EbnfGrammar(text);
  ASSERT_TRUE(g2.ok()) << g2.status().ToString();
  auto cg2 = CompiledGrammar::Compile(*g2, vocab);
  ASSERT_TRUE(cg2.ok()) << cg2.status().ToString();
  GrammarMatcher m2(*cg2);
  ASSERT_TRUE(m2.AcceptToken(20));  // "ab"
  auto bits2 = Mask(m2, vocab->vocab_size());
  for (TokenId id = 0; id < vocab->vocab_size(); ++id) {
    const bool want = id == testing::kSpecialA || id == 2;  // "c" by bytes or by <[2]>
    EXPECT_EQ(Bit(bits2, id), want) << "id " << id;
    GrammarMatcher fresh(*cg2);
    ASSERT_TRUE(fresh.AcceptToken(20));
    EXPECT_EQ(fresh.AcceptToken(id), want) << "id " << id;
  }
  auto plan = m2.ShortestCompletion();
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_TRUE((*plan)[0] == testing::kSpecialA || (*plan)[0] == 2) << (*plan)[0];
  EXPECT_EQ((*plan)[1], 1u);  // "b"
  GrammarMatcher m3(*cg2);
  ASSERT_TRUE(m3.AcceptToken(20));
  ASSERT_TRUE(m3.AcceptToken(testing::kSpecialA));
  ASSERT_TRUE(m3.AcceptToken(1));
  EXPECT_TRUE(m3.CanTerminate());
}

// The same grammars against brute force at every step of random walks (mask bit <=>
// AcceptToken <=> reference), with the non-tokens inside repeats and nested rules.
TEST(Matcher, SpecialTerminalsNamingNonTokensMatchBruteForce) {
  auto g = EbnfGrammar("root ::= (item \",\")* item\n"
                       "item ::= \"a\" <[55]> | \"b\" <[49]>? \"c\" | <[47]> [a-c]* | <[69]> | \"x\"");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  RandomWalks(*g, 10, 14, 11);
}

TEST(Matcher, LeftRecursionIsRejectedNamingTheRule) {
  auto vocab = testing::SmallVocab();
  GrammarBuilder b;
  RuleId e = b.DeclareRule("expr");
  RuleId opt = b.AddRule("opt", b.Optional(b.Literal("-")));
  b.DefineRule(e, b.Alt({b.Seq({b.Ref(opt), b.Ref(e), b.Literal("+a")}), b.Literal("a")}));
  auto cg = CompiledGrammar::Compile(*b.Build(e), vocab);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cg.status().message().find("'expr'"), std::string::npos) << cg.status().message();
}

TEST(Matcher, EmptyLanguageAllowsNothing) {
  auto vocab = testing::SmallVocab();
  GrammarBuilder b;
  RuleId loop = b.DeclareRule("loop");
  b.DefineRule(loop, b.Seq({b.Literal("a"), b.Ref(loop)}));  // no base case
  auto cg = CompiledGrammar::Compile(*b.Build(loop), vocab);
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  EXPECT_EQ(testing::Count(Mask(m, vocab->vocab_size())), 0u);
  EXPECT_FALSE(m.AcceptToken(0));
}

// `list` after k "(" can be in 3^k distinct repetition states: the live parses grow
// exponentially. The matcher gives up with kResourceExhausted at max_parallel_stacks instead of
// slowing every later token down without bound, allows nothing from then on, and Reset()
// recovers. A limit this grammar never reaches changes nothing.
TEST(Matcher, ExponentiallyAmbiguousGrammarFailsAtTheStackLimit) {
  auto vocab = testing::SmallVocab();
  auto g = EbnfGrammar("root ::= list\nlist ::= \"(\" (item (\" \" item)*){0,3}\nitem ::= list | \"\"[a-c]+\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto cg = CompiledGrammar::Compile(*g, vocab);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  const TokenId open = 4, a = 0;
  ASSERT_EQ(vocab->TokenBytes(open), "(");
  for (size_t limit : {size_t{512}, size_t{4096}}) {
    GrammarMatcher m(*cg, MatcherOptions{.max_parallel_stacks = limit});
    int accepted = 0;
    for (; accepted < 200; ++accepted) {
      if (!m.AcceptToken(accepted % 3 == 2 ? a : open)) break;
    }
    ASSERT_LT(accepted, 200) << "limit " << limit << " never reached";
    EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(m.status().message().find("too ambiguous"), std::string::npos) << m.status().message();
    EXPECT_EQ(testing::Count(Mask(m, vocab->vocab_size())), 0u);
    EXPECT_FALSE(m.AcceptToken(open));
    EXPECT_FALSE(m.AcceptString("("));
    EXPECT_EQ(m.FindJumpForwardString(), "");
    m.Reset();
    EXPECT_TRUE(m.status().ok());
    EXPECT_TRUE(m.AcceptToken(open));
  }
  // A larger limit lets more of the input through before failing.
  auto depth = [&](size_t limit) {
    GrammarMatcher m(*cg, MatcherOptions{.max_parallel_stacks = limit});
    int k = 0;
    while (k < 200 && m.AcceptToken(k % 3 == 2 ? a : open)) ++k;
    return k;
  };
  EXPECT_LT(depth(512), depth(8192));
  // JSON never gets near the default limit.
  GrammarMatcher json(*CompiledGrammar::Compile(testing::JsonGrammar(), vocab));
  EXPECT_TRUE(json.AcceptString("{\"a\": [[[[[[[[[[1, {\"b\": [null, \"x\"]}]]]]]]]]]]}"));
  EXPECT_TRUE(json.status().ok());
}

// The real DeepSeek vocabulary: every one of the 129,280 ids checked against AcceptToken and
// the reference recognizer at a few points of a JSON document.
TEST(Matcher, DeepSeekVocabMatchesBruteForce) {
  const std::string path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(path);
  const auto& vocab = testing::LoadDeepSeek(path).vocab;
  ASSERT_TRUE(vocab);
  EXPECT_EQ(vocab->vocab_size(), 129280u);
  EXPECT_TRUE(vocab->IsSpecial(1));
  EXPECT_TRUE(vocab->IsSpecial(128000));
  Grammar g = testing::JsonGrammar();
  auto cg = CompiledGrammar::Compile(g, vocab);
  ASSERT_TRUE(cg.ok());
  auto ref = ReferenceRecognizer::Create(g);
  ASSERT_TRUE(ref.ok());
  for (std::string prefix : {std::string(""), std::string("{\"ke"), std::string("[1, {\"a\": [tr"),
                             std::string("{\"a\": \"x\\")}) {
    GrammarMatcher m(*cg);
    ASSERT_TRUE(m.AcceptString(prefix));
    auto bits = Mask(m, 129280);
    size_t allowed = 0;
    for (TokenId id = 0; id < 129280; ++id) {
      const bool bit = Bit(bits, id);
      allowed += bit;
      bool accepted = m.AcceptToken(id);
      if (accepted) {
        ASSERT_TRUE(m.Rollback(1).ok());
      }
      ASSERT_EQ(bit, accepted) << "id " << id << " prefix '" << prefix << "'";
      // The reference recognizer is the slow side: every id in Release, a stride plus every
      // allowed id under the sanitizers (ladle::testing::kSanitized).
      if (ladle::testing::kSanitized && !bit && id % 16 != 0) continue;
      std::string_view bytes = vocab->TokenBytes(id);
      bool expect = id == 1 ? ref->Matches(prefix)
                            : !bytes.empty() && ref->IsPrefix(prefix + std::string(bytes));
      ASSERT_EQ(bit, expect) << "id " << id << " '" << bytes << "' prefix '" << prefix << "'";
    }
    EXPECT_GT(allowed, 0u);
  }
}

}  // namespace
}  // namespace ladle::grammar
