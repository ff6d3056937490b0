#include "writer_common.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <chrono>
#include <random>

#include "ladle/core/status.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/frontend/response_writers.h"
#include "ladle/json/json.h"

namespace ladle::frontend {

namespace writer_internal {

void BeginNamedFrame(std::string_view name, std::string* out) {
  out->append("event: ");
  out->append(name);
  out->append("\ndata: ");
}

void BeginDataFrame(std::string* out) { out->append("data: "); }

void AppendInt(int64_t v, std::string* out) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, p);
}

void AppendDouble(double v, std::string* out) { json::DumpTo(json::Value::Double(v), json::Style::kCompact, out); }

void AppendQuotedOrNull(std::string_view s, std::string* out) {
  if (s.empty()) {
    out->append("null");
  } else {
    json::AppendQuoted(s, out);
  }
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode Table 3-7), or 0 if none starts
// there.
size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + need >= s.size()) return 0;  // cut short
  for (size_t j = 1; j <= need; ++j) {
    const auto b = static_cast<unsigned char>(s[i + j]);
    if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) return 0;
  }
  return need + 1;
}

}  // namespace

std::string LogprobTokenText(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  bool escaped = false;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = Utf8SequenceAt(bytes, i);
    if (n > 0) {
      text.append(bytes.substr(i, n));
      i += n;
      continue;
    }
    const auto b = static_cast<unsigned char>(bytes[i++]);
    text += "\\x";
    text.push_back(kHex[b >> 4]);
    text.push_back(kHex[b & 15]);
    escaped = true;
  }
  return escaped ? "bytes:" + text : text;
}

void AppendLogprobValue(float v, std::string* out) {
  if (!std::isfinite(v)) {
    out->append("-9999.0");
    return;
  }
  // The float's own shortest form: widening to double first would print digits the engine
  // never computed (-0.31725305f as -0.3172530531883240).
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, p);
}

namespace {

void AppendLogprobHead(std::string_view bytes, float logprob, std::string* out) {
  out->append("{\"token\":");
  json::AppendQuoted(LogprobTokenText(bytes), out);
  out->append(",\"logprob\":");
  AppendLogprobValue(logprob, out);
  out->append(",\"bytes\":[");
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i) out->push_back(',');
    AppendInt(static_cast<unsigned char>(bytes[i]), out);
  }
  out->push_back(']');
}

}  // namespace

void AppendTokenLogprob(const TokenLogprob& t, std::string* out) {
  AppendLogprobHead(t.bytes, t.logprob, out);
  out->append(",\"top_logprobs\":[");
  for (size_t i = 0; i < t.top.size(); ++i) {
    if (i) out->push_back(',');
    AppendLogprobHead(t.top[i].bytes, t.top[i].logprob, out);
    out->push_back('}');
  }
  out->append("]}");
}

void AppendLogprobEntries(const std::vector<TokenLogprob>& lps, size_t* count, std::string* out) {
  for (const TokenLogprob& t : lps) {
    if ((*count)++) out->push_back(',');
    AppendTokenLogprob(t, out);
  }
}

std::string_view IdBody(std::string_view id) {
  size_t cut = id.find_first_of("-_");
  return cut == std::string_view::npos ? id : id.substr(cut + 1);
}

void AppendChatUsage(const Usage& u, std::string* out) {
  out->append("{\"prompt_tokens\":");
  AppendInt(u.prompt_tokens, out);
  out->append(",\"completion_tokens\":");
  AppendInt(u.completion_tokens, out);
  out->append(",\"total_tokens\":");
  AppendInt(u.prompt_tokens + u.completion_tokens, out);
  out->append(",\"prompt_tokens_details\":{\"cached_tokens\":");
  AppendInt(u.cached_tokens, out);
  out->append("},\"completion_tokens_details\":{\"reasoning_tokens\":");
  AppendInt(u.reasoning_tokens, out);
  out->push_back('}');
  if (u.grammar_forced) out->append(",\"grammar_forced\":true");
  out->push_back('}');
}

