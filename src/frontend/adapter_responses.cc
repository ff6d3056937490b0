// OpenAI Responses request → Request.
//
// The adapter itself keeps no state. `ladle serve` keeps recent responses (store, on by
// default) and rewrites item_reference items and previous_response_id into the stored items
// before the adapter runs (src/server/response_store.h); what reaches here unresolved is a 400
// naming the parameter: item_reference input items, previous_response_id, conversation, prompt
// (stored prompt templates) and image file_id references; "background": true too.
//
// Tools: function tools; namespace tools are flattened into their function tools; hosted tools
// (web_search, file_search, mcp, local_shell, custom, ...) are dropped into
// Request::dropped_tools (the server names them in x-ladle-dropped-tools), and a tool_choice
// that forces one is a 400.
//
// How items become messages (tested in adapter_responses_test.cc):
//   * `instructions` (when non-empty) becomes a leading system message, before any input item.
//   * A string `input` is one user message.
//   * A message item with role user/system/developer/assistant becomes that message; items
//     without "type" but with "role" are messages (the SDK's EasyInputMessage).
//   * A reasoning item is held and attached to the next assistant message or function_call.
//     Its text is the concatenation of its `content` reasoning_text parts when present (the
//     raw reasoning, which is what this server's Responses writer emits), else of its summary
//     texts; several parts, or several reasoning items in a row, are joined with "\n\n". A
//     reasoning item with no text (encrypted_content only) is ignored. A reasoning item
//     followed by no assistant output becomes an assistant message with only reasoning.
//   * function_call items join the assistant message right before them (message text and/or
//     reasoning of the same turn), and each other: one assistant message with several tool
//     calls, exactly what Chat Completions sends for the same turn. A reasoning item between
//     two calls starts a new assistant message (interleaved thinking stays in order).
//   * function_call_output items become tool messages linked by call_id, named after the call
//     they answer.
//   * Function tools default to strict=false, as in Chat (OpenAI's Responses default is true;
//     keeping Chat's default makes the same tools behave the same through both APIs and does
//     not reject schemas that strict mode cannot express).
//   * include: ["message.output_text.logprobs"] or top_logprobs > 0 turns logprobs on.
#include <fmt/format.h>

#include <limits>

#include "adapter_common.h"
#include "ladle/frontend/request_adapters.h"

namespace ladle::frontend {
namespace {

using namespace adapter;  // NOLINT: this file is the adapter

// Parts of a message item or a function_call_output; `role` decides which are allowed.
Check ParseParts(const Ctx& ctx, const json::Value& content, const Path& cp, Role role, Message* m) {
  if (content.is_string()) {
    AddText(m, content.as_string());
    return {};
  }
  if (!content.is_array()) return ErrType(ctx, cp, "a string or an array of content parts", content);
  LADLE_ADAPT_TRY(CheckLength(ctx, content, cp, std::numeric_limits<size_t>::max(), true));
  const auto& parts = content.as_array();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Path pp = cp.Index(i);
    const json::Value& part = parts[i];
    LADLE_ADAPT_TRY(ExpectObject(ctx, part, pp));
    const std::string* type = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, part, "type", pp, &type));
    const Path tp = pp.Field("type");
    if (*type == "input_text" || *type == "output_text") {
      const std::string* text = nullptr;
      LADLE_ADAPT_TRY(ReqString(ctx, part, "text", pp, &text));
      AddText(m, *text);
    } else if (*type == "refusal") {
      const std::string* refusal = nullptr;
      LADLE_ADAPT_TRY(ReqString(ctx, part, "refusal", pp, &refusal));
      AddText(m, *refusal);
    } else if (*type == "input_image") {
      if (role != Role::kUser && role != Role::kTool) {
        return ErrValue(ctx, tp, "input_image parts are only allowed in user messages and function call outputs.");
      }
      const std::string* url = nullptr;
      LADLE_ADAPT_TRY(OptString(ctx, part, "image_url", pp, &url));
      if (url == nullptr) {
        if (Get(part, "file_id") != nullptr) {
          return ErrUnsupported(ctx, pp.Field("file_id"),
                                "file references are not supported (this server stores no files); send "
                                "the image as 'image_url'.",
                                "unsupported_parameter");
        }
        return ErrMissing(ctx, pp.Field("image_url"));
      }
      if (const json::Value* detail = Get(part, "detail")) {
        const std::string* d = nullptr;
        LADLE_ADAPT_TRY(ExpectEnum(ctx, *detail, pp.Field("detail"), {"auto", "low", "high"}, &d));
      }
      ContentPart out;
      out.kind = ContentPart::Kind::kImage;
      out.image.where = pp.Bracketed();
      LADLE_ADAPT_TRY(ParseImageUrl(ctx, *url, pp.Field("image_url"), &out.image));
      m->content.push_back(std::move(out));
    } else if (*type == "input_file" || *type == "input_audio") {
      return ErrUnsupported(ctx, tp, fmt::format("'{}' content parts are not supported by this server.", *type));
    } else {
      return ErrEnum(ctx, tp, *type, {"input_text", "output_text", "refusal", "input_image", "input_file"});
    }
  }
  return {};
}

