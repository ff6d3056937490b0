// Shared validation for the request adapters. Decisions that apply to every protocol live here:
//
//   * Response-format extensions (Chat response_format and Responses text.format): besides
//     text / json_object / json_schema, {"type":"regex","regex":"..."} (or "pattern" for the
//     same thing) and {"type":"ebnf","ebnf":"..."} / {"type":"grammar","grammar":"..."} (either
//     key works with either type). Giving both spellings in one object is a 400: silently
//     picking one would hide a client bug. A json_schema without "schema" means "any JSON"
//     and is stored as {}.
//   * Stop strings must be non-empty: "" would match at every position.
//   * Function names follow ^[a-zA-Z0-9_-]{1,64}$ in all three protocols; duplicate tool names
//     are a 400 because a named tool_choice (and the model's calls) could not tell them apart.
//   * Image URLs must be http(s) or data: URIs; other schemes are a 400 here rather than a
//     fetch failure later.
#include "adapter_common.h"

#include <fmt/format.h>

#include <cmath>
#include <string_view>
#include <unordered_map>

namespace ladle::frontend::adapter {

// ---- Path ------------------------------------------------------------------------------------

void Path::Append(bool dotted, std::string* out) const {
  if (kind_ == Kind::kRoot) return;
  parent_->Append(dotted, out);
  if (kind_ == Kind::kField) {
    if (!out->empty()) out->push_back('.');
    out->append(key_);
  } else if (dotted) {
    if (!out->empty()) out->push_back('.');
    out->append(std::to_string(index_));
  } else {
    fmt::format_to(std::back_inserter(*out), "[{}]", index_);
  }
}

std::string Path::Bracketed() const {
  std::string out;
  Append(false, &out);
  return out;
}

std::string Path::Dotted() const {
  std::string out;
  Append(true, &out);
  return out;
}

// ---- errors ----------------------------------------------------------------------------------

std::string_view DescribeType(const json::Value& v) {
  switch (v.type()) {
    case json::Value::Type::kNull: return "null";
    case json::Value::Type::kBool: return "a boolean";
    case json::Value::Type::kNumber: return v.is_integer() ? "an integer" : "a decimal number";
    case json::Value::Type::kString: return "a string";
    case json::Value::Type::kArray: return "an array";
    case json::Value::Type::kObject: return "an object";
  }
  return "an unknown value";
}

namespace {

ApiError Make(const Ctx& ctx, const Path& path, std::string openai_message,
              std::string_view anthropic_detail, std::string_view code) {
  ApiError e;
  e.param = path.Bracketed();
  e.code = std::string(code);
  if (ctx.anthropic()) {
    e.message = path.is_root() ? std::string(anthropic_detail)
                               : fmt::format("{}: {}", path.Dotted(), anthropic_detail);
  } else {
    e.message = std::move(openai_message);
  }
  return e;
}

// How a value is quoted inside an error message: strings in quotes (shortened), others as JSON.
std::string Shown(const json::Value& v) {
  std::string text = v.is_string() ? v.as_string() : json::Dump(v);
  if (text.size() > 64) {
    size_t cut = 61;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    text.resize(cut);
    text += "...";
  }
  return text;
}

std::string FormatNumber(double d) {
  if (d == std::floor(d) && std::fabs(d) < 1e15) return fmt::format("{}", static_cast<int64_t>(d));
  return fmt::format("{}", d);
}

}  // namespace

ApiError ErrMissing(const Ctx& ctx, const Path& path) {
  return Make(ctx, path, fmt::format("Missing required parameter: '{}'.", path.Bracketed()),
              "Field required", "missing_required_parameter");
}

ApiError ErrType(const Ctx& ctx, const Path& path, std::string_view expected, const json::Value& got) {
  const std::string_view got_type = DescribeType(got);
  return Make(ctx, path,
              fmt::format("Invalid type for '{}': expected {}, but got {} instead.", path.Bracketed(),
                          expected, got_type),
              fmt::format("Input should be {}, but got {}", expected, got_type), "invalid_type");
}

ApiError ErrValue(const Ctx& ctx, const Path& path, std::string_view detail, std::string_view code) {
  std::string openai = path.is_root() ? std::string(detail)
                                      : fmt::format("Invalid value for '{}': {}", path.Bracketed(), detail);
  return Make(ctx, path, std::move(openai), detail, code);
}

ApiError ErrEnum(const Ctx& ctx, const Path& path, std::string_view got,
                 std::initializer_list<std::string_view> allowed) {
  // OpenAI lists "'a', 'b', and 'c'"; the Anthropic text reads "Input should be 'a', 'b' or 'c'".
  auto join = [&](std::string_view last_sep, std::string_view last_sep_of_two) {
    std::string list;
    size_t i = 0;
    for (std::string_view a : allowed) {
      if (i > 0) list += (i + 1 == allowed.size()) ? (allowed.size() > 2 ? last_sep : last_sep_of_two) : ", ";
      fmt::format_to(std::back_inserter(list), "'{}'", a);
      ++i;
    }
    return list;
  };
  const std::string shown = Shown(json::Value::String(std::string(got)));
  return Make(ctx, path, fmt::format("Invalid value: '{}'. Supported values are: {}.", shown, join(", and ", " and ")),
              fmt::format("Input should be {}, but got '{}'", join(" or ", " or "), shown), "invalid_value");
}

ApiError ErrUnsupported(const Ctx& ctx, const Path& path, std::string_view detail, std::string_view code) {
  std::string openai = path.is_root() ? std::string(detail)
                                      : fmt::format("Unsupported value for '{}': {}", path.Bracketed(), detail);
  if (code == "unsupported_parameter" && !path.is_root()) {
    openai = fmt::format("Unsupported parameter: '{}': {}", path.Bracketed(), detail);
  }
  return Make(ctx, path, std::move(openai), detail, code);
}

ApiError ErrTooLong(const Ctx& ctx, const Path& path, size_t max, size_t got) {
  return Make(ctx, path,
              fmt::format("Invalid '{}': array too long. Expected an array with maximum length {}, but "
                          "got an array with length {} instead.",
                          path.Bracketed(), max, got),
              fmt::format("at most {} items are allowed (the server's limit), but got {}", max, got),
              "array_above_max_length");
}

ApiError ErrRequest(const Ctx& ctx, std::string message, StatusCode status) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  return e;
}

