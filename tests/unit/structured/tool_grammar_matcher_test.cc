// The tool grammars through the real runtime (matcher.h), compiled against each version's
// DeepSeek vocabulary: every token of a sampled turn is in the mask when it comes, EOS is
// allowed exactly at the end, and tokens that break the format are masked — control tokens
// spelled as text included.
#include <gtest/gtest.h>

#include <map>

#include "ladle/grammar/matcher.h"
#include "tool_grammar_test_util.h"

namespace ladle::structured {
namespace {

using namespace tool_test;  // NOLINT: test helpers

constexpr uint32_t kEos = 1;

struct VersionVocab {
  tokenizer::Tokenizer tok;
  std::shared_ptr<const grammar::TokenVocabulary> vocab;
};

// One vocabulary per version (its added tokens are the special ids), built once.
const VersionVocab& VocabFor(ModelVersion v) {
  static std::map<ModelVersion, std::unique_ptr<VersionVocab>> cache;
  auto& slot = cache[v];
  if (!slot) {
    auto tok = frontend::TokenizerForVersion(*BaseTokenizer(), v);
    EXPECT_TRUE(tok.ok());
    auto vocab = grammar::TokenVocabulary::FromTokenizer(*tok, {kEos});
    EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
    slot = std::make_unique<VersionVocab>(VersionVocab{*tok, *vocab});
  }
  return *slot;
}

bool Bit(const std::vector<uint64_t>& m, uint32_t id) { return (m[id >> 6] >> (id & 63)) & 1; }

size_t Count(const std::vector<uint64_t>& m) {
  size_t n = 0;
  for (uint64_t w : m) n += static_cast<size_t>(__builtin_popcountll(w));
  return n;
}

std::shared_ptr<const grammar::CompiledGrammar> Compile(const Grammar& g, ModelVersion v) {
  auto cg = grammar::CompiledGrammar::Compile(g, VocabFor(v).vocab);
  EXPECT_TRUE(cg.ok()) << cg.status().ToString();
  return cg.ok() ? *cg : nullptr;
}

class ToolGrammarMatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LADLE_REQUIRE_DATA(testing::TokenizerPath());
    ASSERT_NE(BaseTokenizer(), nullptr);
  }
};

TEST_F(ToolGrammarMatcherTest, SampledTurnsStayInTheMask) {
  for (ModelVersion v : kVersions) {
    for (bool thinking : {false, true}) {
      for (bool forced : {true, false}) {
        SCOPED_TRACE(std::string(frontend::ModelVersionName(v)) + (thinking ? " thinking" : "") +
                     (forced ? " required" : " auto-strict"));
        ToolGrammarOptions opts;
        opts.version = v;
        opts.ends_in_thinking = thinking;
        ToolChoice choice;
        if (forced) choice = Required();
        auto tg = BuildToolCallGrammar(TestTools(!forced), choice, true, opts);
        ASSERT_TRUE(tg.ok()) << tg.status().ToString();
        const auto cg = Compile(tg->turn, v);
        ASSERT_NE(cg, nullptr);
        const size_t words = (cg->vocab().vocab_size() + 63) / 64;
        std::vector<uint64_t> mask(words);
        Sampler sampler(tg->turn, 4242);
        for (int i = 0; i < 6; ++i) {
          const std::vector<Symbol> syms = sampler.Sample(i % 2 ? 80 : 250);
          const auto ids = Render(syms, VocabFor(v).tok);
          grammar::GrammarMatcher m(cg);
          for (size_t k = 0; k < ids.size(); ++k) {
            m.FillNextTokenMask(mask.data());
            ASSERT_TRUE(Bit(mask, ids[k])) << "token " << k << " (" << ids[k] << ") masked in " << Show(syms);
            ASSERT_FALSE(Bit(mask, kEos) && !m.CanTerminate());
            ASSERT_TRUE(m.AcceptToken(ids[k]));
          }
          m.FillNextTokenMask(mask.data());
          EXPECT_TRUE(m.CanTerminate()) << Show(syms);
          EXPECT_TRUE(Bit(mask, kEos)) << Show(syms);
          if (forced) {
            // After the closed block the turn is over: only EOS remains.
            EXPECT_EQ(Count(mask), 1u) << Show(syms);
          }
          EXPECT_TRUE(m.AcceptToken(kEos));
          EXPECT_TRUE(m.IsTerminated());
        }
      }
    }
  }
}

