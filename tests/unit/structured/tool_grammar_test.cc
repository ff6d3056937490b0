// Tool-call grammars against the real output parser: for every version and tool_choice,
// random sentences of the grammar, tokenized as the model would emit them (control tokens by
// id, text as plain BPE), must parse back into tool calls of allowed tools whose arguments are
// JSON matching the schema; and strings that break the format must be rejected by the
// reference recognizer (src/grammar/reference_recognizer.h).
#include "ladle/structured/tool_grammar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <regex>

#include "ladle/frontend/output_parser.h"
#include "ladle/json/json.h"
#include "reference_recognizer.h"
#include "test_data.h"
#include "tool_grammar_internal.h"

namespace ladle::structured {
namespace {

using frontend::Event;
using frontend::ModelVersion;
using frontend::Tool;
using frontend::ToolChoice;
using grammar::Expr;
using grammar::ExprKind;
using grammar::Grammar;
using grammar::Symbol;

// ---------------------------------------------------------------------------------------------
// A random sentence generator over the IR: alternatives and repeat counts at random, the
// shortest choice once the output is over budget or the rule depth is too deep.

class Sampler {
 public:
  explicit Sampler(const Grammar& g, uint64_t seed) : g_(g), rng_(seed) { ComputeShortest(); }

  std::vector<Symbol> Sample(size_t budget = 300) {
    out_.clear();
    budget_ = budget;
    Gen(g_.rules[g_.root].body, 0);
    return out_;
  }

 private:
  static constexpr uint64_t kInf = std::numeric_limits<uint64_t>::max() / 4;

  uint64_t Short(grammar::ExprId id) const { return shortest_[static_cast<size_t>(id)]; }

  void ComputeShortest() {
    shortest_.assign(g_.exprs.size(), kInf);
    std::vector<uint64_t> rule(g_.rules.size(), kInf);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < g_.exprs.size(); ++i) {
        const Expr& e = g_.exprs[i];
        uint64_t v = kInf;
        switch (e.kind) {
          case ExprKind::kEmpty: v = 0; break;
          case ExprKind::kNothing: v = kInf; break;
          case ExprKind::kLiteral: v = e.text.size(); break;
          case ExprKind::kByteSet:
          case ExprKind::kCodePoints:
          case ExprKind::kSpecialToken: v = 1; break;
          case ExprKind::kSeq:
            v = 0;
            for (auto c : e.children) v = std::min(kInf, v + Short(c));
            break;
          case ExprKind::kAlt:
            for (auto c : e.children) v = std::min(v, Short(c));
            break;
          case ExprKind::kRepeat: v = e.min == 0 ? 0 : std::min(kInf, Short(e.children[0]) * e.min); break;
          case ExprKind::kRuleRef: v = rule[static_cast<size_t>(e.rule)]; break;
        }
        if (v < shortest_[i]) {
          shortest_[i] = v;
          changed = true;
        }
      }
      for (size_t r = 0; r < g_.rules.size(); ++r) {
        const uint64_t v = Short(g_.rules[r].body);
        if (v < rule[r]) {
          rule[r] = v;
          changed = true;
        }
      }
    }
  }

  bool Tight(int depth) const { return out_.size() >= budget_ || depth > 24; }

  void Byte(uint8_t c) { out_.push_back(grammar::ByteSymbol(c)); }
  void Text(std::string_view s) {
    for (char c : s) Byte(static_cast<uint8_t>(c));
  }

