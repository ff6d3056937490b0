// Internals of StreamParser shared by output_parser.cc (driver, reasoning/content, finish),
// output_parser_grammar.cc (the per-version delimiter tables) and tool_call_formats.cc (the
// tool-call syntaxes). Not a public header.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "delimiter_matcher.h"
#include "json_scanner.h"
#include "ladle/frontend/output_parser.h"

namespace ladle::frontend::parser {

// What a matched delimiter means, independent of how it is spelled (token id or text).
enum class Delim : uint8_t {
  kThink,
  kEndThink,
  // V3/V3.1 control tokens.
  kCallsBegin,
  kCallsEnd,
  kCallBegin,
  kCallEnd,
  kSep,
  // V3 text around the JSON arguments.
  kFenceOpen,   // "\n```json\n"
  kFenceClose,  // "\n```"
  // DSML (V3.2 function_calls, V4 tool_calls; both spellings are accepted by both).
  kSectionOpen,
  kSectionClose,
  kInvokeOpen,  // <｜DSML｜invoke name="
  kInvokeClose,
  kParamOpen,   // <｜DSML｜parameter name="
  kParamClose,
  kTagEnd,      // ">
};

// Which delimiter set is active. Each grammar state maps to one of these.
enum Ctx : uint8_t {
  kCtxReasoning,
  kCtxContent,    // also after a tool-call section
  kCtxSection,    // between calls
  kCtxCallHead,   // V3 call type, V3.1 call name (control tokens end them)
  kCtxV3Name,     // V3 name, ended by the ```json fence
  kCtxV3Args,     // V3 arguments, ended by the closing fence
  kCtxArgs,       // V3.1 arguments, V3 after the closing fence
  kCtxDsmlTag,    // DSML invoke name / parameter header, ended by ">
  kCtxDsmlBody,   // inside an invoke, between parameters
  kCtxDsmlValue,  // a parameter value
  kNumCtx,
};

struct ContextTable {
  DelimiterSet set;
  std::vector<Delim> kinds;  // per delimiter of `set`
};

// Immutable per-version tables, shared by every parser of that version.
struct Grammar {
  bool dsml = false;       // V3.2/V4 DSML syntax (else V3/V3.1 markers)
  bool v3_fence = false;   // V3/R1: "function<sep>name\n```json\n{...}\n```"
  bool think_is_token = false;
  bool dsml_is_token = false;
  std::array<ContextTable, kNumCtx> ctx;
  // Control token id -> symbol; ids of the version that are not listed become kSymOther.
  std::vector<std::pair<tokenizer::TokenId, Symbol>> controls;
};

Result<std::shared_ptr<const Grammar>> GetGrammar(ModelVersion v, const SpecialTokens& st);

// Grammar states of one parser.
enum class Mode : uint8_t {
  kReasoning,
  kContent,
  kPost,       // after a tool-call section: text is dropped, new calls are still parsed
  kSection,    // between calls of a section
  kCallType,   // V3: the "function" before <｜tool▁sep｜>
  kCallName,   // V3: name before the fence; V3.1: name before <｜tool▁sep｜>
  kArgs,       // V3/V3.1 JSON arguments
  kAfterArgs,  // V3: after the closing fence, before <｜tool▁call▁end｜>
  kDsmlName,   // DSML invoke name
  kDsmlBody,
  kDsmlHeader,  // DSML parameter name and attributes
  kDsmlValue,
  kDsmlSkip,   // a parameter whose header was unusable: its value is dropped
};

// How a DSML string="false" value is being passed on.
enum class RawValue : uint8_t {
  kUndecided,  // holding a short number/literal until it is known to be valid JSON
  kRaw,        // streaming the model's JSON through
  kAsString,   // not JSON after all: streamed as a JSON string
};

}  // namespace ladle::frontend::parser

namespace ladle::frontend {

struct StreamParser::Impl {
  using Symbol = parser::Symbol;
  using Mode = parser::Mode;
  using Delim = parser::Delim;

  Impl(std::shared_ptr<const parser::Grammar> g, tokenizer::Tokenizer t, bool start_in_reasoning,
       std::string id_prefix, std::array<std::string, parser::kNumSymbols - 256> control_text);

  // --- driver (output_parser.cc)
  void PushIds(std::span<const tokenizer::TokenId> ids);
  void FeedText(std::string_view text);
  void FeedSymbol(Symbol s);
  void FinishStream(FinishReason from_engine);
  // Sets the mode; returns true when that changes the delimiter set, in which case a text
  // handler must stop and return how much it consumed (the driver re-reads the rest).
  bool SetMode(Mode m);
  parser::Ctx CtxFor(Mode m) const;
  void SyncContext();

  // Handlers. OnText consumes a prefix of `text` (all of it unless SetMode changed the
  // context) and returns its length.
  size_t OnText(std::string_view text);
  void OnStray(Symbol s);
  void OnDelim(Delim d, std::span<const Symbol> spelled);

  // --- output
  void Emit(Event::Kind kind, std::string_view text);
  void EmitArgs(std::string_view text) { Emit(Event::Kind::kToolCallArgs, text); }
  void EmitArgsEscaped(std::string_view text);
  std::string SymbolsText(std::span<const Symbol> syms) const;

  // --- tool calls (tool_call_formats.cc)
  void OpenSection(bool explicit_wrapper, std::string_view opener_text);
  void CloseSection();
  void StartAttempt(std::span<const Symbol> opener);
  void Degrade();
  bool Commit();
  void EndCall(bool clean);
  size_t SectionText(std::string_view text);
  size_t NameText(std::string_view text);
  size_t ArgsText(std::string_view text);
  size_t ValueText(std::string_view text);
  void ToolDelim(Delim d, std::span<const Symbol> spelled);
  void AttemptDelim(Delim d, std::span<const Symbol> spelled);
  void CallDelim(Delim d, std::span<const Symbol> spelled);
  void DsmlHeaderDone();
  void DsmlCloseValue();
  void DsmlFlushUndecided(bool at_close);
  void FinishToolState();

  // --- state
  std::shared_ptr<const parser::Grammar> g;
  tokenizer::Tokenizer tok;
  tokenizer::IncrementalDecoder decoder;
  parser::DelimiterMatcher matcher;
  parser::Ctx cur_ctx = parser::kCtxContent;
  Mode mode = Mode::kContent;
  std::string id_prefix;
  std::array<std::string, parser::kNumSymbols - 256> control_text;

  std::vector<Event>* out = nullptr;  // events of the current Push/Finish
  bool finished = false;
  bool malformed = false;
  int64_t reasoning_tokens = 0;
  int64_t invalid_ids = 0;
  int next_index = 0;
  int completed_calls = 0;

  size_t span_bytes = 0;  // reasoning bytes emitted since the current span opened

  // Section state.
  bool section_implicit = false;  // opened by a bare call, without the wrapper
  bool degraded = false;          // unparsable section text is being returned as content
  int section_calls = 0;
  std::string raw;  // verbatim text since the last commit point, returned as content on failure

  // Call state.
  int open_index = -1;
  bool call_bad = false;  // the open call already went wrong (it will not count as complete)
  std::string name;
  parser::JsonScanner json;

  // DSML parameter state.
  int params = 0;
  std::string header;
  bool value_is_string = true;
  parser::RawValue raw_value = parser::RawValue::kRaw;
  std::string held;  // kUndecided bytes

  // Scratch buffers of the driver.
  std::string text_buf;
  std::string run_buf;
  std::vector<Symbol> queue;
  std::vector<Symbol> tail;
};

}  // namespace ladle::frontend
