// Tool-call grammars against the real output parser: for every version and tool_choice,
// random sentences of the grammar, tokenized as the model would emit them (control tokens by
// id, text as plain BPE), must parse back into tool calls of allowed tools whose arguments are
// JSON matching the schema; and strings that break the format must be rejected by the
// reference recognizer (src/grammar/reference_recognizer.h).
#include "ladle/structured/tool_grammar.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "ladle/frontend/encoder.h"
#include "tool_grammar_internal.h"
#include "tool_grammar_test_util.h"

namespace ladle::structured {
namespace {

using namespace tool_test;  // NOLINT: test helpers
class ToolGrammarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LADLE_REQUIRE_DATA(testing::TokenizerPath());
    ASSERT_NE(BaseTokenizer(), nullptr);
  }
};

// The heart of it: sampled turns parse into exactly the calls the grammar promises.
TEST_F(ToolGrammarTest, SampledTurnsParseIntoValidCalls) {
  int total = 0, with_calls = 0, free_text = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.label);
    const std::vector<Tool> tools = TestTools(c.strict);
    ToolGrammarOptions opts;
    opts.version = c.version;
    opts.ends_in_thinking = c.thinking;
    // Unlisted keys would take any value, and an unbounded number can overflow a double,
    // which json::Parse (simdjson) refuses although it is valid JSON text.
    opts.json.allow_unlisted_properties = false;
    auto tg = BuildToolCallGrammar(tools, c.choice, c.parallel, opts);
    ASSERT_TRUE(tg.ok()) << tg.status().ToString();
    ASSERT_EQ(tg->kind, ToolConstraintKind::kTurn);
    auto rec = grammar::ReferenceRecognizer::Create(tg->turn);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    auto vtok = frontend::TokenizerForVersion(*BaseTokenizer(), c.version);
    ASSERT_TRUE(vtok.ok());
    Sampler sampler(tg->turn, 1234 + total);
    for (int i = 0; i < 24; ++i, ++total) {
      const std::vector<Symbol> syms = sampler.Sample(i % 3 == 0 ? 60 : 400);
      const std::string shown = Show(syms);
      ASSERT_TRUE(rec->Matches(syms)) << "sampler left the grammar: " << shown;
      const auto ids = Render(syms, *vtok);
      const Parsed p = Parse(c.version, c.thinking, ids, /*token_by_token=*/false);
      EXPECT_FALSE(p.malformed) << shown;
      if (tg->forced) {
        ASSERT_FALSE(p.calls.empty()) << shown;
        EXPECT_EQ(p.content.find_first_not_of("\n"), std::string::npos) << "content in a forced turn: " << shown;
      }
      if (!c.parallel || c.choice.mode == ToolChoice::Mode::kNamed) {
        EXPECT_LE(p.calls.size(), 1u) << shown;
      }
      if (p.calls.empty()) {
        ++free_text;
        EXPECT_EQ(p.finish, frontend::FinishReason::kStop);
      } else {
        ++with_calls;
        EXPECT_EQ(p.finish, frontend::FinishReason::kToolCalls) << shown;
      }
      for (const Call& call : p.calls) {
        EXPECT_NE(std::find(tg->allowed.begin(), tg->allowed.end(), call.name), tg->allowed.end())
            << call.name << " in " << shown;
        auto args = json::Parse(call.args);
        ASSERT_TRUE(args.ok()) << "arguments not JSON: " << call.args << "\nfrom " << shown;
        ASSERT_TRUE(args->is_object()) << call.args;
        const json::Value* schema = SchemaOf(tools, call.name);
        ASSERT_NE(schema, nullptr);
        std::string why;
        if (!schema->is_null()) {
          EXPECT_TRUE(Validate(*args, *schema, "", &why)) << why << "\nargs " << call.args << "\nfrom " << shown;
        } else {
          EXPECT_TRUE(args->as_object().empty()) << call.args;
        }
      }
      // Chunking never matters to the parser; check the token-by-token path on some samples.
      if (i % 6 == 0) {
        const Parsed q = Parse(c.version, c.thinking, ids, /*token_by_token=*/true);
        EXPECT_EQ(q.calls.size(), p.calls.size()) << shown;
        for (size_t k = 0; k < std::min(p.calls.size(), q.calls.size()); ++k) {
          EXPECT_EQ(q.calls[k].args, p.calls[k].args);
        }
      }
    }
  }
  EXPECT_GT(with_calls, total / 2);
  EXPECT_GT(free_text, 0);  // auto turns produced answers without calls too
}