void AppendResponsesUsage(const Usage& u, std::string* out) {
  out->append("{\"input_tokens\":");
  AppendInt(u.prompt_tokens, out);
  out->append(",\"input_tokens_details\":{\"cached_tokens\":");
  AppendInt(u.cached_tokens, out);
  out->append("},\"output_tokens\":");
  AppendInt(u.completion_tokens, out);
  out->append(",\"output_tokens_details\":{\"reasoning_tokens\":");
  AppendInt(u.reasoning_tokens, out);
  out->append("},\"total_tokens\":");
  AppendInt(u.prompt_tokens + u.completion_tokens, out);
  if (u.grammar_forced) out->append(",\"grammar_forced\":true");
  out->push_back('}');
}

void AppendMessagesUsage(const Usage& u, bool final, std::string* out) {
  // Anthropic's input_tokens excludes cache reads; the three input counters add up to the
  // prompt. Ladle's prefix cache has no explicit cache writes, so creation is always 0.
  int64_t cached = std::min(u.cached_tokens, u.prompt_tokens);
  out->append("{\"input_tokens\":");
  AppendInt(u.prompt_tokens - cached, out);
  out->append(",\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":");
  AppendInt(cached, out);
  out->append(",\"output_tokens\":");
  AppendInt(u.completion_tokens, out);
  if (final) {
    out->append(",\"output_tokens_details\":{\"thinking_tokens\":");
    AppendInt(u.reasoning_tokens, out);
    out->push_back('}');
    if (u.grammar_forced) out->append(",\"grammar_forced\":true");
  }
  out->push_back('}');
}

std::string FailureMessage(const Event& e) {
  if (!e.text.empty()) return e.text;
  return e.finish == FinishReason::kCancelled ? "The request was cancelled before generation finished."
                                              : "The engine failed while generating the response.";
}

StatusCode FailureStatus(FinishReason r) {
  return r == FinishReason::kCancelled ? StatusCode::kCancelled : StatusCode::kInternal;
}

void AppendOpenAiError(std::string_view message, std::string* out) {
  ApiError e;
  e.status = StatusCode::kInternal;
  e.type = "server_error";
  e.message = std::string(message);
  out->append(OpenAiErrorJson(e));
}

void AppendAnthropicError(std::string_view message, std::string* out) {
  ApiError e;
  e.status = StatusCode::kInternal;
  e.type = "api_error";
  e.message = std::string(message);
  out->append(AnthropicErrorJson(e));
}

void ThinkingSignature::Update(std::string_view text) {
  for (unsigned char c : text) {
    hash_ ^= c;
    hash_ *= 1099511628211ull;
  }
}

std::string ThinkingSignature::Finish() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "ladle-fnv1a64-";
  for (int shift = 60; shift >= 0; shift -= 4) s.push_back(kHex[(hash_ >> shift) & 0xf]);
  return s;
}

OutputItem& OutputItems::Open(OutputItem::Kind kind) {
  items_.emplace_back();
  items_.back().kind = kind;
  open_ = static_cast<int>(items_.size()) - 1;
  if (kind == OutputItem::Kind::kToolCall) ++tool_count_;
  return items_.back();
}

int OutputItems::FindTool(int tool_index) const {
  // Search from the back: the call being streamed is almost always the last item.
  for (int i = static_cast<int>(items_.size()) - 1; i >= 0; --i) {
    if (items_[i].kind == OutputItem::Kind::kToolCall && items_[i].tool_index == tool_index) return i;
  }
  return -1;
}

}  // namespace writer_internal

std::string NewResponseId(Api api) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  // Ids only need to be unique, not secret: a per-thread generator seeded once is enough.
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::string id = api == Api::kChat ? "chatcmpl-" : api == Api::kResponses ? "resp_" : "msg_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[rng() % (sizeof(kAlphabet) - 1)]);
  return id;
}

