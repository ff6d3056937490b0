// Mask caches: lazy and eager caches give the same masks, compiles are deterministic, many
// matchers on one CompiledGrammar in threads see identical masks, identical sub-automata
// share one process-wide cache entry across grammars, and the string-body slice gives the
// masks and budget narrowing a token-by-token check gives.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"
#include "ladle/json/json.h"
#include "ladle/tokenizer/tokenizer.h"
#include "mask_cache.h"
#include "matcher_impl.h"
#include "matcher_test_util.h"
#include "test_data.h"

namespace ladle::grammar {
namespace {

// The masks along a fixed walk (the first allowed token after a seeded shuffle each step).
std::vector<std::vector<uint64_t>> Walk(const std::shared_ptr<const CompiledGrammar>& cg, uint32_t seed,
                                        int steps) {
  const size_t n = cg->vocab().vocab_size();
  std::mt19937 rng(seed);
  GrammarMatcher m(cg);
  std::vector<std::vector<uint64_t>> out;
  for (int s = 0; s < steps && !m.IsTerminated(); ++s) {
    out.push_back(testing::Mask(m, n));
    std::vector<TokenId> allowed;
    for (TokenId id = 0; id < n; ++id) {
      if (testing::Bit(out.back(), id)) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    EXPECT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
  }
  return out;
}

std::shared_ptr<const TokenVocabulary> VocabForThreads() {
  const std::string path = ladle::testing::TokenizerPath();
  if (std::filesystem::exists(path)) {
    auto tok = tokenizer::Tokenizer::FromFile(path);
    if (tok.ok()) {
      auto v = TokenVocabulary::FromTokenizer(*tok, {1});
      if (v.ok()) return *v;
    }
  }
  return testing::SmallVocab();  // the race still exists, just with less to compute
}

TEST(Mask, EagerAndLazyAgree) {
  auto v = testing::SmallVocab();
  CompileOptions eager;
  eager.eager_mask_cache = true;
  auto a = CompiledGrammar::Compile(testing::JsonGrammar(), v);
  auto b = CompiledGrammar::Compile(testing::JsonGrammar(), v, eager);
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint32_t seed = 0; seed < 10; ++seed) EXPECT_EQ(Walk(*a, seed, 40), Walk(*b, seed, 40));
}

TEST(Mask, CompileIsDeterministic) {
  auto v = testing::SmallVocab();
  auto a = CompiledGrammar::Compile(testing::StringHeavyGrammar(), v);
  auto b = CompiledGrammar::Compile(testing::StringHeavyGrammar(), v);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->Serialize(), (*b)->Serialize());
  for (uint32_t seed = 0; seed < 5; ++seed) EXPECT_EQ(Walk(*a, seed, 40), Walk(*b, seed, 40));
}

TEST(Mask, ThreadsShareOneCompiledGrammar) {
  auto v = VocabForThreads();
  // A fresh grammar (its own states) so the threads race on first uses of the caches.
  GrammarBuilder b;
  RuleId item = b.AddRule("item", b.Seq({b.Literal("<"), b.Star(b.CodePoints({{'>', '>'}}, true)), b.Literal(">")}));
  RuleId root = b.AddRule("root", b.Seq({b.Literal("["), b.Ref(item), b.Star(b.Seq({b.Literal(","), b.Ref(item)})),
                                         b.Literal("]")}));
  auto serial_cg = CompiledGrammar::Compile(*b.Build(root), v);
  ASSERT_TRUE(serial_cg.ok());
  std::vector<std::vector<std::vector<uint64_t>>> expect;
  for (uint32_t t = 0; t < 6; ++t) expect.push_back(Walk(*serial_cg, t, 12));
  auto cg = CompiledGrammar::Compile((*serial_cg)->grammar(), v);
  ASSERT_TRUE(cg.ok());
  std::vector<std::vector<std::vector<uint64_t>>> got(6);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 6; ++t) threads.emplace_back([&, t] { got[t] = Walk(*cg, t, 12); });
  for (auto& th : threads) th.join();
  for (uint32_t t = 0; t < 6; ++t) EXPECT_EQ(got[t], expect[t]) << "thread " << t;
}

