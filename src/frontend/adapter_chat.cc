// OpenAI Chat Completions request → Request.
//
// Choices made where the API leaves room (each one is tested in adapter_chat_test.cc):
//   * Legacy function calling is rejected, not mapped: role "function" messages, an assistant
//     "function_call", and top-level "functions" / "function_call" get a 400 that points to
//     tools / tool_calls / role "tool". Mapping them would need a second linking scheme for a
//     deprecated feature; dropping them silently would hide the tools from the model.
//   * Tool-call ids and tool_call_id: the key must be present (OpenAI requires it), but JSON
//     null is accepted and stored as "" because DeepSeek's own encoding harness sends null and
//     links results by position.
//   * Tool-call "arguments" are kept byte for byte when they are a string (the encoders print
//     them as sent and decide themselves whether they must parse). An object, which some
//     clients send, is stored as Python json.dumps text ({"a": 1}), the same rule as Anthropic
//     tool_use input (adapter_messages.cc).
//   * Assistant content may be null/absent when the message has tool_calls or reasoning
//     (reasoning-only turns exist in DeepSeek transcripts); otherwise it is required.
//   * Reasoning: "reasoning_content" wins over "reasoning" when both are non-null.
//   * A tool message without "name" takes the name of the call it answers (LinkToolNames), as
//     the Responses and Messages adapters do, so encoders see the same data from every API.
//   * System and developer messages may carry their own "tools" array (the DeepSeek V3.2
//     harness's shape); each entry is validated like a request tool and kept as sent (only
//     repeated keys are folded, as Python's json.loads would).
//   * Content arrays must be non-empty and parts follow OpenAI's per-role rules (images only
//     for user; refusal only for assistant); input_audio and file parts are a 400
//     unsupported_value naming messages[i].content[j].type.
//   * Thinking is on when chat_template_kwargs.thinking is true OR reasoning_effort is given
//     and is not "none" (the rule, applied literally: either switch turns it on).
//   * max_completion_tokens wins over max_tokens when both are given (vLLM's rule); both are
//     validated. top_k of -1 or 0 means "off" and is stored as not set.
//   * stream_options without stream: true is a 400, as OpenAI and vLLM answer.
//   * logit_bias (non-empty), audio output and the "audio" modality are rejected: the server
//     cannot honour them and ignoring them would change the answer silently.
#include <fmt/format.h>

#include <limits>

#include "adapter_common.h"
#include "ladle/frontend/request_adapters.h"

namespace ladle::frontend {
namespace {

using namespace adapter;  // NOLINT: this file is the adapter

// content: a string or an array of parts; which part types a role may use follows OpenAI.
Check ParseContent(const Ctx& ctx, const json::Value& msg, const Path& mp, Role role, bool null_ok,
                   Message* m) {
  const json::Value* content = Get(msg, "content");
  const Path cp = mp.Field("content");
  if (content == nullptr) {
    if (!null_ok) return ErrMissing(ctx, cp);
    m->content_null = true;
    return {};
  }
  if (content->is_string()) {
    AddText(m, content->as_string());
    return {};
  }
  if (!content->is_array()) return ErrType(ctx, cp, "a string or an array of content parts", *content);
  LADLE_ADAPT_TRY(CheckLength(ctx, *content, cp, std::numeric_limits<size_t>::max(), true));
  const auto& parts = content->as_array();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Path pp = cp.Index(i);
    const json::Value& part = parts[i];
    LADLE_ADAPT_TRY(ExpectObject(ctx, part, pp));
    const std::string* type = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, part, "type", pp, &type));
    if (*type == "text") {
      const std::string* text = nullptr;
      LADLE_ADAPT_TRY(ReqString(ctx, part, "text", pp, &text));
      AddText(m, *text);
    } else if (*type == "image_url" && role == Role::kUser) {
      const json::Value* image = nullptr;
      LADLE_ADAPT_TRY(ReqObject(ctx, part, "image_url", pp, &image));
      const Path ip = pp.Field("image_url");
      const std::string* url = nullptr;
      LADLE_ADAPT_TRY(ReqString(ctx, *image, "url", ip, &url));
      if (const json::Value* detail = Get(*image, "detail")) {
        const std::string* d = nullptr;
        LADLE_ADAPT_TRY(ExpectEnum(ctx, *detail, ip.Field("detail"), {"auto", "low", "high"}, &d));
      }
      ContentPart out;
      out.kind = ContentPart::Kind::kImage;
      out.image.where = pp.Bracketed();
      LADLE_ADAPT_TRY(ParseImageUrl(ctx, *url, ip.Field("url"), &out.image));
      m->content.push_back(std::move(out));
    } else if (*type == "refusal" && role == Role::kAssistant) {
      const std::string* refusal = nullptr;
      LADLE_ADAPT_TRY(ReqString(ctx, part, "refusal", pp, &refusal));
      AddText(m, *refusal);
    } else if ((*type == "input_audio" || *type == "file") && role == Role::kUser) {
      const Path tp = pp.Field("type");
      return ErrUnsupported(ctx, tp,
                            fmt::format("'{}' content parts are not supported by this server; send text "
                                        "and image_url parts.",
                                        *type));
    } else if (*type == "text" || *type == "image_url" || *type == "refusal" || *type == "input_audio" ||
               *type == "file") {
      const Path tp = pp.Field("type");
      return ErrValue(ctx, tp, fmt::format("'{}' content parts are not allowed in this role's messages.", *type));
    } else {
      const Path tp = pp.Field("type");
      return ErrEnum(ctx, tp, *type, {"text", "image_url", "input_audio", "refusal", "file"});
    }
  }
  return {};
}

