// Object key order (JsonSchemaOptions::key_order): kAny accepts every order of the listed
// keys (each at most once, required ones present; unlisted keys after them, reported) exactly
// up to 6 listed keys within a state budget; past that any order within groups, reported, and
// never a duplicate or a missing required key. kSchema keeps the old schema-order grammar. Each verdict is checked
// on the reference recognizer (the oracle over the IR) and on the compiled matcher, and the
// token-level masks on the DeepSeek vocabulary where the data is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"
#include "ladle/json/json.h"
#include "matcher_test_util.h"
#include "reference_recognizer.h"
#include "test_data.h"

namespace ladle::grammar {
namespace {

using Order = JsonSchemaOptions::KeyOrder;
constexpr JsonSchemaOptions::Whitespace kCompact = JsonSchemaOptions::Whitespace::kCompact;

// One schema compiled three ways: the IR with its report, the reference recognizer over it,
// and the automaton on the small test vocabulary.
struct Checked {
  Grammar g;
  CompileReport report;
  std::optional<ReferenceRecognizer> rec;
  std::shared_ptr<const CompiledGrammar> cg;

  // Both recognisers agree (a failure otherwise) and the verdict is returned.
  bool Accepts(const std::string& text) const {
    bool by_ref = rec->Matches(text);
    GrammarMatcher m(cg);
    bool by_matcher = m.AcceptString(text) && m.CanTerminate();
    EXPECT_EQ(by_ref, by_matcher) << "reference and matcher disagree on " << text;
    return by_ref;
  }
  bool Reported(std::string_view what) const {
    for (const auto& a : report.approximations) {
      if (a.what.find(what) != std::string::npos) return true;
    }
    return false;
  }
};

Checked Compile(const std::string& schema, JsonSchemaOptions opts = {.whitespace = kCompact}) {
  Checked c;
  auto v = json::Parse(schema);
  EXPECT_TRUE(v.ok()) << schema;
  auto g = JsonSchemaGrammar(*v, opts, &c.report);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().ToString();
  if (!g.ok()) return c;
  c.g = std::move(*g);
  auto rec = ReferenceRecognizer::Create(c.g);
  EXPECT_TRUE(rec.ok()) << rec.status().ToString();
  if (rec.ok()) c.rec.emplace(std::move(*rec));
  auto cg = CompiledGrammar::Compile(c.g, testing::SmallVocab());
  EXPECT_TRUE(cg.ok()) << cg.status().ToString();
  if (cg.ok()) c.cg = *cg;
  return c;
}

// {"p0":0,...} style schema: n integer properties, the first `required` of them required.
std::string Props(size_t n, size_t required, std::string_view extra = R"("additionalProperties":false)") {
  std::string props, req;
  for (size_t i = 0; i < n; ++i) {
    props += fmt::format(R"({}"p{}":{{"type":"integer"}})", i ? "," : "", i);
    if (i < required) req += fmt::format(R"({}"p{}")", i ? "," : "", i);
  }
  std::string out = fmt::format(R"({{"type":"object","properties":{{{}}},"required":[{}])", props, req);
  if (!extra.empty()) out += fmt::format(",{}", extra);
  return out + "}";
}

// An object text from member names (values are their index, so a wrong value type is not what
// is tested here).
std::string Object(const std::vector<std::string>& keys) {
  std::string out = "{";
  for (size_t i = 0; i < keys.size(); ++i) out += fmt::format(R"({}"{}":{})", i ? "," : "", keys[i], i);
  return out + "}";
}

std::vector<std::string> Names(const std::vector<size_t>& idx) {
  std::vector<std::string> out;
  for (size_t i : idx) out.push_back(fmt::format("p{}", i));
  return out;
}

TEST(JsonKeyOrder, EveryPermutationOfEverySubsetIsAccepted) {
  // 5 listed keys, p0 and p1 required: all 2^3 subsets of the optional ones × every order.
  Checked c = Compile(Props(5, 2));
  ASSERT_TRUE(c.cg);
  EXPECT_TRUE(c.report.approximations.empty()) << c.report.approximations[0].what;
  size_t accepted = 0;
  for (uint32_t mask = 0; mask < 32; ++mask) {
    std::vector<size_t> keys;
    for (size_t i = 0; i < 5; ++i) {
      if (mask >> i & 1) keys.push_back(i);
    }
    const bool valid = (mask & 3) == 3;
    do {
      EXPECT_EQ(c.Accepts(Object(Names(keys))), valid) << Object(Names(keys));
      accepted += valid;
    } while (std::next_permutation(keys.begin(), keys.end()));
  }
  EXPECT_EQ(accepted, 2u + 6 + 6 + 6 + 24 + 24 + 24 + 120);  // sum over subsets ⊇ {p0,p1} of |S|!
}

TEST(JsonKeyOrder, DuplicatesMissingRequiredAndUnlistedKeysAreRejected) {
  Checked c = Compile(Props(3, 1));
  ASSERT_TRUE(c.cg);
  EXPECT_TRUE(c.Accepts(R"({"p2":1,"p0":2})"));
  EXPECT_FALSE(c.Accepts(R"({"p0":1,"p0":2})"));
  EXPECT_FALSE(c.Accepts(R"({"p2":1,"p0":2,"p2":3})"));
  EXPECT_FALSE(c.Accepts(R"({"p1":1,"p0":2,"p1":3})"));
  EXPECT_FALSE(c.Accepts(R"({"p2":1,"p1":2})"));  // p0 missing
  EXPECT_FALSE(c.Accepts(R"({})"));
  EXPECT_FALSE(c.Accepts(R"({"p0":1,"z":2})"));  // additionalProperties false
  EXPECT_FALSE(c.Accepts(R"({"p1":"s","p0":2})"));  // the value schema still applies
  EXPECT_FALSE(c.Accepts(R"({"p1":1,"p0":2,})"));
  EXPECT_FALSE(c.Accepts(R"({,"p0":2})"));
}

TEST(JsonKeyOrder, UnlistedKeysComeAfterTheListedOnes) {
  Checked open = Compile(R"({"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"],
                               "additionalProperties":{"type":"boolean"}})");
  ASSERT_TRUE(open.cg);
  // Interleaving them made every member boundary a call into the unlisted-key loop: masks
  // 4-6x slower on MaskBench schemas (bench/grammar/README.md). A reported restriction.
  EXPECT_TRUE(open.Reported("unlisted keys only after the listed ones"));
  for (const char* ok : {R"({"b":"x"})", R"({"b":"x","z":true})", R"({"a":1,"b":"x","z":true,"y":false})",
                         R"({"b":"x","a":1,"z":true})"}) {
    EXPECT_TRUE(open.Accepts(ok)) << ok;
  }
  for (const char* bad : {R"({"b":"x","z":1})", R"({"b":"x","a":1,"a":2})", R"({"z":true,"a":1})",
                          R"({"b":"x","z":true,"b":"y"})", R"({"a":true,"b":"x"})",
                          R"({"z":true,"b":"x"})" /* the restriction */}) {
    EXPECT_FALSE(open.Accepts(bad)) << bad;
  }
  // Absent additionalProperties: anything unlisted (after); with the option off, none.
  Checked any = Compile(R"({"properties":{"a":{"type":"integer"},"b":{}}})");
  EXPECT_TRUE(any.Accepts(R"({"b":null,"a":1,"q":[1]})"));
  EXPECT_TRUE(any.Accepts(R"({"q":[1],"r":2})"));
  EXPECT_FALSE(any.Accepts(R"({"a":2,"q":[1],"a":1})"));
  EXPECT_FALSE(any.Accepts(R"({"a":2,"a":1})"));
  Checked closed = Compile(R"({"properties":{"a":{"type":"integer"},"b":{}}})",
                           {.whitespace = kCompact, .allow_unlisted_properties = false});
  EXPECT_FALSE(closed.Reported("unlisted"));
  EXPECT_TRUE(closed.Accepts(R"({"b":null,"a":1})"));
  EXPECT_FALSE(closed.Accepts(R"({"b":null,"a":1,"q":[1]})"));
  // patternProperties: pattern keys (after the listed ones), others per additionalProperties.
  Checked pat = Compile(R"({"properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
                            "patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false})");
  EXPECT_TRUE(pat.Accepts(R"({"b":2,"a":1,"x-1":"s","x-2":"t"})"));
  EXPECT_FALSE(pat.Accepts(R"({"b":2,"x-1":1})"));
  EXPECT_FALSE(pat.Accepts(R"({"b":2,"y":"s"})"));
}

TEST(JsonKeyOrder, PropertyCountsInAnyOrder) {
  Checked c = Compile(R"({"properties":{"a":{},"b":{},"c":{}},"minProperties":2,"maxProperties":3})");
  ASSERT_TRUE(c.cg);
  for (const char* ok : {R"({"b":1,"a":1})", R"({"c":1,"z":1})", R"({"c":1,"a":1,"z":1})", R"({"y":1,"z":1})",
                         R"({"c":1,"b":1,"a":1})"}) {
    EXPECT_TRUE(c.Accepts(ok)) << ok;
  }
  for (const char* bad : {R"({"b":1})", R"({"z":1})", R"({"c":1,"b":1,"a":1,"z":1})", R"({"x":1,"y":1,"z":1,"w":1})",
                          R"({"b":1,"b":1})", R"({})"}) {
    EXPECT_FALSE(c.Accepts(bad)) << bad;
  }
  // minProperties past the required count, no unlisted keys.
  Checked m = Compile(Props(4, 1, R"("additionalProperties":false,"minProperties":3)"));
  EXPECT_TRUE(m.Accepts(R"({"p3":1,"p0":1,"p2":1})"));
  EXPECT_FALSE(m.Accepts(R"({"p3":1,"p0":1})"));
  // Unsatisfiable counts compile to nothing, not to a loose grammar.
  Checked none = Compile(Props(3, 3, R"("maxProperties":2)"));
  EXPECT_FALSE(none.Accepts(R"({"p0":1,"p1":1,"p2":1})"));
  EXPECT_FALSE(none.Accepts(R"({"p0":1,"p1":1})"));
}

TEST(JsonKeyOrder, WhitespaceModesInAnyOrder) {
  const std::string s = R"({"properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a"]})";
  Checked pretty = Compile(s, {.whitespace = JsonSchemaOptions::Whitespace::kPretty});
  EXPECT_TRUE(pretty.Accepts("{\n  \"b\": 2,\n  \"a\": 1\n}"));
  EXPECT_TRUE(pretty.Accepts("{\n  \"a\": 1,\n  \"z\": []\n}"));
  EXPECT_FALSE(pretty.Accepts(R"({"b":2,"a":1})"));
  Checked bounded = Compile(s, {.whitespace = JsonSchemaOptions::Whitespace::kBounded, .max_whitespace = 4});
  EXPECT_TRUE(bounded.Accepts(R"({ "b" : 2 , "a" : 1 })"));
  EXPECT_TRUE(bounded.Accepts(R"({"b":2,"a":1})"));
  EXPECT_TRUE(bounded.Accepts("{ \"a\":1 ,\n\"z\" :null }"));
  EXPECT_FALSE(bounded.Accepts(R"({ "b" : 2 , "a" : 1 ,})"));
  EXPECT_FALSE(bounded.Accepts(R"({ "a" : 2      })"));  // past max_whitespace
  EXPECT_FALSE(bounded.Accepts(R"({ })"));                 // "a" is required
  EXPECT_FALSE(bounded.Accepts(R"({ "b" : 2 })"));
}

TEST(JsonKeyOrder, NestedAndDependentObjects) {
  Checked c = Compile(R"({"properties":{"outer":{"properties":{"x":{"type":"integer"},"y":{"type":"integer"}},
                          "required":["x","y"]},"n":{"type":"integer"}},"required":["outer"],
                          "dependentRequired":{"n":["outer"]}})");
  EXPECT_TRUE(c.Accepts(R"({"n":1,"outer":{"y":2,"x":1}})"));
  EXPECT_FALSE(c.Accepts(R"({"n":1,"outer":{"y":2}})"));
  EXPECT_FALSE(c.Accepts(R"({"outer":{"y":2,"x":1,"y":3}})"));
  Checked dep = Compile(R"({"properties":{"a":{},"b":{}},"dependentRequired":{"a":["b"]}})");
  EXPECT_TRUE(dep.Accepts(R"({"a":1,"b":2})"));
  EXPECT_TRUE(dep.Accepts(R"({"b":1,"a":2})"));
  EXPECT_FALSE(dep.Accepts(R"({"a":1})"));
  // Required names that `properties` does not list are keys like any other.
  Checked unlisted_req = Compile(R"({"properties":{"a":{}},"required":["r","a"]})");
  EXPECT_TRUE(unlisted_req.Accepts(R"({"r":1,"a":2})"));
  EXPECT_TRUE(unlisted_req.Accepts(R"({"r":2,"a":1,"q":0})"));
  EXPECT_FALSE(unlisted_req.Accepts(R"({"a":1,"r":2,"r":3})"));
  EXPECT_FALSE(unlisted_req.Accepts(R"({"a":1,"q":2})"));
}