// Accumulates items into messages, merging one assistant turn's pieces.
class Builder {
 public:
  explicit Builder(std::vector<Message>* out) : out_(out) {}

  // A user/system/developer message or a tool result: ends the assistant turn.
  void PushOther(Message m) {
    FlushReasoning();
    open_ = false;
    out_->push_back(std::move(m));
  }
  void PushAssistant(Message m) {
    m.reasoning = std::move(pending_);
    pending_.reset();
    out_->push_back(std::move(m));
    open_ = true;
  }
  void PushCall(ToolCall call) {
    if (pending_.has_value() || !open_) {
      Message m;
      m.role = Role::kAssistant;
      m.content_null = true;
      PushAssistant(std::move(m));
    }
    out_->back().tool_calls.push_back(std::move(call));
  }
  void PushReasoning(std::string text) {
    open_ = false;
    if (pending_.has_value()) {
      *pending_ += "\n\n";
      *pending_ += text;
    } else {
      pending_ = std::move(text);
    }
  }
  void Finish() { FlushReasoning(); }

 private:
  void FlushReasoning() {
    if (!pending_.has_value()) return;
    Message m;
    m.role = Role::kAssistant;
    m.content_null = true;
    PushAssistant(std::move(m));
    open_ = false;
  }

  std::vector<Message>* out_;
  std::optional<std::string> pending_;
  bool open_ = false;  // out_->back() is an assistant message that function calls may join
};

Check ParseMessageItem(const Ctx& ctx, const json::Value& item, const Path& ip, Builder* b) {
  const json::Value* role_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, item, "role", ip, &role_value));
  const std::string* role = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *role_value, ip.Field("role"), {"user", "assistant", "system", "developer"}, &role));
  Message m;
  m.role = *role == "user"        ? Role::kUser
           : *role == "assistant" ? Role::kAssistant
           : *role == "system"    ? Role::kSystem
                                  : Role::kDeveloper;
  const json::Value* content = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, item, "content", ip, &content));
  LADLE_ADAPT_TRY(ParseParts(ctx, *content, ip.Field("content"), m.role, &m));
  if (m.role == Role::kAssistant) {
    b->PushAssistant(std::move(m));
  } else {
    b->PushOther(std::move(m));
  }
  return {};
}

Check ParseFunctionCall(const Ctx& ctx, const json::Value& item, const Path& ip, Builder* b) {
  ToolCall call;
  const std::string* s = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, item, "call_id", ip, &s));
  call.id = *s;
  LADLE_ADAPT_TRY(ReqString(ctx, item, "name", ip, &s));
  call.name = *s;
  const json::Value* args = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, item, "arguments", ip, &args));
  if (args->is_string()) {
    call.arguments = args->as_string();
  } else if (args->is_object()) {
    // Same rule as Chat: an object is kept as Python json.dumps text.
    json::Value folded = *args;
    FoldDuplicateKeys(&folded);
    call.arguments = json::Dump(folded, json::Style::kPython);
  } else {
    return ErrType(ctx, ip.Field("arguments"), "a string", *args);
  }
  b->PushCall(std::move(call));
  return {};
}

Check ParseFunctionCallOutput(const Ctx& ctx, const json::Value& item, const Path& ip, Builder* b) {
  Message m;
  m.role = Role::kTool;
  const std::string* call_id = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, item, "call_id", ip, &call_id));
  m.tool_call_id = *call_id;
  const json::Value* output = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, item, "output", ip, &output));
  LADLE_ADAPT_TRY(ParseParts(ctx, *output, ip.Field("output"), Role::kTool, &m));
  b->PushOther(std::move(m));
  return {};
}