// ---- body ------------------------------------------------------------------------------------

Check ParseBody(const Ctx& ctx, std::string_view body, json::Value* out) {
  if (body.size() > ctx.limits.max_body_bytes) {
    ApiError e = ErrRequest(ctx,
                            fmt::format("Request body of {} bytes exceeds the maximum of {} bytes.",
                                        body.size(), ctx.limits.max_body_bytes),
                            StatusCode::kPayloadTooLarge);
    if (ctx.anthropic()) {
      e.type = "request_too_large";
    } else {
      e.code = "request_too_large";
    }
    return e;
  }
  json::ParseOptions opts;
  opts.max_depth = ctx.limits.max_json_depth;
  opts.max_bytes = ctx.limits.max_body_bytes;
  auto parsed = json::Parse(body, opts);
  if (!parsed.ok()) {
    const Status status = parsed.status();  // status() returns a copy: keep it alive
    std::string_view reason = status.message();
    if (reason.starts_with("invalid JSON: ")) reason.remove_prefix(14);  // said once is enough
    return ErrRequest(ctx, fmt::format("The request body is not valid JSON ({}). The API expects a JSON "
                                       "object as the body.",
                                       reason));
  }
  if (!parsed->is_object()) {
    return ErrRequest(ctx, fmt::format("The request body must be a JSON object, but got {}.",
                                       DescribeType(*parsed)));
  }
  *out = std::move(parsed).value();
  return {};
}

Adapted Run(const Ctx& ctx, std::string_view body, BodyAdapter adapt) {
  Adapted out;
  json::Value root;
  Check parsed = ParseBody(ctx, body, &root);
  if (!parsed.ok()) {
    out.error = parsed.TakeError();
    return out;
  }
  Request req;
  Check adapted = adapt(ctx, root, &req);
  if (!adapted.ok()) {
    out.error = adapted.TakeError();
    return out;
  }
  out.request = std::move(req);
  return out;
}

// ---- getters ---------------------------------------------------------------------------------

const json::Value* Get(const json::Value& obj, std::string_view key) {
  const json::Value* v = obj.Find(key);
  return (v == nullptr || v->is_null()) ? nullptr : v;
}

Check ReqField(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
               const json::Value** out) {
  *out = Get(obj, key);
  if (*out == nullptr) return ErrMissing(ctx, path.Field(key));
  return {};
}