// A random member list over names p0..p(n-1) plus "z" (unlisted), with duplicates and gaps.
std::vector<std::string> RandomMembers(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<size_t> len(0, n + 2), pick(0, n);
  std::vector<std::string> out;
  for (size_t i = len(rng); i > 0; --i) {
    size_t k = pick(rng);
    out.push_back(k == n ? fmt::format("z{}", i) : fmt::format("p{}", k));
  }
  return out;
}

// Valid, and in the order kAny generates: unlisted keys (z...) after the listed ones.
bool Valid(const std::vector<std::string>& keys, size_t required, bool unlisted_ok) {
  std::set<std::string> seen;
  bool after_unlisted = false;
  for (const auto& k : keys) {
    if (!seen.insert(k).second) return false;
    if (k[0] == 'z' && !unlisted_ok) return false;
    if (k[0] == 'p' && after_unlisted) return false;
    after_unlisted = after_unlisted || k[0] == 'z';
  }
  for (size_t i = 0; i < required; ++i) {
    if (!seen.count(fmt::format("p{}", i))) return false;
  }
  return true;
}

TEST(JsonKeyOrder, ExactUpToSixKeys) {
  std::mt19937 rng(12);
  for (bool unlisted : {false, true}) {
    Checked c = Compile(Props(6, 3, unlisted ? "" : R"("additionalProperties":false)"));
    ASSERT_TRUE(c.cg);
    EXPECT_FALSE(c.Reported("groups")) << c.report.approximations[0].what;
    for (int t = 0; t < 400; ++t) {
      auto keys = RandomMembers(rng, 6);
      EXPECT_EQ(c.Accepts(Object(keys)), Valid(keys, 3, unlisted)) << Object(keys);
    }
    std::vector<size_t> all(6);
    std::iota(all.begin(), all.end(), 0);
    for (int t = 0; t < 100; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      EXPECT_TRUE(c.Accepts(Object(Names(all)))) << Object(Names(all));
    }
  }
}