// Free text is text: what the grammar allows before the calls comes back as reasoning and
// content, unchanged.
TEST_F(ToolGrammarTest, FreeTextSurvivesParsing) {
  for (ModelVersion v : kVersions) {
    for (bool thinking : {false, true}) {
      SCOPED_TRACE(std::string(frontend::ModelVersionName(v)) + (thinking ? " thinking" : ""));
      ToolGrammarOptions opts;
      opts.version = v;
      opts.ends_in_thinking = thinking;
      auto tg = BuildToolCallGrammar(TestTools(true), ToolChoice{}, true, opts);
      ASSERT_TRUE(tg.ok()) << tg.status().ToString();
      auto vtok = frontend::TokenizerForVersion(*BaseTokenizer(), v);
      Sampler sampler(tg->turn, 99);
      int checked = 0;
      for (int i = 0; i < 200 && checked < 20; ++i) {
        const std::vector<Symbol> syms = sampler.Sample(200);
        if (std::any_of(syms.begin(), syms.end(), [&](const Symbol& s) {
              return s.special && (!thinking || s.value != frontend::SpecialTokensFor(v).end_think.value_or(0));
            })) {
          continue;  // has calls
        }
        std::string text = Show(syms), reasoning;
        if (thinking) {
          const bool token = frontend::SpecialTokensFor(v).end_think.has_value();
          const std::string marker = token ? "<[" + std::to_string(*frontend::SpecialTokensFor(v).end_think) + "]>"
                                           : std::string("</think>");
          const size_t at = text.find(marker);
          ASSERT_NE(at, std::string::npos) << text;
          reasoning = text.substr(0, at);
          text = text.substr(at + marker.size());
        }
        if (v == ModelVersion::kV32 && text.find("<｜DSML｜") != std::string::npos) continue;  // a block
        const Parsed p = Parse(v, thinking, Render(syms, *vtok), false);
        EXPECT_TRUE(p.calls.empty());
        EXPECT_EQ(p.content, text);
        EXPECT_EQ(p.reasoning, reasoning);
        ++checked;
      }
      EXPECT_GT(checked, 3);
    }
  }
}


grammar::ReferenceRecognizer Recognizer(ModelVersion v, bool thinking, const ToolChoice& choice, bool parallel = true,
                                        bool strict = false) {
  ToolGrammarOptions opts;
  opts.version = v;
  opts.ends_in_thinking = thinking;
  auto tg = BuildToolCallGrammar(TestTools(strict), choice, parallel, opts);
  EXPECT_TRUE(tg.ok()) << tg.status().ToString();
  auto rec = grammar::ReferenceRecognizer::Create(tg->turn);
  EXPECT_TRUE(rec.ok()) << rec.status().ToString();
  return std::move(rec).value();
}

