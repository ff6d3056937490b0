// The automaton compiler: bounded repeats expand exactly, compile budgets end in
// kResourceExhausted (never a hang), and Serialize/Deserialize round-trips with identical
// masks and a vocabulary check.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include <fmt/format.h>

#include "ladle/grammar/matcher.h"
#include "ladle/json/json.h"
#include "matcher_impl.h"
#include "matcher_test_util.h"
#include "reference_recognizer.h"

namespace ladle::grammar {
namespace {

using testing::Mask;

TEST(Automaton, LargeBoundedRepeatIsExact) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Repeat(b.ByteRange('a', 'c'), 2, 1000));
  auto cg = CompiledGrammar::Compile(*b.Build(root), v);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  GrammarMatcher m(*cg);
  EXPECT_FALSE(m.CanTerminate());
  ASSERT_TRUE(m.AcceptString(std::string(999, 'b')));
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_FALSE(m.AcceptToken(21));  // "abc" would make 1002
  EXPECT_FALSE(m.AcceptToken(20));  // "ab" would make 1001
  ASSERT_TRUE(m.AcceptToken(2));    // "c"
  auto bits = Mask(m, testing::kVocabSize);
  EXPECT_EQ(testing::Count(bits), 1u);
  EXPECT_TRUE(testing::Bit(bits, testing::kEos));
  EXPECT_GT((*cg)->MemoryBytes(), 1000u);
}

TEST(Automaton, NestedHugeRepeatExhaustsTheBudget) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  ExprId inner = b.Repeat(b.ByteRange('a', 'z'), 0, 100000);
  RuleId root = b.AddRule("root", b.Repeat(b.Seq({inner, b.Literal(",")}), 0, 100000));
  CompileOptions opts;
  opts.max_memory_bytes = 16 << 20;  // the automaton needs ~300K states: far more than this
  auto cg = CompiledGrammar::Compile(*b.Build(root), v, opts);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kResourceExhausted) << cg.status().ToString();
}

TEST(Automaton, HugeLayeredRepeatExhaustsTheBudgetBeforeAllocating) {
  // Two million copies of a multi-byte character: a layered table of gigabytes, refused by
  // the memory budget before it is allocated.
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  ExprId ch = b.Alt({b.ByteRange('a', 'c'), b.CodePoints({{0xE9, 0xE9}, {0x4E2D, 0x4E2D}})});
  RuleId rep = b.AddRule("rep", b.Repeat(ch, 0, 2000000));
  RuleId root = b.AddRule("root", b.Seq({b.Literal("\""), b.Ref(rep), b.Literal("\"")}));
  CompileOptions opts;
  opts.max_memory_bytes = 16 << 20;
  auto cg = CompiledGrammar::Compile(*b.Build(root), v, opts);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kResourceExhausted) << cg.status().ToString();
}

TEST(Automaton, HugeAlternationExhaustsASmallMemoryBudget) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  std::vector<ExprId> alts;
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    for (int k = 0; k < 12; ++k) s.push_back(static_cast<char>('a' + rng() % 26));
    alts.push_back(b.Literal(s));
  }
  RuleId root = b.AddRule("root", b.Alt(alts));
  Grammar g = *b.Build(root);
  CompileOptions opts;
  opts.max_memory_bytes = 16 << 20;
  auto cg = CompiledGrammar::Compile(g, v, opts);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(cg.status().message().find("MiB"), std::string::npos) << cg.status().message();
}

TEST(Automaton, DeadlineIsChecked) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  RuleId root = b.AddRule("root", b.Repeat(b.Repeat(b.AnyCodePoint(), 0, 3000), 0, 3000));
  CompileOptions opts;
  opts.max_compile_ms = 1;
  opts.max_memory_bytes = size_t{64} << 30;  // only the clock can stop it
  auto cg = CompiledGrammar::Compile(*b.Build(root), v, opts);
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(cg.status().message().find("ms"), std::string::npos) << cg.status().message();
}