TEST(JsonKeyOrder, PastTheBoundGroupsAreSoundAndReported) {
  std::mt19937 rng(7);
  for (size_t n : {7, 9, 12, 40}) {
    Checked c = Compile(Props(n, n / 3));
    ASSERT_TRUE(c.cg) << n;
    EXPECT_TRUE(c.Reported("any order within consecutive groups of")) << n;
    // Sound: whatever is accepted is a valid object.
    size_t accepted = 0;
    for (int t = 0; t < 400; ++t) {
      auto keys = RandomMembers(rng, n);
      bool ok = c.Accepts(Object(keys));
      accepted += ok;
      if (ok) {
        EXPECT_TRUE(Valid(keys, n / 3, false)) << Object(keys);
      }
    }
    // Schema order is always in, and so is any order inside the first group (at least 2 keys).
    std::vector<size_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_TRUE(c.Accepts(Object(Names(all))));
    std::swap(all[0], all[1]);
    EXPECT_TRUE(c.Accepts(Object(Names(all))));
    EXPECT_FALSE(c.Accepts(Object(Names({0, 1, 0}))));
  }
}

TEST(JsonKeyOrder, TheSchemaBudgetIsSpentInDocumentOrder) {
  // Four 6-key objects: each exact one spends 64 - 12 states of the schema's 128 past the
  // free two-a-key baseline, so the first two are exact and the later ones get groups.
  std::string inner;
  for (int i = 0; i < 6; ++i) inner += fmt::format(R"({}"k{}":{{"type":"integer"}})", i ? "," : "", i);
  std::string props;
  for (int o = 0; o < 4; ++o) {
    props += fmt::format(R"({}"o{}":{{"type":"object","properties":{{{}}},"additionalProperties":false}})", o ? "," : "", o,
                         inner);
  }
  Checked c = Compile(fmt::format(R"({{"type":"object","properties":{{{}}},"required":["o0","o1","o2","o3"],
                                     "additionalProperties":false}})", props));
  ASSERT_TRUE(c.cg);
  auto grouped = [&](int o) {
    for (const auto& a : c.report.approximations) {
      if (a.path == fmt::format("/properties/o{}/properties", o) && a.what.find("groups") != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_FALSE(grouped(0));
  EXPECT_FALSE(grouped(1));
  EXPECT_TRUE(grouped(2));
  EXPECT_TRUE(grouped(3));
  const std::string rev = R"({"k5":5,"k4":4,"k3":3,"k2":2,"k1":1,"k0":0})";
  const std::string fwd = R"({"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5})";
  EXPECT_TRUE(c.Accepts(fmt::format(R"({{"o1":{0},"o0":{0},"o2":{1},"o3":{1}}})", rev, fwd)));
  EXPECT_FALSE(c.Accepts(fmt::format(R"({{"o0":{0},"o1":{0},"o2":{0},"o3":{1}}})", rev, fwd)));  // o2 grouped
  EXPECT_FALSE(c.Accepts(fmt::format(R"({{"o0":{0},"o1":{0},"o2":{1},"o3":{1},"o0":{1}}})", rev, fwd)));
}