TEST_F(ToolGrammarTest, V31Format) {
  const auto rec = Recognizer(ModelVersion::kV31, false, Required());
  auto call = [](Syms& s, std::string_view name, std::string_view args) -> Syms& {
    return s.K(kCallBegin).T(name).K(kSep).T(args).K(kCallEnd);
  };
  Syms ok;
  ok.K(kCallsBegin);
  call(ok, "get_weather", R"({"city": "Paris", "days": 3})");
  call(ok, "ping", "{}");
  ok.K(kCallsEnd);
  EXPECT_TRUE(rec.Matches(ok.s));
  const Parsed p = Parse(ModelVersion::kV31, false, Render(ok.s, *frontend::TokenizerForVersion(*BaseTokenizer(), ModelVersion::kV31)), false);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].args, R"({"city": "Paris", "days": 3})");

  Syms bad_name, missing_key, wrong_type, as_text, no_close, content_first, after_close, sep_between;
  call(bad_name.K(kCallsBegin), "get_wether", R"({"city": "Paris"})").K(kCallsEnd);
  call(missing_key.K(kCallsBegin), "get_weather", R"({"days": 3})").K(kCallsEnd);
  call(wrong_type.K(kCallsBegin), "get_weather", R"({"city": 3})").K(kCallsEnd);
  as_text.T("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>ping<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  call(no_close.K(kCallsBegin), "ping", "{}");
  call(content_first.T("Sure.").K(kCallsBegin), "ping", "{}").K(kCallsEnd);
  call(after_close.K(kCallsBegin), "ping", "{}").K(kCallsEnd).T("done");
  call(call(sep_between.K(kCallsBegin), "ping", "{}").T("\n"), "ping", "{}").K(kCallsEnd);
  for (const auto& [what, s] : std::vector<std::pair<std::string, Syms>>{{"unknown tool", bad_name},
                                                                        {"missing required", missing_key},
                                                                        {"wrong type", wrong_type},
                                                                        {"markers as text", as_text},
                                                                        {"unclosed section", no_close},
                                                                        {"content before forced call", content_first},
                                                                        {"text after the section", after_close},
                                                                        {"separator between calls", sep_between}}) {
    EXPECT_FALSE(rec.Matches(s.s)) << what;
  }
  // One call only without parallel_tool_calls.
  const auto single = Recognizer(ModelVersion::kV31, false, Required(), /*parallel=*/false);
  Syms one, two;
  call(one.K(kCallsBegin), "ping", "{}").K(kCallsEnd);
  call(call(two.K(kCallsBegin), "ping", "{}"), "ping", "{}").K(kCallsEnd);
  EXPECT_TRUE(single.Matches(one.s));
  EXPECT_FALSE(single.Matches(two.s));
  // Thinking: the reasoning must be closed by the </think> token before the calls.
  const auto think = Recognizer(ModelVersion::kV31, true, Required());
  Syms closed, unclosed, text_close;
  call(closed.T("let me see").K(128799).K(kCallsBegin), "ping", "{}").K(kCallsEnd);
  call(unclosed.T("let me see").K(kCallsBegin), "ping", "{}").K(kCallsEnd);
  call(text_close.T("let me see</think>").K(kCallsBegin), "ping", "{}").K(kCallsEnd);
  EXPECT_TRUE(think.Matches(closed.s));
  EXPECT_FALSE(think.Matches(unclosed.s));
  EXPECT_FALSE(think.Matches(text_close.s));
}

TEST_F(ToolGrammarTest, V3AndR1Format) {
  const auto rec = Recognizer(ModelVersion::kV3, false, Required());
  auto call = [](Syms& s, std::string_view name, std::string_view args) -> Syms& {
    return s.K(kCallBegin).T("function").K(kSep).T(name).T("\n```json\n").T(args).T("\n```").K(kCallEnd);
  };
  Syms ok, no_fence, no_type, no_newline;
  call(call(ok.K(kCallsBegin), "get_weather", R"({"city": "Paris"})").T("\n"), "ping", "{}").K(kCallsEnd);
  EXPECT_TRUE(rec.Matches(ok.s)) << Show(ok.s);
  no_fence.K(kCallsBegin).K(kCallBegin).T("function").K(kSep).T("ping\n{}").K(kCallEnd).K(kCallsEnd);
  no_type.K(kCallsBegin).K(kCallBegin).K(kSep).T("ping\n```json\n{}\n```").K(kCallEnd).K(kCallsEnd);
  call(call(no_newline.K(kCallsBegin), "ping", "{}"), "ping", "{}").K(kCallsEnd);
  EXPECT_FALSE(rec.Matches(no_fence.s));
  EXPECT_FALSE(rec.Matches(no_type.s));
  EXPECT_FALSE(rec.Matches(no_newline.s));
  // R1 reasoning is closed by the text </think>, and cannot contain it before that.
  const auto r1 = Recognizer(ModelVersion::kR1, true, Required());
  Syms good, twice;
  call(good.T("\nhmm <thin </thinking\n</think>\n\n").K(kCallsBegin), "ping", "{}").K(kCallsEnd);
  call(twice.T("a</think>b</think>").K(kCallsBegin), "ping", "{}").K(kCallsEnd);
  EXPECT_FALSE(r1.Matches(twice.s));
  // The blank line models write after </think> is allowed, other content is not.
  EXPECT_TRUE(r1.Matches(good.s)) << Show(good.s);
  Syms chatty;
  call(chatty.T("ok</think>Calling.").K(kCallsBegin), "ping", "{}").K(kCallsEnd);
  EXPECT_FALSE(r1.Matches(chatty.s));
}

// ｜DSML｜ as the V4 token or V3.2 text.
Syms& D(Syms& s, bool token) { return token ? s.K(128825) : s.T("｜DSML｜"); }

