// Anthropic Messages request → Request.
//
// Choices made where the API leaves room (tested in adapter_messages_test.cc):
//   * Consecutive messages of the same role are combined into one turn, as Anthropic documents
//     ("consecutive user or assistant turns in your request will be combined into a single
//     turn"). The first message may be an assistant turn; a final assistant turn is a prefill
//     the encoder continues.
//   * A user turn's tool_result blocks become Role::kTool messages, in block order, placed
//     before the user message that holds the turn's remaining text and images (what the
//     reference converters do). Each carries tool_use_id as tool_call_id, is_error, and the
//     name of the matching earlier tool_use when there is one. A turn of only tool results
//     yields no user message. Pairing with an earlier tool_use is not enforced (vLLM and SGLang
//     do not either); DeepSeek encoders link results by position.
//   * tool_use.input (an object) becomes ToolCall.arguments as Python json.dumps text
//     ({"a": 1}, ", " and ": " separators, key order kept), which is what DeepSeek's reference
//     harness produces for dict arguments; Chat and Responses string arguments stay as sent.
//   * An assistant turn's thinking blocks become Message::reasoning (several joined with
//     "\n\n"); signatures are accepted and not checked. redacted_thinking is encrypted text the
//     model cannot read back, so it is dropped. content_null is set for an assistant turn whose
//     content is an array without text blocks (Chat's "content": null with tool calls).
//   * system: a string or text blocks, one leading system message; an empty system is none.
//     A message with role "system" inside `messages` (the API accepts them mid-conversation)
//     ends the current turn and becomes a system message at its position.
//   * top_k of 0 means "off" (stored as not set). Tool types other than "custom" (Anthropic's
//     server tools: bash, text_editor, web_search, computer, ...) are dropped and reported in
//     Request::dropped_tools (a tool_choice naming one is a 400: unknown tool); document,
//     search_result and file-source images, and a non-empty mcp_servers.
//   * thinking.budget_tokens must be >= 1024 and < max_tokens; {"type":"adaptive"} turns
//     thinking on with no budget. output_config.format / output_format json_schema becomes a
//     JSON Schema constraint (native structured output). The temperature/top_p limits
//     Claude imposes while thinking are Claude's, not the protocol's, and are not applied.
//   * Errors use Anthropic's shape: no param field, so the message starts with the dotted path
//     ("messages.1.content.0.text: Field required").
#include <fmt/format.h>

#include <limits>

#include "adapter_common.h"
#include "ladle/frontend/request_adapters.h"

namespace ladle::frontend {
namespace {

using namespace adapter;  // NOLINT: this file is the adapter

Check ParseImageBlock(const Ctx& ctx, const json::Value& block, const Path& bp, ContentPart* out) {
  const json::Value* source = nullptr;
  LADLE_ADAPT_TRY(ReqObject(ctx, block, "source", bp, &source));
  const Path sp = bp.Field("source");
  const json::Value* type_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, *source, "type", sp, &type_value));
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *type_value, sp.Field("type"), {"base64", "url", "file"}, &type));
  out->kind = ContentPart::Kind::kImage;
  out->image.where = bp.Bracketed();
  if (*type == "file") {
    return ErrUnsupported(ctx, sp.Field("type"),
                          "file sources are not supported (this server stores no files); send base64 data "
                          "or a URL.");
  }
  if (*type == "url") {
    const std::string* url = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, *source, "url", sp, &url));
    return ParseImageUrl(ctx, *url, sp.Field("url"), &out->image);
  }
  const json::Value* mt_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, *source, "media_type", sp, &mt_value));
  const std::string* media_type = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *mt_value, sp.Field("media_type"),
                             {"image/jpeg", "image/png", "image/gif", "image/webp"}, &media_type));
  const std::string* data = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, *source, "data", sp, &data));
  out->image.media_type = *media_type;
  out->image.url = fmt::format("data:{};base64,{}", *media_type, *data);
  return {};
}

// A turn under construction: consecutive same-role messages feed one Turn.
struct Turn {
  bool is_user = true;
  std::vector<Message> tool_results;  // user turns
  Message message;                    // the user text/images, or the assistant reply
  bool saw_text = false;              // assistant: a text block or string content was seen
};

