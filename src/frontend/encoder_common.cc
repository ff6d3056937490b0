#include "encoder_common.h"

#include <fmt/format.h>

#include <unordered_map>

namespace ladle::frontend::encoder {

PromptBuilder::PromptBuilder(ModelVersion version) {
  prompt_.version = version;
  const SpecialTokens& st = SpecialTokensFor(version);
  controls_ = {{kBos, st.bos}, {kEos, st.eos}, {kUser, st.user}, {kAssistant, st.assistant}};
  auto add = [&](std::string_view spelling, const std::optional<tokenizer::TokenId>& id) {
    if (id) controls_.push_back({spelling, *id});
  };
  add(kThink, st.think);
  add(kEndThink, st.end_think);
  add(kToolCallsBegin, st.tool_calls_begin);
  add(kToolCallsEnd, st.tool_calls_end);
  add(kToolCallBegin, st.tool_call_begin);
  add(kToolCallEnd, st.tool_call_end);
  add(kToolSep, st.tool_sep);
  add(kToolOutputsBegin, st.tool_outputs_begin);
  add(kToolOutputsEnd, st.tool_outputs_end);
  add(kToolOutputBegin, st.tool_output_begin);
  add(kToolOutputEnd, st.tool_output_end);
  add(kDsml, st.dsml);
  add(kImage, st.image);
}

const PromptBuilder::Control* PromptBuilder::Find(std::string_view spelling) const {
  for (const Control& c : controls_) {
    if (c.spelling == spelling) return &c;
  }
  return nullptr;
}

void PromptBuilder::Special(std::string_view spelling) {
  const Control* c = Find(spelling);
  if (c == nullptr) {
    // An encoder bug, never user input: user text only ever reaches Text().
    if (status_.ok()) {
      status_ = Internal(fmt::format("{} encoder placed '{}', which is not a control token of the version",
                                     ModelVersionName(prompt_.version), spelling));
    }
    return;
  }
  PromptPiece p;
  p.kind = PromptPiece::Kind::kSpecial;
  p.begin = prompt_.text.size();
  p.size = spelling.size();
  p.id = c->id;
  prompt_.text.append(spelling);
  prompt_.pieces.push_back(p);
  ++specials_;
}

void PromptBuilder::Text(std::string_view untrusted) {
  if (untrusted.empty()) return;
  if (!prompt_.pieces.empty() && prompt_.pieces.back().kind == PromptPiece::Kind::kText) {
    prompt_.pieces.back().size += untrusted.size();
  } else {
    PromptPiece p;
    p.begin = prompt_.text.size();
    p.size = untrusted.size();
    prompt_.pieces.push_back(p);
  }
  prompt_.text.append(untrusted);
}

void PromptBuilder::Template(std::string_view trusted) {
  // Every control spelling starts with '<' or with the first byte of '｜' (0xEF); template
  // strings are short, so a scan that tries each spelling at those bytes is plenty.
  size_t start = 0;
  for (size_t i = 0; i < trusted.size(); ++i) {
    const char ch = trusted[i];
    if (ch != '<' && ch != '\xEF') continue;
    for (const Control& c : controls_) {
      if (trusted.compare(i, c.spelling.size(), c.spelling) == 0) {
        Text(trusted.substr(start, i - start));
        Special(c.spelling);
        i += c.spelling.size() - 1;
        start = i + 1;
        break;
      }
    }
  }
  Text(trusted.substr(start));
}

void PromptBuilder::Image(const ImagePart& image, std::string_view where) {
  if (!status_.ok()) return;
  if (Find(kImage) == nullptr) {
    status_ = Unsupported(fmt::format("{}: model version {} takes no image input", where, ModelVersionName(prompt_.version)));
    return;
  }
  if (image.placeholder_tokens <= 0) {
    status_ = Status(StatusCode::kFailedPrecondition,
                     fmt::format("{}: the image was not measured (no placeholder count) before rendering", where));
    return;
  }
  PromptImage im;
  im.first_special = specials_;
  im.tokens = image.placeholder_tokens;
  im.image_index = image.index;
  for (int i = 0; i < image.placeholder_tokens; ++i) Special(kImage);
  prompt_.images.push_back(im);
}

bool PromptBuilder::EndsWithSpecial(std::string_view spelling) const {
  if (prompt_.pieces.empty()) return false;
  const PromptPiece& p = prompt_.pieces.back();
  return p.kind == PromptPiece::Kind::kSpecial &&
         std::string_view(prompt_.text).substr(p.begin, p.size) == spelling;
}

Result<Prompt> PromptBuilder::Finish(bool ends_in_thinking) && {
  if (!status_.ok()) return status_;
  prompt_.ends_in_thinking = ends_in_thinking;
  return std::move(prompt_);
}

Result<std::string> MessageText(const Message& m, ModelVersion version, size_t index) {
  std::string out;
  bool first = true;
  for (const ContentPart& part : m.content) {
    if (part.kind == ContentPart::Kind::kImage) {
      const std::string where = part.image.where.empty() ? fmt::format("messages[{}]", index) : part.image.where;
      return Unsupported(fmt::format("{}: model version {} takes no image input", where, ModelVersionName(version)));
    }
    if (!first) out += '\n';
    out += part.text;
    first = false;
  }
  return out;
}

Status AppendContent(const Message& m, size_t index, PromptBuilder* b) {
  bool first = true;
  const std::string where = fmt::format("messages[{}]", index);
  for (const ContentPart& part : m.content) {
    if (!first) b->Text("\n");
    first = false;
    if (part.kind == ContentPart::Kind::kImage) {
      b->Image(part.image, part.image.where.empty() ? where : part.image.where);
    } else {
      b->Text(part.text);
    }
  }
  return Status::Ok();
}

bool HasImage(const Message& m) {
  for (const ContentPart& part : m.content) {
    if (part.kind == ContentPart::Kind::kImage) return true;
  }
  return false;
}

json::Value DedupeKeys(const json::Value& v) {
  if (v.is_array()) {
    json::Value::Array a;
    a.reserve(v.as_array().size());
    for (const auto& e : v.as_array()) a.push_back(DedupeKeys(e));
    return json::Value::MakeArray(std::move(a));
  }
  if (!v.is_object()) return v;
  const auto& members = v.as_object();
  json::Value::Object out;
  out.reserve(members.size());
  // Small objects (the common case) need no map; a dict keeps a key's first position.
  std::unordered_map<std::string_view, size_t> pos;
  for (const auto& [key, value] : members) {
    size_t found = out.size();
    if (members.size() <= 16) {
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i].first == key) {
          found = i;
          break;
        }
      }
    } else if (auto it = pos.find(key); it != pos.end()) {
      found = it->second;
    }
    if (found < out.size()) {
      out[found].second = DedupeKeys(value);
    } else {
      if (members.size() > 16) pos.emplace(key, out.size());
      out.emplace_back(key, DedupeKeys(value));
    }
  }
  return json::Value::MakeObject(std::move(out));
}