Syms DsmlTurn(bool v4, const std::vector<std::pair<std::string, std::string>>& invokes, std::string_view lead = "\n\n") {
  Syms s;
  const std::string block = v4 ? "tool_calls>" : "function_calls>";
  s.T(lead).T("<");
  D(s, v4).T(block + "\n");
  for (size_t i = 0; i < invokes.size(); ++i) {
    if (i > 0) s.T("\n");
    s.T("<");
    D(s, v4).T("invoke name=\"" + invokes[i].first + "\">").T(invokes[i].second).T("</");
    D(s, v4).T("invoke>");
  }
  s.T("\n</");
  D(s, v4).T(block);
  return s;
}

// One parameter element followed by "\n" (the body's form).
std::string Param(bool v4, std::string_view key, bool is_string, std::string_view value) {
  const std::string dsml = v4 ? "\x01" : "｜DSML｜";  // \x01 marks where the V4 token goes
  return std::string("<") + dsml + "parameter name=\"" + std::string(key) + "\" string=\"" +
         (is_string ? "true" : "false") + "\">" + std::string(value) + "</" + dsml + "parameter>\n";
}

// Turns Param()'s \x01 markers into the V4 token.
Syms Expand(const Syms& in) {
  Syms out;
  for (const Symbol& s : in.s) {
    if (!s.special && s.value == 1) {
      out.K(128825);
    } else {
      out.s.push_back(s);
    }
  }
  return out;
}

TEST_F(ToolGrammarTest, DsmlFormat) {
  for (bool v4 : {false, true}) {
    const ModelVersion v = v4 ? ModelVersion::kV4 : ModelVersion::kV32;
    SCOPED_TRACE(frontend::ModelVersionName(v));
    const auto rec = Recognizer(v, false, Required());
    auto vtok = frontend::TokenizerForVersion(*BaseTokenizer(), v);
    const std::string weather = "\n" + Param(v4, "city", true, "São Paulo \"centro\"\nnorth") +
                                Param(v4, "unit", true, "celsius") + Param(v4, "days", false, "3");
    const Syms ok = Expand(DsmlTurn(v4, {{"get_weather", weather}, {"ping", "\n\n"}}));
    EXPECT_TRUE(rec.Matches(ok.s)) << Show(ok.s);
    const Parsed p = Parse(v, false, Render(ok.s, *vtok), false);
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].args, R"({"city": "São Paulo \"centro\"\nnorth", "unit": "celsius", "days": 3})");
    EXPECT_EQ(p.calls[1].args, "{}");
    EXPECT_EQ(p.finish, frontend::FinishReason::kToolCalls);

    const std::vector<std::pair<std::string, std::string>> bad = {
        {"required parameter missing", "\n" + Param(v4, "days", false, "3")},
        {"schema order", "\n" + Param(v4, "days", false, "3") + Param(v4, "city", true, "x")},
        {"unknown parameter", "\n" + Param(v4, "city", true, "x") + Param(v4, "country", true, "y")},
        {"string=false for an integer that is not one", "\n" + Param(v4, "city", true, "x") + Param(v4, "days", false, "three")},
        {"enum value", "\n" + Param(v4, "city", true, "x") + Param(v4, "unit", true, "kelvin")},
        {"integer as a string", "\n" + Param(v4, "city", true, "x") + Param(v4, "days", true, "3")},
        {"no newline after the tag", Param(v4, "city", true, "x")},
    };
    for (const auto& [what, body] : bad) {
      EXPECT_FALSE(rec.Matches(Expand(DsmlTurn(v4, {{"get_weather", body}})).s)) << what;
    }
    EXPECT_FALSE(rec.Matches(Expand(DsmlTurn(v4, {{"get_wether", "\n" + Param(v4, "city", true, "x")}})).s));
    EXPECT_FALSE(rec.Matches(Expand(DsmlTurn(v4, {{"ping", "\n\n"}}, "Sure.\n\n")).s)) << "content in a forced turn";
    EXPECT_TRUE(rec.Matches(Expand(DsmlTurn(v4, {{"ping", "\n\n"}}, "")).s)) << "no blank line is fine";
    if (v4) {
      // The markup spelled with ordinary text is not a V4 tool call.
      Syms text = DsmlTurn(false, {{"ping", "\n\n"}});
      EXPECT_FALSE(rec.Matches(text.s));
    } else {
      // V3.2: a raw string cannot contain the closer the parser would stop at.
      const std::string body = "\n" + Param(false, "city", true, "a</｜DSML｜parameter>b");
      EXPECT_FALSE(rec.Matches(DsmlTurn(false, {{"get_weather", body}}).s));
      const std::string near = "\n" + Param(false, "city", true, "a</｜DSML｜param <｜DSML｜parameter>b");
      EXPECT_TRUE(rec.Matches(DsmlTurn(false, {{"get_weather", near}}).s));
    }
    // A string with a pattern is written as a JSON string (string="false"), which the schema
    // compiler constrains exactly and the parser passes through.
    const std::string coded = "\n" + Param(v4, "city", true, "Paris") + Param(v4, "country", false, "\"FR\"");
    const Syms coded_turn = Expand(DsmlTurn(v4, {{"get_weather", coded}}));
    EXPECT_TRUE(rec.Matches(coded_turn.s));
    const Parsed pc = Parse(v, false, Render(coded_turn.s, *vtok), false);
    ASSERT_EQ(pc.calls.size(), 1u);
    EXPECT_EQ(pc.calls[0].args, R"({"city": "Paris", "country": "FR"})");
    EXPECT_FALSE(rec.Matches(
        Expand(DsmlTurn(v4, {{"get_weather", "\n" + Param(v4, "city", true, "Paris") + Param(v4, "country", false, "\"Fr\"")}}))
            .s));
    EXPECT_FALSE(rec.Matches(
        Expand(DsmlTurn(v4, {{"get_weather", "\n" + Param(v4, "city", true, "Paris") + Param(v4, "days", false, "17")}}))
            .s));
    // Mixed-type parameter: raw string or JSON null.
    const std::string mode_null = "\n" + Param(v4, "mode", true, "fast") + Param(v4, "note", false, "null");
    const std::string mode_text = "\n" + Param(v4, "mode", true, "safe") + Param(v4, "note", true, "n/a");
    EXPECT_TRUE(rec.Matches(Expand(DsmlTurn(v4, {{"set_mode", mode_null}})).s));
    EXPECT_TRUE(rec.Matches(Expand(DsmlTurn(v4, {{"set_mode", mode_text}})).s));
  }
}