Check ParseToolResult(const Ctx& ctx, const json::Value& block, const Path& bp, Turn* turn) {
  Message m;
  m.role = Role::kTool;
  const std::string* id = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, block, "tool_use_id", bp, &id));
  m.tool_call_id = *id;
  std::optional<bool> is_error;
  LADLE_ADAPT_TRY(OptBool(ctx, block, "is_error", bp, &is_error));
  m.is_error = is_error.value_or(false);
  if (const json::Value* content = Get(block, "content")) {
    const Path cp = bp.Field("content");
    if (content->is_string()) {
      AddText(&m, content->as_string());
    } else if (content->is_array()) {
      for (size_t i = 0; i < content->as_array().size(); ++i) {
        const Path ip = cp.Index(i);
        const json::Value& inner = content->as_array()[i];
        LADLE_ADAPT_TRY(ExpectObject(ctx, inner, ip));
        const std::string* type = nullptr;
        LADLE_ADAPT_TRY(ReqString(ctx, inner, "type", ip, &type));
        if (*type == "text") {
          const std::string* text = nullptr;
          LADLE_ADAPT_TRY(ReqString(ctx, inner, "text", ip, &text));
          AddText(&m, *text);
        } else if (*type == "image") {
          ContentPart part;
          LADLE_ADAPT_TRY(ParseImageBlock(ctx, inner, ip, &part));
          m.content.push_back(std::move(part));
        } else if (*type == "document" || *type == "search_result") {
          return ErrUnsupported(ctx, ip.Field("type"),
                                fmt::format("'{}' blocks are not supported by this server.", *type));
        } else {
          return ErrEnum(ctx, ip.Field("type"), *type, {"text", "image", "document", "search_result"});
        }
      }
    } else {
      return ErrType(ctx, cp, "a string or an array of content blocks", *content);
    }
  }
  turn->tool_results.push_back(std::move(m));
  return {};
}

Check ParseBlock(const Ctx& ctx, const json::Value& block, const Path& bp, Turn* turn) {
  LADLE_ADAPT_TRY(ExpectObject(ctx, block, bp));
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, block, "type", bp, &type));
  const Path tp = bp.Field("type");
  Message& m = turn->message;
  if (*type == "text") {
    const std::string* text = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, block, "text", bp, &text));
    AddText(&m, *text);
    turn->saw_text = true;
    return {};
  }
  if (turn->is_user) {
    if (*type == "image") {
      ContentPart part;
      LADLE_ADAPT_TRY(ParseImageBlock(ctx, block, bp, &part));
      m.content.push_back(std::move(part));
      return {};
    }
    if (*type == "tool_result") return ParseToolResult(ctx, block, bp, turn);
    if (*type == "document" || *type == "search_result") {
      return ErrUnsupported(ctx, tp, fmt::format("'{}' blocks are not supported by this server.", *type));
    }
    if (*type == "tool_use" || *type == "thinking" || *type == "redacted_thinking") {
      return ErrValue(ctx, tp, fmt::format("'{}' blocks are only allowed in assistant messages.", *type));
    }
    return ErrEnum(ctx, tp, *type, {"text", "image", "tool_result", "document", "search_result"});
  }
  if (*type == "tool_use") {
    ToolCall call;
    const std::string* s = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, block, "id", bp, &s));
    call.id = *s;
    LADLE_ADAPT_TRY(ReqString(ctx, block, "name", bp, &s));
    call.name = *s;
    const json::Value* input = nullptr;
    LADLE_ADAPT_TRY(ReqObject(ctx, block, "input", bp, &input));
    json::Value folded = *input;
    FoldDuplicateKeys(&folded);
    call.arguments = json::Dump(folded, json::Style::kPython);
    m.tool_calls.push_back(std::move(call));
    return {};
  }
  if (*type == "thinking") {
    const std::string* thinking = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, block, "thinking", bp, &thinking));
    const std::string* signature = nullptr;
    LADLE_ADAPT_TRY(OptString(ctx, block, "signature", bp, &signature));
    if (m.reasoning.has_value()) {
      if (!thinking->empty()) {
        if (!m.reasoning->empty()) *m.reasoning += "\n\n";
        *m.reasoning += *thinking;
      }
    } else {
      m.reasoning = *thinking;
    }
    return {};
  }
  if (*type == "redacted_thinking") {
    const std::string* data = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, block, "data", bp, &data));
    return {};
  }
  if (*type == "image" || *type == "tool_result" || *type == "document" || *type == "search_result") {
    return ErrValue(ctx, tp, fmt::format("'{}' blocks are only allowed in user messages.", *type));
  }
  if (*type == "server_tool_use" || *type == "web_search_tool_result") {
    return ErrUnsupported(ctx, tp, fmt::format("'{}' blocks (server tools) are not supported.", *type));
  }
  return ErrEnum(ctx, tp, *type, {"text", "tool_use", "thinking", "redacted_thinking"});
}