Check ExpectString(const Ctx& ctx, const json::Value& v, const Path& path, const std::string** out) {
  if (!v.is_string()) return ErrType(ctx, path, "a string", v);
  *out = &v.as_string();
  return {};
}

Check ExpectObject(const Ctx& ctx, const json::Value& v, const Path& path) {
  if (!v.is_object()) return ErrType(ctx, path, "an object", v);
  return {};
}

Check OptString(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                const std::string** out) {
  *out = nullptr;
  const json::Value* v = Get(obj, key);
  if (v == nullptr) return {};
  return ExpectString(ctx, *v, path.Field(key), out);
}

Check ReqString(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                const std::string** out) {
  const json::Value* v = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, obj, key, path, &v));
  return ExpectString(ctx, *v, path.Field(key), out);
}

Check OptBool(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
              std::optional<bool>* out) {
  const json::Value* v = Get(obj, key);
  if (v == nullptr) return {};
  if (!v->is_bool()) return ErrType(ctx, path.Field(key), "a boolean", *v);
  *out = v->as_bool();
  return {};
}

Check OptObject(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                const json::Value** out) {
  *out = Get(obj, key);
  if (*out != nullptr && !(*out)->is_object()) return ErrType(ctx, path.Field(key), "an object", **out);
  return {};
}

Check ReqObject(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                const json::Value** out) {
  LADLE_ADAPT_TRY(ReqField(ctx, obj, key, path, out));
  if (!(*out)->is_object()) return ErrType(ctx, path.Field(key), "an object", **out);
  return {};
}

Check OptArray(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
               const json::Value** out) {
  *out = Get(obj, key);
  if (*out != nullptr && !(*out)->is_array()) return ErrType(ctx, path.Field(key), "an array", **out);
  return {};
}

Check ReqArray(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
               const json::Value** out) {
  LADLE_ADAPT_TRY(ReqField(ctx, obj, key, path, out));
  if (!(*out)->is_array()) return ErrType(ctx, path.Field(key), "an array", **out);
  return {};
}

Check OptNumber(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                Range range, std::optional<double>* out) {
  const json::Value* v = Get(obj, key);
  if (v == nullptr) return {};
  const Path p = path.Field(key);
  if (!v->is_number()) return ErrType(ctx, p, "a number", *v);
  const double d = v->as_double();
  if (!std::isfinite(d)) return ErrValue(ctx, p, "the number is not finite");
  if (d < range.lo || (range.lo_open && d == range.lo)) {
    const std::string bound = FormatNumber(range.lo);
    return Make(ctx, p,
                fmt::format("Invalid '{}': decimal below minimum value. Expected a value {} {}, but got {} "
                            "instead.",
                            p.Bracketed(), range.lo_open ? ">" : ">=", bound, v->as_string()),
                fmt::format("Input should be {} {}", range.lo_open ? "greater than" : "greater than or equal to",
                            bound),
                "decimal_below_min_value");
  }
  if (d > range.hi) {
    const std::string bound = FormatNumber(range.hi);
    return Make(ctx, p,
                fmt::format("Invalid '{}': decimal above maximum value. Expected a value <= {}, but got {} "
                            "instead.",
                            p.Bracketed(), bound, v->as_string()),
                fmt::format("Input should be less than or equal to {}", bound), "decimal_above_max_value");
  }
  *out = d;
  return {};
}

namespace {

Check CheckInt(const Ctx& ctx, const json::Value& v, const Path& p, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number() || !v.is_integer()) return ErrType(ctx, p, "an integer", v);
  auto parsed = v.as_int64();
  // Digits beyond int64 are out of range on the side of their sign.
  const bool negative = !v.as_string().empty() && v.as_string()[0] == '-';
  if (!parsed.ok() || *parsed < lo || *parsed > hi) {
    const bool below = parsed.ok() ? *parsed < lo : negative;
    if (below) {
      return Make(ctx, p,
                  fmt::format("Invalid '{}': integer below minimum value. Expected a value >= {}, but got {} "
                              "instead.",
                              p.Bracketed(), lo, v.as_string()),
                  fmt::format("Input should be greater than or equal to {}", lo), "integer_below_min_value");
    }
    return Make(ctx, p,
                fmt::format("Invalid '{}': integer above maximum value. Expected a value <= {}, but got {} "
                            "instead.",
                            p.Bracketed(), hi, v.as_string()),
                fmt::format("Input should be less than or equal to {}", hi), "integer_above_max_value");
  }
  *out = *parsed;
  return {};
}

}  // namespace