TEST(Automaton, SerializeRoundTripsWithIdenticalMasks) {
  auto v = testing::SmallVocab();
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  ASSERT_TRUE(cg.ok());
  std::string blob = (*cg)->Serialize();
  auto back = CompiledGrammar::Deserialize(blob, v);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->grammar().ToString(), (*cg)->grammar().ToString());
  EXPECT_EQ((*back)->Serialize(), blob);
  std::mt19937 rng(9);
  for (int walk = 0; walk < 10; ++walk) {
    GrammarMatcher a(*cg), b(*back);
    for (int step = 0; step < 30; ++step) {
      auto ma = Mask(a, testing::kVocabSize), mb = Mask(b, testing::kVocabSize);
      ASSERT_EQ(ma, mb);
      std::vector<TokenId> allowed;
      for (TokenId id = 0; id < testing::kVocabSize; ++id) {
        if (testing::Bit(ma, id)) allowed.push_back(id);
      }
      if (allowed.empty() || a.IsTerminated()) break;
      TokenId pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(a.AcceptToken(pick));
      ASSERT_TRUE(b.AcceptToken(pick));
    }
  }
}

TEST(Automaton, DeserializeChecksTheVocabulary) {
  auto v = testing::SmallVocab();
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  ASSERT_TRUE(cg.ok());
  auto other = TokenVocabulary::FromTokens({"a", "b"}, {}, {}, 2);
  ASSERT_TRUE(other.ok());
  auto back = CompiledGrammar::Deserialize((*cg)->Serialize(), *other);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kFailedPrecondition);
}

TEST(Automaton, DeserializeRejectsCorruptBlobs) {
  auto v = testing::SmallVocab();
  auto cg = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  ASSERT_TRUE(cg.ok());
  const std::string blob = (*cg)->Serialize();
  for (size_t cut = 0; cut < blob.size(); cut += 7) {
    EXPECT_FALSE(CompiledGrammar::Deserialize(blob.substr(0, cut), v).ok()) << cut;
  }
  // Flipped bytes past the header either fail validation or still give a usable grammar;
  // they must never crash (run under ASan in CI).
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    std::string bad = blob;
    bad[16 + rng() % (bad.size() - 16)] ^= static_cast<char>(1 + rng() % 255);
    auto r = CompiledGrammar::Deserialize(bad, v);
    if (r.ok()) {
      GrammarMatcher m(*r);
      auto bits = Mask(m, testing::kVocabSize);
      (void)bits;
    }
  }
}


// Shapes that used to blow up the automaton, each compiled under a memory budget far below
// what the blow-up needed, then checked on accepted and rejected texts.
Result<std::shared_ptr<const CompiledGrammar>> CompileSchema(
    const std::string& schema, size_t max_bytes,
    JsonSchemaOptions::KeyOrder order = JsonSchemaOptions::KeyOrder::kAny) {
  auto v = json::Parse(schema);
  EXPECT_TRUE(v.ok()) << schema;
  auto g = JsonSchemaGrammar(*v, {.whitespace = JsonSchemaOptions::Whitespace::kCompact, .key_order = order});
  if (!g.ok()) return g.status();
  CompileOptions opts;
  opts.max_memory_bytes = max_bytes;
  return CompiledGrammar::Compile(*g, testing::SmallVocab(), opts);
}

bool Accepts(const std::shared_ptr<const CompiledGrammar>& cg, const std::string& text) {
  GrammarMatcher m(cg);
  return m.AcceptString(text) && m.CanTerminate();
}

TEST(Automaton, OptionalPropertyChainIsLinearInThePropertyCount) {
  // 131 optional properties in schema order (KeyOrder::kSchema; any order is
  // json_schema_key_order_test.cc's): the IR shares each tail between the alternative that
  // starts there and the tail before it; expanded as a tree it was 388k NFA states (1.3 s).
  std::string props;
  for (int i = 0; i < 131; ++i) props += fmt::format("{}\"p{}\":{{\"type\":[\"string\",\"null\"]}}", i ? "," : "", i);
  auto cg = CompileSchema(fmt::format(R"({{"type":"object","additionalProperties":false,"properties":{{{}}}}})", props),
                          8 << 20, JsonSchemaOptions::KeyOrder::kSchema);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  EXPECT_LT((*cg)->MemoryBytes(), size_t{4} << 20);
  EXPECT_TRUE(Accepts(*cg, "{}"));
  EXPECT_TRUE(Accepts(*cg, R"({"p0":"a","p7":null,"p130":"z"})"));
  EXPECT_TRUE(Accepts(*cg, R"({"p129":"a","p130":null})"));
  EXPECT_FALSE(Accepts(*cg, R"({"p7":null,"p0":"a"})"));  // schema order
  EXPECT_FALSE(Accepts(*cg, R"({"p7":null,"p7":"a"})"));
  EXPECT_FALSE(Accepts(*cg, R"({"p131":"a"})"));
}

