#include "ladle/structured/constraint.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <chrono>

#include "ladle/json/json.h"
#include "structured_internal.h"

namespace ladle::structured {

using frontend::ResponseFormat;
using frontend::ToolChoice;
using grammar::JsonSchemaOptions;

std::string_view ConstraintKindName(ConstraintKind k) {
  switch (k) {
    case ConstraintKind::kJsonObject: return "json_object";
    case ConstraintKind::kJsonSchema: return "json_schema";
    case ConstraintKind::kRegex: return "regex";
    case ConstraintKind::kEbnf: return "ebnf";
    case ConstraintKind::kToolCall: return "tool_call";
  }
  return "unknown";
}

Result<ConstraintKind> ParseConstraintKind(std::string_view name) {
  for (auto k : {ConstraintKind::kJsonObject, ConstraintKind::kJsonSchema, ConstraintKind::kRegex,
                 ConstraintKind::kEbnf, ConstraintKind::kToolCall}) {
    if (ConstraintKindName(k) == name) return k;
  }
  return InvalidArgument(fmt::format("unknown constraint kind '{}'", name));
}

namespace {

std::string_view WhitespaceName(JsonSchemaOptions::Whitespace w) {
  switch (w) {
    case JsonSchemaOptions::Whitespace::kCompact: return "compact";
    case JsonSchemaOptions::Whitespace::kPretty: return "pretty";
    case JsonSchemaOptions::Whitespace::kBounded: return "bounded";
  }
  return "bounded";
}

Result<JsonSchemaOptions::Whitespace> ParseWhitespace(std::string_view s) {
  if (s == "compact") return JsonSchemaOptions::Whitespace::kCompact;
  if (s == "pretty") return JsonSchemaOptions::Whitespace::kPretty;
  if (s == "bounded") return JsonSchemaOptions::Whitespace::kBounded;
  return InvalidArgument(fmt::format("unknown whitespace mode '{}' (compact, pretty, bounded)", s));
}

std::string_view ChoiceModeName(ToolChoice::Mode m) {
  switch (m) {
    case ToolChoice::Mode::kAuto: return "auto";
    case ToolChoice::Mode::kNone: return "none";
    case ToolChoice::Mode::kRequired: return "required";
    case ToolChoice::Mode::kNamed: return "named";
    case ToolChoice::Mode::kAllowed: return "allowed";
  }
  return "auto";
}

ToolChoice::Mode ParseChoiceMode(std::string_view s) {
  if (s == "none") return ToolChoice::Mode::kNone;
  if (s == "required") return ToolChoice::Mode::kRequired;
  if (s == "named") return ToolChoice::Mode::kNamed;
  if (s == "allowed") return ToolChoice::Mode::kAllowed;
  return ToolChoice::Mode::kAuto;
}

// Whether the tool choice obliges the model to call a tool (the only case constrained here).
bool ForcesToolCall(const frontend::Request& req) {
  if (req.tools.empty()) return false;
  const auto& tc = req.tool_choice;
  return tc.mode == ToolChoice::Mode::kRequired || tc.mode == ToolChoice::Mode::kNamed ||
         (tc.mode == ToolChoice::Mode::kAllowed && tc.allowed_required);
}

// auto / allowed with a strict tool: the tool grammar constrains the whole turn (free text
// or calls with schema-valid arguments).
bool StrictToolsAllowed(const frontend::Request& req) {
  const auto m = req.tool_choice.mode;
  if (req.tools.empty() || !(m == ToolChoice::Mode::kAuto || m == ToolChoice::Mode::kAllowed)) return false;
  for (const auto& t : req.tools)
    if (t.strict) return true;
  return false;
}

bool AutoTools(const frontend::Request& req) {
  const auto m = req.tool_choice.mode;
  return !req.tools.empty() && (m == ToolChoice::Mode::kAuto || (m == ToolChoice::Mode::kAllowed && !req.tool_choice.allowed_required));
}

// Tools and choice as one canonical JSON object. Only what shapes the grammar goes in
// (descriptions do not), so requests that differ in prose share a compiled grammar.
json::Value ToolPayload(const frontend::Request& req) {
  json::Value::Array tools;
  for (const auto& t : req.tools) {
    json::Value::Object o;
    o.emplace_back("name", json::Value::String(t.name));
    o.emplace_back("parameters", t.parameters);
    o.emplace_back("strict", json::Value::Bool(t.strict));
    tools.push_back(json::Value::MakeObject(std::move(o)));
  }
  json::Value::Object choice;
  choice.emplace_back("mode", json::Value::String(std::string(ChoiceModeName(req.tool_choice.mode))));
  choice.emplace_back("name", json::Value::String(req.tool_choice.name));
  json::Value::Array allowed;
  for (const auto& a : req.tool_choice.allowed) allowed.push_back(json::Value::String(a));
  choice.emplace_back("allowed", json::Value::MakeArray(std::move(allowed)));
  choice.emplace_back("allowed_required", json::Value::Bool(req.tool_choice.allowed_required));
  json::Value::Object root;
  root.emplace_back("api", json::Value::Int(static_cast<int64_t>(req.api)));
  root.emplace_back("tools", json::Value::MakeArray(std::move(tools)));
  root.emplace_back("tool_choice", json::Value::MakeObject(std::move(choice)));
  root.emplace_back("parallel", json::Value::Bool(req.parallel_tool_calls));
  return json::Value::MakeObject(std::move(root));
}

// The request field that carried the format, in the API's own names (Messages: the native
// structured-output field; its older beta spelling `output_format` maps to the same place).
std::string ParamForSchema(frontend::Api api) {
  switch (api) {
    case frontend::Api::kResponses: return "text.format.schema";
    case frontend::Api::kMessages: return "output_config.format.schema";
    default: return "response_format.json_schema.schema";
  }
}
std::string ParamForFormat(frontend::Api api) {
  switch (api) {
    case frontend::Api::kResponses: return "text.format";
    case frontend::Api::kMessages: return "output_config.format";
    default: return "response_format";
  }
}

}  // namespace

std::string ConstraintKey::Hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

ConstraintKey KeyFor(const ConstraintSpec& spec, uint64_t vocab_fingerprint) {
  // A fixed-layout header, then the payload: no separator ambiguity since the header has a
  // fixed size and the payload is last.
  std::string buf = "ladle-constraint-v1";
  buf.push_back(static_cast<char>(spec.kind));
  buf.push_back(static_cast<char>(spec.version));
  buf.push_back(static_cast<char>(spec.whitespace));
  buf.push_back(spec.allow_unlisted_properties ? 1 : 0);
  buf.push_back(spec.ends_in_thinking ? 1 : 0);
  buf.push_back(spec.lazy ? 1 : 0);
  buf.append(reinterpret_cast<const char*>(&spec.max_whitespace), sizeof(spec.max_whitespace));
  buf.append(reinterpret_cast<const char*>(&vocab_fingerprint), sizeof(vocab_fingerprint));
  buf += spec.payload;
  const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  return ConstraintKey{h.high64, h.low64};
}

Result<std::optional<ConstraintSpec>> SpecFromRequest(const frontend::Request& req, frontend::ModelVersion version,
                                                      bool ends_in_thinking) {
  ConstraintSpec spec;
  spec.version = version;
  const bool lazy = AutoTools(req) && !StrictToolsAllowed(req);
  if (ForcesToolCall(req) || StrictToolsAllowed(req) || (lazy && req.response_format.kind == ResponseFormat::Kind::kText)) {
    spec.kind = ConstraintKind::kToolCall;
    spec.lazy = lazy;
    spec.payload = json::Dump(ToolPayload(req));
    spec.ends_in_thinking = ends_in_thinking;
    spec.param = "tools";
    // Arguments are compact JSON: the DSML and marker formats carry them inline.
    spec.whitespace = JsonSchemaOptions::Whitespace::kCompact;
    return std::optional<ConstraintSpec>(std::move(spec));
  }
  const ResponseFormat& rf = req.response_format;
  switch (rf.kind) {
    case ResponseFormat::Kind::kText:
      return std::optional<ConstraintSpec>();
    case ResponseFormat::Kind::kJsonObject:
      spec.kind = ConstraintKind::kJsonObject;
      spec.param = ParamForFormat(req.api);
      break;
    case ResponseFormat::Kind::kJsonSchema:
      spec.kind = ConstraintKind::kJsonSchema;
      spec.payload = json::Dump(rf.schema);
      spec.param = ParamForSchema(req.api);
      // OpenAI's strict mode: only the listed properties (it requires additionalProperties
      // false anyway; this makes an omission mean the same).
      spec.allow_unlisted_properties = !rf.strict;
      break;
    case ResponseFormat::Kind::kRegex:
      spec.kind = ConstraintKind::kRegex;
      spec.payload = rf.grammar;
      spec.param = ParamForFormat(req.api) + ".regex";
      break;
    case ResponseFormat::Kind::kEbnf:
      spec.kind = ConstraintKind::kEbnf;
      spec.payload = rf.grammar;
      spec.param = ParamForFormat(req.api) + ".grammar";
      break;
  }
  return std::optional<ConstraintSpec>(std::move(spec));
}

std::string SpecToJson(const ConstraintSpec& spec) {
  json::Value::Object o;
  o.emplace_back("kind", json::Value::String(std::string(ConstraintKindName(spec.kind))));
  o.emplace_back("payload", json::Value::String(spec.payload));
  o.emplace_back("version", json::Value::String(std::string(frontend::ModelVersionName(spec.version))));
  o.emplace_back("whitespace", json::Value::String(std::string(WhitespaceName(spec.whitespace))));
  o.emplace_back("max_whitespace", json::Value::Int(spec.max_whitespace));
  o.emplace_back("allow_unlisted_properties", json::Value::Bool(spec.allow_unlisted_properties));
  o.emplace_back("ends_in_thinking", json::Value::Bool(spec.ends_in_thinking));
  o.emplace_back("lazy", json::Value::Bool(spec.lazy));
  o.emplace_back("param", json::Value::String(spec.param));
  return json::Dump(json::Value::MakeObject(std::move(o)));
}

Result<ConstraintSpec> SpecFromJson(std::string_view text) {
  LADLE_ASSIGN_OR_RETURN(json::Value v, json::Parse(text));
  if (!v.is_object()) return InvalidArgument("constraint spec: expected a JSON object");
  auto str = [&](const char* key) -> Result<std::string> {
    const json::Value* f = v.Find(key);
    if (f == nullptr || !f->is_string()) return InvalidArgument(fmt::format("constraint spec: '{}' must be a string", key));
    return f->as_string();
  };
  ConstraintSpec spec;
  LADLE_ASSIGN_OR_RETURN(std::string kind, str("kind"));
  LADLE_ASSIGN_OR_RETURN(spec.kind, ParseConstraintKind(kind));
  LADLE_ASSIGN_OR_RETURN(spec.payload, str("payload"));
  LADLE_ASSIGN_OR_RETURN(std::string version, str("version"));
  LADLE_ASSIGN_OR_RETURN(spec.version, frontend::ParseModelVersion(version));
  LADLE_ASSIGN_OR_RETURN(std::string ws, str("whitespace"));
  LADLE_ASSIGN_OR_RETURN(spec.whitespace, ParseWhitespace(ws));
  if (const json::Value* f = v.Find("max_whitespace"); f && f->is_number()) {
    LADLE_ASSIGN_OR_RETURN(int64_t n, f->as_int64());
    if (n < 0 || n > 1024) return InvalidArgument("constraint spec: max_whitespace out of range");
    spec.max_whitespace = static_cast<uint32_t>(n);
  }
  if (const json::Value* f = v.Find("allow_unlisted_properties"); f && f->is_bool()) {
    spec.allow_unlisted_properties = f->as_bool();
  }
  if (const json::Value* f = v.Find("ends_in_thinking"); f && f->is_bool()) spec.ends_in_thinking = f->as_bool();
  if (const json::Value* f = v.Find("lazy"); f && f->is_bool()) spec.lazy = f->as_bool();
  if (const json::Value* f = v.Find("param"); f && f->is_string()) spec.param = f->as_string();
  return spec;
}

frontend::Request ToolRequestFromPayload(const json::Value& payload) {
  frontend::Request req;
  if (const json::Value* api = payload.Find("api"); api && api->is_number()) {
    auto n = api->as_int64();
    if (n.ok() && *n >= 0 && *n <= 2) req.api = static_cast<frontend::Api>(*n);
  }
  if (const json::Value* tools = payload.Find("tools"); tools && tools->is_array()) {
    for (const auto& t : tools->as_array()) {
      frontend::Tool tool;
      if (const json::Value* n = t.Find("name"); n && n->is_string()) tool.name = n->as_string();
      if (const json::Value* p = t.Find("parameters")) tool.parameters = *p;
      if (const json::Value* s = t.Find("strict"); s && s->is_bool()) tool.strict = s->as_bool();
      req.tools.push_back(std::move(tool));
    }
  }
  if (const json::Value* c = payload.Find("tool_choice"); c && c->is_object()) {
    if (const json::Value* m = c->Find("mode"); m && m->is_string()) req.tool_choice.mode = ParseChoiceMode(m->as_string());
    if (const json::Value* n = c->Find("name"); n && n->is_string()) req.tool_choice.name = n->as_string();
    if (const json::Value* a = c->Find("allowed"); a && a->is_array()) {
      for (const auto& x : a->as_array())
        if (x.is_string()) req.tool_choice.allowed.push_back(x.as_string());
    }
    if (const json::Value* r = c->Find("allowed_required"); r && r->is_bool()) req.tool_choice.allowed_required = r->as_bool();
  }
  if (const json::Value* p = payload.Find("parallel"); p && p->is_bool()) req.parallel_tool_calls = p->as_bool();
  return req;
}

size_t CompiledConstraint::MemoryBytes() const {
  size_t n = sizeof(*this) + compiled_by.size();
  for (const auto& a : report.approximations) n += a.path.size() + a.what.size() + sizeof(a);
  if (grammar) n += grammar->MemoryBytes();
  // A lazy constraint's `grammar` is triggers[0].after: counted once, below.
  if (!triggers.empty()) n -= grammar->MemoryBytes();
  for (const auto& t : triggers) n += sizeof(t) + t.text.size() + (t.after ? t.after->MemoryBytes() : 0);
  return n;
}

Result<std::shared_ptr<const CompiledConstraint>> CompileLocally(const ConstraintSpec& spec,
                                                                 std::shared_ptr<const grammar::TokenVocabulary> vocab,
                                                                 const grammar::CompileOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = std::make_shared<CompiledConstraint>();
  out->kind = spec.kind;
  out->compiled_by = "local";
  if (spec.lazy) {
    LADLE_ASSIGN_OR_RETURN(out->triggers, CompileLazyTriggers(spec, vocab, opts, &out->report));
    if (out->triggers.empty()) return InvalidArgument("no tool-call trigger for this version");
    out->grammar = out->triggers.front().after;
    out->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return std::shared_ptr<const CompiledConstraint>(std::move(out));
  }
  LADLE_ASSIGN_OR_RETURN(grammar::Grammar g, BuildGrammar(spec, &out->report));
  LADLE_ASSIGN_OR_RETURN(out->grammar, grammar::CompiledGrammar::Compile(std::move(g), std::move(vocab), opts));
  out->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return std::shared_ptr<const CompiledConstraint>(std::move(out));
}

}  // namespace ladle::structured
