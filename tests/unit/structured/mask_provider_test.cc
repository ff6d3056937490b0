// The MaskProvider adapter: per-sample matchers, the reasoning trigger (token id and R1 text)
// and budget-forced closing of reasoning.
#include "ladle/structured/mask_provider.h"

#include <gtest/gtest.h>

#include "ladle/structured/compile_service.h"
#include "test_vocab.h"

namespace ladle::structured {
namespace {

using testing_vocab::ByteToken;
using testing_vocab::kEndThink;
using testing_vocab::kEos;

constexpr size_t kVocab = 320;

std::shared_ptr<const CompiledConstraint> CompileRegex(const std::string& pattern) {
  ConstraintSpec s;
  s.kind = ConstraintKind::kRegex;
  s.payload = pattern;
  auto c = CompileLocally(s, testing_vocab::ByteVocabulary(kVocab), {});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : nullptr;
}

struct Mask {
  std::vector<uint64_t> bits = std::vector<uint64_t>((kVocab + 63) / 64, 0);
  bool Has(uint32_t id) const { return (bits[id >> 6] >> (id & 63)) & 1; }
  size_t Count() const {
    size_t n = 0;
    for (uint32_t i = 0; i < kVocab; ++i) n += Has(i);
    return n;
  }
};

Mask Fill(StructuredMaskProvider& p, int index) {
  Mask m;
  p.FillMask(index, m.bits.data(), kVocab);
  return m;
}

TEST(MaskProvider, ConstrainsFromTheFirstTokenWithoutReasoning) {
  MaskOptions o;
  o.max_tokens = 100;
  StructuredMaskProvider p(CompileRegex("[0-9]{3}"), o);
  EXPECT_TRUE(p.constrained(0));
  for (int i = 0; i < 3; ++i) {
    Mask m = Fill(p, 0);
    EXPECT_TRUE(m.Has(ByteToken('7')));
    EXPECT_FALSE(m.Has(ByteToken('a')));
    EXPECT_FALSE(m.Has(kEos));
    p.Accept(0, ByteToken('7'));
  }
  Mask end = Fill(p, 0);
  EXPECT_TRUE(end.Has(kEos));
  EXPECT_EQ(end.Count(), 1u);
  EXPECT_FALSE(p.forced());
}

// A user grammar whose live parses grow exponentially: the matcher gives up at its stack limit,
// the mask then allows nothing (so the engine ends the request), and Failure() says why, for
// that sample only.
TEST(MaskProvider, TooAmbiguousGrammarReportsItsFailure) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kEbnf;
  spec.payload = "root ::= list\nlist ::= \"(\" (item (\" \" item)*){0,3}\nitem ::= list | \"\"[a-z]+\n";
  auto c = CompileLocally(spec, testing_vocab::ByteVocabulary(kVocab), {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  MaskOptions o;
  o.n = 2;
  o.max_tokens = 1000;
  StructuredMaskProvider p(*c, o);
  int k = 0;
  for (; k < 1000; ++k) {
    Mask m = Fill(p, 0);
    const uint32_t t = ByteToken(k % 3 == 2 ? 'a' : '(');
    if (!m.Has(t)) break;
    p.Accept(0, t);
  }
  ASSERT_LT(k, 1000);
  EXPECT_EQ(Fill(p, 0).Count(), 0u);
  EXPECT_NE(p.Failure(0).find("too ambiguous"), std::string::npos) << p.Failure(0);
  EXPECT_EQ(p.Failure(1), "");
  EXPECT_TRUE(Fill(p, 1).Has(ByteToken('(')));
}

TEST(MaskProvider, ThinkingTriggerByTokenId) {
  MaskOptions o;
  o.max_tokens = 100;
  o.starts_in_reasoning = true;
  o.trigger_id = kEndThink;
  o.trigger_tokens = {kEndThink};
  StructuredMaskProvider p(CompileRegex("[0-9]+"), o);
  EXPECT_FALSE(p.constrained(0));
  // Free while reasoning: letters, the marker and EOS are all allowed.
  Mask free = Fill(p, 0);
  EXPECT_TRUE(free.Has(ByteToken('a')));
  EXPECT_TRUE(free.Has(kEndThink));
  EXPECT_EQ(free.Count(), kVocab);
  p.Accept(0, ByteToken('h'));
  p.Accept(0, ByteToken('m'));
  EXPECT_FALSE(p.constrained(0));
  p.Accept(0, kEndThink);
  EXPECT_TRUE(p.constrained(0));
  Mask m = Fill(p, 0);
  EXPECT_TRUE(m.Has(ByteToken('1')));
  EXPECT_FALSE(m.Has(ByteToken('a')));
  EXPECT_FALSE(m.Has(kEndThink));
}

TEST(MaskProvider, ThinkingTriggerByTextAcrossTokens) {
  // R1: "</think>" is ordinary text, here split over the tokens "</" and "think>".
  MaskOptions o;
  o.max_tokens = 100;
  o.starts_in_reasoning = true;
  o.trigger_tokens = {testing_vocab::TokenOf("</"), testing_vocab::TokenOf("think>")};
  StructuredMaskProvider p(CompileRegex("x[0-9]"), o);
  p.Accept(0, testing_vocab::TokenOf("</"));
  EXPECT_FALSE(p.constrained(0));
  p.Accept(0, testing_vocab::TokenOf("think>"));
  EXPECT_TRUE(p.constrained(0));
  Mask m = Fill(p, 0);
  EXPECT_TRUE(m.Has(ByteToken('x')));
  EXPECT_FALSE(m.Has(ByteToken('1')));
}

TEST(MaskProvider, TextTriggerFeedsTheRestOfItsToken) {
  // A token that ends the marker and starts the answer: its tail is the answer's first byte.
  MaskOptions o;
  o.max_tokens = 100;
  o.starts_in_reasoning = true;
  StructuredMaskProvider p(CompileRegex("x[0-9]"), o);
  for (char c : std::string("ok</")) p.Accept(0, ByteToken(static_cast<unsigned char>(c)));
  EXPECT_FALSE(p.constrained(0));
  p.Accept(0, testing_vocab::TokenOf("think>\nx"));
  EXPECT_TRUE(p.constrained(0));
  Mask m = Fill(p, 0);
  EXPECT_TRUE(m.Has(ByteToken('5')));  // 'x' was consumed, a digit comes next
  EXPECT_FALSE(m.Has(ByteToken('x')));
}

TEST(MaskProvider, BudgetForcesTheEndOfReasoning) {
  MaskOptions o;
  o.max_tokens = 12;
  o.margin = 2;
  o.starts_in_reasoning = true;
  o.trigger_id = kEndThink;
  o.trigger_tokens = {kEndThink};
  StructuredMaskProvider p(CompileRegex("[0-9]{4}"), o);
  // need = 4 (shortest completion, in bytes) + 1 (marker) + 1 (EOS) + 2 (margin) = 8: free
  // while more than 8 tokens remain, then only the marker.
  int steps = 0;
  while (steps < 12) {
    Mask m = Fill(p, 0);
    if (m.Count() == 1) {
      EXPECT_TRUE(m.Has(kEndThink));
      break;
    }
    p.Accept(0, ByteToken('r'));
    ++steps;
  }
  EXPECT_EQ(steps, 12 - 8);
  EXPECT_TRUE(p.forced());
  EXPECT_TRUE(p.forced(0));
  p.Accept(0, kEndThink);
  EXPECT_TRUE(p.constrained(0));
  // The answer still fits: 4 digits then EOS within the 12 (with 3 tokens of slack left the
  // provider commits to the shortest completion, so the digits may be forced).
  for (int i = 0; i < 4; ++i) {
    Mask m = Fill(p, 0);
    char digit = 0;
    for (char c = '0'; c <= '9' && !digit; ++c) {
      if (m.Has(ByteToken(c))) digit = c;
    }
    ASSERT_NE(digit, 0);
    p.Accept(0, ByteToken(digit));
  }
  EXPECT_TRUE(Fill(p, 0).Has(kEos));
}

TEST(MaskProvider, SamplesAreIndependent) {
  MaskOptions o;
  o.n = 2;
  o.max_tokens = 100;
  StructuredMaskProvider p(CompileRegex("(ab|cd)"), o);
  p.Accept(0, ByteToken('a'));
  p.Accept(1, ByteToken('c'));
  Mask m0 = Fill(p, 0), m1 = Fill(p, 1);
  EXPECT_TRUE(m0.Has(ByteToken('b')));
  EXPECT_FALSE(m0.Has(ByteToken('d')));
  EXPECT_TRUE(m1.Has(ByteToken('d')));
  EXPECT_FALSE(m1.Has(ByteToken('b')));
}

TEST(MaskProvider, BudgetNarrowsTheAnswerAndIsReported) {
  // A long-winded grammar with a short way out: once the budget is near the shortest
  // completion only the short path stays.
  MaskOptions o;
  o.max_tokens = 8;
  o.margin = 1;
  StructuredMaskProvider p(CompileRegex("a{0,50}b"), o);
  int emitted = 0;
  bool closed = false;
  for (; emitted < 8; ++emitted) {
    Mask m = Fill(p, 0);
    if (m.Has(kEos)) {
      closed = true;
      break;
    }
    const uint32_t tok = m.Has(ByteToken('a')) ? ByteToken('a') : ByteToken('b');
    ASSERT_TRUE(m.Has(tok));
    p.Accept(0, tok);
  }
  EXPECT_TRUE(closed) << "the output did not close within max_tokens";
  EXPECT_TRUE(p.forced());
}

std::shared_ptr<const CompiledConstraint> Lazy() {
  auto vocab = testing_vocab::ByteVocabulary(kVocab);
  auto g1 = grammar::RegexGrammar("[0-9]+");
  auto g2 = grammar::RegexGrammar("x+");
  EXPECT_TRUE(g1.ok() && g2.ok());
  auto c = std::make_shared<CompiledConstraint>();
  c->kind = ConstraintKind::kToolCall;
  CompiledTrigger by_id;
  by_id.token_id = kEndThink;  // any special token serves as the opener here
  by_id.after = *grammar::CompiledGrammar::Compile(*g1, vocab);
  CompiledTrigger by_text;
  by_text.text = "CALL:";
  by_text.after = *grammar::CompiledGrammar::Compile(*g2, vocab);
  c->triggers = {by_id, by_text};
  c->grammar = c->triggers[0].after;
  return c;
}

TEST(MaskProvider, LazyTriggerByTokenId) {
  MaskOptions o;
  o.max_tokens = 100;
  StructuredMaskProvider p(Lazy(), o);
  EXPECT_FALSE(p.constrained(0));
  for (char c : std::string("free text ")) {
    EXPECT_EQ(Fill(p, 0).Count(), kVocab);
    p.Accept(0, ByteToken(static_cast<unsigned char>(c)));
  }
  p.Accept(0, kEndThink);
  EXPECT_TRUE(p.constrained(0));
  Mask m = Fill(p, 0);
  EXPECT_TRUE(m.Has(ByteToken('4')));
  EXPECT_FALSE(m.Has(ByteToken('x')));
  EXPECT_FALSE(m.Has(kEos));
}

TEST(MaskProvider, LazyTriggerByTextFeedsTheRest) {
  MaskOptions o;
  o.max_tokens = 100;
  StructuredMaskProvider p(Lazy(), o);
  for (char c : std::string("hello CALL")) p.Accept(0, ByteToken(static_cast<unsigned char>(c)));
  EXPECT_FALSE(p.constrained(0));
  p.Accept(0, ByteToken(':'));
  EXPECT_TRUE(p.constrained(0));
  Mask m = Fill(p, 0);
  EXPECT_TRUE(m.Has(ByteToken('x')));
  EXPECT_FALSE(m.Has(ByteToken('4')));
  EXPECT_FALSE(m.Has(kEos));  // x+ needs one x
  p.Accept(0, ByteToken('x'));
  EXPECT_TRUE(Fill(p, 0).Has(kEos));
}

TEST(MaskProvider, OptionsForVersions) {
  // Only the token-id form is tested without the real tokenizer.
  auto v32 = frontend::SpecialTokensFor(frontend::ModelVersion::kV32);
  ASSERT_TRUE(v32.end_think.has_value());
  EXPECT_EQ(*v32.end_think, 128799u);
}

}  // namespace
}  // namespace ladle::structured