// Joins the `text` of each part of `key` whose type is `part_type`.
Check JoinTexts(const Ctx& ctx, const json::Value& item, std::string_view key, std::string_view part_type,
                const Path& ip, std::string* out) {
  const json::Value* parts = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, item, key, ip, &parts));
  if (parts == nullptr) return {};
  const Path kp = ip.Field(key);
  for (size_t i = 0; i < parts->as_array().size(); ++i) {
    const Path pp = kp.Index(i);
    const json::Value& part = parts->as_array()[i];
    LADLE_ADAPT_TRY(ExpectObject(ctx, part, pp));
    const json::Value* type_value = nullptr;
    LADLE_ADAPT_TRY(ReqField(ctx, part, "type", pp, &type_value));
    const std::string* type = nullptr;
    LADLE_ADAPT_TRY(ExpectEnum(ctx, *type_value, pp.Field("type"), {part_type}, &type));
    const std::string* text = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, part, "text", pp, &text));
    if (text->empty()) continue;
    if (!out->empty()) *out += "\n\n";
    *out += *text;
  }
  return {};
}

Check ParseReasoningItem(const Ctx& ctx, const json::Value& item, const Path& ip, Builder* b) {
  std::string content, summary;
  LADLE_ADAPT_TRY(JoinTexts(ctx, item, "content", "reasoning_text", ip, &content));
  LADLE_ADAPT_TRY(JoinTexts(ctx, item, "summary", "summary_text", ip, &summary));
  if (!content.empty()) {
    b->PushReasoning(std::move(content));
  } else if (!summary.empty()) {
    b->PushReasoning(std::move(summary));
  }
  return {};
}

Check ParseItem(const Ctx& ctx, const json::Value& item, const Path& ip, Builder* b) {
  LADLE_ADAPT_TRY(ExpectObject(ctx, item, ip));
  const json::Value* type_value = Get(item, "type");
  if (type_value == nullptr) {
    if (Get(item, "role") != nullptr) return ParseMessageItem(ctx, item, ip, b);
    return ErrMissing(ctx, ip.Field("type"));
  }
  const Path tp = ip.Field("type");
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ExpectString(ctx, *type_value, tp, &type));
  if (*type == "message") return ParseMessageItem(ctx, item, ip, b);
  if (*type == "function_call") return ParseFunctionCall(ctx, item, ip, b);
  if (*type == "function_call_output") return ParseFunctionCallOutput(ctx, item, ip, b);
  if (*type == "reasoning") return ParseReasoningItem(ctx, item, ip, b);
  if (*type == "item_reference") {
    return ErrUnsupported(ctx, tp,
                          "item references need stored items, which this server does not keep; send the "
                          "items themselves.");
  }
  return ErrUnsupported(ctx, tp,
                        fmt::format("input items of type '{}' are not supported; supported types are "
                                    "'message', 'function_call', 'function_call_output' and 'reasoning'.",
                                    *type));
}

