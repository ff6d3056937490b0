// DeepSeek-V3.2: DeepSeek's own encoder, encoding/encoding_dsv32.py of the model repository
// (Hugging Face deepseek-ai/DeepSeek-V3.2, mirrored as vllm/tokenizers/deepseek_v32_encoding.py),
// rule for rule. Tool calls are DSML <｜DSML｜function_calls> blocks; tool results are grouped in
// <function_results> by their position after the assistant turn that made the calls.
#include <fmt/format.h>

#include "encoder_common.h"

namespace ladle::frontend::encoder {
namespace {

// TOOLS_SYSTEM_TEMPLATE of encoding_dsv32.py up to {tool_schemas}, with its tokens filled in.
// "<think>"/"</think>" become control tokens via PromptBuilder::Template, as they do when
// Hugging Face tokenizes the reference prompt string.
constexpr std::string_view kToolsHead = R"(## Tools

You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<｜DSML｜function_calls>" block like the following as part of your reply to the user:
<｜DSML｜function_calls>
<｜DSML｜invoke name="$FUNCTION_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$FUNCTION_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜function_calls>

String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).

If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:

<｜DSML｜function_calls>
...
</｜DSML｜function_calls>

<function_results>
...
</function_results>

<think>...thinking about results</think>

Here are the functions available in JSONSchema format:
<functions>
)";
constexpr std::string_view kToolsTail = "\n</functions>\n";
constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// render_tools(): the schemas are the client's, so they go in as text.
void AppendTools(const std::vector<json::Value>& tools, PromptBuilder* b) {
  b->Template(kToolsHead);
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) b->Text("\n");
    b->Text(PyDumps(ToolFunction(tools[i])));
  }
  b->Template(kToolsTail);
}

void AppendToolsAndFormat(const Turn& t, PromptBuilder* b) {
  if (!t.tools.empty()) {
    b->Template("\n\n");
    AppendTools(t.tools, b);
  }
  if (t.response_format) {
    b->Template("\n\n");
    b->Template(kResponseFormatHead);
    b->Text(PyDumps(*t.response_format));
  }
}

// find_last_user_index(): user and developer turns both count.
int LastUserIndex(const std::vector<Turn>& turns) {
  for (int i = static_cast<int>(turns.size()) - 1; i >= 0; --i) {
    if (turns[i].role == Role::kUser || turns[i].role == Role::kDeveloper) return i;
  }
  return -1;
}

}  // namespace

Result<Prompt> RenderV32(const Request& request, const RenderOptions& options) {
  constexpr ModelVersion kVersion = ModelVersion::kV32;
  const bool thinking = request.thinking.enabled;
  std::vector<Turn> turns = DsmlTurns(request);

  // drop_thinking_messages(): before the last user turn, assistant reasoning is removed (it is
  // not rendered there anyway) and developer turns are dropped outright; the rest is kept.
  if (thinking && options.drop_thinking) {
    const int last_user = LastUserIndex(turns);
    std::vector<Turn> kept;
    kept.reserve(turns.size());
    for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
      if (turns[i].role == Role::kDeveloper && i < last_user) continue;
      kept.push_back(std::move(turns[i]));
    }
    turns = std::move(kept);
  }
  const int last_user = LastUserIndex(turns);

  PromptBuilder b(kVersion);
  if (options.add_bos) b.Special(kBos);
  for (int idx = 0; idx < static_cast<int>(turns.size()); ++idx) {
    const Turn& t = turns[idx];
    std::string content;
    if (t.msg != nullptr) {
      LADLE_ASSIGN_OR_RETURN(content, MessageText(*t.msg, kVersion, t.source));
    }
    switch (t.role) {
      case Role::kSystem:
        b.Text(content);
        AppendToolsAndFormat(t, &b);
        break;
      case Role::kDeveloper:
        if (content.empty()) {
          return InvalidArgument(fmt::format("messages[{}]: a developer message needs content for {}", t.source,
                                             ModelVersionName(kVersion)));
        }
        b.Special(kUser);
        AppendToolsAndFormat(t, &b);
        b.Template("\n\n# The user's message is: ");
        b.Text(content);
        b.Special(kAssistant);
        b.Special(idx == last_user && thinking ? kThink : kEndThink);
        break;
      case Role::kUser:
        b.Special(kUser);
        b.Text(content);
        b.Special(kAssistant);
        b.Special(idx == last_user && thinking ? kThink : kEndThink);
        break;
      case Role::kTool: {
        // The result's place among the calls is its distance from the assistant turn.
        int prev = idx - 1;
        while (prev >= 0 && turns[prev].role == Role::kTool) --prev;
        if (prev < 0 || turns[prev].role != Role::kAssistant || turns[prev].msg == nullptr) {
          return InvalidArgument(fmt::format("messages[{}]: a tool result must follow an assistant message with "
                                             "tool calls",
                                             t.source));
        }
        const size_t order = static_cast<size_t>(idx - prev);
        const size_t calls = turns[prev].msg->tool_calls.size();
        if (calls < order) {
          return InvalidArgument(fmt::format("messages[{}]: tool result {} has no matching call (the assistant made "
                                             "{})",
                                             t.source, order, calls));
        }
        if (order == 1) b.Template("\n\n<function_results>");
        b.Template("\n<result>");
        b.Text(content);
        b.Template("</result>");
        if (order == calls) {
          b.Template("\n</function_results>\n\n");
          b.Special(idx >= last_user && thinking ? kThink : kEndThink);
        }
        break;
      }
      case Role::kAssistant:
        // DeepSeek's encoder asserts reasoning or tool calls here in thinking mode; an answer
        // without recorded reasoning is rendered with an empty one instead of being refused.
        if (thinking && idx > last_user) {
          b.Text(t.msg->reasoning.value_or(""));
          b.Special(kEndThink);
        }
        b.Text(content);
        if (!t.msg->tool_calls.empty()) {
          LADLE_RETURN_IF_ERROR(AppendDsmlToolCalls(t.msg->tool_calls, "function_calls", t.source, &b));
        }
        b.Special(kEos);
        break;
    }
  }
  const bool open = b.EndsWithSpecial(kThink);
  return std::move(b).Finish(open);
}

}  // namespace ladle::frontend::encoder