// On the real vocabulary (small ones classify every state outright, never keyed).
TEST(Mask, IdenticalSubAutomataShareAcrossGrammars) {
  const std::string path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(path);
  const auto& ds = testing::LoadDeepSeek(path);
  ASSERT_TRUE(ds.vocab);
  const auto& vocab = ds.vocab;
  const size_t n = vocab->vocab_size();
  auto make = [&](const std::string& key) {
    GrammarBuilder b;
    // Lower-case letters only: a body the string-body slice does not cover, and one that
    // accepts too many tokens to be classified without its structural key.
    RuleId str = b.AddRule("string", b.Seq({b.Literal("\""), b.Star(b.ByteRange('a', 'z')), b.Literal("\"")}));
    RuleId root = b.AddRule("root", b.Seq({b.Literal("{\"" + key + "\": "), b.Ref(str), b.Literal("}")}));
    return *CompiledGrammar::Compile(*b.Build(root), vocab);
  };
  auto g1 = make("alpha");
  GrammarMatcher m1(g1);
  ASSERT_TRUE(m1.AcceptString("{\"alpha\": \"x"));
  testing::Mask(m1, n);
  const auto before = GetSharedMaskCacheStats();
  auto g2 = make("beta");
  GrammarMatcher m2(g2);
  ASSERT_TRUE(m2.AcceptString("{\"beta\": \"x"));
  auto mask2 = testing::Mask(m2, n);
  const auto after = GetSharedMaskCacheStats();
  EXPECT_GT(after.hits, before.hits);  // the string body came from g1's entry
  GrammarMatcher m1b(g1);
  ASSERT_TRUE(m1b.AcceptString("{\"alpha\": \"x"));
  EXPECT_EQ(testing::Mask(m1b, n), mask2);
  EXPECT_TRUE(testing::Bit(mask2, ds.tok->TokenToId("hello").value_or(0)));
}

// After `prefix`, every id's mask bit must be what AcceptToken says, and with a budget the
// kept tokens must be exactly those whose shortest completion fits (ids checked on a stride
// under the sanitizers).
void CheckTokenByToken(const std::shared_ptr<const CompiledGrammar>& cg, const TokenVocabulary& vocab,
                       const std::string& prefix) {
  const size_t n = vocab.vocab_size();
  const size_t step = ladle::testing::kSanitized ? 16 : 1;
  GrammarMatcher m(cg, MatcherOptions{.budget_aware = false});
  ASSERT_TRUE(m.AcceptString(prefix)) << prefix;
  auto bits = testing::Mask(m, n);
  std::vector<std::pair<TokenId, uint32_t>> after;  // allowed ids, shortest completion after
  for (TokenId id = 0; id < n; ++id) {
    const bool bit = testing::Bit(bits, id);
    if (!bit && id % step != 0) continue;
    const bool ok = m.AcceptToken(id);
    ASSERT_EQ(bit, ok) << "id " << id << " '" << vocab.TokenBytes(id) << "' after '" << prefix << "'";
    if (ok) {
      after.push_back({id, m.ShortestCompletionTokens()});
      ASSERT_TRUE(m.Rollback(1).ok());
    }
  }
  ASSERT_FALSE(after.empty()) << prefix;
  uint32_t best = UINT32_MAX;
  for (auto [id, d] : after) best = std::min(best, d);
  for (uint32_t extra : {1u, 2u, 4u, 9u}) {
    GrammarMatcher b(cg);
    ASSERT_TRUE(b.AcceptString(prefix));
    const uint32_t remaining = b.ShortestCompletionTokens() + extra;
    b.SetRemainingTokens(remaining);
    auto kept = testing::Mask(b, n);
    const uint32_t limit = std::max(remaining - 1, best);
    for (auto [id, d] : after) {
      ASSERT_EQ(testing::Bit(kept, id), d <= limit)
          << "'" << vocab.TokenBytes(id) << "' completes in " << d << ", " << remaining << " left after '"
          << prefix << "'";
    }
  }
}

