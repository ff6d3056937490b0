// DeepSeek-V3 and DeepSeek-R1: the chat_template of each model's tokenizer_config.json,
// reproduced byte for byte, quirks included (docs/prompt_formats.md lists them):
//   V3 (../shared/tokenizers/deepseek-v3/tokenizer_config.json): an assistant turn renders its
//     tool calls only when its content is null, and closes the block with
//     <｜tool▁calls▁end｜><｜end▁of▁sentence｜> after each call but the first; the
//     first-call and first-output flags are never reset, so only the first tool round of a
//     conversation opens with <｜Assistant｜><｜tool▁calls▁begin｜> / <｜tool▁outputs▁begin｜>.
//   R1 (DeepSeek-R1 tokenizer_config.json): closes the call block once after the loop,
//     writes content before the calls, joins tool outputs without "\n", strips reasoning pasted
//     into content (everything up to the last </think>) and always opens the answer with
//     "<think>\n".
// Neither template renders `tools`; the tool description used here is the wording of vLLM's
// examples/tool_chat_template_deepseekv3.jinja (see RenderTools).
#include <fmt/format.h>

#include "encoder_common.h"

namespace ladle::frontend::encoder {
namespace {

// vLLM's V3 tool-calling template's description, placed after the system prompt as vLLM does.
// It spells V3's call syntax with its control tokens, which therefore become control tokens.
void AppendTools(const std::vector<json::Value>& tools, PromptBuilder* b) {
  b->Template(
      "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
  for (const json::Value& tool : tools) {
    b->Template("\n");
    b->Text(PyDumps(tool));
  }
  b->Template(
      "\n</tools>\n\n"
      "For function call returns, you should first print <｜tool▁calls▁begin｜>"
      "For each function call, you should return object like:\n"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜><function_name>\n```json\n<function_arguments_in_json_format>\n```"
      "<｜tool▁call▁end｜>"
      "At the end of function call returns, you should print <｜tool▁calls▁end｜><｜end▁of▁sentence｜>");
}

// '<｜tool▁call▁begin｜>' + type + '<｜tool▁sep｜>' + name + '\n```json\n' + arguments + '\n```<｜tool▁call▁end｜>'
void AppendCall(const ToolCall& call, PromptBuilder* b) {
  b->Special(kToolCallBegin);
  b->Text("function");  // tool['type']: the only type OpenAI defines for calls
  b->Special(kToolSep);
  b->Text(call.name);
  b->Template("\n```json\n");
  b->Text(call.arguments);
  b->Template("\n```");
  b->Special(kToolCallEnd);
}

}  // namespace

Result<Prompt> RenderV3(const Request& request, bool r1, const RenderOptions& options) {
  const ModelVersion version = r1 ? ModelVersion::kR1 : ModelVersion::kV3;
  PromptBuilder b(version);
  if (options.add_bos) b.Special(kBos);

  // System messages are hoisted and joined by a blank line; developer counts as system.
  bool first_system = true;
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const Message& m = request.messages[i];
    if (m.role != Role::kSystem && m.role != Role::kDeveloper) continue;
    LADLE_ASSIGN_OR_RETURN(std::string text, MessageText(m, version, i));
    if (!first_system) b.Template("\n\n");
    b.Text(text);
    first_system = false;
  }
  const std::vector<json::Value> tools = AllTools(request);
  if (!tools.empty()) AppendTools(tools, &b);

  bool is_first = false, is_tool = false, is_output_first = true;
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const Message& m = request.messages[i];
    LADLE_ASSIGN_OR_RETURN(std::string content, MessageText(m, version, i));
    switch (m.role) {
      case Role::kSystem:
      case Role::kDeveloper:
        break;
      case Role::kUser:
        is_tool = false;
        b.Special(kUser);
        b.Text(content);
        break;
      case Role::kAssistant: {
        const bool calls_branch = r1 ? !m.tool_calls.empty() : m.content_null;
        if (calls_branch) {
          is_tool = false;
          for (const ToolCall& call : m.tool_calls) {
            if (!is_first) {
              b.Special(kAssistant);
              if (r1 && !m.content_null) b.Text(content);
              b.Special(kToolCallsBegin);
              AppendCall(call, &b);
              is_first = true;
            } else {
              b.Template("\n");
              AppendCall(call, &b);
              if (!r1) {
                b.Special(kToolCallsEnd);
                b.Special(kEos);
              }
            }
          }
          if (r1) {
            b.Special(kToolCallsEnd);
            b.Special(kEos);
          }
          break;
        }
        if (is_tool) {
          b.Special(kToolOutputsEnd);
          b.Text(content);
          b.Special(kEos);
          is_tool = false;
          break;
        }
        std::string_view answer = content;
        if (r1) {
          const size_t cut = answer.rfind(kEndThink);
          if (cut != std::string_view::npos) answer = answer.substr(cut + kEndThink.size());
        }
        b.Special(kAssistant);
        b.Text(answer);
        b.Special(kEos);
        break;
      }
      case Role::kTool:
        is_tool = true;
        if (is_output_first) {
          b.Special(kToolOutputsBegin);
          is_output_first = false;
        } else if (!r1) {
          b.Template("\n");
        }
        b.Special(kToolOutputBegin);
        b.Text(content);
        b.Special(kToolOutputEnd);
        break;
    }
  }
  if (is_tool) b.Special(kToolOutputsEnd);
  // add_generation_prompt: not after tool outputs (the model continues after
  // <｜tool▁outputs▁end｜>); R1 opens its reasoning itself.
  bool open = false;
  if (!is_tool) {
    b.Special(kAssistant);
    if (r1) {
      b.Template("<think>\n");
      open = true;
    }
  }
  return std::move(b).Finish(open);
}

}  // namespace ladle::frontend::encoder