Check OptInt(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path, int64_t lo,
             int64_t hi, std::optional<int64_t>* out) {
  const json::Value* v = Get(obj, key);
  if (v == nullptr) return {};
  int64_t value = 0;
  LADLE_ADAPT_TRY(CheckInt(ctx, *v, path.Field(key), lo, hi, &value));
  *out = value;
  return {};
}

Check ReqInt(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path, int64_t lo,
             int64_t hi, int64_t* out) {
  const json::Value* v = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, obj, key, path, &v));
  return CheckInt(ctx, *v, path.Field(key), lo, hi, out);
}

Check CheckLength(const Ctx& ctx, const json::Value& array, const Path& path, size_t max, bool min_one) {
  const size_t n = array.as_array().size();
  if (min_one && n == 0) {
    return Make(ctx, path,
                fmt::format("Invalid '{}': empty array. Expected an array with minimum length 1, but got an "
                            "empty array instead.",
                            path.Bracketed()),
                "at least one item is required", "empty_array");
  }
  if (n > max) return ErrTooLong(ctx, path, max, n);
  return {};
}

Check ExpectEnum(const Ctx& ctx, const json::Value& v, const Path& path,
                 std::initializer_list<std::string_view> allowed, const std::string** out) {
  LADLE_ADAPT_TRY(ExpectString(ctx, v, path, out));
  for (std::string_view a : allowed) {
    if (**out == a) return {};
  }
  return ErrEnum(ctx, path, **out, allowed);
}

// ---- shared conversions ----------------------------------------------------------------------

void FoldDuplicateKeys(json::Value* v) {
  if (v->is_array()) {
    for (auto& e : v->as_array()) FoldDuplicateKeys(&e);
    return;
  }
  if (!v->is_object()) return;
  auto& members = v->as_object();
  // Python's dict: a repeated key keeps its first position and takes the last value.
  bool has_dup = false;
  if (members.size() <= 16) {
    for (size_t i = 0; i < members.size() && !has_dup; ++i) {
      for (size_t j = i + 1; j < members.size(); ++j) {
        if (members[i].first == members[j].first) {
          has_dup = true;
          break;
        }
      }
    }
  } else {
    std::unordered_map<std::string_view, size_t> seen;
    for (const auto& m : members) {
      if (!seen.emplace(m.first, 0).second) {
        has_dup = true;
        break;
      }
    }
  }
  if (has_dup) {
    json::Value::Object folded;
    std::unordered_map<std::string, size_t> index;
    for (auto& m : members) {
      auto [it, fresh] = index.emplace(m.first, folded.size());
      if (fresh) {
        folded.push_back(std::move(m));
      } else {
        folded[it->second].second = std::move(m.second);
      }
    }
    members = std::move(folded);
  }
  for (auto& m : members) FoldDuplicateKeys(&m.second);
}

Check CheckFunctionName(const Ctx& ctx, const std::string& name, const Path& path) {
  if (name.empty() || name.size() > 64) {
    return ErrValue(ctx, path,
                    fmt::format("function names must be 1 to 64 characters long, but got {} characters.",
                                name.size()),
                    name.empty() ? "empty_string" : "string_above_max_length");
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-';
    if (!ok) {
      return ErrValue(ctx, path,
                      fmt::format("string does not match pattern. Expected a string that matches the pattern "
                                  "'^[a-zA-Z0-9_-]{{1,64}}$', but got '{}'.",
                                  Shown(json::Value::String(name))));
    }
  }
  return {};
}

Check ParseFunctionTool(const Ctx& ctx, const json::Value& fn, const Path& path, std::string_view schema_key,
                        bool schema_required, Tool* tool) {
  const std::string* name = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, fn, "name", path, &name));
  LADLE_ADAPT_TRY(CheckFunctionName(ctx, *name, path.Field("name")));
  tool->name = *name;
  const std::string* description = nullptr;
  LADLE_ADAPT_TRY(OptString(ctx, fn, "description", path, &description));
  if (description != nullptr) {
    tool->description = *description;
    tool->has_description = true;
  }
  const json::Value* schema = nullptr;
  if (schema_required) {
    LADLE_ADAPT_TRY(ReqObject(ctx, fn, schema_key, path, &schema));
  } else {
    LADLE_ADAPT_TRY(OptObject(ctx, fn, schema_key, path, &schema));
  }
  if (schema != nullptr) {
    tool->parameters = *schema;
    FoldDuplicateKeys(&tool->parameters);
  }
  std::optional<bool> strict;
  LADLE_ADAPT_TRY(OptBool(ctx, fn, "strict", path, &strict));
  tool->strict = strict.value_or(false);
  return {};
}

