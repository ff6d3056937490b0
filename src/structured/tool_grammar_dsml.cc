// DSML arguments (V3.2, V4): a tool's `parameters` object schema mapped onto parameter
// elements, as encoder_common.cc's AppendDsmlToolCalls renders them and the output parser
// (tool_call_formats.cc) reads them back:
//
//   <｜DSML｜parameter name="KEY" string="true">raw text</｜DSML｜parameter>     strings
//   <｜DSML｜parameter name="KEY" string="false">JSON</｜DSML｜parameter>       everything else
//
// A raw string="true" value is copied into the arguments JSON-escaped, so any text is a valid
// string there; it only has to avoid the closers the parser listens for inside a value (a
// concern only where ｜DSML｜ is text, V3.2). String properties with keywords that constrain the
// text (pattern, format, lengths) are written as JSON strings with string="false" instead,
// which the parser passes through unchanged, so the schema compiler enforces them exactly.
#include <fmt/format.h>

#include <algorithm>

#include "ladle/tokenizer/tokenizer.h"
#include "tool_grammar_internal.h"

namespace ladle::structured::tool_grammar {

namespace {

constexpr std::string_view kDsmlText = "｜DSML｜";

// Keywords that say nothing about the instance.
bool IsAnnotation(std::string_view k) {
  static constexpr std::string_view kKeys[] = {"description", "title",    "examples",  "default",
                                               "$comment",    "deprecated", "readOnly", "writeOnly"};
  return std::find(std::begin(kKeys), std::end(kKeys), k) != std::end(kKeys);
}

// Top-level keywords the parameter mapping enforces (or that do not constrain the object).
bool IsMappedTopLevel(std::string_view k) {
  static constexpr std::string_view kKeys[] = {"type", "properties", "required", "additionalProperties", "$schema",
                                               "$id",  "$defs",      "definitions", "strict"};
  return IsAnnotation(k) || std::find(std::begin(kKeys), std::end(kKeys), k) != std::end(kKeys);
}

enum class ValueForm : uint8_t {
  kRawString,   // any string: string="true" with raw text
  kStringEnum,  // string enum/const: string="true" with one of the literals
  kMixed,       // a type list with an unconstrained "string": raw text or JSON
  kJson,        // string="false" with JSON
};

std::vector<std::string> Types(const json::Value& s) {
  std::vector<std::string> out;
  const json::Value* t = s.Find("type");
  if (t == nullptr) return out;
  if (t->is_string()) out.push_back(t->as_string());
  if (t->is_array()) {
    for (const json::Value& x : t->as_array()) {
      if (x.is_string()) out.push_back(x.as_string());
    }
  }
  return out;
}

bool ContainsAny(std::string_view s, const std::vector<std::string>& markers) {
  for (const std::string& m : markers) {
    if (s.find(m) != std::string_view::npos) return true;
  }
  return false;
}

ValueForm FormOf(const json::Value& s, const std::vector<std::string>& closers, std::vector<std::string>* literals) {
  if (s.is_bool()) return s.as_bool() ? ValueForm::kMixed : ValueForm::kJson;
  if (!s.is_object()) return ValueForm::kJson;
  const std::vector<std::string> types = Types(s);
  bool only_annotations = true;
  for (const auto& [k, v] : s.as_object()) {
    if (k != "type" && k != "enum" && k != "const" && !IsAnnotation(k)) only_annotations = false;
  }
  if (!only_annotations) return ValueForm::kJson;
  const json::Value* e = s.Find("enum");
  const json::Value* c = s.Find("const");
  if (e != nullptr || c != nullptr) {
    if (!types.empty() && !(types.size() == 1 && types[0] == "string")) return ValueForm::kJson;
    std::vector<json::Value> values;
    if (c != nullptr) values.push_back(*c);
    if (e != nullptr && e->is_array()) values.insert(values.end(), e->as_array().begin(), e->as_array().end());
    if (e != nullptr && c != nullptr) return ValueForm::kJson;  // the intersection is the compiler's job
    for (const json::Value& v : values) {
      if (!v.is_string() || ContainsAny(v.as_string(), closers)) return ValueForm::kJson;
      literals->push_back(v.as_string());
    }
    return ValueForm::kStringEnum;
  }
  if (types.size() == 1 && types[0] == "string") return ValueForm::kRawString;
  if (types.empty() || std::find(types.begin(), types.end(), "string") != types.end()) return ValueForm::kMixed;
  return ValueForm::kJson;
}

// True when a JSON instance of `s` may contain a string (so, in V3.2, text a DSML closer).
bool MayHoldStrings(const json::Value& s) {
  if (!s.is_object()) return true;
  const std::vector<std::string> types = Types(s);
  if (types.empty()) return true;
  for (const std::string& t : types) {
    if (t != "integer" && t != "number" && t != "boolean" && t != "null") return true;
  }
  return false;
}

Status CheckKey(std::string_view key) {
  // The parser takes the key up to the first '"' of `name="KEY" string=…` and trims it.
  if (key.empty() || !tokenizer::IsValidUtf8(key)) return InvalidArgument("an empty or non-UTF-8 property name");
  if (key.find_first_of("\"<\n\r\t") != std::string_view::npos || key.front() == ' ' || key.back() == ' ') {
    return InvalidArgument(fmt::format("property name '{}' cannot be written as a DSML parameter name", key));
  }
  return Status::Ok();
}

// The property schema compiled on its own, with the root's $defs/definitions so that its
// "#/$defs/…" references still resolve.
json::Value WithRootDefs(const json::Value& sub, const json::Value& root) {
  if (!sub.is_object()) return sub;
  json::Value out = sub;
  for (const char* k : {"$defs", "definitions"}) {
    if (const json::Value* d = root.Find(k); d != nullptr && out.Find(k) == nullptr) out.Set(k, *d);
  }
  return out;
}

void Approx(grammar::CompileReport* report, std::string path, std::string what) {
  if (report != nullptr) report->approximations.push_back({std::move(path), std::move(what)});
}

}  // namespace

ExprId DsmlSpelling::Dsml(GrammarBuilder& b) const {
  return dsml_token ? b.SpecialToken(dsml_id) : b.Literal(kDsmlText);
}

ExprId DsmlSpelling::Open(GrammarBuilder& b, std::string_view rest) const {
  return b.Seq({b.Literal("<"), Dsml(b), b.Literal(rest)});
}

ExprId DsmlSpelling::Close(GrammarBuilder& b, std::string_view rest) const {
  return b.Seq({b.Literal("</"), Dsml(b), b.Literal(rest)});
}

std::vector<std::string> DsmlSpelling::ValueClosersText() const {
  if (dsml_token) return {};
  // Everything the parser ends a value at (output_parser_grammar.cc, kCtxDsmlValue).
  std::vector<std::string> out;
  for (std::string_view t : {"function_calls>", "tool_calls>", "invoke>", "parameter>"}) {
    out.push_back(fmt::format("</{}{}", kDsmlText, t));
  }
  return out;
}

std::vector<std::string> DsmlSpelling::ContentOpenersText() const {
  if (dsml_token) return {};
  // What starts a call in content (kCtxContent): either wrapper, or a bare invoke.
  std::vector<std::string> out;
  for (std::string_view t : {"function_calls>", "tool_calls>", "invoke name=\""}) {
    out.push_back(fmt::format("<{}{}", kDsmlText, t));
  }
  return out;
}

Result<ExprId> DsmlInvokeBody(GrammarBuilder& b, const frontend::Tool& tool, const DsmlSpelling& sp,
                              const grammar::JsonSchemaOptions& opts, grammar::CompileReport* report) {
  const std::string path = fmt::format("/tools/{}/parameters", tool.name);
  const ExprId nl = b.Literal("\n");
  const json::Value& schema = tool.parameters;
  if (schema.is_null() || (schema.is_bool() && schema.as_bool())) return b.Seq({nl, nl});
  if (!schema.is_object()) {
    return InvalidArgument(fmt::format("{}: the parameters schema must be an object", path));
  }
  for (const auto& [k, v] : schema.as_object()) {
    if (IsMappedTopLevel(k)) continue;
    if (tool.strict) {
      return Unsupported(fmt::format("{}/{}: not expressible as DSML parameter elements (strict tool)", path, k));
    }
    Approx(report, path + "/" + k, "not enforced: DSML arguments follow only the top-level properties and required");
  }
  const std::vector<std::string> types = Types(schema);
  if (!types.empty() && std::find(types.begin(), types.end(), "object") == types.end()) {
    return InvalidArgument(fmt::format("{}/type: tool parameters must be an object", path));
  }

  std::vector<std::string> required_names;
  if (const json::Value* r = schema.Find("required"); r != nullptr && r->is_array()) {
    for (const json::Value& x : r->as_array()) {
      if (x.is_string()) required_names.push_back(x.as_string());
    }
  }
  std::vector<std::pair<std::string, json::Value>> props;
  if (const json::Value* p = schema.Find("properties"); p != nullptr && p->is_object()) {
    for (const auto& [k, v] : p->as_object()) {
      if (std::none_of(props.begin(), props.end(), [&](const auto& kv) { return kv.first == k; })) {
        props.emplace_back(k, v);
      }
    }
  }
  // A required name with no property schema takes any value, after the listed ones.
  for (const std::string& r : required_names) {
    if (std::none_of(props.begin(), props.end(), [&](const auto& kv) { return kv.first == r; })) {
      props.emplace_back(r, json::Value::Bool(true));
    }
  }

  const std::vector<std::string> closers = sp.ValueClosersText();
  std::vector<ExprId> items;
  std::vector<bool> required;
  for (const auto& [key, sub] : props) {
    const std::string ppath = path + "/properties/" + key;
    const bool req = std::find(required_names.begin(), required_names.end(), key) != required_names.end();
    if (Status st = CheckKey(key); !st.ok()) {
      if (tool.strict || req) return Unsupported(fmt::format("{}: {}", ppath, st.message()));
      Approx(report, ppath, "never generated: its name cannot be written in DSML");
      continue;
    }
    if (sub.is_bool() && !sub.as_bool()) {
      if (req) return b.Nothing();  // the schema admits no arguments at all
      continue;
    }
    std::vector<std::string> literals;
    const ValueForm form = FormOf(sub, closers, &literals);
    const ExprId head = b.Seq({sp.Open(b, "parameter name=\""), b.Literal(key)});
    const ExprId close = sp.Close(b, "parameter>");
    std::vector<ExprId> alts;
    if (form == ValueForm::kRawString || form == ValueForm::kMixed) {
      // One shared rule for every raw value of the grammar: the automaton compiler builds its
      // DFA once instead of once per parameter.
      ExprId raw;
      if (auto rule = b.FindRule("tool_dsml_raw_value")) {
        raw = b.Ref(*rule);
      } else {
        LADLE_ASSIGN_OR_RETURN(ExprId text, TextAvoiding(b, closers));
        raw = b.Ref(b.AddRule("tool_dsml_raw_value", text));
      }
      alts.push_back(b.Seq({head, b.Literal("\" string=\"true\">"), raw, close}));
    }
    if (form == ValueForm::kStringEnum) {
      std::vector<ExprId> lits;
      for (const std::string& s : literals) lits.push_back(b.Literal(s));
      alts.push_back(b.Seq({head, b.Literal("\" string=\"true\">"), b.Alt(lits), close}));
    }
    if (form == ValueForm::kJson || form == ValueForm::kMixed) {
      const json::Value value_schema = WithRootDefs(sub, schema);
      auto value = SchemaJson(b, value_schema, opts, ppath, report);
      if (!value.ok()) {
        if (tool.strict) return value.status();
        Approx(report, ppath, fmt::format("any JSON value: the schema did not compile ({})", value.status().message()));
        value = AnyJsonValue(b, opts);
        if (!value.ok()) return value.status();
      }
      alts.push_back(b.Seq({head, b.Literal("\" string=\"false\">"), *value, close}));
      if (!sp.dsml_token && MayHoldStrings(sub)) {
        Approx(report, ppath,
               "V3.2: a string inside this JSON value is not kept from spelling a DSML closer as text, which "
               "the parser would take as the end of the value");
      }
    }
    items.push_back(b.Alt(alts));
    required.push_back(req);
  }
  return b.Seq({nl, JoinedItems(b, items, required, nl), nl});
}

}  // namespace ladle::structured::tool_grammar
