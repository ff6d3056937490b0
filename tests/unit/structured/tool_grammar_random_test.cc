// Random tool schemas: whatever mix of property types, enums, type lists, nesting and
// required sets a tool has, sampled turns of every version parse into calls whose arguments
// are valid against it. Catches mapping gaps the hand-picked test tools do not reach.
#include <gtest/gtest.h>

#include "tool_grammar_test_util.h"

namespace ladle::structured {
namespace {

using namespace tool_test;  // NOLINT: test helpers

class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}

  json::Value Object(int depth) {
    static const char* kKeys[] = {"a", "name", "with space", "ü", "x_y", "名前", "n1", "list", "obj", "flag"};
    json::Value props = json::Value::MakeObject();
    json::Value req = json::Value::MakeArray();
    const int n = static_cast<int>(rng_() % 4) + (depth == 0 ? 1 : 0);
    for (int i = 0; i < n; ++i) {
      std::string key = kKeys[rng_() % std::size(kKeys)];
      if (props.Find(key) != nullptr) continue;
      props.Set(key, Value(depth));
      if (rng_() % 2) req.as_array().push_back(json::Value::String(key));
    }
    json::Value o = json::Value::MakeObject();
    o.Set("type", json::Value::String("object"));
    o.Set("properties", std::move(props));
    if (!req.as_array().empty()) o.Set("required", std::move(req));
    if (rng_() % 2) o.Set("additionalProperties", json::Value::Bool(false));
    return o;
  }

 private:
  json::Value Parse(std::string_view s) { return *json::Parse(s); }

  json::Value Value(int depth) {
    switch (rng_() % (depth < 2 ? 11 : 8)) {
      case 0: return Parse(R"({"type":"string"})");
      case 1: return Parse(R"({"type":"string","description":"free text"})");
      case 2: return Parse(R"({"type":"integer","minimum":-5,"maximum":500})");
      case 3: return Parse(R"({"type":"number","minimum":0,"maximum":1})");
      case 4: return Parse(R"({"type":"boolean"})");
      case 5: return Parse(R"({"enum":["red","green","blue"]})");
      case 6: return Parse(R"({"type":["string","null"]})");
      case 7: return Parse(R"({"type":"string","maxLength":5})");
      case 8: return Parse(R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"maxItems":4})");
      case 9: return Object(depth + 1);
      default: return Parse(R"({"enum":[1,"two",null]})");
    }
  }

  std::mt19937_64 rng_;
};

TEST(ToolGrammarRandom, RandomSchemasRoundTrip) {
  LADLE_REQUIRE_DATA(testing::TokenizerPath());
  ASSERT_NE(BaseTokenizer(), nullptr);
  SchemaGen gen(2026);
  int calls = 0;
  for (int round = 0; round < 12; ++round) {
    std::vector<Tool> tools;
    for (int t = 0; t < 3; ++t) {
      Tool tool;
      tool.name = "tool_" + std::to_string(round) + "_" + std::to_string(t);
      tool.parameters = gen.Object(0);
      tool.strict = t == 0;
      tools.push_back(std::move(tool));
    }
    for (ModelVersion v : kVersions) {
      SCOPED_TRACE(std::string(frontend::ModelVersionName(v)) + " round " + std::to_string(round));
      ToolGrammarOptions opts;
      opts.version = v;
      opts.json.allow_unlisted_properties = false;  // keeps numbers in simdjson's range
      auto tg = BuildToolCallGrammar(tools, Required(), true, opts);
      ASSERT_TRUE(tg.ok()) << tg.status().ToString();
      auto vtok = frontend::TokenizerForVersion(*BaseTokenizer(), v);
      Sampler sampler(tg->turn, 77 + round);
      for (int i = 0; i < 6; ++i) {
        const std::vector<Symbol> syms = sampler.Sample(300);
        const Parsed p = Parse(v, false, Render(syms, *vtok), false);
        const std::string shown = Show(syms);
        EXPECT_FALSE(p.malformed) << shown;
        ASSERT_FALSE(p.calls.empty()) << shown;
        for (const Call& c : p.calls) {
          auto args = json::Parse(c.args);
          ASSERT_TRUE(args.ok()) << c.args << "\nfrom " << shown;
          std::string why;
          EXPECT_TRUE(Validate(*args, *SchemaOf(tools, c.name), "", &why))
              << why << "\nschema " << json::Dump(*SchemaOf(tools, c.name)) << "\nargs " << c.args << "\nfrom " << shown;
          ++calls;
        }
      }
    }
  }
  EXPECT_GT(calls, 200);
}

}  // namespace
}  // namespace ladle::structured