Check CheckToolSet(const Ctx& ctx, const std::vector<Tool>& tools, const Path& tools_path) {
  if (tools.size() > ctx.limits.max_tools) return ErrTooLong(ctx, tools_path, ctx.limits.max_tools, tools.size());
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t i = 0; i < tools.size(); ++i) {
    auto [it, fresh] = seen.emplace(tools[i].name, i);
    if (!fresh) {
      const Path p = tools_path.Index(i);
      return ErrValue(ctx, p,
                      fmt::format("duplicate tool name '{}' (also tools[{}]); tool names must be unique.",
                                  tools[i].name, it->second));
    }
  }
  return {};
}

Check CheckToolChoice(const Ctx& ctx, const Request& req, const Path& choice_path, const Path& name_path) {
  const ToolChoice& tc = req.tool_choice;
  if (tc.mode == ToolChoice::Mode::kNone || tc.mode == ToolChoice::Mode::kAuto) return {};
  if (req.tools.empty()) {
    return ErrValue(ctx, choice_path,
                    ctx.anthropic() ? "tool_choice requires tools to be specified."
                                    : "'tool_choice' is only allowed when 'tools' are specified.");
  }
  auto exists = [&](const std::string& name) {
    for (const Tool& t : req.tools) {
      if (t.name == name) return true;
    }
    return false;
  };
  if (tc.mode == ToolChoice::Mode::kNamed && !exists(tc.name)) {
    return ErrValue(ctx, name_path, fmt::format("no tool named '{}' is given in 'tools'.", tc.name));
  }
  if (tc.mode == ToolChoice::Mode::kAllowed) {
    for (const std::string& name : tc.allowed) {
      if (!exists(name)) {
        return ErrValue(ctx, choice_path,
                        fmt::format("allowed tool '{}' is not given in 'tools'.", name));
      }
    }
  }
  return {};
}

Check ParseStopList(const Ctx& ctx, const json::Value& v, const Path& path, bool allow_string,
                    std::vector<std::string>* out) {
  auto add = [&](const json::Value& s, const Path& p) -> Check {
    const std::string* text = nullptr;
    LADLE_ADAPT_TRY(ExpectString(ctx, s, p, &text));
    if (text->empty()) return ErrValue(ctx, p, "stop sequences must not be empty strings.", "empty_string");
    out->push_back(*text);
    return {};
  };
  if (allow_string && v.is_string()) return add(v, path);
  if (!v.is_array()) {
    return ErrType(ctx, path, allow_string ? "a string or an array of strings" : "an array of strings", v);
  }
  LADLE_ADAPT_TRY(CheckLength(ctx, v, path, ctx.limits.max_stop, false));
  const auto& items = v.as_array();
  for (size_t i = 0; i < items.size(); ++i) LADLE_ADAPT_TRY(add(items[i], path.Index(i)));
  return {};
}

Check ParseMetadata(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                    json::Value* out) {
  const json::Value* v = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, obj, key, path, &v));
  if (v == nullptr) return {};
  const Path mp = path.Field(key);
  for (const auto& [k, value] : v->as_object()) {
    if (!value.is_string()) {
      const Path vp = mp.Field(k);
      return ErrType(ctx, vp, "a string", value);
    }
  }
  *out = *v;
  FoldDuplicateKeys(out);
  return {};
}

Check ParseEffort(const Ctx& ctx, const json::Value& v, const Path& path, std::string* out) {
  const std::string* effort = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, v, path, {"none", "minimal", "low", "medium", "high", "xhigh"}, &effort));
  *out = *effort;
  return {};
}