namespace {

bool HasDuplicateKeys(const json::Value& v) {
  if (v.is_array()) {
    for (const auto& e : v.as_array()) {
      if (HasDuplicateKeys(e)) return true;
    }
    return false;
  }
  if (!v.is_object()) return false;
  const auto& m = v.as_object();
  for (size_t i = 0; i < m.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (m[i].first == m[j].first) return true;
    }
    if (HasDuplicateKeys(m[i].second)) return true;
  }
  return false;
}

}  // namespace

std::string PyDumps(const json::Value& v) {
  // Duplicates are rare; only then pay for a rebuilt copy.
  if (HasDuplicateKeys(v)) return json::Dump(DedupeKeys(v), json::Style::kPython);
  return json::Dump(v, json::Style::kPython);
}

json::Value ToolObject(const Tool& tool) {
  json::Value fn = json::Value::MakeObject();
  fn.Set("name", json::Value::String(tool.name));
  if (tool.has_description) fn.Set("description", json::Value::String(tool.description));
  if (!tool.parameters.is_null()) fn.Set("parameters", tool.parameters);
  if (tool.strict) fn.Set("strict", json::Value::Bool(true));
  json::Value obj = json::Value::MakeObject();
  obj.Set("type", json::Value::String("function"));
  obj.Set("function", std::move(fn));
  return obj;
}

json::Value ToolFunction(const json::Value& tool) {
  if (const json::Value* fn = tool.Find("function"); fn != nullptr && fn->is_object()) return *fn;
  if (!tool.is_object()) return tool;
  json::Value::Object rest;
  for (const auto& [k, v] : tool.as_object()) {
    if (k != "type") rest.emplace_back(k, v);
  }
  return json::Value::MakeObject(std::move(rest));
}