void FlushTurn(Turn* turn, std::vector<Message>* out) {
  if (turn->is_user) {
    for (Message& t : turn->tool_results) out->push_back(std::move(t));
    const bool only_tools = !turn->tool_results.empty() && turn->message.content.empty();
    if (!only_tools) out->push_back(std::move(turn->message));
  } else {
    turn->message.content_null = !turn->saw_text;
    out->push_back(std::move(turn->message));
  }
}

Check ParseSystemText(const Ctx& ctx, const json::Value* system, const Path& sp, Message* out);

Check ParseMessages(const Ctx& ctx, const json::Value& messages, const Path& msp, Request* req) {
  std::optional<Turn> turn;
  const auto& items = messages.as_array();
  for (size_t i = 0; i < items.size(); ++i) {
    const Path mp = msp.Index(i);
    const json::Value& msg = items[i];
    LADLE_ADAPT_TRY(ExpectObject(ctx, msg, mp));
    const json::Value* role_value = nullptr;
    LADLE_ADAPT_TRY(ReqField(ctx, msg, "role", mp, &role_value));
    const std::string* role = nullptr;
    const Path rp = mp.Field("role");
    if (role_value->is_string() && role_value->as_string() == "system") {
      // The Messages API takes system messages inside the conversation too (Claude Code sends
      // them mid-conversation): one ends the current turn and stays at its position.
      if (turn.has_value()) {
        FlushTurn(&*turn, &req->messages);
        turn.reset();
      }
      const json::Value* content = nullptr;
      LADLE_ADAPT_TRY(ReqField(ctx, msg, "content", mp, &content));
      Message sys;
      LADLE_ADAPT_TRY(ParseSystemText(ctx, content, mp.Field("content"), &sys));
      if (!sys.content.empty()) req->messages.push_back(std::move(sys));
      continue;
    }
    LADLE_ADAPT_TRY(ExpectEnum(ctx, *role_value, rp, {"user", "assistant"}, &role));
    const bool is_user = *role == "user";
    if (turn.has_value() && turn->is_user != is_user) {
      FlushTurn(&*turn, &req->messages);
      turn.reset();
    }
    if (!turn.has_value()) {
      turn.emplace();
      turn->is_user = is_user;
      turn->message.role = is_user ? Role::kUser : Role::kAssistant;
    }
    const json::Value* content = nullptr;
    LADLE_ADAPT_TRY(ReqField(ctx, msg, "content", mp, &content));
    const Path cp = mp.Field("content");
    if (content->is_string()) {
      AddText(&turn->message, content->as_string());
      turn->saw_text = true;
    } else if (content->is_array()) {
      for (size_t j = 0; j < content->as_array().size(); ++j) {
        LADLE_ADAPT_TRY(ParseBlock(ctx, content->as_array()[j], cp.Index(j), &*turn));
      }
    } else {
      return ErrType(ctx, cp, "a string or an array of content blocks", *content);
    }
  }
  if (turn.has_value()) FlushTurn(&*turn, &req->messages);
  LinkToolNames(&req->messages);
  return {};
}

// A system prompt's text: a string or an array of text blocks (cache_control and other block
// fields are accepted and have no effect here).
Check ParseSystemText(const Ctx& ctx, const json::Value* system, const Path& sp, Message* out) {
  Message& m = *out;
  m.role = Role::kSystem;
  if (system->is_string()) {
    AddText(&m, system->as_string());
  } else if (system->is_array()) {
    for (size_t i = 0; i < system->as_array().size(); ++i) {
      const Path bp = sp.Index(i);
      const json::Value& block = system->as_array()[i];
      LADLE_ADAPT_TRY(ExpectObject(ctx, block, bp));
      const json::Value* type_value = nullptr;
      LADLE_ADAPT_TRY(ReqField(ctx, block, "type", bp, &type_value));
      const std::string* type = nullptr;
      LADLE_ADAPT_TRY(ExpectEnum(ctx, *type_value, bp.Field("type"), {"text"}, &type));
      const std::string* text = nullptr;
      LADLE_ADAPT_TRY(ReqString(ctx, block, "text", bp, &text));
      AddText(&m, *text);
    }
  } else {
    return ErrType(ctx, sp, "a string or an array of text blocks", *system);
  }
  return {};
}