// auto with strict tools: free text, then optionally calls.
TEST_F(ToolGrammarTest, AutoAllowsTextThenCalls) {
  const auto rec = Recognizer(ModelVersion::kV32, false, ToolChoice{}, true, /*strict=*/true);
  EXPECT_TRUE(rec.Matches(Syms{}.T("Just an answer.").s));
  EXPECT_TRUE(rec.Matches(Syms{}.s));
  EXPECT_TRUE(rec.Matches(DsmlTurn(false, {{"ping", "\n\n"}}, "Let me check.\n\n").s));
  // Free text cannot open a section the grammar does not constrain.
  EXPECT_FALSE(rec.Matches(Syms{}.T("x <｜DSML｜function_calls> y").s));
  EXPECT_FALSE(rec.Matches(Syms{}.T("x <｜DSML｜invoke name=\"ping\">").s));
  EXPECT_TRUE(rec.Matches(Syms{}.T("x <｜DSML｜function_call> y <｜DSML｜invoke").s));
  // Nothing after the calls.
  Syms after = DsmlTurn(false, {{"ping", "\n\n"}}, "");
  after.T("more");
  EXPECT_FALSE(rec.Matches(after.s));
}

TEST_F(ToolGrammarTest, ChoiceModes) {
  ToolGrammarOptions opts;
  opts.version = ModelVersion::kV4;
  ToolChoice none;
  none.mode = ToolChoice::Mode::kNone;
  auto g = BuildToolCallGrammar(TestTools(), none, true, opts);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->kind, ToolConstraintKind::kNone);

  g = BuildToolCallGrammar(TestTools(), ToolChoice{}, true, opts);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->kind, ToolConstraintKind::kLazy);
  ASSERT_EQ(g->triggers.size(), 1u);
  EXPECT_EQ(g->triggers[0].token_id, 128825u);
  EXPECT_EQ(g->triggers[0].text, "<");

  ToolChoice named;
  named.mode = ToolChoice::Mode::kNamed;
  named.name = "nope";
  EXPECT_FALSE(BuildToolCallGrammar(TestTools(), named, true, opts).ok());
  named.name = "ping";
  g = BuildToolCallGrammar(TestTools(), named, true, opts);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->forced);
  EXPECT_EQ(g->allowed, std::vector<std::string>{"ping"});

  ToolChoice allowed;
  allowed.mode = ToolChoice::Mode::kAllowed;
  allowed.allowed = {"search"};
  g = BuildToolCallGrammar(TestTools(), allowed, true, opts);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->forced);
  EXPECT_EQ(g->allowed, std::vector<std::string>{"search"});

  EXPECT_FALSE(BuildToolCallGrammar({MakeTool("bad name", "")}, Required(), true, opts).ok());
  EXPECT_FALSE(BuildToolCallGrammar({}, Required(), true, opts).ok());
}

