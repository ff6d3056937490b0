// Shared machinery of the three request adapters (adapter_chat.cc, adapter_responses.cc,
// adapter_messages.cc): where a value sits in the body (Path), the error-or-nothing result of
// each validation step (Check), protocol-styled error builders, and typed field getters that
// turn a wrong type or range into an ApiError naming the parameter.
//
// Conventions every adapter follows:
//   * A field that is absent and a field that is JSON null mean the same thing for optional
//     fields (official clients send null for "not given"); required fields reject both.
//   * Unknown fields are ignored. Known fields that this server cannot honour are rejected with
//     a 400 naming them, never silently dropped.
//   * Error texts follow OpenAI's wording for Chat/Responses ("Invalid type for 'messages[0]
//     .content': expected ...", codes invalid_type / invalid_value / missing_required_parameter
//     / integer_above_max_value / ...) and "<dotted.path>: <what is wrong>" for Anthropic, whose
//     error JSON has no param field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/frontend/conversation.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/json/json.h"

namespace ladle::frontend::adapter {

// Where a value sits in the request body. A Path lives on the stack and points at its parent,
// so the success path builds no strings; the text is made only when an error is reported.
// Field()/Index() are callable on named paths only: chaining on a temporary would leave the
// child pointing at a destroyed parent.
class Path {
 public:
  Path() = default;  // the body itself

  Path Field(std::string_view key) const& { return Path(this, key, 0, Kind::kField); }
  Path Index(size_t i) const& { return Path(this, {}, i, Kind::kIndex); }
  Path Field(std::string_view key) const&& = delete;
  Path Index(size_t i) const&& = delete;

  bool is_root() const { return kind_ == Kind::kRoot; }
  // OpenAI's param style: messages[3].content[0].text
  std::string Bracketed() const;
  // Anthropic's style: messages.3.content.0.text
  std::string Dotted() const;

 private:
  enum class Kind : uint8_t { kRoot, kField, kIndex };
  Path(const Path* parent, std::string_view key, size_t index, Kind kind)
      : parent_(parent), key_(key), index_(index), kind_(kind) {}
  void Append(bool dotted, std::string* out) const;

  const Path* parent_ = nullptr;
  std::string_view key_;
  size_t index_ = 0;
  Kind kind_ = Kind::kRoot;
};

// One validation step's outcome: OK, or the ApiError to answer with. The error sits behind a
// pointer so the OK path is a single null word.
class [[nodiscard]] Check {
 public:
  Check() = default;
  Check(ApiError e) : error_(std::make_unique<ApiError>(std::move(e))) {}  // NOLINT: implicit by design
  bool ok() const { return error_ == nullptr; }
  ApiError TakeError() { return std::move(*error_); }