Check ParseTools(const Ctx& ctx, const json::Value& body, const Path& root, Request* req) {
  const json::Value* tools = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, body, "tools", root, &tools));
  if (tools == nullptr) return {};
  const Path tsp = root.Field("tools");
  LADLE_ADAPT_TRY(CheckLength(ctx, *tools, tsp, ctx.limits.max_tools, false));
  req->tools.reserve(tools->as_array().size());
  for (size_t i = 0; i < tools->as_array().size(); ++i) {
    const Path tp = tsp.Index(i);
    const json::Value& t = tools->as_array()[i];
    LADLE_ADAPT_TRY(ExpectObject(ctx, t, tp));
    const std::string* type = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, t, "type", tp, &type));
    if (*type == "function") {
      Tool tool;
      LADLE_ADAPT_TRY(ParseFunctionTool(ctx, t, tp, "parameters", false, &tool));
      req->tools.push_back(std::move(tool));
    } else if (*type == "namespace") {
      // A group of function tools (Codex declares its sub-agent tools this way). The model sees
      // them as plain function tools with their own names: the namespace only groups them.
      const json::Value* inner = nullptr;
      LADLE_ADAPT_TRY(ReqArray(ctx, t, "tools", tp, &inner));
      const Path itp = tp.Field("tools");
      LADLE_ADAPT_TRY(CheckLength(ctx, *inner, itp, ctx.limits.max_tools, false));
      for (size_t j = 0; j < inner->as_array().size(); ++j) {
        const Path jp = itp.Index(j);
        const json::Value& f = inner->as_array()[j];
        LADLE_ADAPT_TRY(ExpectObject(ctx, f, jp));
        const std::string* ftype = nullptr;
        LADLE_ADAPT_TRY(ReqString(ctx, f, "type", jp, &ftype));
        if (*ftype != "function") {
          req->dropped_tools.push_back(*ftype);
          continue;
        }
        Tool tool;
        LADLE_ADAPT_TRY(ParseFunctionTool(ctx, f, jp, "parameters", false, &tool));
        req->tools.push_back(std::move(tool));
      }
    } else {
      // Hosted tools (web_search, file_search, code_interpreter, computer_use_preview, mcp,
      // image_generation, local_shell, custom, ...) run on OpenAI's side or need a grammar this
      // server does not take: declared but unusable, they are dropped and named in the
      // x-ladle-dropped-tools header; a tool_choice that forces one is a 400.
      const std::string* name = nullptr;
      if (Get(t, "name") != nullptr) LADLE_ADAPT_TRY(OptString(ctx, t, "name", tp, &name));
      req->dropped_tools.push_back(name != nullptr ? *name : *type);
    }
    if (req->tools.size() > ctx.limits.max_tools) {
      return ErrValue(ctx, tsp, fmt::format("at most {} tools are allowed (namespaces included).", ctx.limits.max_tools));
    }
  }
  return CheckToolSet(ctx, req->tools, tsp);
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
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, v, "type", p, &type));
  if (*type == "function") {
    const std::string* name = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, v, "name", p, &name));
    tc->mode = ToolChoice::Mode::kNamed;
    tc->name = *name;
    return {};
  }
  if (*type != "allowed_tools") {
    // {"type":"web_search"} and the other hosted tools: this server cannot run them.
    return ErrUnsupported(ctx, p.Field("type"),
                          fmt::format("tool_choice of type '{}' is not supported; use 'function' or "
                                      "'allowed_tools'.",
                                      *type));
  }
  const json::Value* mode_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, v, "mode", p, &mode_value));
  const std::string* mode = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *mode_value, p.Field("mode"), {"auto", "required"}, &mode));
  const json::Value* tools = nullptr;
  LADLE_ADAPT_TRY(ReqArray(ctx, v, "tools", p, &tools));
  const Path tsp = p.Field("tools");
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
    const std::string* name = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, t, "name", tp, &name));
    tc->allowed.push_back(*name);
  }
  return {};
}

// Parameters that need server-side state or background execution.
Check RejectStateful(const Ctx& ctx, const json::Value& body, const Path& root) {
  if (Get(body, "previous_response_id") != nullptr) {
    return ErrUnsupported(ctx, root.Field("previous_response_id"),
                          "server-side conversation state is not supported yet; send the whole "
                          "conversation in 'input' instead.",
                          "unsupported_parameter");
  }
  if (Get(body, "conversation") != nullptr) {
    return ErrUnsupported(ctx, root.Field("conversation"),
                          "server-side conversations are not supported yet; send the whole conversation "
                          "in 'input' instead.",
                          "unsupported_parameter");
  }
  if (Get(body, "prompt") != nullptr) {
    return ErrUnsupported(ctx, root.Field("prompt"),
                          "stored prompt templates are not supported; send 'instructions' and 'input'.",
                          "unsupported_parameter");
  }
  std::optional<bool> store, background;
  // store (default true) is the server's business: `ladle serve` keeps recent responses in a
  // bounded in-memory store so later item_reference items resolve (src/server/response_store.h).
  LADLE_ADAPT_TRY(OptBool(ctx, body, "store", root, &store));
  LADLE_ADAPT_TRY(OptBool(ctx, body, "background", root, &background));
  if (background.value_or(false)) {
    return ErrUnsupported(ctx, root.Field("background"), "background responses are not supported yet.");
  }
  return {};
}

Check ParseInput(const Ctx& ctx, const json::Value& body, const Path& root, Request* req) {
  const std::string* instructions = nullptr;
  LADLE_ADAPT_TRY(OptString(ctx, body, "instructions", root, &instructions));
  if (instructions != nullptr && !instructions->empty()) {
    Message sys;
    sys.role = Role::kSystem;
    AddText(&sys, *instructions);
    req->messages.push_back(std::move(sys));
  }
  const json::Value* input = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, body, "input", root, &input));
  const Path ip = root.Field("input");
  if (input->is_string()) {
    Message user;
    user.role = Role::kUser;
    AddText(&user, input->as_string());
    req->messages.push_back(std::move(user));
    return {};
  }
  if (!input->is_array()) return ErrType(ctx, ip, "a string or an array of input items", *input);
  LADLE_ADAPT_TRY(CheckLength(ctx, *input, ip, ctx.limits.max_messages, true));
  Builder builder(&req->messages);
  const auto& items = input->as_array();
  for (size_t i = 0; i < items.size(); ++i) LADLE_ADAPT_TRY(ParseItem(ctx, items[i], ip.Index(i), &builder));
  builder.Finish();
  LinkToolNames(&req->messages);
  return {};
}