// Lazy (auto) triggers: after the trigger, `after` constrains the rest of the block.
TEST_F(ToolGrammarTest, TriggersConstrainTheRestOfTheBlock) {
  for (ModelVersion v : kVersions) {
    SCOPED_TRACE(frontend::ModelVersionName(v));
    ToolGrammarOptions opts;
    opts.version = v;
    auto g = BuildToolCallGrammar(TestTools(), ToolChoice{}, true, opts);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_EQ(g->kind, ToolConstraintKind::kLazy);
    ASSERT_FALSE(g->triggers.empty());
    const auto forced_rec = Recognizer(v, false, Required());
    // A forced turn starts with the trigger; what follows it must be accepted by `after`.
    auto forced = BuildToolCallGrammar(TestTools(), Required(), true, opts);
    Sampler sampler(forced->turn, 7);
    const ToolCallTrigger& t = g->triggers[0];
    auto rec = grammar::ReferenceRecognizer::Create(t.after);
    ASSERT_TRUE(rec.ok());
    for (int i = 0; i < 20; ++i) {
      std::vector<Symbol> s = sampler.Sample(300);
      size_t skip = 0;
      if (t.token_id) {
        while (skip < s.size() && !(s[skip].special && s[skip].value == *t.token_id)) ++skip;
        ++skip;
      } else {
        const std::string shown = Show(s);
        skip = shown.find(t.text) + t.text.size();
      }
      ASSERT_LE(skip, s.size());
      std::vector<Symbol> rest(s.begin() + static_cast<std::ptrdiff_t>(skip), s.end());
      EXPECT_TRUE(rec->Matches(rest)) << Show(rest);
      rest.push_back(grammar::ByteSymbol('x'));
      EXPECT_FALSE(rec->Matches(rest));
    }
  }
}

// JSON arguments are an object even where the schema leaves the type open.
TEST_F(ToolGrammarTest, ArgumentsAreObjects) {
  ToolGrammarOptions opts;
  opts.version = ModelVersion::kV31;
  auto g = BuildToolCallGrammar({MakeTool("any", "{}"), MakeTool("untyped", R"({"properties":{"a":{"type":"integer"}}})")},
                                Required(), true, opts);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto turn = [](std::string_view name, std::string_view args) {
    return Syms{}.K(kCallsBegin).K(kCallBegin).T(name).K(kSep).T(args).K(kCallEnd).K(kCallsEnd).s;
  };
  EXPECT_TRUE(grammar::ReferenceMatches(g->turn, turn("any", "{}")));
  EXPECT_TRUE(grammar::ReferenceMatches(g->turn, turn("any", R"({"x": [1]})")));
  EXPECT_FALSE(grammar::ReferenceMatches(g->turn, turn("any", "3")));
  EXPECT_TRUE(grammar::ReferenceMatches(g->turn, turn("untyped", R"({"a": 1})")));
  EXPECT_FALSE(grammar::ReferenceMatches(g->turn, turn("untyped", "[]")));
  // Unlisted keys: the caller's choice (JSON Schema allows them), always off for strict tools.
  const std::string_view schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  for (bool strict : {false, true}) {
    auto sg = BuildToolCallGrammar({MakeTool("t", schema, strict)}, Required(), true, opts);
    ASSERT_TRUE(sg.ok());
    EXPECT_TRUE(grammar::ReferenceMatches(sg->turn, turn("t", R"({"a": 1})")));
    EXPECT_EQ(grammar::ReferenceMatches(sg->turn, turn("t", R"({"a": 1, "b": 2})")), !strict);
  }
  for (ModelVersion v : kVersions) {
    opts.version = v;
    EXPECT_FALSE(BuildToolCallGrammar({MakeTool("arr", R"({"type":"array"})")}, Required(), true, opts).ok());
  }
}