std::vector<Turn> DsmlTurns(const Request& request) {
  std::vector<Turn> turns;
  turns.reserve(request.messages.size() + 1);
  std::optional<json::Value> rf = ResponseFormatObject(request.response_format);
  const bool head_is_system =
      !request.messages.empty() &&
      (request.messages[0].role == Role::kSystem || request.messages[0].role == Role::kDeveloper);
  const bool has_request_tools = !request.tools.empty();
  if (!head_is_system && (has_request_tools || rf)) turns.push_back(Turn{Role::kSystem, nullptr, 0, {}, {}});
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const Message& m = request.messages[i];
    turns.push_back(Turn{m.role, &m, i, m.tools, {}});
  }
  if (has_request_tools || rf) {
    Turn& head = turns.front();
    if (has_request_tools) {
      head.tools.clear();
      for (const Tool& t : request.tools) head.tools.push_back(ToolObject(t));
    }
    head.response_format = std::move(rf);
  }
  return turns;
}

std::vector<json::Value> AllTools(const Request& request) {
  std::vector<json::Value> out;
  if (!request.tools.empty()) {
    for (const Tool& t : request.tools) out.push_back(ToolObject(t));
    return out;
  }
  for (const Message& m : request.messages) out.insert(out.end(), m.tools.begin(), m.tools.end());
  return out;
}

std::optional<json::Value> ResponseFormatObject(const ResponseFormat& rf) {
  json::Value obj = json::Value::MakeObject();
  switch (rf.kind) {
    case ResponseFormat::Kind::kJsonObject:
      obj.Set("type", json::Value::String("json_object"));
      return obj;
    case ResponseFormat::Kind::kJsonSchema: {
      json::Value inner = json::Value::MakeObject();
      if (!rf.name.empty()) inner.Set("name", json::Value::String(rf.name));
      inner.Set("schema", rf.schema);
      if (rf.strict) inner.Set("strict", json::Value::Bool(true));
      obj.Set("type", json::Value::String("json_schema"));
      obj.Set("json_schema", std::move(inner));
      return obj;
    }
    case ResponseFormat::Kind::kText:
    case ResponseFormat::Kind::kRegex:
    case ResponseFormat::Kind::kEbnf:
      return std::nullopt;
  }
  return std::nullopt;
}

Result<std::vector<std::pair<std::string, json::Value>>> ArgumentItems(std::string_view arguments,
                                                                       size_t message_index) {
  std::vector<std::pair<std::string, json::Value>> items;
  if (arguments.find_first_not_of(" \t\r\n") == std::string_view::npos) return items;
  auto parsed = json::Parse(arguments);
  if (!parsed.ok()) {
    return InvalidArgument(fmt::format("messages[{}]: tool call arguments are not valid JSON: {}", message_index,
                                       parsed.status().message()));
  }
  if (!parsed->is_object()) {
    return InvalidArgument(fmt::format("messages[{}]: tool call arguments must be a JSON object, got {}",
                                       message_index, parsed->TypeName()));
  }
  json::Value obj = DedupeKeys(*parsed);
  items.reserve(obj.as_object().size());
  for (auto& member : obj.as_object()) items.push_back(std::move(member));
  return items;
}

Status AppendDsmlToolCalls(const std::vector<ToolCall>& calls, std::string_view block, size_t message_index,
                           PromptBuilder* b) {
  // Parse everything first so a bad call leaves no half-written block behind.
  std::vector<std::vector<std::pair<std::string, json::Value>>> args;
  args.reserve(calls.size());
  for (const ToolCall& call : calls) {
    LADLE_ASSIGN_OR_RETURN(auto items, ArgumentItems(call.arguments, message_index));
    args.push_back(std::move(items));
  }
  const std::string dsml_open = fmt::format("<{}", kDsml);
  const std::string dsml_close = fmt::format("</{}", kDsml);
  b->Template(fmt::format("\n\n{}{}>\n", dsml_open, block));
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) b->Template("\n");
    b->Template(dsml_open + "invoke name=\"");
    b->Text(calls[i].name);
    b->Template("\">\n");
    for (size_t k = 0; k < args[i].size(); ++k) {
      const auto& [key, value] = args[i][k];
      if (k > 0) b->Template("\n");
      b->Template(dsml_open + "parameter name=\"");
      b->Text(key);
      b->Template(value.is_string() ? "\" string=\"true\">" : "\" string=\"false\">");
      if (value.is_string()) {
        b->Text(value.as_string());
      } else {
        b->Text(PyDumps(value));
      }
      b->Template(dsml_close + "parameter>");
    }
    b->Template("\n" + dsml_close + "invoke>");
  }
  b->Template(fmt::format("\n{}{}>", dsml_close, block));
  return Status::Ok();
}

}  // namespace ladle::frontend::encoder