Check AdaptResponsesBody(const Ctx& ctx, const json::Value& body, Request* req) {
  const Path root;
  req->api = Api::kResponses;
  req->include_usage = true;
  const std::string* model = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, body, "model", root, &model));
  if (model->empty()) return ErrValue(ctx, root.Field("model"), "the model name must not be empty.");
  req->model = *model;
  LADLE_ADAPT_TRY(RejectStateful(ctx, body, root));
  LADLE_ADAPT_TRY(ParseInput(ctx, body, root, req));

  LADLE_ADAPT_TRY(ParseTools(ctx, body, root, req));
  req->tool_choice.mode = req->tools.empty() ? ToolChoice::Mode::kNone : ToolChoice::Mode::kAuto;
  const Path tcp = root.Field("tool_choice");
  if (const json::Value* tc = Get(body, "tool_choice")) {
    LADLE_ADAPT_TRY(ParseToolChoice(ctx, *tc, tcp, &req->tool_choice));
    LADLE_ADAPT_TRY(CheckToolChoice(ctx, *req, tcp, tcp.Field("name")));
  }
  std::optional<bool> parallel;
  LADLE_ADAPT_TRY(OptBool(ctx, body, "parallel_tool_calls", root, &parallel));
  req->parallel_tool_calls = parallel.value_or(true);

  const json::Value* text = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "text", root, &text));
  if (text != nullptr) {
    if (const json::Value* format = Get(*text, "format")) {
      const Path textp = root.Field("text");
      LADLE_ADAPT_TRY(ParseResponseFormat(ctx, *format, textp.Field("format"), false, &req->response_format));
    }
  }
  const json::Value* reasoning = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "reasoning", root, &reasoning));
  if (reasoning != nullptr) {
    if (const json::Value* effort = Get(*reasoning, "effort")) {
      const Path rp = root.Field("reasoning");
      LADLE_ADAPT_TRY(ParseEffort(ctx, *effort, rp.Field("effort"), &req->thinking.effort));
    }
  }
  req->thinking.enabled = !req->thinking.effort.empty() && req->thinking.effort != "none";

  Sampling& s = req->sampling;
  LADLE_ADAPT_TRY(OptInt(ctx, body, "max_output_tokens", root, 1, ctx.limits.max_tokens, &s.max_tokens));
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "temperature", root, {0, 2}, &s.temperature));
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "top_p", root, {0, 1, true}, &s.top_p));
  std::optional<int64_t> top_logprobs;
  LADLE_ADAPT_TRY(OptInt(ctx, body, "top_logprobs", root, 0, 20, &top_logprobs));
  s.top_logprobs = static_cast<int>(top_logprobs.value_or(0));
  const json::Value* include = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, body, "include", root, &include));
  if (include != nullptr) {
    const Path incp = root.Field("include");
    for (size_t i = 0; i < include->as_array().size(); ++i) {
      const std::string* entry = nullptr;
      LADLE_ADAPT_TRY(ExpectString(ctx, include->as_array()[i], incp.Index(i), &entry));
      if (*entry == "message.output_text.logprobs") s.logprobs = true;
    }
  }
  if (s.top_logprobs > 0) s.logprobs = true;

  std::optional<bool> stream;
  LADLE_ADAPT_TRY(OptBool(ctx, body, "stream", root, &stream));
  req->stream = stream.value_or(false);
  LADLE_ADAPT_TRY(ParseMetadata(ctx, body, "metadata", root, &req->metadata));
  const std::string* user = nullptr;
  LADLE_ADAPT_TRY(OptString(ctx, body, "user", root, &user));
  if (user != nullptr) req->user = *user;
  return {};
}

}  // namespace

Adapted AdaptResponses(std::string_view body, const Limits& limits) {
  return adapter::Run(adapter::Ctx{Api::kResponses, limits}, body, AdaptResponsesBody);
}

}  // namespace ladle::frontend