// DeepSeek's own V3.2 vectors (../shared/golden/deepseek-v3.2): every assistant turn the
// official encoder rendered, from its </think> to its EOS, is a sentence of the grammar built
// from the conversation's tools — calls under `required`, answers under `auto`.
TEST_F(ToolGrammarTest, OfficialV32TurnsAreAccepted) {
  const std::string dir = testing::EnvOr("LADLE_SHARED", LADLE_TEST_SHARED_DIR) + "/golden/deepseek-v3.2";
  int calls_checked = 0, answers_checked = 0;
  for (const auto& [in_name, out_name] : std::vector<std::pair<std::string, std::string>>{
           {"test_input.json", "test_output.txt"}, {"test_input_search_wo_date.json", "test_output_search_wo_date.txt"}}) {
    SCOPED_TRACE(in_name);
    LADLE_REQUIRE_DATA(dir + "/" + in_name);
    auto read = [](const std::string& path) {
      std::ifstream f(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(f), {});
    };
    auto input = json::Parse(read(dir + "/" + in_name));
    ASSERT_TRUE(input.ok());
    const std::string rendered = read(dir + "/" + out_name);
    std::vector<Tool> tools;
    const json::Value* list = input->Find("tools");
    for (const json::Value& t : list != nullptr ? list->as_array() : json::Value::Array{}) {
      const json::Value* fn = t.Find("function");
      ASSERT_NE(fn, nullptr);
      Tool tool;
      tool.name = fn->Find("name")->as_string();
      if (const json::Value* p = fn->Find("parameters")) tool.parameters = *p;
      tools.push_back(std::move(tool));
    }
    if (tools.empty()) continue;
    ToolGrammarOptions opts;
    opts.version = ModelVersion::kV32;
    auto forced = BuildToolCallGrammar(tools, Required(), true, opts);
    auto free = BuildToolCallGrammar(tools, ToolChoice{}, true, opts);
    ASSERT_TRUE(forced.ok() && free.ok()) << forced.status().ToString() << free.status().ToString();
    auto forced_rec = grammar::ReferenceRecognizer::Create(forced->turn);
    auto free_rec = grammar::ReferenceRecognizer::Create(free->turn);
    ASSERT_TRUE(forced_rec.ok() && free_rec.ok());
    const std::string eos = "<｜end▁of▁sentence｜>", end_think = "</think>";
    for (size_t at = rendered.find(eos); at != std::string::npos; at = rendered.find(eos, at + 1)) {
      const size_t think = rendered.rfind(end_think, at);
      ASSERT_NE(think, std::string::npos);
      const std::string turn = rendered.substr(think + end_think.size(), at - think - end_think.size());
      if (turn.find("<｜DSML｜function_calls>") != std::string::npos) {
        EXPECT_TRUE(forced_rec->Matches(turn)) << turn;
        ++calls_checked;
      } else {
        EXPECT_TRUE(free_rec->Matches(turn)) << turn;
        ++answers_checked;
      }
    }
  }
  EXPECT_GT(calls_checked, 0);
  EXPECT_GT(answers_checked, 0);
}

// Ladle's encoders are the syntax's ground truth for every version: an assistant turn with
// calls, rendered as history, is a sentence of the forced grammar.
TEST_F(ToolGrammarTest, EncoderRenderedCallsAreAccepted) {
  for (ModelVersion v : kVersions) {
    SCOPED_TRACE(frontend::ModelVersionName(v));
    frontend::Request req;
    req.tools = TestTools();
    frontend::Message user;
    user.role = frontend::Role::kUser;
    user.content.push_back({frontend::ContentPart::Kind::kText, "Weather in Paris?", {}});
    frontend::Message assistant;
    assistant.role = frontend::Role::kAssistant;
    assistant.content_null = true;
    assistant.tool_calls = {{"c0", "get_weather", R"({"city": "Paris", "unit": "celsius", "days": 3})"},
                            {"c1", "ping", "{}"},
                            {"c2", "set_mode", R"({"mode": "fast", "note": null})"}};
    req.messages = {user, assistant};
    auto prompt = frontend::RenderPrompt(req, v);
    ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
    std::vector<Symbol> syms;
    for (const frontend::PromptPiece& p : prompt->pieces) {
      if (p.kind == frontend::PromptPiece::Kind::kSpecial) {
        syms.push_back(grammar::SpecialSymbol(p.id));
      } else {
        for (size_t i = 0; i < p.size; ++i) syms.push_back(grammar::ByteSymbol(static_cast<uint8_t>(prompt->text[p.begin + i])));
      }
    }
    const auto& st = frontend::SpecialTokensFor(v);
    // The rendered turn: from the last <｜Assistant｜> that an EOS follows (the prompt ends with
    // another one, the generation prompt), past a </think> token, to the first EOS after it.
    // (V3 closes only from the second call on, so with three calls that is the first two.)
    auto start = syms.end(), eos = syms.end();
    for (auto it = syms.begin(); it != syms.end(); ++it) {
      if (*it != grammar::SpecialSymbol(st.assistant)) continue;
      auto e = std::find(it, syms.end(), grammar::SpecialSymbol(st.eos));
      if (e == syms.end()) break;
      start = it + 1;
      eos = e;
    }
    ASSERT_NE(eos, syms.end());
    if (st.end_think && *start == grammar::SpecialSymbol(*st.end_think)) ++start;
    const std::vector<Symbol> turn(start, eos);
    ToolGrammarOptions opts;
    opts.version = v;
    auto g = BuildToolCallGrammar(req.tools, Required(), true, opts);
    ASSERT_TRUE(g.ok());
    EXPECT_TRUE(grammar::ReferenceMatches(g->turn, turn)) << Show(turn);
  }
}