// The string-body slice on the real vocabulary: inside strings (plain, length-bounded, near
// the bound, mid-character, after a backslash), at keys where unlisted keys are allowed and
// in a pattern, every id's mask bit must be what AcceptToken says, and with a budget the
// kept tokens must be exactly those whose shortest completion fits.
TEST(Mask, StringBodySliceMatchesTokenByToken) {
  const std::string path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(path);
  const std::shared_ptr<const TokenVocabulary> vocab = testing::LoadDeepSeek(path).vocab;
  ASSERT_TRUE(vocab);
  struct Case {
    const char* schema;
    std::vector<std::string> prefixes;
  };
  const std::string near_bound = "{\"note\":\"" + std::string(290, 'a');
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"name":{"type":"string","minLength":2,"maxLength":40},"id":{"type":"string"},"note":{"type":["string","null"],"maxLength":300}}})",
       {"{\"", "{\"na", "{\"zz", "{\"name\":\"", "{\"name\":\"x", "{\"name\":\"xyz\\", "{\"id\":\"a\u00e9",
        "{\"id\":\"\xe4\xb8", "{\"name\":\"ab\",\"id\":\"q", near_bound}},
      {R"({"type":"array","items":{"type":"string","pattern":"^[a-z ]+$"}})", {"[\"", "[\"ab"}},
  };
  const auto before = GetSharedMaskCacheStats();
  for (const Case& c : cases) {
    auto schema = json::Parse(c.schema);
    ASSERT_TRUE(schema.ok());
    auto g = JsonSchemaGrammar(*schema, {.whitespace = JsonSchemaOptions::Whitespace::kCompact});
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    auto cg = CompiledGrammar::Compile(*g, vocab);
    ASSERT_TRUE(cg.ok());
    for (const std::string& prefix : c.prefixes) {
      CheckTokenByToken(*cg, *vocab, prefix);
      if (HasFatalFailure()) return;
    }
  }
  // The slice did the work in string bodies and at the keys.
  EXPECT_GE(GetSharedMaskCacheStats().body_slices - before.body_slices, 6u);
}