TEST(Automaton, CountedRepeatOfALargeBodyIsCalledNotCopied) {
  // maxItems 255 of a ~1k-state object: 255 copies were a 100k+-state NFA.
  std::string props;
  for (int i = 0; i < 8; ++i) props += fmt::format(R"({}"f{}":{{"type":"string","maxLength":16}})", i ? "," : "", i);
  auto cg = CompileSchema(
      fmt::format(R"({{"type":"array","maxItems":255,"items":{{"type":"object","additionalProperties":false,"properties":{{{}}}}}}})",
                  props),
      4 << 20);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  auto items = [](int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += i ? R"(,{"f1":"x"})" : R"({"f1":"x"})";
    return s + "]";
  };
  EXPECT_TRUE(Accepts(*cg, items(0)));
  EXPECT_TRUE(Accepts(*cg, items(3)));
  EXPECT_TRUE(Accepts(*cg, items(255)));
  EXPECT_FALSE(Accepts(*cg, items(256)));
  EXPECT_FALSE(Accepts(*cg, R"([{"f1":"0123456789abcdefg"}])"));  // 17 > maxLength
}

// The matcher against the reference recognizer on one string: walked as a prefix, and
// accepted as a whole document, exactly when the reference says so. Counts both outcomes.
void ExpectSameAsReference(const std::shared_ptr<const CompiledGrammar>& cg, const ReferenceRecognizer& ref,
                           const std::string& s, size_t& prefixes, size_t& accepted) {
  GrammarMatcher m(cg);
  const bool walked = m.AcceptString(s);
  ASSERT_EQ(walked, ref.IsPrefix(s)) << s;
  const bool whole = walked && m.CanTerminate();
  ASSERT_EQ(whole, ref.Matches(s)) << s;
  prefixes += walked;
  accepted += whole;
}