 private:
  std::unique_ptr<ApiError> error_;
};

#define LADLE_ADAPT_TRY(expr)                    \
  do {                                           \
    ::ladle::frontend::adapter::Check c_ = (expr); \
    if (!c_.ok()) return c_;                     \
  } while (0)

// What every helper needs to know: which protocol (for the error style) and the limits.
struct Ctx {
  Api api;
  const Limits& limits;
  bool anthropic() const { return api == Api::kMessages; }
};

// ---- error builders ----------------------------------------------------------------------

// A required field is absent or null.
ApiError ErrMissing(const Ctx& ctx, const Path& path);
// Wrong JSON type. `expected` reads after "expected": "a string", "an array of objects", ...
ApiError ErrType(const Ctx& ctx, const Path& path, std::string_view expected, const json::Value& got);
// A value of the right type that is not acceptable; `detail` says why.
ApiError ErrValue(const Ctx& ctx, const Path& path, std::string_view detail,
                  std::string_view code = "invalid_value");
// A string outside its enumeration.
ApiError ErrEnum(const Ctx& ctx, const Path& path, std::string_view got,
                 std::initializer_list<std::string_view> allowed);
// A known field or value that this server cannot honour (code unsupported_parameter or
// unsupported_value).
ApiError ErrUnsupported(const Ctx& ctx, const Path& path, std::string_view detail,
                        std::string_view code = "unsupported_value");
// An array longer than `max` (code array_above_max_length), naming the limit.
ApiError ErrTooLong(const Ctx& ctx, const Path& path, size_t max, size_t got);
// An error about the request as a whole (no param).
ApiError ErrRequest(const Ctx& ctx, std::string message, StatusCode status = StatusCode::kInvalidArgument);

// "an integer", "a decimal number", "a string", "a boolean", "an array", "an object", "null".
std::string_view DescribeType(const json::Value& v);

// ---- body ----------------------------------------------------------------------------------

// Size limit (413), JSON parse (400, "not valid JSON"), nesting limit, and "must be an object".
Check ParseBody(const Ctx& ctx, std::string_view body, json::Value* out);

// ParseBody, then `adapt` on the parsed object: the shared outer shape of AdaptChat & co.
using BodyAdapter = Check (*)(const Ctx& ctx, const json::Value& body, Request* req);
Adapted Run(const Ctx& ctx, std::string_view body, BodyAdapter adapt);

// ---- typed getters -------------------------------------------------------------------------
// `obj` is the object holding `key`, `path` is where `obj` sits. On absence/null the output is
// left as "not given" (nullptr / nullopt) and the optional getters succeed.

// The field's value, or nullptr when absent or null.
const json::Value* Get(const json::Value& obj, std::string_view key);

Check ReqField(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
               const json::Value** out);
Check OptString(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                const std::string** out);
Check ReqString(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                const std::string** out);
Check OptBool(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
              std::optional<bool>* out);
Check OptObject(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                const json::Value** out);
Check ReqObject(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                const json::Value** out);
Check OptArray(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
               const json::Value** out);
Check ReqArray(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
               const json::Value** out);

// A number in [lo, hi] (lo excluded when lo_open). Range errors use OpenAI's
// decimal_below_min_value / decimal_above_max_value codes.
struct Range {
  double lo, hi;
  bool lo_open = false;
};
Check OptNumber(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                Range range, std::optional<double>* out);
// An integer (no fraction or exponent in its text) in [lo, hi]; codes invalid_type,
// integer_below_min_value / integer_above_max_value.
Check OptInt(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
             int64_t lo, int64_t hi, std::optional<int64_t>* out);
Check ReqInt(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
             int64_t lo, int64_t hi, int64_t* out);

// Value-level checks, for array elements and fields already fetched.
Check ExpectString(const Ctx& ctx, const json::Value& v, const Path& path, const std::string** out);
Check ExpectObject(const Ctx& ctx, const json::Value& v, const Path& path);
// The element count against `max` (array_above_max_length), and non-empty when min_one.
Check CheckLength(const Ctx& ctx, const json::Value& array, const Path& path, size_t max, bool min_one);
// A string that must be one of `allowed`.
Check ExpectEnum(const Ctx& ctx, const json::Value& v, const Path& path,
                 std::initializer_list<std::string_view> allowed, const std::string** out);

// ---- shared conversions ---------------------------------------------------------------------

// Python's json.loads keeps one entry per key (first position, last value); json::Value keeps
// every duplicate. Values that are later printed into prompts (schemas, tool lists, Anthropic
// tool_use input) are folded to Python's view so json.dumps-equality holds.
void FoldDuplicateKeys(json::Value* v);

// ^[a-zA-Z0-9_-]{1,64}$, the function-name rule of OpenAI and Anthropic.
Check CheckFunctionName(const Ctx& ctx, const std::string& name, const Path& path);

// Fills tool->name / description / parameters / strict from `fn`, the object that holds them
// (Chat: tools[i].function; Responses: tools[i]; Messages: tools[i] with "input_schema").
Check ParseFunctionTool(const Ctx& ctx, const json::Value& fn, const Path& path,
                        std::string_view schema_key, bool schema_required, Tool* tool);
// Tool-count limit and unique names, after all tools are parsed.
Check CheckToolSet(const Ctx& ctx, const std::vector<Tool>& tools, const Path& tools_path);
// Named and allowed-tools choices must name tools that exist; any choice other than none/auto
// needs tools.
Check CheckToolChoice(const Ctx& ctx, const Request& req, const Path& choice_path,
                      const Path& name_path);

// A stop list: a string or an array of non-empty strings, at most limits.max_stop.
Check ParseStopList(const Ctx& ctx, const json::Value& v, const Path& path, bool allow_string,
                    std::vector<std::string>* out);

// An object of string values (OpenAI metadata), kept as given.
Check ParseMetadata(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path,
                    json::Value* out);

// OpenAI reasoning effort: none | minimal | low | medium | high | xhigh.
Check ParseEffort(const Ctx& ctx, const json::Value& v, const Path& path, std::string* out);

// A response format object. `nested` is Chat's shape ({type:"json_schema", json_schema:{name,
// schema, strict}}); otherwise Responses' flat text.format ({type:"json_schema", name, schema,
// strict}). Both accept the regex / ebnf extensions (see adapter_common.cc).
Check ParseResponseFormat(const Ctx& ctx, const json::Value& v, const Path& path, bool nested,
                          ResponseFormat* out);

// An image URL: http(s) or a data: URI. Sets media_type from a data URI.
Check ParseImageUrl(const Ctx& ctx, const std::string& url, const Path& path, ImagePart* out);

// Gives each tool message without a name the name of the call it answers (the latest earlier
// assistant tool call with that id), so every adapter hands encoders the same linking data.
void LinkToolNames(std::vector<Message>* messages);

// Appends a text part unless the text is empty (a plain-string content of "" has no parts).
void AddText(Message* m, std::string text);

}  // namespace ladle::frontend::adapter
