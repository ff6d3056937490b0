// Tool-calling grammars: the assistant turn a request's tool settings allow, in the call
// syntax of each DeepSeek version, as grammar IR (grammar.h) for the mask engine.
//
// The syntax is what the encoders render for a recorded call (src/frontend/encoder_v*.cc),
// which is what the model learnt to emit and what the streaming output parser reads back:
//
//   V3, R1  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//           (\n<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>)* <｜tool▁calls▁end｜> EOS
//   V3.1    <｜tool▁calls▁begin｜>(<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>)+<｜tool▁calls▁end｜> EOS
//   V3.2    \n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n
//             <｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>\n …
//           </｜DSML｜invoke>(\n<｜DSML｜invoke …)*\n</｜DSML｜function_calls> EOS
//   V4      as V3.2 with tool_calls, and ｜DSML｜ is control token 128825
//
// EOS ends every turn; it is not spelled in the IR: the grammar ends where the turn does, and
// the matcher then allows only EOS (matcher.h).
//
// Every marker that is a control token of the version (the V3 markers 128806–128814, </think>
// from V3.1 on, ｜DSML｜ in V4) is a kSpecialToken terminal, so it can only be produced as that
// id; V3.2's ｜DSML｜ and R1's </think> are text. ARGS (V3/V3.1) are a JSON object following the
// tool's `parameters` schema; in DSML the schema's top-level properties become parameter
// elements in schema order (required ones always present), string-only properties written
// raw with string="true" and the others as JSON with string="false".
//
// Free text is allowed only where the API allows it: reasoning while the prompt left it open
// (then it must be closed by </think> before any call), and content before the calls when the
// choice is `auto`. Free text never spells what the parser would read as markup (e.g. V3.2
// content cannot contain "<｜DSML｜function_calls>", R1 reasoning cannot contain "</think>").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/frontend/conversation.h"
#include "ladle/frontend/model_version.h"
#include "ladle/grammar/grammar.h"

namespace ladle::structured {

struct ToolGrammarOptions {
  frontend::ModelVersion version = frontend::ModelVersion::kV32;
  // The prompt ends with reasoning open (PromptOpensReasoning / Prompt::ends_in_thinking): the
  // turn starts with free reasoning, closed by </think>.
  bool ends_in_thinking = false;
  // Whitespace and budget of JSON arguments (ARGS, and DSML string="false" values). For a
  // `strict` tool unlisted properties are always off (OpenAI's strict mode); otherwise
  // `json.allow_unlisted_properties` decides. DSML never generates unlisted top-level keys.
  grammar::JsonSchemaOptions json;
};

// How the turn is constrained.
enum class ToolConstraintKind : uint8_t {
  kNone,  // nothing to enforce: no tools, tool_choice none, or nothing left after filtering
  kTurn,  // `turn` constrains the whole assistant turn from its first token
  kLazy,  // tool_choice auto: free output until a trigger appears, then `triggers[i].after`
};

// Where an unconstrained (auto) turn starts a tool-call block, and what must follow. The
// mask provider leaves generation free until the trigger appears, then constrains with
// `after` until the end of the turn.
struct ToolCallTrigger {
  // The control token that opens a block (V3/R1/V3.1: <｜tool▁calls▁begin｜> 128806, or a bare
  // <｜tool▁call▁begin｜> 128808; V4: ｜DSML｜ 128825, after which either the wrapper's
  // "tool_calls>" or a bare "invoke name=" follows). Unset when the opener is text (V3.2).
  std::optional<uint32_t> token_id;
  // V3.2: the opener's bytes ("<｜DSML｜function_calls>", or a bare "<｜DSML｜invoke name=\""),
  // matched on the decoded output; the bytes of the token that completed the match past its
  // end are the start of `after` (feed them with GrammarMatcher::AcceptString). With a token
  // trigger: the text the format puts right before the token ("<" in V4, "" otherwise) —
  // already free output, not enforced.
  std::string text;
  // What follows the trigger, to the end of the turn.
  grammar::Grammar after;
};

struct ToolGrammar {
  ToolConstraintKind kind = ToolConstraintKind::kNone;
  // kTurn: the whole turn. Also filled for kLazy (the free-text-or-calls turn), so a caller
  // that prefers one grammar for auto can use it.
  grammar::Grammar turn;
  // kLazy: the version's triggers, each with its `after` grammar.
  std::vector<ToolCallTrigger> triggers;
  // At least one call is required (required, named, allowed-required).
  bool forced = false;
  // The tools a call may name, in request order.
  std::vector<std::string> allowed;
  // Schema keywords or syntax enforced only approximately (JSON paths under /tools/NAME/…).
  grammar::CompileReport report;
};

// Builds the turn grammar for `tools` under `choice`:
//   required / allowed-required — one or more calls (one when !parallel_tool_calls) of the
//     allowed tools, nothing else (reasoning aside);
//   named — exactly one call of that tool;
//   auto / allowed — kTurn when any allowed tool is `strict` (free text, or text then calls
//     whose arguments are schema-constrained), otherwise kLazy;
//   none — kNone.
// Errors: kInvalidArgument (unknown named tool, a tool name the syntax cannot carry),
// kUnsupported (a strict tool's schema the syntax cannot express exactly), or the schema
// compiler's error for a strict tool. A non-strict tool whose schema fails to compile gets
// permissive JSON arguments, reported in `report`.
Result<ToolGrammar> BuildToolCallGrammar(const std::vector<frontend::Tool>& tools,
                                         const frontend::ToolChoice& choice, bool parallel_tool_calls,
                                         const ToolGrammarOptions& opts);

// The same from a request's tools, tool_choice and parallel_tool_calls.
Result<ToolGrammar> BuildToolCallGrammar(const frontend::Request& request, const ToolGrammarOptions& opts);

// The tool-call trigger spelling of a version (without `after`): for docs, logs and tests.
std::vector<ToolCallTrigger> ToolCallTriggers(frontend::ModelVersion version);

}  // namespace ladle::structured