  void CodePoint(const std::vector<grammar::CodeRange>& ranges) {
    // Mostly characters that matter to the formats (markup pieces, quotes, escapes, newlines),
    // then anything in the ranges.
    static const uint32_t kPalette[] = {'a', 'b', 'z', ' ', '\n', '<', '/', '>', '"', '\\', '{', '}', '=', '_',
                                        0xFF5C /* ｜ */, 'D', 'S', 'M', 'L', 't', 'h', 'i', 'n', 'k', 0xE9, 0x4E2D,
                                        0x1F600, '`', '0', '7'};
    auto in = [&](uint32_t cp) {
      return std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return r.lo <= cp && cp <= r.hi; });
    };
    uint32_t cp = 0;
    bool found = false;
    for (int tries = 0; tries < 8 && !found; ++tries) {
      cp = kPalette[rng_() % std::size(kPalette)];
      found = in(cp);
    }
    if (!found) {
      const auto& r = ranges[rng_() % ranges.size()];
      cp = r.lo + static_cast<uint32_t>(rng_() % (uint64_t{r.hi} - r.lo + 1));
    }
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    Text(s);
  }

  void Gen(grammar::ExprId id, int depth) {
    const Expr& e = g_.exprs[static_cast<size_t>(id)];
    switch (e.kind) {
      case ExprKind::kEmpty: return;
      case ExprKind::kNothing: ADD_FAILURE() << "sampled into kNothing"; return;
      case ExprKind::kLiteral: Text(e.text); return;
      case ExprKind::kByteSet: {
        std::vector<uint8_t> bytes;
        for (int c = 0; c < 256; ++c) {
          if (e.bytes.Has(static_cast<uint8_t>(c))) bytes.push_back(static_cast<uint8_t>(c));
        }
        Byte(bytes[rng_() % bytes.size()]);
        return;
      }
      case ExprKind::kCodePoints: CodePoint(e.ranges); return;
      case ExprKind::kSpecialToken: out_.push_back(grammar::SpecialSymbol(e.token_id)); return;
      case ExprKind::kSeq:
        for (auto c : e.children) Gen(c, depth);
        return;
      case ExprKind::kAlt: {
        std::vector<grammar::ExprId> ok;
        for (auto c : e.children) {
          if (Short(c) < kInf) ok.push_back(c);
        }
        if (Tight(depth)) {
          Gen(*std::min_element(ok.begin(), ok.end(), [&](auto a, auto b) { return Short(a) < Short(b); }), depth);
        } else {
          Gen(ok[rng_() % ok.size()], depth);
        }
        return;
      }
      case ExprKind::kRepeat: {
        uint32_t n = e.min;
        if (!Tight(depth)) {
          const uint64_t extra = rng_() % 4;
          n = static_cast<uint32_t>(std::min<uint64_t>(e.max, e.min + extra));
        }
        for (uint32_t i = 0; i < n; ++i) Gen(e.children[0], depth);
        return;
      }
      case ExprKind::kRuleRef: Gen(g_.rules[static_cast<size_t>(e.rule)].body, depth + 1); return;
    }
  }

  const Grammar& g_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> shortest_;
  std::vector<Symbol> out_;
  size_t budget_ = 300;
};

// ---------------------------------------------------------------------------------------------
// Tokenizing and parsing

const tokenizer::Tokenizer* BaseTokenizer() {
  static std::unique_ptr<tokenizer::Tokenizer> tok = [] {
    auto t = tokenizer::Tokenizer::FromFile(testing::TokenizerPath());
    return t.ok() ? std::make_unique<tokenizer::Tokenizer>(std::move(t).value()) : nullptr;
  }();
  return tok.get();
}

std::vector<tokenizer::TokenId> Render(const std::vector<Symbol>& syms, const tokenizer::Tokenizer& tok) {
  std::vector<tokenizer::TokenId> ids;
  std::string text;
  auto flush = [&] {
    if (text.empty()) return;
    const auto t = tok.EncodePlain(text);
    ids.insert(ids.end(), t.begin(), t.end());
    text.clear();
  };
  for (const Symbol& s : syms) {
    if (s.special) {
      flush();
      ids.push_back(s.value);
    } else {
      text += static_cast<char>(s.value);
    }
  }
  flush();
  return ids;
}

std::string Show(const std::vector<Symbol>& syms) {
  std::string s;
  for (const Symbol& x : syms) {
    if (x.special) {
      s += "<[" + std::to_string(x.value) + "]>";
    } else {
      s += static_cast<char>(x.value);
    }
  }
  return s;
}

struct Call {
  std::string name, args;
};
struct Parsed {
  std::string reasoning, content;
  std::vector<Call> calls;
  frontend::FinishReason finish = frontend::FinishReason::kStop;
  bool malformed = false;
};

