// DeepSeek-V3.1 (and V3.2-Exp, which ships the same template): the chat_template of the
// DeepSeek-V3.1 tokenizer_config.json (as kept in llama.cpp's models/templates/
// deepseek-ai-DeepSeek-V3.1.jinja), with the tool description of the DeepSeek-V3.1 model card
// ("ToolCall": `{system prompt}\n\n{tool_description}`), which the template itself does not
// render. Hybrid thinking: the generation prompt is <think> or </think>; earlier reasoning is
// never rendered; tool calls are raw JSON between <｜tool▁sep｜> and <｜tool▁call▁end｜>.
#include <fmt/format.h>

#include "encoder_common.h"

namespace ladle::frontend::encoder {
namespace {

constexpr std::string_view kToolsIntro = "## Tools\nYou have access to the following tools:\n";
// The model card's format instructions, after the last tool.
constexpr std::string_view kToolsRules =
    "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>"
    "{additional_tool_calls}<｜tool▁calls▁end｜>\n"
    "\n"
    "Where:\n"
    "- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
    "- For multiple tool calls, chain them directly without separators or spaces";

// "### {name}\nDescription: {description}\n\nParameters: {json.dumps(parameters)}\n" per tool.
void AppendToolDescription(const std::vector<json::Value>& tools, PromptBuilder* b) {
  b->Template(kToolsIntro);
  for (const json::Value& tool : tools) {
    const json::Value fn = ToolFunction(tool);
    const json::Value* name = fn.Find("name");
    const json::Value* description = fn.Find("description");
    const json::Value* parameters = fn.Find("parameters");
    b->Template("\n### ");
    b->Text(name != nullptr && name->is_string() ? name->as_string() : "");
    b->Template("\nDescription: ");
    b->Text(description != nullptr && description->is_string() ? description->as_string() : "");
    b->Template("\n\nParameters: ");
    b->Text(parameters != nullptr ? PyDumps(*parameters) : "{}");
    b->Template("\n");
  }
  b->Template("\n");
  b->Template(kToolsRules);
}

}  // namespace

Result<Prompt> RenderV31(const Request& request, const RenderOptions& options) {
  constexpr ModelVersion kVersion = ModelVersion::kV31;
  const bool thinking = request.thinking.enabled;
  PromptBuilder b(kVersion);
  if (options.add_bos) b.Special(kBos);

  // All system messages, wherever they are, open the prompt joined by a blank line. The template
  // has no developer role; a developer message is a system message to it (OpenAI's meaning).
  bool first_system = true;
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const Message& m = request.messages[i];
    if (m.role != Role::kSystem && m.role != Role::kDeveloper) continue;
    LADLE_ASSIGN_OR_RETURN(std::string text, MessageText(m, kVersion, i));
    if (!first_system) b.Template("\n\n");
    b.Text(text);
    first_system = false;
  }
  const std::vector<json::Value> tools = AllTools(request);
  if (!tools.empty()) {
    b.Template("\n\n");
    AppendToolDescription(tools, &b);
  }

  bool is_last_user = false, is_tool = false;
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const Message& m = request.messages[i];
    switch (m.role) {
      case Role::kSystem:
      case Role::kDeveloper:
        break;
      case Role::kUser: {
        LADLE_ASSIGN_OR_RETURN(std::string text, MessageText(m, kVersion, i));
        is_tool = false;
        is_last_user = true;
        b.Special(kUser);
        b.Text(text);
        break;
      }
      case Role::kAssistant: {
        LADLE_ASSIGN_OR_RETURN(std::string content, MessageText(m, kVersion, i));
        if (!m.tool_calls.empty()) {
          if (is_last_user) {
            b.Special(kAssistant);
            b.Special(kEndThink);
          }
          is_last_user = false;
          is_tool = false;
          for (size_t k = 0; k < m.tool_calls.size(); ++k) {
            if (k == 0) {
              b.Text(content);
              b.Special(kToolCallsBegin);
            }
            b.Special(kToolCallBegin);
            b.Text(m.tool_calls[k].name);
            b.Special(kToolSep);
            b.Text(m.tool_calls[k].arguments);
            b.Special(kToolCallEnd);
          }
          b.Special(kToolCallsEnd);
          b.Special(kEos);
          break;
        }
        if (is_last_user) {
          // `prefix` (continue a partial answer) is not part of the conversation form, so a
          // history answer always closes the think tag.
          b.Special(kAssistant);
          b.Special(kEndThink);
        }
        is_last_user = false;
        if (is_tool) {
          b.Text(content);
          is_tool = false;
        } else {
          // Reasoning pasted into content is cut at the first </think>, as the template does.
          const size_t cut = content.find(kEndThink);
          b.Text(cut == std::string::npos ? std::string_view(content)
                                          : std::string_view(content).substr(cut + kEndThink.size()));
        }
        b.Special(kEos);
        break;
      }
      case Role::kTool: {
        LADLE_ASSIGN_OR_RETURN(std::string text, MessageText(m, kVersion, i));
        is_last_user = false;
        is_tool = true;
        b.Special(kToolOutputBegin);
        b.Text(text);
        b.Special(kToolOutputEnd);
        break;
      }
    }
  }
  // add_generation_prompt: only after a user turn; after tool outputs the model continues as is.
  bool open = false;
  if (is_last_user && !is_tool) {
    b.Special(kAssistant);
    b.Special(thinking ? kThink : kEndThink);
    open = thinking;
  }
  return std::move(b).Finish(open);
}

}  // namespace ladle::frontend::encoder
