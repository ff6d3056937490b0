// Budget-aware completion: ShortestCompletionTokens, and with SetRemainingTokens a random
// mask-respecting sampler under a tight max_tokens always ends with a complete, valid document.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ladle/grammar/matcher.h"
#include "ladle/tokenizer/tokenizer.h"
#include "matcher_test_util.h"
#include "reference_recognizer.h"
#include "test_data.h"

namespace ladle::grammar {
namespace {

// Every printable ASCII byte and newline is a token (as every byte is in a byte-level BPE),
// plus long tokens that tempt the sampler past the budget.
std::shared_ptr<const TokenVocabulary> ByteVocab(TokenId* eos) {
  std::vector<std::string> toks;
  for (int c = 0x20; c < 0x7F; ++c) toks.push_back(std::string(1, static_cast<char>(c)));
  toks.push_back("\n");
  for (const char* t : {"{\"", "\": \"", "abcdefgh", "\"}", "[[[[", "]]", "12345", "\", \"", "true", "null,"}) {
    toks.push_back(t);
  }
  *eos = static_cast<TokenId>(toks.size());
  toks.push_back("");
  return *TokenVocabulary::FromTokens(toks, {}, {*eos}, toks.size() + 3);
}

// Whether token t is in the first mask with `remaining` tokens left.
bool AllowedFirst(const std::shared_ptr<const CompiledGrammar>& cg, uint32_t remaining, TokenId t) {
  GrammarMatcher m(cg);
  m.SetRemainingTokens(remaining);
  std::vector<uint64_t> bits((cg->vocab().vocab_size() + 63) / 64);
  m.FillNextTokenMask(bits.data());
  return ((bits[t >> 6] >> (t & 63)) & 1) != 0;
}

TEST(Budget, ShortestCompletionCountsFramesAndCalls) {
  TokenId eos;
  auto v = ByteVocab(&eos);
  GrammarBuilder b;
  RuleId inner = b.AddRule("inner", b.Seq({b.Literal("xy"), b.Star(b.Literal("z"))}));
  RuleId root = b.AddRule("root", b.Seq({b.Literal("ab"), b.Ref(inner), b.Literal("c")}));
  auto cg = CompiledGrammar::Compile(*b.Build(root), v);
  ASSERT_TRUE(cg.ok());
  GrammarMatcher m(*cg);
  EXPECT_EQ(m.ShortestCompletionTokens(), 5u);
  ASSERT_TRUE(m.AcceptString("abx"));
  EXPECT_EQ(m.ShortestCompletionTokens(), 2u);
  ASSERT_TRUE(m.AcceptString("yzz"));
  EXPECT_EQ(m.ShortestCompletionTokens(), 1u);
  ASSERT_TRUE(m.AcceptString("c"));
  EXPECT_EQ(m.ShortestCompletionTokens(), 0u);
}

void SampleUnderBudget(const std::shared_ptr<const CompiledGrammar>& cg, const ReferenceRecognizer& ref,
                       uint32_t slack, int runs, uint32_t seed) {
  const TokenVocabulary& v = cg->vocab();
  std::mt19937 rng(seed);
  std::vector<uint64_t> bits((v.vocab_size() + 63) / 64);
  int forced = 0;
  for (int run = 0; run < runs; ++run) {
    GrammarMatcher m(cg);
    const uint32_t max_tokens = m.ShortestCompletionTokens() + slack;
    std::string out;
    uint32_t used = 0;
    while (used < max_tokens && !m.IsTerminated()) {
      m.SetRemainingTokens(max_tokens - used);
      m.FillNextTokenMask(bits.data());
      std::vector<TokenId> allowed;
      for (TokenId id = 0; id < v.vocab_size(); ++id) {
        if ((bits[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << out;
      // Prefer long tokens and avoid stopping: the adversarial sampler for a budget.
      TokenId pick = allowed[rng() % allowed.size()];
      for (int tries = 0; tries < 3; ++tries) {
        TokenId alt = allowed[rng() % allowed.size()];
        if (v.TokenBytes(alt).size() > v.TokenBytes(pick).size()) pick = alt;
      }
      ASSERT_TRUE(m.AcceptToken(pick));
      out += v.TokenBytes(pick);
      ++used;
    }
    EXPECT_TRUE(m.CanTerminate()) << "run " << run << ": '" << out << "' after " << used << " tokens";
    EXPECT_TRUE(ref.Matches(out)) << "run " << run << ": '" << out << "'";
    forced += m.ForcedByBudget();
    if (std::getenv("LADLE_DBG")) std::fprintf(stderr, "run %d: %u tokens, forced %d: %s\n", run, used, m.ForcedByBudget(), out.c_str());
  }
  EXPECT_GT(forced, 0);  // the budget did bite
}

TEST(Budget, TightMaxTokensAlwaysClosesTheDocument) {
  TokenId eos;
  auto v = ByteVocab(&eos);
  Grammar g = testing::JsonGrammar();
  auto cg = CompiledGrammar::Compile(g, v);
  ASSERT_TRUE(cg.ok());
  auto ref = ReferenceRecognizer::Create(g);
  ASSERT_TRUE(ref.ok());
  for (uint32_t slack : {0u, 1u, 3u, 8u, 20u}) SampleUnderBudget(*cg, *ref, slack, 40, 100 + slack);
}

TEST(Budget, OffUnlessRequested) {
  TokenId eos;
  auto v = ByteVocab(&eos);
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  ASSERT_TRUE(cg.ok());
  GrammarMatcher plain(*cg);
  GrammarMatcher off(*cg, MatcherOptions{.budget_aware = false});
  off.SetRemainingTokens(1);
  std::vector<uint64_t> a((v->vocab_size() + 63) / 64), b(a.size());
  plain.FillNextTokenMask(a.data());
  off.FillNextTokenMask(b.data());
  EXPECT_EQ(a, b);
  EXPECT_FALSE(off.ForcedByBudget());
  GrammarMatcher on(*cg);
  on.SetRemainingTokens(1);  // one token left: only a complete value fits ("0".."9" or a number token)
  on.FillNextTokenMask(b.data());
  EXPECT_NE(a, b);
  EXPECT_TRUE(on.ForcedByBudget());
  EXPECT_TRUE((b[('1' - 0x20) >> 6] >> (('1' - 0x20) & 63)) & 1);
  EXPECT_FALSE((b[('{' - 0x20) >> 6] >> (('{' - 0x20) & 63)) & 1);
}

// One token can raise the shortest completion far past the margin: `{"` commits to an object
// with a 30-byte required key while "x" completes at once. With 20 tokens left the `{"` token
// must already be gone, although 20 is well above shortest (1) + margin.
TEST(Budget, SingleTokenJumpIsCaughtBeforeTheMargin) {
  TokenId eos;
  auto v = ByteVocab(&eos);
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Alt({b.Literal("x"), b.Seq({b.Literal("{\""), b.Repeat(b.Literal("a"), 30, 30),
                                                                b.Literal("\"}")})}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  auto cg = CompiledGrammar::Compile(*g, v);
  ASSERT_TRUE(cg.ok());
  const TokenId brace_quote = 95 + 1;  // "{\"" follows the 95 printable bytes and "\n"
  ASSERT_EQ(v->TokenBytes(brace_quote), "{\"");
  auto allowed = [&](uint32_t remaining, TokenId t) { return AllowedFirst(*cg, remaining, t); };
  EXPECT_FALSE(allowed(20, brace_quote));
  EXPECT_TRUE(allowed(20, 'x' - 0x20));
  EXPECT_TRUE(allowed(40, brace_quote));  // 32 more bytes fit in 39 tokens
}

// A jump far beyond MatcherOptions::lookahead (64): `{"` commits to 200 more bytes. The check
// is exact at every step, so with 150 tokens left the token is already gone.
TEST(Budget, JumpsBeyondTheLookaheadAreCaughtToo) {
  TokenId eos;
  auto v = ByteVocab(&eos);
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Alt({b.Literal("x"), b.Seq({b.Literal("{\""), b.Repeat(b.Literal("a"), 200, 200),
                                                                b.Literal("\"}")})}));
  auto cg = CompiledGrammar::Compile(*b.Build(root), v);
  ASSERT_TRUE(cg.ok());
  const TokenId brace_quote = 95 + 1;
  auto allowed = [&](uint32_t remaining, TokenId t) { return AllowedFirst(*cg, remaining, t); };
  EXPECT_FALSE(allowed(150, brace_quote));
  EXPECT_TRUE(allowed(150, 'x' - 0x20));
  EXPECT_TRUE(allowed(203, brace_quote));  // 202 more bytes fit in 202 tokens
  EXPECT_FALSE(allowed(202, brace_quote));
}

// The narrowed mask is exactly the allowed tokens after which the shortest completion fits,
// by brute force: replay the prefix in a fresh matcher, accept the token, measure. The mask
// reads completion lengths from the cached entries instead of simulating each token.
void ExpectExactNarrowing(const std::shared_ptr<const CompiledGrammar>& cg, int runs, uint32_t seed) {
  const TokenVocabulary& v = cg->vocab();
  std::mt19937 rng(seed);
  const size_t words = (v.vocab_size() + 63) / 64;
  std::vector<uint64_t> plain(words), narrowed(words);
  int compared = 0, narrowed_steps = 0;
  for (int run = 0; run < runs; ++run) {
    GrammarMatcher m(cg, MatcherOptions{.budget_aware = false});
    std::vector<TokenId> prefix;
    for (int step = 0; step < 40 && !m.IsTerminated(); ++step) {
      m.FillNextTokenMask(plain.data());
      std::vector<TokenId> allowed;
      for (TokenId id = 0; id < v.vocab_size(); ++id) {
        if ((plain[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      std::vector<uint32_t> after(allowed.size());
      for (size_t k = 0; k < allowed.size(); ++k) {
        GrammarMatcher r(cg);
        for (TokenId t : prefix) ASSERT_TRUE(r.AcceptToken(t));
        ASSERT_TRUE(r.AcceptToken(allowed[k]));
        after[k] = r.ShortestCompletionTokens();
      }
      const uint32_t shortest = m.ShortestCompletionTokens();
      for (uint32_t remaining : {shortest + 1, shortest + 2, shortest + 5, shortest + 12, shortest + 40, shortest + 90}) {
        GrammarMatcher b(cg);
        for (TokenId t : prefix) ASSERT_TRUE(b.AcceptToken(t));
        b.SetRemainingTokens(remaining);
        b.FillNextTokenMask(narrowed.data());
        uint32_t best = *std::min_element(after.begin(), after.end());
        const uint32_t limit = std::max(remaining - 1, best);
        for (size_t k = 0; k < allowed.size(); ++k) {
          const bool kept = (narrowed[allowed[k] >> 6] >> (allowed[k] & 63)) & 1;
          EXPECT_EQ(kept, after[k] <= limit)
              << "token '" << v.TokenBytes(allowed[k]) << "' completes in " << after[k] << ", remaining " << remaining
              << ", after " << prefix.size() << " tokens";
          narrowed_steps += !kept;
        }
        for (TokenId id = 0; id < v.vocab_size(); ++id) {
          const bool in_plain = (plain[id >> 6] >> (id & 63)) & 1;
          if (!in_plain) {
            EXPECT_FALSE((narrowed[id >> 6] >> (id & 63)) & 1) << id;
          }
        }
        ++compared;
      }
      TokenId pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.AcceptToken(pick));
      prefix.push_back(pick);
    }
  }
  EXPECT_GT(compared, 100);
  EXPECT_GT(narrowed_steps, 0);
}

TEST(Budget, NarrowingIsExactByBruteForce) {
  TokenId eos;
  auto v = ByteVocab(&eos);
  auto json = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  ASSERT_TRUE(json.ok());
  ExpectExactNarrowing(*json, 12, 7);
  GrammarBuilder b;
  RuleId inner = b.AddRule("inner", b.Seq({b.Literal("{\""), b.Repeat(b.Literal("a"), 0, 30), b.Literal("\"}")}));
  RuleId root = b.AddRule("root", b.Seq({b.Star(b.Alt({b.Ref(inner), b.Literal("12345"), b.Literal("x")})),
                                        b.Literal("]]")}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  auto cg = CompiledGrammar::Compile(*g, v);
  ASSERT_TRUE(cg.ok());
  ExpectExactNarrowing(*cg, 12, 8);
  // A long counted run: its states look alike within a token's reach (the cache shares their
  // token classes) but are different distances from the end, which the budget must see.
  GrammarBuilder c;
  RuleId run = c.AddRule("run", c.Seq({c.Literal("["), c.Repeat(c.Alt({c.Literal("a"), c.Literal("12345")}), 30, 45),
                                      c.Literal("]")}));
  auto gr = c.Build(run);
  ASSERT_TRUE(gr.ok());
  auto cr = CompiledGrammar::Compile(*gr, v);
  ASSERT_TRUE(cr.ok());
  ExpectExactNarrowing(*cr, 6, 9);
}

TEST(Budget, DeepSeekVocabCloses) {
  const std::string path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(path);
  auto tok = tokenizer::Tokenizer::FromFile(path);
  ASSERT_TRUE(tok.ok());
  auto v = TokenVocabulary::FromTokenizer(*tok, {1});
  ASSERT_TRUE(v.ok());
  Grammar g = testing::StringHeavyGrammar();  // numbers never need forcing; strings do
  auto cg = CompiledGrammar::Compile(g, *v);
  ASSERT_TRUE(cg.ok());
  auto ref = ReferenceRecognizer::Create(g);
  ASSERT_TRUE(ref.ok());
  SampleUnderBudget(*cg, *ref, 6, 6, 5);
}

}  // namespace
}  // namespace ladle::grammar