// A string-body state with excluded first bytes that it reaches again after another byte:
// after `"a` the body loops on ' ' and ':' and has no '/', so " /" and "://" must be refused. The containment
// walk once expanded the start pair only at depth 0, where the excluded bytes are left out,
// and accepted every token that reached it again (an ebnf_fuzz find).
TEST(Mask, StringBodySliceChecksExcludedBytesPastTheFirst) {
  const std::string path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(path);
  const std::shared_ptr<const TokenVocabulary> vocab = testing::LoadDeepSeek(path).vocab;
  ASSERT_TRUE(vocab);
  auto g = EbnfGrammar(R"(root ::= "\"" ( [^"\\/\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"")");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto cg = CompiledGrammar::Compile(*g, vocab);
  ASSERT_TRUE(cg.ok());
  for (const char* prefix : {"\"", "\"a", "\"a:"}) {
    CheckTokenByToken(*cg, *vocab, prefix);
    if (HasFatalFailure()) return;
  }
}

// The layer slice (a maxLength string's boundaries, far from and near the bound, with and
// without minLength still to meet) and the string-body slice at the rest of an unlisted key
// (first characters excluded): every id's mask bit must be what AcceptToken says.
TEST(Mask, LayerAndUnlistedKeySlicesMatchTokenByToken) {
  const std::string path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(path);
  const std::shared_ptr<const TokenVocabulary> vocab = testing::LoadDeepSeek(path).vocab;
  ASSERT_TRUE(vocab);
  auto schema = json::Parse(
      R"({"type":"object","properties":{"id":{"type":"string","minLength":3,"maxLength":20},)"
      R"("code":{"type":"string","minLength":36,"maxLength":36},"count":{"type":"integer"}}})");
  ASSERT_TRUE(schema.ok());
  auto g = JsonSchemaGrammar(*schema, {.whitespace = JsonSchemaOptions::Whitespace::kCompact});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto cg = CompiledGrammar::Compile(*g, vocab);
  ASSERT_TRUE(cg.ok());
  ASSERT_FALSE((*cg)->impl().automaton.layered.empty());
  const auto before = GetSharedMaskCacheStats();
  const std::vector<std::string> prefixes = {
      "{\"id\":\"", "{\"id\":\"a", "{\"id\":\"ab", "{\"id\":\"" + std::string(12, 'x'), "{\"id\":\"" + std::string(17, 'x'),
      "{\"id\":\"" + std::string(19, 'x'), "{\"id\":\"" + std::string(20, 'x'), "{\"id\":\"\xc3\xa9\xe4\xb8\xad",
      "{\"code\":\"" + std::string(30, '7'), "{\"code\":\"" + std::string(35, '7'), "{\"c", "{\"co", "{\"x",
      "{\"i", "{\"idx", "{\"count\":1,\"", "{\"count\":1,\"q"};
  for (const std::string& prefix : prefixes) {
    CheckTokenByToken(*cg, *vocab, prefix);
    if (HasFatalFailure()) return;
  }
  const auto after = GetSharedMaskCacheStats();
  EXPECT_GE(after.layer_slices - before.layer_slices, 8u);
  EXPECT_GE(after.body_slices - before.body_slices, 3u);

  // The slices against the full classification, state by state (a mask is a union over the
  // stack tops, which can hide a wrong entry: the tokens an unlisted key's rest excludes are
  // allowed through the name trie anyway). Accepted sets must be equal, and every token a
  // slice rejects outright must be rejected by the full classification too.
  const Automaton& a = (*cg)->impl().automaton;
  const TokenVocabulary::Impl& v = vocab->impl();
  auto accepted = [&](const MaskEntry& e) {
    std::vector<uint8_t> by_id(v.vocab_size, 0);
    if (!e.accepted_bits.empty()) {
      for (size_t id = 0; id < v.vocab_size; ++id) by_id[id] = (e.accepted_bits[id >> 6] >> (id & 63)) & 1;
    }
    for (TokenId id : e.accepted_ids) by_id[id] = 1;
    return by_id;
  };
  auto uncertain = [&](const MaskEntry& e) {
    std::vector<uint8_t> by_id(v.vocab_size, 0);
    for (const auto* list : {&e.uncertain, &e.pop_uncertain}) {
      for (auto [lo, hi] : *list) {
        for (uint32_t i = lo; i < hi; ++i) by_id[v.sorted[i]] = 1;
      }
    }
    return by_id;
  };
  size_t layers = 0, bodies = 0;
  const size_t stride = ladle::testing::kSanitized ? 8 : 1;
  for (int32_t st = 0; st < static_cast<int32_t>(a.num_states()); ++st) {
    std::shared_ptr<const MaskEntry> slice = ClassifyLayer(a, v, st);
    if (slice) {
      ++layers;
    } else if (MaskEntry body; ClassifyStringBody(a, v, st, &body)) {
      ++bodies;
      slice = std::make_shared<const MaskEntry>(std::move(body));
    }
    if (!slice || (layers + bodies) % stride != 0) continue;
    const MaskEntry full = ClassifyState(a, v, st, TokenSpan::kAll);
    ASSERT_EQ(accepted(*slice), accepted(full)) << "state " << st;
    const auto acc = accepted(full), unc_full = uncertain(full), unc_slice = uncertain(*slice);
    for (size_t id = 0; id < v.vocab_size; ++id) {
      if (unc_full[id] && !acc[id]) ASSERT_TRUE(unc_slice[id]) << "state " << st << " id " << id;
    }
  }
  EXPECT_GE(layers, 50u);  // id's 20 boundaries and code's 36
  EXPECT_GE(bodies, 3u);
}


// A layered repeat followed by something that takes the same bytes: the tokens that need more
// layers than are left can go on after the frame pops, so the matcher must walk them (in a
// string they cannot: the closing quote takes no body byte, and the walk is skipped).
TEST(Mask, LayerTokensThatOutrunTheBoundAreWalkedWhenTheParentCanTakeThem) {
  const std::string path = ladle::testing::TokenizerPath();
  LADLE_REQUIRE_DATA(path);
  const std::shared_ptr<const TokenVocabulary> vocab = testing::LoadDeepSeek(path).vocab;
  ASSERT_TRUE(vocab);
  GrammarBuilder b;
  ExprId ch = b.Alt({b.CodePoints({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}),
                     b.Seq({b.Literal("\\"), b.Alt({b.Literal("n"), b.Literal("\\"), b.Literal("\"")})})});
  RuleId bounded = b.AddRule("bounded", b.Repeat(ch, 0, 40));
  RuleId root = b.AddRule("root", b.Alt({b.Seq({b.Literal("\""), b.Ref(bounded), b.Star(b.ByteRange('a', 'z')), b.Literal("\"")}),
                                         b.Seq({b.Literal("'"), b.Ref(bounded), b.Literal("\"")})}));
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto cg = CompiledGrammar::Compile(*g, vocab);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  ASSERT_EQ((*cg)->impl().automaton.layered.size(), 1u);
  const auto before = GetSharedMaskCacheStats();
  for (const std::string& prefix : {"\"" + std::string(36, 'x'), "\"" + std::string(39, 'q'), "'" + std::string(36, 'x'),
                                    "'" + std::string(38, 'q'), "\"\xc3\xa9\xc3\xa9" + std::string(33, 'x')}) {
    CheckTokenByToken(*cg, *vocab, prefix);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(GetSharedMaskCacheStats().layer_slices - before.layer_slices, 4u);
}

}  // namespace
}  // namespace ladle::grammar
