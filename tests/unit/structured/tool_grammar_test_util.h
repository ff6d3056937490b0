// Shared by the tool-grammar tests: a random sentence generator over the grammar IR biased
// towards markup characters, rendering sentences to ids as the model would emit them, running
// the output parser, a small JSON Schema validator, and the test tools.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ladle/frontend/model_version.h"
#include "ladle/frontend/output_parser.h"
#include "ladle/grammar/grammar.h"
#include "ladle/json/json.h"
#include "ladle/structured/tool_grammar.h"
#include "ladle/tokenizer/tokenizer.h"
#include "reference_recognizer.h"
#include "test_data.h"

namespace ladle::structured::tool_test {

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
    tokenizer::AppendUtf8(s, cp);
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

inline const tokenizer::Tokenizer* BaseTokenizer() {
  static std::unique_ptr<tokenizer::Tokenizer> tok = [] {
    auto t = tokenizer::Tokenizer::FromFile(testing::TokenizerPath());
    return t.ok() ? std::make_unique<tokenizer::Tokenizer>(std::move(t).value()) : nullptr;
  }();
  return tok.get();
}

inline std::vector<tokenizer::TokenId> Render(const std::vector<Symbol>& syms, const tokenizer::Tokenizer& tok) {
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

inline std::string Show(const std::vector<Symbol>& syms) {
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

inline Parsed Parse(ModelVersion v, bool thinking, const std::vector<tokenizer::TokenId>& ids, bool token_by_token) {
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

// JSON Schema equality: numbers by value (1 == 1.0), containers element-wise.
inline bool JsonEqual(const json::Value& a, const json::Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.as_array().size() != b.as_array().size()) return false;
    for (size_t i = 0; i < a.as_array().size(); ++i) {
      if (!JsonEqual(a.as_array()[i], b.as_array()[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.as_object().size() != b.as_object().size()) return false;
    for (const auto& [k, x] : a.as_object()) {
      const json::Value* y = b.Find(k);
      if (y == nullptr || !JsonEqual(x, *y)) return false;
    }
    return true;
  }
  return json::Dump(a) == json::Dump(b);
}

// ECMAScript regex search (std::regex), defined in tool_grammar_test_util.cc so that <regex>
// is compiled once, not in every test file that includes this header.
bool PatternSearch(const std::string& text, const std::string& pattern);

inline bool Validate(const json::Value& v, const json::Value& s, const std::string& at, std::string* why) {
  if (s.is_bool()) {
    if (!s.as_bool()) *why = at + ": false schema";
    return s.as_bool();
  }
  auto fail = [&](const std::string& m) {
    *why = at + ": " + m + " (" + json::Dump(v) + ")";
    return false;
  };
  if (const json::Value* c = s.Find("const"); c && !JsonEqual(*c, v)) return fail("not const");
  if (const json::Value* e = s.Find("enum")) {
    const auto& a = e->as_array();
    if (std::none_of(a.begin(), a.end(), [&](const json::Value& x) { return JsonEqual(x, v); })) {
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
    if (const json::Value* pat = s.Find("pattern"); pat && !PatternSearch(str, pat->as_string())) {
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

inline Tool MakeTool(std::string name, std::string_view params, bool strict = false) {
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

inline std::vector<Tool> TestTools(bool strict = false) {
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

inline const json::Value* SchemaOf(const std::vector<Tool>& tools, const std::string& name) {
  for (const Tool& t : tools) {
    if (t.name == name) return &t.parameters;
  }
  return nullptr;
}

inline constexpr ModelVersion kVersions[] = {ModelVersion::kV3, ModelVersion::kR1, ModelVersion::kV31, ModelVersion::kV32,
                                      ModelVersion::kV4};

struct Case {
  ModelVersion version;
  bool thinking;
  ToolChoice choice;
  bool parallel;
  bool strict;
  std::string label;
};

inline std::vector<Case> Cases() {
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

inline constexpr uint32_t kCallsBegin = 128806, kCallsEnd = 128807, kCallBegin = 128808, kCallEnd = 128809, kSep = 128814;

inline ToolChoice Required() {
  ToolChoice c;
  c.mode = ToolChoice::Mode::kRequired;
  return c;
}

}  // namespace ladle::structured::tool_test