// The key must be present; null means "no id" (positional linking).
Check IdField(const Ctx& ctx, const json::Value& obj, std::string_view key, const Path& path, std::string* out) {
  const json::Value* v = obj.Find(key);
  if (v == nullptr) return ErrMissing(ctx, path.Field(key));
  if (v->is_null()) return {};
  const std::string* s = nullptr;
  LADLE_ADAPT_TRY(ExpectString(ctx, *v, path.Field(key), &s));
  *out = *s;
  return {};
}

Check ParseToolCalls(const Ctx& ctx, const json::Value& calls, const Path& path, Message* m) {
  const auto& items = calls.as_array();
  m->tool_calls.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Path cp = path.Index(i);
    const json::Value& call = items[i];
    LADLE_ADAPT_TRY(ExpectObject(ctx, call, cp));
    ToolCall out;
    LADLE_ADAPT_TRY(IdField(ctx, call, "id", cp, &out.id));
    if (const json::Value* type = Get(call, "type")) {
      const std::string* t = nullptr;
      LADLE_ADAPT_TRY(ExpectEnum(ctx, *type, cp.Field("type"), {"function"}, &t));
    }
    const json::Value* fn = nullptr;
    LADLE_ADAPT_TRY(ReqObject(ctx, call, "function", cp, &fn));
    const Path fp = cp.Field("function");
    const std::string* name = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, *fn, "name", fp, &name));
    out.name = *name;
    const json::Value* args = nullptr;
    LADLE_ADAPT_TRY(ReqField(ctx, *fn, "arguments", fp, &args));
    if (args->is_string()) {
      out.arguments = args->as_string();
    } else if (args->is_object()) {
      json::Value folded = *args;
      FoldDuplicateKeys(&folded);
      out.arguments = json::Dump(folded, json::Style::kPython);
    } else {
      return ErrType(ctx, fp.Field("arguments"), "a string", *args);
    }
    m->tool_calls.push_back(std::move(out));
  }
  return {};
}

// {type:"function", function:{name, description?, parameters?, strict?}}
Check ParseChatTool(const Ctx& ctx, const json::Value& t, const Path& tp, Tool* tool) {
  LADLE_ADAPT_TRY(ExpectObject(ctx, t, tp));
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, t, "type", tp, &type));
  if (*type == "custom") {
    return ErrUnsupported(ctx, tp.Field("type"), "custom (free-form grammar) tools are not supported; use "
                                                 "function tools.");
  }
  if (*type != "function") return ErrEnum(ctx, tp.Field("type"), *type, {"function", "custom"});
  const json::Value* fn = nullptr;
  LADLE_ADAPT_TRY(ReqObject(ctx, t, "function", tp, &fn));
  return ParseFunctionTool(ctx, *fn, tp.Field("function"), "parameters", false, tool);
}