TEST(JsonKeyOrder, ManyOptionalKeysStaySmall) {
  // automaton_test's 131-property chain: past the object's state budget, groups of two (as
  // cheap as schema order: two states a key), reported; grammar and automaton stay linear.
  std::string props;
  for (int i = 0; i < 131; ++i) props += fmt::format("{}\"p{}\":{{\"type\":[\"string\",\"null\"]}}", i ? "," : "", i);
  auto v = json::Parse(fmt::format(R"({{"type":"object","additionalProperties":false,"properties":{{{}}}}})", props));
  ASSERT_TRUE(v.ok());
  CompileReport report;
  auto g = JsonSchemaGrammar(*v, {.whitespace = kCompact}, &report);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_LT(g->exprs.size(), 10000u);
  bool reported = false;
  for (const auto& a : report.approximations) reported = reported || a.what.find("groups of 2,") != std::string::npos;
  EXPECT_TRUE(reported);
  CompileOptions opts;
  opts.max_memory_bytes = 32 << 20;
  auto cg = CompiledGrammar::Compile(*g, testing::SmallVocab(), opts);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  EXPECT_LT((*cg)->MemoryBytes(), size_t{4} << 20);
  GrammarMatcher m(*cg);
  EXPECT_TRUE(m.AcceptString(R"({"p0":null,"p1":"a","p130":"z"})") && m.CanTerminate());
  GrammarMatcher swapped(*cg);
  EXPECT_TRUE(swapped.AcceptString(R"({"p1":"a","p0":null})") && swapped.CanTerminate());
  GrammarMatcher across(*cg);  // p2 is in the second group
  EXPECT_FALSE(across.AcceptString(R"({"p2":"a","p0":null})") && across.CanTerminate());
  GrammarMatcher dup(*cg);
  EXPECT_FALSE(dup.AcceptString(R"({"p1":"a","p0":null,"p1":"z"})") && dup.CanTerminate());
}