// Bare calls (no section wrapper) are triggers too, since the parser reads them as calls.
TEST_F(ToolGrammarTest, BareCallTriggers) {
  ToolGrammarOptions opts;
  opts.version = ModelVersion::kV32;
  auto g = BuildToolCallGrammar(TestTools(), ToolChoice{}, true, opts);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->triggers.size(), 2u);
  EXPECT_EQ(g->triggers[1].text, "<｜DSML｜invoke name=\"");
  EXPECT_TRUE(grammar::ReferenceMatches(g->triggers[1].after, "ping\">\n\n</｜DSML｜invoke>"));
  EXPECT_FALSE(grammar::ReferenceMatches(g->triggers[1].after, "pong\">\n\n</｜DSML｜invoke>"));

  opts.version = ModelVersion::kV3;
  g = BuildToolCallGrammar(TestTools(), ToolChoice{}, true, opts);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->triggers.size(), 2u);
  EXPECT_EQ(g->triggers[1].token_id, kCallBegin);
  const Syms rest = Syms{}.T("function").K(kSep).T("ping\n```json\n{}\n```").K(kCallEnd).K(kCallsEnd);
  EXPECT_TRUE(grammar::ReferenceMatches(g->triggers[1].after, rest.s));
  // The wrapper trigger's `after` starts with a call, not with the name.
  EXPECT_FALSE(grammar::ReferenceMatches(g->triggers[0].after, rest.s));
}

TEST(ToolGrammarText, TextAvoiding) {
  grammar::GrammarBuilder b;
  auto e = tool_grammar::TextAvoiding(b, {"<｜DSML｜function_calls>", "<｜DSML｜invoke name=\"", "</think>"});
  ASSERT_TRUE(e.ok());
  auto g = b.Build(b.AddRule("root", *e));
  ASSERT_TRUE(g.ok());
  auto rec = grammar::ReferenceRecognizer::Create(*g);
  ASSERT_TRUE(rec.ok());
  for (std::string_view ok : {"", "plain", "<", "<<", "a<｜DSML｜function_calls", "<｜DSML｜function_callsX>",
                              "<</thin</think", "<｜DSML｜invoke name=", "中文 <｜DSML｜ 😀", "</think >"}) {
    EXPECT_TRUE(rec->Matches(ok)) << ok;
  }
  for (std::string_view bad : {"<｜DSML｜function_calls>", "x<｜DSML｜invoke name=\"y", "<</think>", "a</think>b",
                               "\xff", "<\xe4"}) {
    EXPECT_FALSE(rec->Matches(bad)) << bad;
  }
  grammar::GrammarBuilder b2;
  EXPECT_FALSE(tool_grammar::TextAvoiding(b2, {"a<b"}).ok());
  EXPECT_FALSE(tool_grammar::TextAvoiding(b2, {"<a<"}).ok());
}

TEST(ToolGrammarText, JoinedItems) {
  grammar::GrammarBuilder b;
  const std::vector<grammar::ExprId> items = {b.Literal("a"), b.Literal("b"), b.Literal("c")};
  auto g = b.Build(b.AddRule("root", tool_grammar::JoinedItems(b, items, {false, true, false}, b.Literal(","))));
  ASSERT_TRUE(g.ok());
  auto rec = grammar::ReferenceRecognizer::Create(*g);
  ASSERT_TRUE(rec.ok());
  for (std::string_view ok : {"b", "a,b", "b,c", "a,b,c"}) EXPECT_TRUE(rec->Matches(ok)) << ok;
  for (std::string_view bad : {"", "a", "c", "a,c", "b,a", ",b", "b,", "ab"}) EXPECT_FALSE(rec->Matches(bad)) << bad;
}

}  // namespace
}  // namespace ladle::structured