Check ParseMessageTools(const Ctx& ctx, const json::Value& msg, const Path& mp, Message* m) {
  const json::Value* tools = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, msg, "tools", mp, &tools));
  if (tools == nullptr) return {};
  const Path tsp = mp.Field("tools");
  LADLE_ADAPT_TRY(CheckLength(ctx, *tools, tsp, ctx.limits.max_tools, false));
  std::vector<Tool> parsed(tools->as_array().size());
  for (size_t i = 0; i < parsed.size(); ++i) {
    LADLE_ADAPT_TRY(ParseChatTool(ctx, tools->as_array()[i], tsp.Index(i), &parsed[i]));
  }
  LADLE_ADAPT_TRY(CheckToolSet(ctx, parsed, tsp));
  for (const json::Value& t : tools->as_array()) {
    m->tools.push_back(t);
    FoldDuplicateKeys(&m->tools.back());
  }
  return {};
}

Check ParseMessage(const Ctx& ctx, const json::Value& msg, const Path& mp, Message* m) {
  LADLE_ADAPT_TRY(ExpectObject(ctx, msg, mp));
  const json::Value* role_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, msg, "role", mp, &role_value));
  const Path rp = mp.Field("role");
  const std::string* role = nullptr;
  LADLE_ADAPT_TRY(
      ExpectEnum(ctx, *role_value, rp, {"system", "developer", "user", "assistant", "tool", "function"}, &role));
  const std::string* name = nullptr;
  LADLE_ADAPT_TRY(OptString(ctx, msg, "name", mp, &name));
  if (name != nullptr) m->name = *name;

  if (*role == "function") {
    return ErrUnsupported(ctx, rp,
                          "role 'function' (legacy function calling) is not supported; send tool results "
                          "as role 'tool' messages with a tool_call_id.");
  }
  if (*role == "system" || *role == "developer") {
    m->role = *role == "system" ? Role::kSystem : Role::kDeveloper;
    LADLE_ADAPT_TRY(ParseContent(ctx, msg, mp, m->role, false, m));
    return ParseMessageTools(ctx, msg, mp, m);
  }
  if (*role == "user") {
    m->role = Role::kUser;
    return ParseContent(ctx, msg, mp, m->role, false, m);
  }
  if (*role == "tool") {
    m->role = Role::kTool;
    LADLE_ADAPT_TRY(IdField(ctx, msg, "tool_call_id", mp, &m->tool_call_id));
    return ParseContent(ctx, msg, mp, m->role, false, m);
  }
  m->role = Role::kAssistant;
  const std::string* reasoning_content = nullptr;
  const std::string* reasoning = nullptr;
  LADLE_ADAPT_TRY(OptString(ctx, msg, "reasoning_content", mp, &reasoning_content));
  LADLE_ADAPT_TRY(OptString(ctx, msg, "reasoning", mp, &reasoning));
  if (reasoning_content != nullptr) {
    m->reasoning = *reasoning_content;
  } else if (reasoning != nullptr) {
    m->reasoning = *reasoning;
  }
  if (Get(msg, "function_call") != nullptr) {
    return ErrUnsupported(ctx, mp.Field("function_call"),
                          "legacy 'function_call' is not supported; use 'tool_calls'.", "unsupported_parameter");
  }
  const json::Value* calls = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, msg, "tool_calls", mp, &calls));
  if (calls != nullptr) LADLE_ADAPT_TRY(ParseToolCalls(ctx, *calls, mp.Field("tool_calls"), m));
  return ParseContent(ctx, msg, mp, m->role, !m->tool_calls.empty() || m->reasoning.has_value(), m);
}

