// DeepSeek-V4: DeepSeek's own encoder, encoding/encoding_dsv4.py of the model repository (as
// vendored by vLLM in vllm/tokenizers/deepseek_v4_encoding.py), rule for rule. Differences from
// V3.2 that matter:
//   * Tool results are not a role: they are merged into user turns as <tool_result> blocks,
//     sorted into the order of the calls by tool_call_id, and consecutive user turns merge too.
//   * The generation prompt (<｜Assistant｜> + <think> or </think>) follows a user or developer
//     turn only when the next turn is the assistant's (or there is none).
//   * If any turn lists tools, earlier reasoning is kept (drop_thinking is switched off).
//   * Tool calls are <｜DSML｜tool_calls> blocks, and ｜DSML｜ is a control token of V4's tokenizer.
#include <fmt/format.h>

#include <algorithm>

#include "encoder_common.h"

namespace ladle::frontend::encoder {
namespace {

constexpr std::string_view kToolsHead = R"(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";
constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// A user turn after merge_tool_messages(): text blocks and tool results, in order.
struct Block {
  bool tool_result = false;
  const Message* msg = nullptr;  // the user message or the tool's output (text and images)
  size_t source = 0;             // its index in the request
  std::string tool_call_id;      // tool_result only
};

struct V4Turn {
  Role role = Role::kUser;  // never kTool: tool results live in user turns
  const Turn* turn = nullptr;  // system, developer and assistant turns
  std::vector<Block> blocks;   // user turns
};

void AppendToolsAndFormat(const Turn& t, PromptBuilder* b) {
  if (!t.tools.empty()) {
    b->Template("\n\n");
    b->Template(kToolsHead);
    for (size_t i = 0; i < t.tools.size(); ++i) {
      if (i > 0) b->Text("\n");
      b->Text(PyDumps(ToolFunction(t.tools[i])));
    }
    b->Template(kToolsTail);
  }
  if (t.response_format) {
    b->Template("\n\n");
    b->Template(kResponseFormatHead);
    b->Text(PyDumps(*t.response_format));
  }
}

// merge_tool_messages(): a tool result joins the user turn before it if there is one (else
// starts one); a user message joins a preceding merged user turn the same way.
Result<std::vector<V4Turn>> MergeToolMessages(const std::vector<Turn>& turns) {
  std::vector<V4Turn> merged;
  merged.reserve(turns.size());
  for (const Turn& t : turns) {
    if (t.role == Role::kTool || t.role == Role::kUser) {
      Block block;
      block.tool_result = t.role == Role::kTool;
      block.msg = t.msg;
      block.source = t.source;
      if (block.tool_result) block.tool_call_id = t.msg->tool_call_id;
      if (merged.empty() || merged.back().role != Role::kUser) merged.push_back(V4Turn{Role::kUser, nullptr, {}});
      merged.back().blocks.push_back(std::move(block));
      continue;
    }
    merged.push_back(V4Turn{t.role, &t, {}});
  }
  return merged;
}

// sort_tool_results_by_call_order(): within a user turn, tool results take the order of the
// calls of the latest assistant turn with calls (unknown ids sort as call 0; the sort is stable).
void SortToolResults(std::vector<V4Turn>* turns) {
  std::vector<std::pair<std::string_view, size_t>> order;  // call id → position
  for (V4Turn& t : *turns) {
    if (t.role == Role::kAssistant && !t.turn->msg->tool_calls.empty()) {
      order.clear();
      const auto& calls = t.turn->msg->tool_calls;
      for (size_t i = 0; i < calls.size(); ++i) {
        if (!calls[i].id.empty()) order.emplace_back(calls[i].id, i);
      }
      continue;
    }
    if (t.role != Role::kUser || order.empty()) continue;
    std::vector<Block*> results;
    for (Block& b : t.blocks) {
      if (b.tool_result) results.push_back(&b);
    }
    if (results.size() < 2) continue;
    auto rank = [&](const Block* b) {
      // A later duplicate id overwrote an earlier one in the reference's dict.
      size_t r = 0;
      for (const auto& [id, pos] : order) {
        if (id == b->tool_call_id) r = pos;
      }
      return r;
    };
    std::vector<Block> sorted;
    sorted.reserve(results.size());
    for (Block* b : results) sorted.push_back(std::move(*b));
    std::stable_sort(sorted.begin(), sorted.end(), [&](const Block& x, const Block& y) { return rank(&x) < rank(&y); });
    for (size_t i = 0; i < results.size(); ++i) *results[i] = std::move(sorted[i]);
  }
}

int LastUserIndex(const std::vector<V4Turn>& turns) {
  for (int i = static_cast<int>(turns.size()) - 1; i >= 0; --i) {
    if (turns[i].role == Role::kUser || turns[i].role == Role::kDeveloper) return i;
  }
  return -1;
}

}  // namespace

Result<Prompt> RenderV4(const Request& request, const RenderOptions& options) {
  constexpr ModelVersion kVersion = ModelVersion::kV4;
  const bool thinking = request.thinking.enabled;
  const std::vector<Turn> base = DsmlTurns(request);
  LADLE_ASSIGN_OR_RETURN(std::vector<V4Turn> turns, MergeToolMessages(base));
  SortToolResults(&turns);

  // Reasoning is kept whenever any turn lists tools: agent loops need their earlier thoughts.
  bool drop = options.drop_thinking;
  for (const Turn& t : base) {
    if (!t.tools.empty()) drop = false;
  }
  // _drop_thinking_messages(): before the last user turn, reasoning goes and developer turns
  // are dropped; user, system and (merged) tool turns stay.
  if (thinking && drop) {
    const int last_user = LastUserIndex(turns);
    std::vector<V4Turn> kept;
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
    const V4Turn& t = turns[idx];
    if (idx == 0 && thinking && request.thinking.effort == "max") b.Template(kReasoningEffortMax);
    std::string content;
    if (t.turn != nullptr && t.turn->msg != nullptr) {
      LADLE_ASSIGN_OR_RETURN(content, MessageText(*t.turn->msg, kVersion, t.turn->source));
    }
    switch (t.role) {
      case Role::kSystem:
        b.Text(content);
        AppendToolsAndFormat(*t.turn, &b);
        break;
      case Role::kDeveloper:
        if (content.empty()) {
          return InvalidArgument(fmt::format("messages[{}]: a developer message needs content for {}",
                                             t.turn->source, ModelVersionName(kVersion)));
        }
        b.Special(kUser);
        b.Text(content);
        AppendToolsAndFormat(*t.turn, &b);
        break;
      case Role::kUser:
        b.Special(kUser);
        for (size_t i = 0; i < t.blocks.size(); ++i) {
          if (i > 0) b.Template("\n\n");
          if (t.blocks[i].tool_result) b.Template("<tool_result>");
          LADLE_RETURN_IF_ERROR(AppendContent(*t.blocks[i].msg, t.blocks[i].source, &b));
          if (t.blocks[i].tool_result) b.Template("</tool_result>");
        }
        break;
      case Role::kAssistant: {
        const Message& m = *t.turn->msg;
        if (thinking && (!drop || idx > last_user)) {
          b.Text(m.reasoning.value_or(""));
          b.Special(kEndThink);
        }
        b.Text(content);
        if (!m.tool_calls.empty()) {
          LADLE_RETURN_IF_ERROR(AppendDsmlToolCalls(m.tool_calls, "tool_calls", t.turn->source, &b));
        }
        b.Special(kEos);
        break;
      }
      case Role::kTool:
        return Internal("V4 tool results must have been merged into user turns");
    }
    // The generation prompt comes only before an assistant turn (or at the very end).
    const bool next_is_assistant = idx + 1 < static_cast<int>(turns.size()) && turns[idx + 1].role == Role::kAssistant;
    const bool is_last = idx + 1 == static_cast<int>(turns.size());
    if ((next_is_assistant || is_last) && (t.role == Role::kUser || t.role == Role::kDeveloper)) {
      b.Special(kAssistant);
      b.Special(thinking && (!drop || idx >= last_user) ? kThink : kEndThink);
    }
  }
  const bool open = b.EndsWithSpecial(kThink);
  return std::move(b).Finish(open);
}

}  // namespace ladle::frontend::encoder