Check ParseSystem(const Ctx& ctx, const json::Value& body, const Path& root, Request* req) {
  const json::Value* system = Get(body, "system");
  if (system == nullptr) return {};
  Message m;
  LADLE_ADAPT_TRY(ParseSystemText(ctx, system, root.Field("system"), &m));
  if (!m.content.empty()) req->messages.push_back(std::move(m));
  return {};
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
    LADLE_ADAPT_TRY(OptString(ctx, t, "type", tp, &type));
    if (type != nullptr && *type != "custom") {
      // A server tool (web_search_20250305, bash_20250124, ...) runs on Anthropic's side, which
      // this server is not: declared-but-unusable tools are dropped (and named in a response
      // header), so agents that always declare them still work. Forcing one is a 400 below.
      const std::string* name = nullptr;
      LADLE_ADAPT_TRY(OptString(ctx, t, "name", tp, &name));
      req->dropped_tools.push_back(name != nullptr ? *name : *type);
      continue;
    }
    Tool tool;
    LADLE_ADAPT_TRY(ParseFunctionTool(ctx, t, tp, "input_schema", true, &tool));
    req->tools.push_back(std::move(tool));
  }
  return CheckToolSet(ctx, req->tools, tsp);
}

Check ParseToolChoice(const Ctx& ctx, const json::Value& body, const Path& root, Request* req) {
  req->tool_choice.mode = req->tools.empty() ? ToolChoice::Mode::kNone : ToolChoice::Mode::kAuto;
  const json::Value* tc = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "tool_choice", root, &tc));
  if (tc == nullptr) return {};
  const Path tcp = root.Field("tool_choice");
  const json::Value* type_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, *tc, "type", tcp, &type_value));
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *type_value, tcp.Field("type"), {"auto", "any", "tool", "none"}, &type));
  ToolChoice& choice = req->tool_choice;
  if (*type == "auto") {
    choice.mode = ToolChoice::Mode::kAuto;
  } else if (*type == "any") {
    choice.mode = ToolChoice::Mode::kRequired;
  } else if (*type == "none") {
    choice.mode = ToolChoice::Mode::kNone;
  } else {
    const std::string* name = nullptr;
    LADLE_ADAPT_TRY(ReqString(ctx, *tc, "name", tcp, &name));
    choice.mode = ToolChoice::Mode::kNamed;
    choice.name = *name;
  }
  std::optional<bool> disable_parallel;
  LADLE_ADAPT_TRY(OptBool(ctx, *tc, "disable_parallel_tool_use", tcp, &disable_parallel));
  req->parallel_tool_calls = !disable_parallel.value_or(false);
  return CheckToolChoice(ctx, *req, tcp, tcp.Field("name"));
}

Check ParseThinking(const Ctx& ctx, const json::Value& body, const Path& root, Request* req) {
  const json::Value* thinking = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "thinking", root, &thinking));
  if (thinking == nullptr) return {};
  const Path tp = root.Field("thinking");
  const json::Value* type_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, *thinking, "type", tp, &type_value));
  const std::string* type = nullptr;
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *type_value, tp.Field("type"), {"enabled", "disabled", "adaptive"}, &type));
  if (*type == "disabled") return {};
  if (*type == "adaptive") {
    // The model decides how much to think: thinking on, no budget (budget_tokens is optional).
    req->thinking.enabled = true;
    if (Get(*thinking, "budget_tokens") != nullptr) {
      int64_t budget = 0;
      LADLE_ADAPT_TRY(ReqInt(ctx, *thinking, "budget_tokens", tp, 1, std::numeric_limits<int64_t>::max(), &budget));
      req->thinking.budget_tokens = budget;
    }
    return {};
  }
  int64_t budget = 0;
  LADLE_ADAPT_TRY(ReqInt(ctx, *thinking, "budget_tokens", tp, 1024, std::numeric_limits<int64_t>::max(), &budget));
  const int64_t max_tokens = req->sampling.max_tokens.value_or(0);
  if (budget >= max_tokens) {
    return ErrValue(ctx, tp.Field("budget_tokens"),
                    fmt::format("must be less than max_tokens ({}), but got {}.", max_tokens, budget));
  }
  req->thinking.enabled = true;
  req->thinking.budget_tokens = budget;
  return {};
}