Check ParseToolChoice(const Ctx& ctx, const json::Value& v, const Path& p, ToolChoice* tc) {
  if (v.is_string()) {
    const std::string* mode = nullptr;
    LADLE_ADAPT_TRY(ExpectEnum(ctx, v, p, {"none", "auto", "required"}, &mode));
    tc->mode = *mode == "none" ? ToolChoice::Mode::kNone
               : *mode == "auto" ? ToolChoice::Mode::kAuto
                                 : ToolChoice::Mode::kRequired;
    return {};
  }
  if (!v.is_object()) return ErrType(ctx, p, "a string or an object", v);
  const json::Value* type_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, v, "type", p, &type_value));
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *type_value, p.Field("type"), {"function", "allowed_tools", "custom"}, &type));
  if (*type == "custom") {
    return ErrUnsupported(ctx, p.Field("type"), "custom tools are not supported; use function tools.");
  }
  if (*type == "function") {
    const json::Value* fn = nullptr;
    LADLE_ADAPT_TRY(ReqObject(ctx, v, "function", p, &fn));
    const std::string* name = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, *fn, "name", p.Field("function"), &name));
    tc->mode = ToolChoice::Mode::kNamed;
    tc->name = *name;
    return {};
  }
  const json::Value* allowed = nullptr;
  LADLE_ADAPT_TRY(ReqObject(ctx, v, "allowed_tools", p, &allowed));
  const Path ap = p.Field("allowed_tools");
  const json::Value* mode_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, *allowed, "mode", ap, &mode_value));
  const std::string* mode = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *mode_value, ap.Field("mode"), {"auto", "required"}, &mode));
  const json::Value* tools = nullptr;
  LADLE_ADAPT_TRY(ReqArray(ctx, *allowed, "tools", ap, &tools));
  const Path tsp = ap.Field("tools");
  LADLE_ADAPT_TRY(CheckLength(ctx, *tools, tsp, ctx.limits.max_tools, true));
  tc->mode = ToolChoice::Mode::kAllowed;
  tc->allowed_required = *mode == "required";
  for (size_t i = 0; i < tools->as_array().size(); ++i) {
    const Path tp = tsp.Index(i);
    const json::Value& t = tools->as_array()[i];
    LADLE_ADAPT_TRY(ExpectObject(ctx, t, tp));
    const json::Value* ttype = nullptr;
    LADLE_ADAPT_TRY(ReqField(ctx, t, "type", tp, &ttype));
    const std::string* tt = nullptr;
    LADLE_ADAPT_TRY(ExpectEnum(ctx, *ttype, tp.Field("type"), {"function"}, &tt));
    const json::Value* fn = nullptr;
    LADLE_ADAPT_TRY(ReqObject(ctx, t, "function", tp, &fn));
    const std::string* name = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, *fn, "name", tp.Field("function"), &name));
    tc->allowed.push_back(*name);
  }
  return {};
}

