// Pieces every per-version encoder shares: the prompt builder that keeps control tokens apart
// from text, Python-compatible JSON for tools and arguments, the DSML tool-call writer of V3.2
// and V4, and the mapping of request-level tools onto a conversation turn.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/frontend/conversation.h"
#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"
#include "ladle/json/json.h"

namespace ladle::frontend::encoder {

// Spellings of the control tokens the templates use.
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThink = "<think>";
inline constexpr std::string_view kEndThink = "</think>";
inline constexpr std::string_view kToolCallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kToolCallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view kToolCallBegin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view kToolCallEnd = "<｜tool▁call▁end｜>";
inline constexpr std::string_view kToolSep = "<｜tool▁sep｜>";
inline constexpr std::string_view kToolOutputsBegin = "<｜tool▁outputs▁begin｜>";
inline constexpr std::string_view kToolOutputsEnd = "<｜tool▁outputs▁end｜>";
inline constexpr std::string_view kToolOutputBegin = "<｜tool▁output▁begin｜>";
inline constexpr std::string_view kToolOutputEnd = "<｜tool▁output▁end｜>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kImage = "<｜image｜>";

// Builds a Prompt. Three ways in, by trust:
//   Special  — a control token of the version, by spelling (the id comes from the version).
//   Template — text Ladle wrote from a reference template. Control-token spellings inside it
//              become control tokens, exactly as Hugging Face's tokenizer treats the reference
//              prompt string; this keeps ids identical to the reference for template text.
//   Text     — anything from the request (user, tool, argument, tool schema text): always plain.
class PromptBuilder {
 public:
  explicit PromptBuilder(ModelVersion version);

  void Special(std::string_view spelling);
  void Template(std::string_view trusted);
  void Text(std::string_view untrusted);
  // An image: its placeholder_tokens <｜image｜> control tokens, recorded in Prompt::images.
  // kUnsupported when the version has no image token, kFailedPrecondition when the image was
  // never measured (placeholder_tokens 0). `where` names the message for the error.
  void Image(const ImagePart& image, std::string_view where);

  // Whether the last piece written is the control token `spelling` (e.g. "<think>").
  bool EndsWithSpecial(std::string_view spelling) const;

  // The prompt, or kInternal if an encoder asked for a control token its version lacks.
  Result<Prompt> Finish(bool ends_in_thinking) &&;

 private:
  struct Control {
    std::string_view spelling;
    tokenizer::TokenId id;
  };
  const Control* Find(std::string_view spelling) const;

  Prompt prompt_;
  size_t specials_ = 0;  // kSpecial pieces so far (an image records where its run starts)
  std::vector<Control> controls_;
  Status status_;
};

// Text of a message: its text parts joined with "\n" (as vLLM flattens content-part arrays).
// kUnsupported on an image part: no DeepSeek text version has a slot for one.
Result<std::string> MessageText(const Message& m, ModelVersion version, size_t index);
// The same content written into `b`: text parts joined with "\n" as plain text, image parts as
// their placeholders (PromptBuilder::Image), so versions with an image token take images.
Status AppendContent(const Message& m, size_t index, PromptBuilder* b);
// Whether `m` has an image part.
bool HasImage(const Message& m);

// Python's json.dumps(v, ensure_ascii=False) after json.loads: duplicate object keys collapse
// to the first position with the last value, as a Python dict does.
std::string PyDumps(const json::Value& v);
json::Value DedupeKeys(const json::Value& v);

// The OpenAI tool object {"type": "function", "function": {...}} of a request-level tool, with
// the function's keys in the order OpenAI documents them (name, description, parameters,
// strict): the adapters keep fields, not the client's key order.
json::Value ToolObject(const Tool& tool);
// tool["function"] of an OpenAI tool object; a flat {"type":"function","name":...} object (the
// Responses shape) gives itself without "type".
json::Value ToolFunction(const json::Value& tool);

// The turns the DSML encoders (V3.2, V4) render: the request's messages, each with the tools
// and response format it carries. Request-level tools (and the response format) go to the first
// message when it is a system or developer message, replacing tools that message carried
// (rendering both would list them twice, as vLLM notes); otherwise to a system turn inserted in
// front, which is vLLM's placement.
struct Turn {
  Role role = Role::kUser;
  const Message* msg = nullptr;  // nullptr for the inserted system turn
  size_t source = 0;             // index in request.messages, for error messages
  std::vector<json::Value> tools;  // OpenAI tool objects this turn lists
  std::optional<json::Value> response_format;
};
std::vector<Turn> DsmlTurns(const Request& request);

// Every tool of the conversation as OpenAI tool objects, for versions that list tools once in
// the system prompt (V3, R1, V3.1): the request-level tools, else those messages carry.
std::vector<json::Value> AllTools(const Request& request);

// The response_format object a system/developer turn renders, in OpenAI Chat's shape; nullopt
// for text, regex and EBNF (those are enforced by the grammar, and no reference describes them
// in the prompt).
std::optional<json::Value> ResponseFormatObject(const ResponseFormat& rf);

// Python json.loads(arguments).items() for DSML: an empty string is {} (clients send "" for a
// call without arguments); anything else must be a JSON object.
Result<std::vector<std::pair<std::string, json::Value>>> ArgumentItems(std::string_view arguments,
                                                                       size_t message_index);

// The DSML tool-call block of an assistant turn (V3.2 `function_calls`, V4 `tool_calls`):
// "\n\n<｜DSML｜{block}>\n<｜DSML｜invoke name=...>...\n</｜DSML｜{block}>". Names, keys and
// string values are request text; non-strings are Python JSON.
Status AppendDsmlToolCalls(const std::vector<ToolCall>& calls, std::string_view block, size_t message_index,
                           PromptBuilder* b);

// Per-version entry points (encoder_v3.cc, encoder_v31.cc, encoder_v32.cc, encoder_v4.cc).
Result<Prompt> RenderV3(const Request& request, bool r1, const RenderOptions& options);
Result<Prompt> RenderV31(const Request& request, const RenderOptions& options);
Result<Prompt> RenderV32(const Request& request, const RenderOptions& options);
Result<Prompt> RenderV4(const Request& request, const RenderOptions& options);

}  // namespace ladle::frontend::encoder
