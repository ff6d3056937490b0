// A request's output constraint as plain data (a ConstraintSpec): what kind it is, its
// canonical payload and the options that change the compiled grammar. Specs travel to
// `ladle grammar-worker` as JSON, are the compile cache's key (with the vocabulary and model
// version), and turn into a grammar::Grammar on whichever machine compiles them.
//
//   request --SpecFromRequest--> ConstraintSpec --BuildGrammar--> Grammar --Compile--> CompiledGrammar
//
// Key canonicalisation: the payload is the schema re-serialised compactly with its key order
// kept. Two schemas that differ only in property order are *different* constraints, because
// the JSON Schema compiler emits properties in schema order (the order is enforced in the
// output), so they compile to different grammars.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/frontend/conversation.h"
#include "ladle/frontend/model_version.h"
#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"

namespace ladle::structured {

enum class ConstraintKind : uint8_t {
  kJsonObject,  // any JSON object (response_format json_object)
  kJsonSchema,  // payload: the schema as compact JSON
  kRegex,       // payload: the pattern (whole-output match)
  kEbnf,        // payload: GBNF text
  kToolCall,    // payload: {"tools":[...],"tool_choice":{...},"parallel":bool} (see ToolPayload)
};

std::string_view ConstraintKindName(ConstraintKind k);
Result<ConstraintKind> ParseConstraintKind(std::string_view name);

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string payload;
  frontend::ModelVersion version = frontend::ModelVersion::kV32;
  // Options that change the grammar (so they are part of the key).
  grammar::JsonSchemaOptions::Whitespace whitespace = grammar::JsonSchemaOptions::Whitespace::kBounded;
  uint32_t max_whitespace = 4;
  bool allow_unlisted_properties = true;
  // kToolCall: the prompt ends with reasoning open; the tool grammar itself then starts with
  // free reasoning closed by </think> (other kinds use the mask provider's trigger instead).
  bool ends_in_thinking = false;
  // kToolCall with tool_choice auto and no strict tool: output is free until the version's
  // tool-call trigger appears, then the call syntax is enforced (CompiledConstraint::triggers).
  // A lazy constraint that fails to compile leaves the request unconstrained, never 400.
  bool lazy = false;
  // Where the constraint came from in the request ("response_format.json_schema.schema",
  // "text.format.schema", "tools[2].input_schema", ...): the `param` of a compile error.
  // Not part of the key.
  std::string param;
};

// 128-bit cache key (XXH3_128).
struct ConstraintKey {
  uint64_t hi = 0, lo = 0;
  bool operator==(const ConstraintKey&) const = default;
  std::string Hex() const;
};
struct ConstraintKeyHash {
  size_t operator()(const ConstraintKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)); }
};

// Hash of (kind, canonical payload, grammar options, model version, vocabulary fingerprint).
ConstraintKey KeyFor(const ConstraintSpec& spec, uint64_t vocab_fingerprint);

// The constraint a request asks for, or nullopt for free text. Precedence: a forced tool
// choice (required / named / allowed-required, and Anthropic any/tool) beats response_format,
// since the API then answers with a tool call. `tool_choice` auto with tools is not
// constrained unless a tool is `strict` (then the tool grammar constrains the whole turn).
// `ends_in_thinking` is the encoded prompt's flag (EncodedPrompt::ends_in_thinking).
Result<std::optional<ConstraintSpec>> SpecFromRequest(const frontend::Request& req, frontend::ModelVersion version,
                                                      bool ends_in_thinking = false);

// The spec as a JSON object and back (the grammar-worker protocol).
std::string SpecToJson(const ConstraintSpec& spec);
Result<ConstraintSpec> SpecFromJson(std::string_view text);

// Whether the mask provider must wait for the end of reasoning before applying the grammar
// (false for tool calls, whose grammar covers the reasoning itself).
inline bool UsesReasoningTrigger(const ConstraintSpec& spec) { return spec.kind != ConstraintKind::kToolCall; }

// The front-end step: spec → grammar IR, approximations reported in `report`.
Result<grammar::Grammar> BuildGrammar(const ConstraintSpec& spec, grammar::CompileReport* report);

// A lazy tool constraint's trigger (tool_grammar.h ToolCallTrigger, compiled).
struct CompiledTrigger {
  std::optional<uint32_t> token_id;  // the opener token, or
  std::string text;                  // the opener's bytes (when token_id is unset)
  std::shared_ptr<const grammar::CompiledGrammar> after;
};

// The result the cache holds and requests share.
struct CompiledConstraint {
  // The whole output's grammar; for a lazy constraint the first trigger's `after` (so it is
  // never null and names the vocabulary).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::vector<CompiledTrigger> triggers;  // non-empty exactly for lazy constraints
  grammar::CompileReport report;
  ConstraintKind kind = ConstraintKind::kJsonObject;
  double compile_ms = 0;   // front-end + automaton (or the worker's figure)
  std::string compiled_by;  // "local" or the worker's host:port
  size_t MemoryBytes() const;
};

// BuildGrammar + CompiledGrammar::Compile in this process.
Result<std::shared_ptr<const CompiledConstraint>> CompileLocally(const ConstraintSpec& spec,
                                                                 std::shared_ptr<const grammar::TokenVocabulary> vocab,
                                                                 const grammar::CompileOptions& opts);

// Tool-call grammars are built by src/structured/tool_grammar*.cc from a frontend::Request;
// the spec carries the tools and the choice so a worker can rebuild that request.
frontend::Request ToolRequestFromPayload(const json::Value& payload);

}  // namespace ladle::structured