Check ParseSampling(const Ctx& ctx, const json::Value& body, const Path& root, Request* req) {
  Sampling& s = req->sampling;
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "temperature", root, {0, 2}, &s.temperature));
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "top_p", root, {0, 1, true}, &s.top_p));
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "min_p", root, {0, 1}, &s.min_p));
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "presence_penalty", root, {-2, 2}, &s.presence_penalty));
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "frequency_penalty", root, {-2, 2}, &s.frequency_penalty));
  LADLE_ADAPT_TRY(OptInt(ctx, body, "top_k", root, -1, std::numeric_limits<int32_t>::max(), &s.top_k));
  if (s.top_k.has_value() && *s.top_k <= 0) s.top_k.reset();
  LADLE_ADAPT_TRY(OptInt(ctx, body, "seed", root, std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max(), &s.seed));
  std::optional<int64_t> max_tokens, max_completion_tokens;
  LADLE_ADAPT_TRY(OptInt(ctx, body, "max_tokens", root, 1, ctx.limits.max_tokens, &max_tokens));
  LADLE_ADAPT_TRY(
      OptInt(ctx, body, "max_completion_tokens", root, 1, ctx.limits.max_tokens, &max_completion_tokens));
  s.max_tokens = max_completion_tokens.has_value() ? max_completion_tokens : max_tokens;
  if (const json::Value* stop = Get(body, "stop")) {
    LADLE_ADAPT_TRY(ParseStopList(ctx, *stop, root.Field("stop"), true, &s.stop));
  }
  const json::Value* stop_ids = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, body, "stop_token_ids", root, &stop_ids));
  if (stop_ids != nullptr) {
    const Path sp = root.Field("stop_token_ids");
    const auto& ids = stop_ids->as_array();
    for (size_t i = 0; i < ids.size(); ++i) {
      const Path ip = sp.Index(i);
      if (!ids[i].is_number() || !ids[i].is_integer()) return ErrType(ctx, ip, "an integer", ids[i]);
      auto id = ids[i].as_int64();
      if (!id.ok() || *id < 0 || *id > std::numeric_limits<uint32_t>::max()) {
        return ErrValue(ctx, ip, "token ids must be integers in [0, 4294967295].");
      }
      s.stop_token_ids.push_back(static_cast<uint32_t>(*id));
    }
  }
  std::optional<int64_t> n;
  LADLE_ADAPT_TRY(OptInt(ctx, body, "n", root, 1, ctx.limits.max_n, &n));
  if (n.has_value()) s.n = static_cast<int>(*n);
  std::optional<bool> logprobs;
  LADLE_ADAPT_TRY(OptBool(ctx, body, "logprobs", root, &logprobs));
  s.logprobs = logprobs.value_or(false);
  std::optional<int64_t> top_logprobs;
  LADLE_ADAPT_TRY(OptInt(ctx, body, "top_logprobs", root, 0, 20, &top_logprobs));
  if (top_logprobs.has_value()) {
    if (!s.logprobs) {
      return ErrValue(ctx, root.Field("top_logprobs"), "'logprobs' must be true when 'top_logprobs' is given.");
    }
    s.top_logprobs = static_cast<int>(*top_logprobs);
  }
  return {};
}

// Fields this server knows but cannot honour: a 400 instead of a silently different answer.
Check RejectUnsupported(const Ctx& ctx, const json::Value& body, const Path& root) {
  if (Get(body, "functions") != nullptr) {
    return ErrUnsupported(ctx, root.Field("functions"), "legacy 'functions' are not supported; use 'tools'.",
                          "unsupported_parameter");
  }
  if (Get(body, "function_call") != nullptr) {
    return ErrUnsupported(ctx, root.Field("function_call"),
                          "legacy 'function_call' is not supported; use 'tool_choice'.", "unsupported_parameter");
  }
  if (Get(body, "audio") != nullptr) {
    return ErrUnsupported(ctx, root.Field("audio"), "audio output is not supported.", "unsupported_parameter");
  }
  const json::Value* modalities = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, body, "modalities", root, &modalities));
  if (modalities != nullptr) {
    const Path mp = root.Field("modalities");
    for (size_t i = 0; i < modalities->as_array().size(); ++i) {
      const Path ip = mp.Index(i);
      const std::string* m = nullptr;
      LADLE_ADAPT_TRY(ExpectEnum(ctx, modalities->as_array()[i], ip, {"text", "audio"}, &m));
      if (*m == "audio") return ErrUnsupported(ctx, ip, "audio output is not supported.");
    }
  }
  const json::Value* logit_bias = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "logit_bias", root, &logit_bias));
  if (logit_bias != nullptr && !logit_bias->as_object().empty()) {
    return ErrUnsupported(ctx, root.Field("logit_bias"), "logit_bias is not supported by this server.",
                          "unsupported_parameter");
  }
  return {};
}

