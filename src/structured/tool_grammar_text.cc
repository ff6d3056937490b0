// Free text that avoids markup, JSON arguments, and ordered optional items: the building
// blocks of the tool-call grammars.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "ladle/tokenizer/tokenizer.h"
#include "tool_grammar_internal.h"

// The JSON Schema compiler (grammar::AddJsonSchema) is another part of the grammar engine;
// until it is linked, arguments use the small typed fallback below. 1 = use the compiler.
#ifndef LADLE_TOOL_GRAMMAR_SCHEMA_COMPILER
#define LADLE_TOOL_GRAMMAR_SCHEMA_COMPILER 0
#endif

namespace ladle::structured::tool_grammar {

using grammar::CodeRange;
using grammar::kUnbounded;

namespace {

// Decodes valid UTF-8 (the markers are compile-time constants and tool-provided text that was
// already validated); stops at the first invalid byte.
std::vector<uint32_t> CodePointsOf(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) break;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string Utf8(uint32_t cp) {
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
  return s;
}

// A trie of the markers' code points after their leading '<'.
struct TrieNode {
  std::map<uint32_t, int> next;
  bool terminal = false;
};

}  // namespace

ExprId AnyText(GrammarBuilder& b) { return b.Star(b.AnyCodePoint()); }

Result<ExprId> TextAvoiding(GrammarBuilder& b, const std::vector<std::string>& avoid) {
  if (avoid.empty()) return AnyText(b);
  std::vector<TrieNode> trie(1);
  for (const std::string& m : avoid) {
    const std::vector<uint32_t> cps = CodePointsOf(m);
    if (cps.size() < 2 || cps[0] != '<' || std::count(cps.begin(), cps.end(), uint32_t{'<'}) != 1) {
      return InvalidArgument(fmt::format("text-avoiding marker '{}' must start with its only '<'", m));
    }
    int at = 0;
    for (size_t i = 1; i < cps.size(); ++i) {
      auto it = trie[at].next.find(cps[i]);
      if (it == trie[at].next.end()) {
        trie.push_back({});
        const int id = static_cast<int>(trie.size()) - 1;
        trie[at].next.emplace(cps[i], id);
        at = id;
      } else {
        at = it->second;
      }
    }
    trie[at].terminal = true;
  }
  // Because '<' opens every marker and appears nowhere else in them, a partial match can only
  // be broken (or completed) by what follows it, and every '<' restarts matching. So the text
  // is [^<]* ("<" R)*, where R at a trie node is: stop (the next thing is '<' or the end), or
  // a code point that continues no marker (nor '<') followed by [^<]*, or a code point that
  // continues a marker without completing it, then R of that node.
  const ExprId not_lt = b.CodePoints({{'<', '<'}}, /*negate=*/true);
  const ExprId plain = b.Star(not_lt);
  auto r = [&](auto&& self, int node) -> ExprId {
    std::vector<CodeRange> stop = {{'<', '<'}};
    std::vector<ExprId> alts = {b.Empty()};
    for (const auto& [cp, child] : trie[node].next) {
      stop.push_back({cp, cp});
      if (trie[child].terminal) continue;
      alts.push_back(b.Seq({b.Literal(Utf8(cp)), self(self, child)}));
    }
    alts.push_back(b.Seq({b.CodePoints(stop, /*negate=*/true), plain}));
    return b.Alt(alts);
  };
  return b.Seq({plain, b.Star(b.Seq({b.Literal("<"), r(r, 0)}))});
}

ExprId JsonWs(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts) {
  if (opts.whitespace == grammar::JsonSchemaOptions::Whitespace::kCompact) return b.Empty();
  grammar::ByteSet ws;
  for (char c : {' ', '\t', '\n', '\r'}) ws.Set(static_cast<uint8_t>(c));
  return b.Repeat(b.Bytes(ws), 0, opts.max_whitespace);
}

ExprId JoinedItems(GrammarBuilder& b, const std::vector<ExprId>& items, const std::vector<bool>& required, ExprId sep) {
  const size_t n = items.size();
  // tail[j]: items j.. each preceded by `sep`, optional ones optional.
  std::vector<ExprId> tail(n + 1);
  tail[n] = b.Empty();
  for (size_t j = n; j-- > 0;) {
    const ExprId with_sep = b.Seq({sep, items[j]});
    tail[j] = b.Seq({required[j] ? with_sep : b.Optional(with_sep), tail[j + 1]});
  }
  // The first present item is j; every item before it must be optional.
  std::vector<ExprId> firsts;
  bool all_optional = true;
  for (size_t j = 0; j < n; ++j) {
    firsts.push_back(b.Seq({items[j], tail[j + 1]}));
    if (required[j]) {
      all_optional = false;
      break;
    }
  }
  if (all_optional) firsts.push_back(b.Empty());
  return b.Alt(firsts);
}

// ---------------------------------------------------------------------------------------------
// JSON

namespace {

struct JsonRules {
  ExprId value, object, string;
};

JsonRules AnyJsonRules(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts) {
  // One set of rules per builder and whitespace setting, found again by name.
  const std::string suffix = fmt::format("{}_{}", static_cast<int>(opts.whitespace), opts.max_whitespace);
  const std::string vname = "tool_json_value_" + suffix;
  if (auto v = b.FindRule(vname)) {
    return {b.Ref(*v), b.Ref(*b.FindRule("tool_json_object_" + suffix)), b.Ref(*b.FindRule("tool_json_string"))};
  }
  const grammar::RuleId value = b.DeclareRule(vname);
  const grammar::RuleId object = b.DeclareRule("tool_json_object_" + suffix);
  grammar::RuleId string;
  if (auto s = b.FindRule("tool_json_string")) {
    string = *s;
  } else {
    string = b.DeclareRule("tool_json_string");
    grammar::ByteSet hex;
    hex.SetRange('0', '9');
    hex.SetRange('a', 'f');
    hex.SetRange('A', 'F');
    grammar::ByteSet esc;
    for (char c : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) esc.Set(static_cast<uint8_t>(c));
    // \u escapes of scalar values only: a lone surrogate is not valid JSON text to simdjson.
    grammar::ByteSet not_d = hex, d, low;
    for (char c : {'d', 'D'}) {
      d.Set(static_cast<uint8_t>(c));
      not_d.bits[static_cast<uint8_t>(c) >> 6] &= ~(uint64_t{1} << (static_cast<uint8_t>(c) & 63));
    }
    low.SetRange('0', '7');
    const ExprId u = b.Seq({b.Literal("u"), b.Alt({b.Seq({b.Bytes(not_d), b.Repeat(b.Bytes(hex), 3, 3)}),
                                                    b.Seq({b.Bytes(d), b.Bytes(low), b.Repeat(b.Bytes(hex), 2, 2)})})});
    const ExprId ch = b.Alt({b.CodePoints({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, /*negate=*/true),
                             b.Seq({b.Literal("\\"), b.Alt({b.Bytes(esc), u})})});
    b.DefineRule(string, b.Seq({b.Literal("\""), b.Star(ch), b.Literal("\"")}));
  }
  const ExprId ws = JsonWs(b, opts);
  const ExprId digits = b.Plus(b.ByteRange('0', '9'));
  grammar::ByteSet e_set, sign;
  e_set.Set('e');
  e_set.Set('E');
  sign.Set('+');
  sign.Set('-');
  const ExprId integer =
      b.Seq({b.Optional(b.Literal("-")), b.Alt({b.Literal("0"), b.Seq({b.ByteRange('1', '9'), b.Star(b.ByteRange('0', '9'))})})});
  // At most two exponent digits: larger exponents overflow a double, which simdjson rejects.
  const ExprId exp_digits = b.Repeat(b.ByteRange('0', '9'), 1, 2);
  const ExprId number = b.Seq({integer, b.Optional(b.Seq({b.Literal("."), digits})),
                               b.Optional(b.Seq({b.Bytes(e_set), b.Optional(b.Bytes(sign)), exp_digits}))});
  const ExprId member = b.Seq({b.Ref(string), ws, b.Literal(":"), ws, b.Ref(value)});
  const ExprId comma = b.Seq({ws, b.Literal(","), ws});
  b.DefineRule(object, b.Seq({b.Literal("{"), ws, b.Optional(b.Seq({member, b.Star(b.Seq({comma, member})), ws})),
                              b.Literal("}")}));
  const ExprId array = b.Seq({b.Literal("["), ws,
                              b.Optional(b.Seq({b.Ref(value), b.Star(b.Seq({comma, b.Ref(value)})), ws})),
                              b.Literal("]")});
  b.DefineRule(value, b.Alt({b.Ref(object), array, b.Ref(string), number, b.Literal("true"), b.Literal("false"),
                             b.Literal("null")}));
  return {b.Ref(value), b.Ref(object), b.Ref(string)};
}

void Approx(grammar::CompileReport* report, std::string path, std::string what) {
  if (report != nullptr) report->approximations.push_back({std::move(path), std::move(what)});
}

// The fallback schema compiler: type (one or a list), enum, const, nullable, properties with
// required (in schema order, unlisted properties only when additionalProperties allows them
// and nothing is listed), items. Every other keyword is reported as not enforced.
Result<ExprId> FallbackSchema(GrammarBuilder& b, const json::Value& s, const grammar::JsonSchemaOptions& opts,
                              const std::string& path, grammar::CompileReport* report, int depth) {
  const JsonRules any = AnyJsonRules(b, opts);
  if (s.is_bool()) return s.as_bool() ? any.value : b.Nothing();
  if (!s.is_object()) return InvalidArgument(fmt::format("{}: a schema must be an object or a boolean", path));
  if (depth > 32) {
    Approx(report, path, "nested deeper than the fallback compiler follows: any JSON value");
    return any.value;
  }
  static constexpr std::string_view kAnnotations[] = {
      "type", "enum", "const", "nullable", "properties", "required", "additionalProperties", "items",
      "description", "title", "examples", "default", "$comment", "$schema", "$id", "deprecated", "readOnly",
      "writeOnly", "strict"};
  for (const auto& [key, v] : s.as_object()) {
    if (std::find(std::begin(kAnnotations), std::end(kAnnotations), key) == std::end(kAnnotations)) {
      Approx(report, path + "/" + key, "not enforced (fallback schema compiler)");
    }
  }
  const ExprId ws = JsonWs(b, opts);
  if (const json::Value* c = s.Find("const")) return b.Literal(json::Dump(*c));
  if (const json::Value* e = s.Find("enum"); e != nullptr && e->is_array()) {
    std::vector<ExprId> alts;
    for (const json::Value& v : e->as_array()) alts.push_back(b.Literal(json::Dump(v)));
    return b.Alt(alts);
  }
  std::vector<std::string> types;
  if (const json::Value* t = s.Find("type")) {
    if (t->is_string()) types.push_back(t->as_string());
    if (t->is_array()) {
      for (const json::Value& x : t->as_array()) {
        if (x.is_string()) types.push_back(x.as_string());
      }
    }
  }
  if (types.empty()) return any.value;
  if (const json::Value* n = s.Find("nullable"); n != nullptr && n->is_bool() && n->as_bool()) types.push_back("null");
  std::vector<ExprId> alts;
  for (const std::string& t : types) {
    if (t == "string") {
      alts.push_back(any.string);
    } else if (t == "integer") {
      alts.push_back(b.Seq({b.Optional(b.Literal("-")),
                            b.Alt({b.Literal("0"), b.Seq({b.ByteRange('1', '9'), b.Star(b.ByteRange('0', '9'))})})}));
    } else if (t == "number") {
      const ExprId digits = b.Plus(b.ByteRange('0', '9'));
      grammar::ByteSet e_set, sign;
      e_set.Set('e');
      e_set.Set('E');
      sign.Set('+');
      sign.Set('-');
      alts.push_back(b.Seq({b.Optional(b.Literal("-")),
                            b.Alt({b.Literal("0"), b.Seq({b.ByteRange('1', '9'), b.Star(b.ByteRange('0', '9'))})}),
                            b.Optional(b.Seq({b.Literal("."), digits})),
                            b.Optional(b.Seq({b.Bytes(e_set), b.Optional(b.Bytes(sign)),
                                              b.Repeat(b.ByteRange('0', '9'), 1, 2)}))}));
    } else if (t == "boolean") {
      alts.push_back(b.Alt({b.Literal("true"), b.Literal("false")}));
    } else if (t == "null") {
      alts.push_back(b.Literal("null"));
    } else if (t == "array") {
      ExprId item = any.value;
      if (const json::Value* it = s.Find("items")) {
        LADLE_ASSIGN_OR_RETURN(item, FallbackSchema(b, *it, opts, path + "/items", report, depth + 1));
      }
      const ExprId comma = b.Seq({ws, b.Literal(","), ws});
      alts.push_back(b.Seq({b.Literal("["), ws, b.Optional(b.Seq({item, b.Star(b.Seq({comma, item})), ws})),
                            b.Literal("]")}));
    } else if (t == "object") {
      const json::Value* props = s.Find("properties");
      const json::Value* addl = s.Find("additionalProperties");
      if (props == nullptr || !props->is_object() || props->as_object().empty()) {
        const bool closed = addl != nullptr && addl->is_bool() && !addl->as_bool();
        alts.push_back(closed ? b.Seq({b.Literal("{"), ws, b.Literal("}")}) : any.object);
        continue;
      }
      std::vector<std::string> req;
      if (const json::Value* r = s.Find("required"); r != nullptr && r->is_array()) {
        for (const json::Value& x : r->as_array()) {
          if (x.is_string()) req.push_back(x.as_string());
        }
      }
      std::vector<ExprId> items;
      std::vector<bool> required;
      for (const auto& [key, sub] : props->as_object()) {
        LADLE_ASSIGN_OR_RETURN(ExprId v, FallbackSchema(b, sub, opts, path + "/properties/" + key, report, depth + 1));
        std::string quoted;
        json::AppendQuoted(key, &quoted);
        items.push_back(b.Seq({b.Literal(quoted), ws, b.Literal(":"), ws, v}));
        required.push_back(std::find(req.begin(), req.end(), key) != req.end());
      }
      const ExprId comma = b.Seq({ws, b.Literal(","), ws});
      alts.push_back(b.Seq({b.Literal("{"), ws, JoinedItems(b, items, required, comma), ws, b.Literal("}")}));
    } else {
      return InvalidArgument(fmt::format("{}/type: unknown type '{}'", path, t));
    }
  }
  return b.Alt(alts);
}

}  // namespace

ExprId AnyJsonValue(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts) { return AnyJsonRules(b, opts).value; }
ExprId AnyJsonObject(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts) { return AnyJsonRules(b, opts).object; }

Result<ExprId> SchemaJson(GrammarBuilder& b, const json::Value& schema, const grammar::JsonSchemaOptions& opts,
                          std::string_view path, grammar::CompileReport* report) {
#if LADLE_TOOL_GRAMMAR_SCHEMA_COMPILER
  grammar::CompileReport local;
  LADLE_ASSIGN_OR_RETURN(ExprId e, grammar::AddJsonSchema(b, schema, opts, &local));
  for (grammar::Approximation& a : local.approximations) Approx(report, std::string(path) + a.path, std::move(a.what));
  return e;
#else
  return FallbackSchema(b, schema, opts, std::string(path), report, 0);
#endif
}

Status CheckToolName(std::string_view name) {
  // What the output parser accepts as a name (tool_call_formats.cc): no whitespace, no quote,
  // angle bracket, backslash, backtick, brace or bracket, no control byte, at most 256 bytes.
  if (name.empty() || name.size() > 256) {
    return InvalidArgument(fmt::format("tool name '{}' must have 1 to 256 bytes", name));
  }
  if (!tokenizer::IsValidUtf8(name)) return InvalidArgument("a tool name is not valid UTF-8");
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) continue;
    if (c <= 0x20 || c == 0x7F || std::string_view("\"<>\\`{}[]").find(ch) != std::string_view::npos) {
      return InvalidArgument(fmt::format("tool name '{}' has a character the tool-call syntax cannot carry", name));
    }
  }
  return Status::Ok();
}

}  // namespace ladle::structured::tool_grammar