Parsed Parse(ModelVersion v, bool thinking, const std::vector<tokenizer::TokenId>& ids, bool token_by_token) {
  Parsed p;
  auto vtok = frontend::TokenizerForVersion(*BaseTokenizer(), v);
  EXPECT_TRUE(vtok.ok());
  frontend::StreamParserOptions o;
  o.tool_id_prefix = "call_";
  auto parser = frontend::StreamParser::Create(v, *vtok, thinking, o);
  EXPECT_TRUE(parser.ok()) << parser.status().ToString();
  std::vector<Event> events;
  if (token_by_token) {
    for (size_t i = 0; i < ids.size(); ++i) {
      auto ev = parser->Push(std::span(ids).subspan(i, 1));
      events.insert(events.end(), ev.begin(), ev.end());
    }
  } else {
    events = parser->Push(ids);
  }
  auto fin = parser->Finish(frontend::FinishReason::kStop);
  events.insert(events.end(), fin.begin(), fin.end());
  for (const Event& e : events) {
    switch (e.kind) {
      case Event::Kind::kReasoning: p.reasoning += e.text; break;
      case Event::Kind::kContent: p.content += e.text; break;
      case Event::Kind::kToolCallStart: p.calls.push_back({e.tool_name, ""}); break;
      case Event::Kind::kToolCallArgs: p.calls.back().args += e.text; break;
      case Event::Kind::kToolCallEnd: break;
      case Event::Kind::kFinish:
        p.finish = e.finish;
        p.malformed = e.malformed;
        break;
    }
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// A small JSON Schema validator for the keywords the test tools use.

bool Validate(const json::Value& v, const json::Value& s, const std::string& at, std::string* why) {
  if (s.is_bool()) {
    if (!s.as_bool()) *why = at + ": false schema";
    return s.as_bool();
  }
  auto fail = [&](const std::string& m) {
    *why = at + ": " + m + " (" + json::Dump(v) + ")";
    return false;
  };
  if (const json::Value* c = s.Find("const"); c && json::Dump(*c) != json::Dump(v)) return fail("not const");
  if (const json::Value* e = s.Find("enum")) {
    const auto& a = e->as_array();
    if (std::none_of(a.begin(), a.end(), [&](const json::Value& x) { return json::Dump(x) == json::Dump(v); })) {
      return fail("not in enum");
    }
  }
  if (const json::Value* t = s.Find("type")) {
    std::vector<std::string> types;
    if (t->is_string()) types.push_back(t->as_string());
    for (const json::Value& x : t->is_array() ? t->as_array() : json::Value::Array{}) types.push_back(x.as_string());
    auto is = [&](const std::string& ty) {
      // JSON Schema's integer is a number with no fractional part (1.0 and -0.0 count).
      if (ty == "integer") return v.is_number() && std::floor(v.as_double()) == v.as_double();
      if (ty == "number") return v.is_number();
      if (ty == "boolean") return v.is_bool();
      return std::string(v.TypeName()) == ty;
    };
    if (std::none_of(types.begin(), types.end(), is)) return fail("wrong type");
  }
  if (v.is_number()) {
    if (const json::Value* m = s.Find("minimum"); m && v.as_double() < m->as_double()) return fail("below minimum");
    if (const json::Value* m = s.Find("maximum"); m && v.as_double() > m->as_double()) return fail("above maximum");
  }
  if (v.is_string()) {
    const std::string& str = v.as_string();
    const auto cps = static_cast<int64_t>(std::count_if(str.begin(), str.end(), [](char c) { return (c & 0xC0) != 0x80; }));
    if (const json::Value* m = s.Find("minLength"); m && cps < *m->as_int64()) return fail("too short");
    if (const json::Value* m = s.Find("maxLength"); m && cps > *m->as_int64()) return fail("too long");
    if (const json::Value* pat = s.Find("pattern"); pat && !std::regex_search(str, std::regex(pat->as_string()))) {
      return fail("pattern");
    }
  }
  if (v.is_object()) {
    const json::Value* props = s.Find("properties");
    if (const json::Value* r = s.Find("required")) {
      for (const json::Value& k : r->as_array()) {
        if (v.Find(k.as_string()) == nullptr) return fail("missing required " + k.as_string());
      }
    }
    for (const auto& [k, x] : v.as_object()) {
      const json::Value* sub = props ? props->Find(k) : nullptr;
      if (sub == nullptr) {
        const json::Value* ap = s.Find("additionalProperties");
        if (ap && ap->is_bool() && !ap->as_bool()) return fail("unexpected property " + k);
        continue;
      }
      if (!Validate(x, *sub, at + "/" + k, why)) return false;
    }
  }
  if (v.is_array()) {
    if (const json::Value* m = s.Find("maxItems"); m && static_cast<int64_t>(v.as_array().size()) > *m->as_int64()) {
      return fail("too many items");
    }
    if (const json::Value* items = s.Find("items")) {
      for (size_t i = 0; i < v.as_array().size(); ++i) {
        if (!Validate(v.as_array()[i], *items, at + "/" + std::to_string(i), why)) return false;
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Test tools

Tool MakeTool(std::string name, std::string_view params, bool strict = false) {
  Tool t;
  t.name = std::move(name);
  if (!params.empty()) {
    auto p = json::Parse(params);
    EXPECT_TRUE(p.ok()) << params;
    t.parameters = std::move(p).value();
  }
  t.strict = strict;
  return t;
}

std::vector<Tool> TestTools(bool strict = false) {
  return {
      MakeTool("get_weather",
               R"({"type":"object","properties":{"city":{"type":"string","description":"City"},)"
               R"("unit":{"type":"string","enum":["celsius","fahrenheit"]},)"
               R"("days":{"type":"integer","minimum":1,"maximum":16},)"
               R"("country":{"type":"string","pattern":"^[A-Z]{2}$"}},)"
               R"("required":["city"]})",
               strict),
      MakeTool("search",
               R"({"type":"object","properties":{"query":{"type":"string"},)"
               R"("filters":{"type":"object","properties":{"lang":{"type":"string"},"safe":{"type":"boolean"}},)"
               R"("required":["safe"],"additionalProperties":false},)"
               R"("tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3},)"
               R"("limit":{"type":"number","minimum":0,"maximum":100}},)"
               R"("required":["query","filters"]})",
               strict),
      MakeTool("set_mode",
               R"({"type":"object","properties":{"mode":{"enum":["fast","safe"]},"note":{"type":["string","null"]}},)"
               R"("required":["mode","note"],"additionalProperties":false})",
               strict),
      MakeTool("ping", "", strict),
  };
}

const json::Value* SchemaOf(const std::vector<Tool>& tools, const std::string& name) {
  for (const Tool& t : tools) {
    if (t.name == name) return &t.parameters;
  }
  return nullptr;
}

constexpr ModelVersion kVersions[] = {ModelVersion::kV3, ModelVersion::kR1, ModelVersion::kV31, ModelVersion::kV32,
                                      ModelVersion::kV4};

struct Case {
  ModelVersion version;
  bool thinking;
  ToolChoice choice;
  bool parallel;
  bool strict;
  std::string label;
};

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (ModelVersion v : kVersions) {
    for (bool thinking : {false, true}) {
      const std::string vl = std::string(frontend::ModelVersionName(v)) + (thinking ? "/thinking" : "");
      ToolChoice required;
      required.mode = ToolChoice::Mode::kRequired;
      ToolChoice named;
      named.mode = ToolChoice::Mode::kNamed;
      named.name = "search";
      ToolChoice allowed;
      allowed.mode = ToolChoice::Mode::kAllowed;
      allowed.allowed = {"set_mode", "ping"};
      allowed.allowed_required = true;
      ToolChoice autoc;
      out.push_back({v, thinking, required, true, false, vl + " required"});
      out.push_back({v, thinking, required, false, false, vl + " required, one call"});
      out.push_back({v, thinking, named, true, false, vl + " named"});
      out.push_back({v, thinking, allowed, true, false, vl + " allowed-required"});
      out.push_back({v, thinking, autoc, true, true, vl + " auto, strict tools"});
    }
  }
  return out;
}

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

// ---------------------------------------------------------------------------------------------
// Hand-written turns: the exact encoder form is accepted, and format violations are rejected.

struct Syms {
  std::vector<Symbol> s;
  Syms& T(std::string_view t) {
    for (char c : t) s.push_back(grammar::ByteSymbol(static_cast<uint8_t>(c)));
    return *this;
  }
  Syms& K(uint32_t id) {
    s.push_back(grammar::SpecialSymbol(id));
    return *this;
  }
};

constexpr uint32_t kCallsBegin = 128806, kCallsEnd = 128807, kCallBegin = 128808, kCallEnd = 128809, kSep = 128814;

ToolChoice Required() {
  ToolChoice c;
  c.mode = ToolChoice::Mode::kRequired;
  return c;
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