TEST(JsonKeyOrder, SchemaOrderIsTheExplicitOption) {
  JsonSchemaOptions o{.whitespace = kCompact, .key_order = Order::kSchema};
  Checked c = Compile(Props(3, 1, R"("additionalProperties":true)"), o);
  EXPECT_TRUE(c.Reported("properties in schema order only"));
  EXPECT_TRUE(c.Accepts(R"({"p0":1,"p2":2,"z":3})"));
  EXPECT_FALSE(c.Accepts(R"({"p2":2,"p0":1})"));
  EXPECT_FALSE(c.Accepts(R"({"z":3,"p0":1})"));  // unlisted keys last
  Checked any = Compile(Props(3, 1, R"("additionalProperties":true)"));
  EXPECT_FALSE(any.Reported("schema order"));
  EXPECT_TRUE(any.Accepts(R"({"p2":2,"p0":1})"));
  EXPECT_TRUE(any.Accepts(R"({"p2":2,"p0":1,"z":3})"));
}

// Token by token on the real vocabulary: the mask allows each token of every order.
TEST(JsonKeyOrder, MasksAllowEveryOrderOnTheDeepSeekVocabulary) {
  LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
  const auto& ds = testing::LoadDeepSeek(ladle::testing::TokenizerPath());
  ASSERT_TRUE(ds.vocab);
  auto v = json::Parse(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                           "tags":{"type":"array","items":{"type":"string"}},"ok":{"type":"boolean"}},
                           "required":["name","age"]})");
  ASSERT_TRUE(v.ok());
  auto g = JsonSchemaGrammar(*v, {});
  ASSERT_TRUE(g.ok());
  auto cg = CompiledGrammar::Compile(*g, ds.vocab);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  std::vector<std::string> members = {R"("name": "Ann")", R"("age": 41)", R"("tags": ["a", "b"])", R"("ok": true)"};
  std::vector<size_t> idx = {0, 1, 2, 3};
  std::vector<uint64_t> bits(((*cg)->vocab().vocab_size() + 63) / 64);
  do {
    std::string text = "{";
    for (size_t i = 0; i < idx.size(); ++i) text += (i ? ", " : "") + members[idx[i]];
    text += "}";
    GrammarMatcher m(*cg);
    bool all = true;
    for (uint32_t id : ds.tok->EncodePlain(text)) {
      m.FillNextTokenMask(bits.data());
      bool bit = (bits[id / 64] >> (id % 64)) & 1;
      bool acc = m.AcceptToken(id);
      EXPECT_EQ(bit, acc) << text;
      if (!bit || !acc) {
        all = false;
        break;
      }
    }
    EXPECT_TRUE(all && m.CanTerminate()) << text;
  } while (std::next_permutation(idx.begin(), idx.end()));
}

}  // namespace
}  // namespace ladle::grammar