// Anthropic's native structured output: output_config.format (GA) or output_format (the beta),
// {"type":"json_schema","schema":{...}}. Honoured as a JSON Schema constraint, never ignored.
Check ParseOutputFormat(const Ctx& ctx, const json::Value& body, const Path& root, Request* req) {
  const json::Value* format = nullptr;
  const Path cp = root.Field("output_config");
  const Path cfp = cp.Field("format");
  const Path ofp = root.Field("output_format");
  const Path* fp = &ofp;
  const json::Value* config = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "output_config", root, &config));
  if (config != nullptr) {
    LADLE_ADAPT_TRY(OptObject(ctx, *config, "format", cp, &format));
    if (format != nullptr) fp = &cfp;
    const json::Value* effort = Get(*config, "effort");
    if (effort != nullptr && effort->is_string()) req->thinking.effort = effort->as_string();
  }
  if (format == nullptr) LADLE_ADAPT_TRY(OptObject(ctx, body, "output_format", root, &format));
  if (format == nullptr) return {};
  const json::Value* type_value = nullptr;
  LADLE_ADAPT_TRY(ReqField(ctx, *format, "type", *fp, &type_value));
  const std::string* type = nullptr;
  const Path tp = fp->Field("type");
  LADLE_ADAPT_TRY(ExpectEnum(ctx, *type_value, tp, {"json_schema"}, &type));
  const json::Value* schema = nullptr;
  LADLE_ADAPT_TRY(ReqObject(ctx, *format, "schema", *fp, &schema));
  req->response_format.kind = ResponseFormat::Kind::kJsonSchema;
  req->response_format.name = "output";
  req->response_format.schema = *schema;
  req->response_format.strict = true;
  return {};
}

Check AdaptMessagesBody(const Ctx& ctx, const json::Value& body, Request* req) {
  const Path root;
  req->api = Api::kMessages;
  req->include_usage = true;
  const std::string* model = nullptr;
  LADLE_ADAPT_TRY(ReqString(ctx, body, "model", root, &model));
  if (model->empty()) return ErrValue(ctx, root.Field("model"), "the model name must not be empty.");
  req->model = *model;
  int64_t max_tokens = 0;
  LADLE_ADAPT_TRY(ReqInt(ctx, body, "max_tokens", root, 1, ctx.limits.max_tokens, &max_tokens));
  req->sampling.max_tokens = max_tokens;

  LADLE_ADAPT_TRY(ParseSystem(ctx, body, root, req));
  const json::Value* messages = nullptr;
  LADLE_ADAPT_TRY(ReqArray(ctx, body, "messages", root, &messages));
  const Path msp = root.Field("messages");
  LADLE_ADAPT_TRY(CheckLength(ctx, *messages, msp, ctx.limits.max_messages, true));
  LADLE_ADAPT_TRY(ParseMessages(ctx, *messages, msp, req));

  LADLE_ADAPT_TRY(ParseTools(ctx, body, root, req));
  LADLE_ADAPT_TRY(ParseToolChoice(ctx, body, root, req));
  LADLE_ADAPT_TRY(ParseThinking(ctx, body, root, req));
  LADLE_ADAPT_TRY(ParseOutputFormat(ctx, body, root, req));

  const json::Value* mcp = nullptr;
  LADLE_ADAPT_TRY(OptArray(ctx, body, "mcp_servers", root, &mcp));
  if (mcp != nullptr && !mcp->as_array().empty()) {
    return ErrUnsupported(ctx, root.Field("mcp_servers"), "MCP servers are not supported by this server.");
  }

  Sampling& s = req->sampling;
  if (const json::Value* stop = Get(body, "stop_sequences")) {
    LADLE_ADAPT_TRY(ParseStopList(ctx, *stop, root.Field("stop_sequences"), false, &s.stop));
  }
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "temperature", root, {0, 1}, &s.temperature));
  LADLE_ADAPT_TRY(OptNumber(ctx, body, "top_p", root, {0, 1, true}, &s.top_p));
  LADLE_ADAPT_TRY(OptInt(ctx, body, "top_k", root, 0, std::numeric_limits<int32_t>::max(), &s.top_k));
  if (s.top_k.has_value() && *s.top_k == 0) s.top_k.reset();

  std::optional<bool> stream;
  LADLE_ADAPT_TRY(OptBool(ctx, body, "stream", root, &stream));
  req->stream = stream.value_or(false);
  const json::Value* metadata = nullptr;
  LADLE_ADAPT_TRY(OptObject(ctx, body, "metadata", root, &metadata));
  if (metadata != nullptr) {
    const std::string* user_id = nullptr;
    LADLE_ADAPT_TRY(OptString(ctx, *metadata, "user_id", root.Field("metadata"), &user_id));
    if (user_id != nullptr) req->user = *user_id;
    req->metadata = *metadata;
    FoldDuplicateKeys(&req->metadata);
  }
  return {};
}

}  // namespace

Adapted AdaptMessages(std::string_view body, const Limits& limits) {
  return adapter::Run(adapter::Ctx{Api::kMessages, limits}, body, AdaptMessagesBody);
}

}  // namespace ladle::frontend