Check AdaptChatBody(const Ctx& ctx, const json::Value& body, Request* req) {
  const Path root;
  req->api = Api::kChat;
  const std::string* model = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, body, "model", root, &model));
  if (model->empty()) return ErrValue(ctx, root.Field("model"), "the model name must not be empty.");
  req->model = *model;

  const json::Value* messages = nullptr;
  LADLE_ADAPT_TRY(ReqArray(ctx, body, "messages", root, &messages));
  const Path msp = root.Field("messages");
  LADLE_ADAPT_TRY(CheckLength(ctx, *messages, msp, ctx.limits.max_messages, true));
  req->messages.resize(messages->as_array().size());
  for (size_t i = 0; i < req->messages.size(); ++i) {
    LADLE_ADAPT_TRY(ParseMessage(ctx, messages->as_array()[i], msp.Index(i), &req->messages[i]));
  }
  LinkToolNames(&req->messages);

  LADLE_ADAPT_TRY(RejectUnsupported(ctx, body, root));

  const json::Value* tools = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, body, "tools", root, &tools));
  const Path tsp = root.Field("tools");
  if (tools != nullptr) {
    LADLE_ADAPT_TRY(CheckLength(ctx, *tools, tsp, ctx.limits.max_tools, false));
    req->tools.resize(tools->as_array().size());
    for (size_t i = 0; i < req->tools.size(); ++i) {
      LADLE_ADAPT_TRY(ParseChatTool(ctx, tools->as_array()[i], tsp.Index(i), &req->tools[i]));
    }
    LADLE_ADAPT_TRY(CheckToolSet(ctx, req->tools, tsp));
  }
  // OpenAI's defaults: "none" without tools, "auto" with them.
  req->tool_choice.mode = req->tools.empty() ? ToolChoice::Mode::kNone : ToolChoice::Mode::kAuto;
  const Path tcp = root.Field("tool_choice");
  if (const json::Value* tc = Get(body, "tool_choice")) {
    LADLE_ADAPT_TRY(ParseToolChoice(ctx, *tc, tcp, &req->tool_choice));
    const Path fp = tcp.Field("function");
    LADLE_ADAPT_TRY(CheckToolChoice(ctx, *req, tcp, fp.Field("name")));
  }
  std::optional<bool> parallel;
  LADLE_ADAPT_TRY(OptBool(ctx, body, "parallel_tool_calls", root, &parallel));
  req->parallel_tool_calls = parallel.value_or(true);

  if (const json::Value* rf = Get(body, "response_format")) {
    LADLE_ADAPT_TRY(ParseResponseFormat(ctx, *rf, root.Field("response_format"), true, &req->response_format));
  }

  const json::Value* kwargs = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "chat_template_kwargs", root, &kwargs));
  std::optional<bool> thinking;
  if (kwargs != nullptr) {
    LADLE_ADAPT_TRY(OptBool(ctx, *kwargs, "thinking", root.Field("chat_template_kwargs"), &thinking));
  }
  if (const json::Value* effort = Get(body, "reasoning_effort")) {
    LADLE_ADAPT_TRY(ParseEffort(ctx, *effort, root.Field("reasoning_effort"), &req->thinking.effort));
  }
  req->thinking.enabled =
      thinking.value_or(false) || (!req->thinking.effort.empty() && req->thinking.effort != "none");

  LADLE_ADAPT_TRY(ParseSampling(ctx, body, root, req));

  std::optional<bool> stream;
  LADLE_ADAPT_TRY(OptBool(ctx, body, "stream", root, &stream));
  req->stream = stream.value_or(false);
  const json::Value* stream_options = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "stream_options", root, &stream_options));
  if (stream_options != nullptr) {
    if (!req->stream) {
      return ErrValue(ctx, root.Field("stream_options"),
                      "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
    }
    std::optional<bool> include_usage;
    LADLE_ADAPT_TRY(OptBool(ctx, *stream_options, "include_usage", root.Field("stream_options"), &include_usage));
    req->include_usage = include_usage.value_or(false);
  }

  LADLE_ADAPT_TRY(ParseMetadata(ctx, body, "metadata", root, &req->metadata));
  const std::string* user = nullptr;
  LADLE_ADAPT_TRY(OptString(ctx, body, "user", root, &user));
  if (user != nullptr) req->user = *user;
  return {};
}

}  // namespace

Adapted AdaptChat(std::string_view body, const Limits& limits) {
  return adapter::Run(adapter::Ctx{Api::kChat, limits}, body, AdaptChatBody);
}

}  // namespace ladle::frontend