// The lazy grammars compile too, and the rest of a block after its trigger token is in the
// mask all the way to EOS.
TEST_F(ToolGrammarMatcherTest, TriggerGrammarsCompile) {
  for (ModelVersion v : kVersions) {
    SCOPED_TRACE(frontend::ModelVersionName(v));
    ToolGrammarOptions opts;
    opts.version = v;
    auto lazy = BuildToolCallGrammar(TestTools(), ToolChoice{}, true, opts);
    ASSERT_TRUE(lazy.ok());
    ASSERT_EQ(lazy->kind, ToolConstraintKind::kLazy);
    for (const ToolCallTrigger& t : lazy->triggers) ASSERT_NE(Compile(t.after, v), nullptr);
    const ToolCallTrigger& t = lazy->triggers[0];
    if (!t.token_id) continue;  // V3.2's text trigger ends inside a token: covered by the recognizer test
    auto forced = BuildToolCallGrammar(TestTools(), Required(), true, opts);
    ASSERT_TRUE(forced.ok());
    const auto cg = Compile(t.after, v);
    std::vector<uint64_t> mask((cg->vocab().vocab_size() + 63) / 64);
    Sampler sampler(forced->turn, 11);
    for (int i = 0; i < 4; ++i) {
      const auto ids = Render(sampler.Sample(200), VocabFor(v).tok);
      const auto at = std::find(ids.begin(), ids.end(), *t.token_id);
      ASSERT_NE(at, ids.end());
      grammar::GrammarMatcher m(cg);
      for (auto it = at + 1; it != ids.end(); ++it) {
        m.FillNextTokenMask(mask.data());
        ASSERT_TRUE(Bit(mask, *it)) << *it;
        ASSERT_TRUE(m.AcceptToken(*it));
      }
      EXPECT_TRUE(m.CanTerminate());
    }
  }
}

TEST_F(ToolGrammarMatcherTest, MarkersOnlyAsTheirIds) {
  // V3.1 required: the turn opens with <｜tool▁calls▁begin｜> as an id, nothing else.
  {
    ToolGrammarOptions opts;
    opts.version = ModelVersion::kV31;
    auto tg = BuildToolCallGrammar(TestTools(), Required(), true, opts);
    ASSERT_TRUE(tg.ok());
    const auto cg = Compile(tg->turn, ModelVersion::kV31);
    ASSERT_NE(cg, nullptr);
    grammar::GrammarMatcher m(cg);
    std::vector<uint64_t> mask((cg->vocab().vocab_size() + 63) / 64);
    m.FillNextTokenMask(mask.data());
    EXPECT_TRUE(Bit(mask, kCallsBegin));
    EXPECT_FALSE(Bit(mask, kEos));
    EXPECT_FALSE(Bit(mask, kCallBegin));  // the wrapper is not optional in a forced turn
    const auto sure = VocabFor(ModelVersion::kV31).tok.EncodePlain("Sure");
    EXPECT_FALSE(Bit(mask, sure[0]));
    EXPECT_FALSE(m.AcceptString("<｜tool▁calls▁begin｜>"));
    ASSERT_TRUE(m.AcceptToken(kCallsBegin));
    ASSERT_TRUE(m.AcceptToken(kCallBegin));
    EXPECT_TRUE(m.AcceptString("ping"));
    m.FillNextTokenMask(mask.data());
    EXPECT_TRUE(Bit(mask, kSep));
    EXPECT_EQ(Count(mask), 1u);  // "ping" is complete and no other tool starts with it
  }
  // V4: ｜DSML｜ only as 128825; V3.2: only as text.
  for (ModelVersion v : {ModelVersion::kV4, ModelVersion::kV32}) {
    SCOPED_TRACE(frontend::ModelVersionName(v));
    ToolGrammarOptions opts;
    opts.version = v;
    auto tg = BuildToolCallGrammar(TestTools(), Required(), true, opts);
    ASSERT_TRUE(tg.ok());
    const auto cg = Compile(tg->turn, v);
    ASSERT_NE(cg, nullptr);
    grammar::GrammarMatcher m(cg);
    std::vector<uint64_t> mask((cg->vocab().vocab_size() + 63) / 64);
    ASSERT_TRUE(m.AcceptString("\n\n<"));
    m.FillNextTokenMask(mask.data());
    if (v == ModelVersion::kV4) {
      EXPECT_TRUE(Bit(mask, 128825));
      EXPECT_FALSE(m.AcceptString("｜DSML｜"));
      ASSERT_TRUE(m.AcceptToken(128825));
      EXPECT_TRUE(m.AcceptString("tool_calls>\n<"));
      EXPECT_FALSE(m.AcceptString("invoke"));  // the invoke tag needs the token too
      ASSERT_TRUE(m.AcceptToken(128825));
    } else {
      EXPECT_FALSE(Bit(mask, 128825));
      EXPECT_TRUE(m.AcceptString("｜DSML｜function_calls>\n<｜DSML｜"));
    }
    // Only the listed tools, and a required parameter cannot be skipped.
    grammar::GrammarMatcher probe = std::move(m);
    EXPECT_FALSE(probe.AcceptString("invoke name=\"get_wether\""));
    EXPECT_TRUE(probe.AcceptString("invoke name=\"get_weather\">\n<"));
    if (v == ModelVersion::kV4) {
      ASSERT_TRUE(probe.AcceptToken(128825));
    } else {
      ASSERT_TRUE(probe.AcceptString("｜DSML｜"));
    }
    EXPECT_FALSE(probe.AcceptString("parameter name=\"days\""));
    EXPECT_TRUE(probe.AcceptString("parameter name=\"city\" string=\"true\">Paris"));
  }
}

}  // namespace
}  // namespace ladle::structured