namespace {

// One of two spellings of a string field; both given is an error.
Check EitherString(const Ctx& ctx, const json::Value& obj, std::string_view a, std::string_view b,
                   const Path& path, std::string* out) {
  const std::string* va = nullptr;
  const std::string* vb = nullptr;
  LADLE_ADAPT_TRY(OptString(ctx, obj, a, path, &va));
  LADLE_ADAPT_TRY(OptString(ctx, obj, b, path, &vb));
  if (va != nullptr && vb != nullptr) {
    return ErrValue(ctx, path.Field(b), fmt::format("give either '{}' or '{}', not both.", a, b));
  }
  if (va == nullptr && vb == nullptr) return ErrMissing(ctx, path.Field(a));
  *out = va != nullptr ? *va : *vb;
  return {};
}

}  // namespace

Check ParseResponseFormat(const Ctx& ctx, const json::Value& v, const Path& path, bool nested,
                          ResponseFormat* out) {
  LADLE_ADAPT_TRY(ExpectObject(ctx, v, path));
  const json::Value* type_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, v, "type", path, &type_value));
  const Path type_path = path.Field("type");
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *type_value, type_path,
                             {"text", "json_object", "json_schema", "regex", "ebnf", "grammar"}, &type));
  *out = ResponseFormat();
  if (*type == "text") return {};
  if (*type == "json_object") {
    out->kind = ResponseFormat::Kind::kJsonObject;
    return {};
  }
  if (*type == "regex") {
    out->kind = ResponseFormat::Kind::kRegex;
    LADLE_ADAPT_TRY(EitherString(ctx, v, "regex", "pattern", path, &out->grammar));
    if (out->grammar.empty()) return ErrValue(ctx, path.Field("regex"), "the pattern must not be empty.");
    return {};
  }
  if (*type == "ebnf" || *type == "grammar") {
    out->kind = ResponseFormat::Kind::kEbnf;
    LADLE_ADAPT_TRY(EitherString(ctx, v, "grammar", "ebnf", path, &out->grammar));
    if (out->grammar.empty()) return ErrValue(ctx, path.Field("grammar"), "the grammar must not be empty.");
    return {};
  }
  // json_schema
  out->kind = ResponseFormat::Kind::kJsonSchema;
  const json::Value* holder = &v;
  const Path nested_path = path.Field("json_schema");
  const Path& hp = nested ? nested_path : path;
  if (nested) LADLE_ADAPT_TRY(ReqObject(ctx, v, "json_schema", path, &holder));
  const std::string* name = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, *holder, "name", hp, &name));
  LADLE_ADAPT_TRY(CheckFunctionName(ctx, *name, hp.Field("name")));
  out->name = *name;
  const json::Value* schema = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, *holder, "schema", hp, &schema));
  out->schema = schema != nullptr ? *schema : json::Value::MakeObject();
  FoldDuplicateKeys(&out->schema);
  std::optional<bool> strict;
  LADLE_ADAPT_TRY(OptBool(ctx, *holder, "strict", hp, &strict));
  out->strict = strict.value_or(false);
  return {};
}

Check ParseImageUrl(const Ctx& ctx, const std::string& url, const Path& path, ImagePart* out) {
  const std::string_view u = url;
  if (u.starts_with("data:")) {
    // data:[<media type>][;base64],<data>
    const size_t comma = u.find(',');
    if (comma == std::string_view::npos) {
      return ErrValue(ctx, path, "the data URI has no ',' before its data.", "invalid_image_url");
    }
    std::string_view meta = u.substr(5, comma - 5);
    const size_t semi = meta.find(';');
    out->media_type = std::string(meta.substr(0, semi));
  } else if (!u.starts_with("http://") && !u.starts_with("https://")) {
    return ErrValue(ctx, path, "expected an http(s) URL or a data: URI.", "invalid_image_url");
  }
  out->url = url;
  return {};
}

void LinkToolNames(std::vector<Message>* messages) {
  std::unordered_map<std::string_view, std::string_view> names;  // call id → tool name
  for (Message& m : *messages) {
    for (const ToolCall& c : m.tool_calls) {
      if (!c.id.empty()) names[c.id] = c.name;
    }
    if (m.role == Role::kTool && m.name.empty() && !m.tool_call_id.empty()) {
      if (auto it = names.find(m.tool_call_id); it != names.end()) m.name = std::string(it->second);
    }
  }
}

void AddText(Message* m, std::string text) {
  if (text.empty()) return;
  ContentPart part;
  part.kind = ContentPart::Kind::kText;
  part.text = std::move(text);
  m->content.push_back(std::move(part));
}

}  // namespace ladle::frontend::adapter