// A counted repeat of a prefix-free body is built by layering the body's DFA (LayerRepeat),
// not by subset construction: the unit is exactly max layers of the body's non-accepting
// states plus a final state, and its language is the same. A body that is not prefix-free
// ("a" | "ab") takes the usual path. Both are checked against the reference recognizer on
// random strings, as whole strings and as prefixes.
TEST(Automaton, CountedRepeatOfAPrefixFreeBodyIsLayeredAndExact) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  ExprId hex = b.Alt({b.ByteRange('0', '9'), b.ByteRange('a', 'f')});
  ExprId ch = b.Alt({b.CodePoints({{'"', '"'}, {'\\', '\\'}, {0, 0x1f}}, /*negate=*/true),
                     b.Seq({b.Literal("\\"), b.Alt({b.Literal("n"), b.Literal("\\"), b.Seq({b.Literal("u"), b.Repeat(hex, 4, 4)})})})});
  RuleId str = b.AddRule("str", b.Repeat(ch, 3, 40));
  RuleId ab = b.AddRule("ab", b.Repeat(b.Alt({b.Literal("a"), b.Literal("ab")}), 0, 200));
  RuleId root = b.AddRule("root", b.Alt({b.Seq({b.Literal("\""), b.Ref(str), b.Literal("\"")}),
                                         b.Seq({b.Literal("<"), b.Ref(ab), b.Literal(">")})}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto cg = CompiledGrammar::Compile(*g, v);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  auto ref = ReferenceRecognizer::Create(*g);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();

  const Automaton& a = (*cg)->impl().automaton;
  bool found = false;
  for (size_t u = 0; u < a.unit_start.size(); ++u) {
    if (g->rules[a.unit_rule[u]].name != "str") continue;
    found = true;
    const size_t end = u + 1 < a.unit_start.size() ? a.unit_start[u + 1] : a.num_states();
    const size_t states = end - a.unit_start[u];
    EXPECT_EQ(states % 40, 1u) << states << " states: not 40 layers plus a final state";
  }
  EXPECT_TRUE(found) << "the repeat was inlined, not a unit";
  ASSERT_EQ(a.layered.size(), 1u);  // str; ab is not prefix-free
  EXPECT_EQ(a.layered[0].max, 40u);
  EXPECT_EQ(a.layered[0].min, 3u);

  std::mt19937 rng(11);
  const std::vector<std::string> pieces = {"x", "\"", "\\", "n", "u", "0", "f", "g", "\xc3\xa9", "\xe2\x82\xac",
                                           "\xf0\x9f\x98\x80", "\xc3", "\x01", "a", "b", "<", ">"};
  size_t accepted = 0, prefixes = 0;
  for (int i = 0; i < 4000; ++i) {
    const bool quoted = rng() % 2;
    std::string s = quoted ? "\"" : "<";
    const size_t n = rng() % 50;
    for (size_t k = 0; k < n; ++k) {
      if (quoted && rng() % 4) {
        s += rng() % 3 ? "x" : "\\u00e9";
      } else if (!quoted && rng() % 3) {
        s += rng() % 2 ? "a" : "ab";
      } else {
        s += pieces[rng() % pieces.size()];
      }
    }
    if (rng() % 2) s += quoted ? "\"" : ">";
    ExpectSameAsReference(*cg, *ref, s, prefixes, accepted);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(accepted, 200u);  // both outcomes are well represented
  EXPECT_GT(prefixes - accepted, 200u);
  EXPECT_LT(prefixes, 3800u);
}

// A unit whose body is head·tail with a prefix-free head is built by joining the head's DFA to
// the tail's, and the tail's DFA is built once for every unit that ends in it (the JSON Schema
// front-end's "rest of an unlisted key" rules). A head that is not prefix-free ("a" | "ab")
// takes the usual path. All three are checked against the reference recognizer.
TEST(Automaton, SequencesEndingInASharedTailAreJoinedAndExact) {
  auto v = testing::SmallVocab();
  GrammarBuilder b;
  ExprId tail = b.Seq({b.Star(b.Alt({b.ByteRange('a', 'c'), b.CodePoints({{0xe9, 0xe9}, {0x20ac, 0x20ac}})})), b.Literal("\"")});
  RuleId r1 = b.AddRule("r1", b.SeqThen({b.Alt({b.Literal("x"), b.Seq({b.Literal("\\"), b.ByteRange('0', '9')})})}, tail));
  RuleId r2 = b.AddRule("r2", b.SeqThen({b.CodePoints({{'d', 'f'}, {0x3b1, 0x3c9}})}, tail));
  RuleId r3 = b.AddRule("r3", b.SeqThen({b.Alt({b.Literal("a"), b.Literal("ab")})}, tail));
  RuleId root = b.AddRule("root", b.Alt({b.Seq({b.Literal("1"), b.Ref(r1)}), b.Seq({b.Literal("2"), b.Ref(r2)}),
                                         b.Seq({b.Literal("3"), b.Ref(r3)})}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto cg = CompiledGrammar::Compile(*g, v);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  auto ref = ReferenceRecognizer::Create(*g);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  EXPECT_EQ((*cg)->impl().automaton.concatenated_units, 2u);  // r1 and r2; r3's head is not prefix-free

  std::mt19937 rng(5);
  const std::vector<std::string> pieces = {"a", "b", "c", "d", "x", "\\", "7", "\"", "\xc3\xa9", "\xe2\x82\xac",
                                           "\xce\xb2", "\xc3", "\xe2", "\xe2\x82", "\xce", "1", "2", "3", "ab"};
  size_t accepted = 0, prefixes = 0;
  for (int i = 0; i < 4000; ++i) {
    const int which = static_cast<int>(rng() % 3);
    std::string s(1, static_cast<char>('1' + which));
    static const std::vector<std::string> heads[3] = {{"x", "\\4"}, {"e", "\xce\xb2"}, {"a", "ab"}};
    s += rng() % 4 ? heads[which][rng() % 2] : pieces[rng() % pieces.size()];
    const size_t n = rng() % 8;
    static const std::vector<std::string> body = {"a", "b", "c", "\xc3\xa9", "\xe2\x82\xac"};
    for (size_t k = 0; k < n; ++k) s += rng() % 8 ? body[rng() % body.size()] : pieces[rng() % pieces.size()];
    if (rng() % 3) s += "\"";
    ExpectSameAsReference(*cg, *ref, s, prefixes, accepted);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(accepted, 100u);
  EXPECT_GT(prefixes - accepted, 100u);
  EXPECT_LT(prefixes, 3900u);
}

// Call-free unit DFAs are shared across compiles (UnitDfaCache, keyed by the body's structure
// with inlined rules expanded): a second compile of the same schema takes its string,
// pattern and unlisted-key units from the cache and serialises byte for byte like a compile
// that built everything.
TEST(Automaton, SharedUnitDfasAreTheOnesACompileWouldBuild) {
  auto v = testing::SmallVocab();
  auto schema = json::Parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":40},"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]+$"},
      "when":{"type":"string","format":"date"},"tags":{"type":"array","items":{"type":"string","minLength":2}}},
      "required":["name"],"additionalProperties":{"type":"integer"}})");
  ASSERT_TRUE(schema.ok());
  auto g = JsonSchemaGrammar(*schema);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  CompileOptions cold;
  cold.share_unit_dfas = false;
  auto built = CompiledGrammar::Compile(*g, v, cold);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  EXPECT_EQ((*built)->impl().automaton.shared_units, 0u);
  auto first = CompiledGrammar::Compile(*g, v);  // fills the cache (or hits an earlier test's units)
  auto second = CompiledGrammar::Compile(*g, v);
  ASSERT_TRUE(first.ok() && second.ok());
  const Automaton& a = (*second)->impl().automaton;
  EXPECT_GE(a.shared_units, 4u);  // the length-bounded string, the pattern, the date, an unlisted-key rest
  EXPECT_EQ(a.layered.size(), (*built)->impl().automaton.layered.size());
  EXPECT_EQ(a.concatenated_units, (*built)->impl().automaton.concatenated_units);
  EXPECT_EQ((*second)->Serialize(), (*built)->Serialize());
  EXPECT_EQ((*first)->Serialize(), (*built)->Serialize());
}

// The cache key expands inlined rules: two grammars whose unit bodies are the same expression
// over a rule of the same name and id, but with different rule bodies, must not share.
TEST(Automaton, SharedUnitKeysLookThroughInlinedRules) {
  auto v = testing::SmallVocab();
  auto make = [&](char letter) {
    GrammarBuilder b;
    RuleId ch = b.AddRule("ch", b.ByteRange(letter, letter));
    RuleId body = b.AddRule("body", b.Seq({b.Star(b.Ref(ch)), b.Literal("!")}));  // a unit: unbounded
    RuleId root = b.AddRule("root", b.Seq({b.Literal("<"), b.Ref(body)}));
    auto g = b.Build(root);
    EXPECT_TRUE(g.ok());
    return *g;
  };
  for (char first : {'a', 'b'}) {
    auto ga = CompiledGrammar::Compile(make(first), v);
    const char other = first == 'a' ? 'b' : 'a';
    auto gb = CompiledGrammar::Compile(make(other), v);
    ASSERT_TRUE(ga.ok() && gb.ok());
    GrammarMatcher ma(*ga), mb(*gb);
    EXPECT_TRUE(ma.AcceptString(std::string("<") + first + first + "!"));
    EXPECT_TRUE(mb.AcceptString(std::string("<") + other + other + "!"));
    GrammarMatcher mc(*gb);
    EXPECT_FALSE(mc.AcceptString(std::string("<") + first));
  }
  // And a repeat compile of the same grammar does share its unit.
  auto again = CompiledGrammar::Compile(make('a'), v);
  ASSERT_TRUE(again.ok());
  EXPECT_GE((*again)->impl().automaton.shared_units, 1u);
}

// Compiles on several threads share the unit cache: every thread's grammar serialises like a
// cold compile of the same schema (the cache is filled and read concurrently).
TEST(Automaton, SharedUnitDfasAreSafeAcrossThreads) {
  auto v = testing::SmallVocab();
  std::vector<Grammar> grammars;
  std::vector<std::string> cold;
  for (int i = 0; i < 6; ++i) {
    auto schema = json::Parse(fmt::format(R"({{"type":"object","properties":{{
        "k{0}":{{"type":"string","maxLength":{1}}},"p":{{"type":"string","pattern":"^[a-f]{{{2}}}$"}},
        "n":{{"type":"integer","minimum":{0}}}}},"additionalProperties":{{"type":"boolean"}}}})",
                                          i % 3, 20 + 5 * (i % 2), 2 + i % 3));
    ASSERT_TRUE(schema.ok());
    auto g = JsonSchemaGrammar(*schema);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    CompileOptions off;
    off.share_unit_dfas = false;
    auto cg = CompiledGrammar::Compile(*g, v, off);
    ASSERT_TRUE(cg.ok());
    cold.push_back((*cg)->Serialize());
    grammars.push_back(std::move(*g));
  }
  std::vector<std::string> got(grammars.size() * 4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < grammars.size(); ++k) {
        const size_t i = (k + t) % grammars.size();
        auto cg = CompiledGrammar::Compile(grammars[i], v);
        if (cg.ok()) got[t * grammars.size() + i] = (*cg)->Serialize();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < 4; ++t) {
    for (size_t i = 0; i < grammars.size(); ++i) EXPECT_EQ(got[t * grammars.size() + i], cold[i]) << t << " " << i;
  }
}

}  // namespace
}  // namespace ladle::grammar