namespace {

json::Value ToolsJson(const std::vector<Tool>& tools) {
  json::Value::Array arr;
  for (const Tool& t : tools) {
    json::Value::Object o;
    o.emplace_back("type", json::Value::String("function"));
    o.emplace_back("name", json::Value::String(t.name));
    o.emplace_back("description", t.has_description ? json::Value::String(t.description) : json::Value::Null());
    o.emplace_back("parameters", t.parameters);
    o.emplace_back("strict", json::Value::Bool(t.strict));
    arr.push_back(json::Value::MakeObject(std::move(o)));
  }
  return json::Value::MakeArray(std::move(arr));
}

json::Value ToolChoiceJson(const ToolChoice& tc) {
  switch (tc.mode) {
    case ToolChoice::Mode::kAuto: return json::Value::String("auto");
    case ToolChoice::Mode::kNone: return json::Value::String("none");
    case ToolChoice::Mode::kRequired: return json::Value::String("required");
    case ToolChoice::Mode::kNamed:
      return json::Value::MakeObject({{"type", json::Value::String("function")}, {"name", json::Value::String(tc.name)}});
    case ToolChoice::Mode::kAllowed: {
      json::Value::Array names;
      for (const std::string& n : tc.allowed) {
        names.push_back(json::Value::MakeObject({{"type", json::Value::String("function")}, {"name", json::Value::String(n)}}));
      }
      return json::Value::MakeObject({{"type", json::Value::String("allowed_tools")},
                                      {"mode", json::Value::String(tc.allowed_required ? "required" : "auto")},
                                      {"tools", json::Value::MakeArray(std::move(names))}});
    }
  }
  return json::Value::String("auto");
}

json::Value TextFormatJson(const ResponseFormat& rf) {
  json::Value::Object format;
  switch (rf.kind) {
    case ResponseFormat::Kind::kJsonObject: format.emplace_back("type", json::Value::String("json_object")); break;
    case ResponseFormat::Kind::kJsonSchema:
      format.emplace_back("type", json::Value::String("json_schema"));
      format.emplace_back("name", json::Value::String(rf.name));
      format.emplace_back("schema", rf.schema);
      format.emplace_back("strict", json::Value::Bool(rf.strict));
      break;
    default: format.emplace_back("type", json::Value::String("text")); break;
  }
  return json::Value::MakeObject({{"format", json::Value::MakeObject(std::move(format))}});
}

}  // namespace

ResponseMeta MakeResponseMeta(const Request& req, int64_t created) {
  ResponseMeta m;
  m.api = req.api;
  m.id = NewResponseId(req.api);
  m.model = req.model;
  m.created = created;
  m.stream = req.stream;
  m.include_usage = req.include_usage;
  m.n = std::max(1, req.sampling.n);
  m.top_logprobs = req.sampling.logprobs ? std::max(0, req.sampling.top_logprobs) : -1;
  if (req.api == Api::kResponses) {
    ResponsesEcho& e = m.echo;
    e.max_output_tokens = req.sampling.max_tokens;
    e.parallel_tool_calls = req.parallel_tool_calls;
    e.reasoning_effort = req.thinking.effort;
    e.temperature = req.sampling.temperature;
    e.top_p = req.sampling.top_p;
    e.text = TextFormatJson(req.response_format);
    e.tool_choice = ToolChoiceJson(req.tool_choice);
    e.tools = ToolsJson(req.tools);
    e.metadata = req.metadata;
    e.user = req.user;
  }
  return m;
}

std::unique_ptr<ResponseWriter> MakeResponseWriter(const ResponseMeta& meta) {
  switch (meta.api) {
    case Api::kChat: return MakeChatWriter(meta);
    case Api::kResponses: return MakeResponsesWriter(meta);
    case Api::kMessages: return MakeMessagesWriter(meta);
  }
  return MakeChatWriter(meta);
}

}  // namespace ladle::frontend
