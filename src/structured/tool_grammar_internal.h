// Pieces of the tool-call grammars (tool_grammar.h), internal to ladle_structured:
// free text that avoids markup, JSON arguments, and DSML parameter elements.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/frontend/conversation.h"
#include "ladle/grammar/grammar.h"
#include "ladle/json/json.h"

namespace ladle::structured::tool_grammar {

using grammar::ExprId;
using grammar::GrammarBuilder;

// Any sequence of UTF-8 scalar values (tool_grammar_text.cc).
ExprId AnyText(GrammarBuilder& b);

// Text (UTF-8 scalar values) that never contains any of `avoid`. Each string must start with
// '<' and have no other '<' (true of every DeepSeek marker), which keeps the construction a
// finite expression without recursion. kInvalidArgument otherwise.
Result<ExprId> TextAvoiding(GrammarBuilder& b, const std::vector<std::string>& avoid);

// JSON following `schema`, through the schema compiler (grammar::AddJsonSchema), with the
// compiler's approximation paths prefixed by `path`.
Result<ExprId> SchemaJson(GrammarBuilder& b, const json::Value& schema, const grammar::JsonSchemaOptions& opts,
                          std::string_view path, grammar::CompileReport* report);
// Any JSON value, any JSON object, and the empty object, with opts' whitespace.
Result<ExprId> AnyJsonValue(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts);
Result<ExprId> AnyJsonObject(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts);
Result<ExprId> EmptyJsonObject(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts);

// Items in a fixed order, `sep` between consecutive present ones, where `required[i]` ones
// must appear and the others may (so the result can be empty when none is required).
ExprId JoinedItems(GrammarBuilder& b, const std::vector<ExprId>& items, const std::vector<bool>& required,
                   ExprId sep);

// The spelling of DSML markup in one version: ｜DSML｜ as a token (V4) or as text (V3.2).
struct DsmlSpelling {
  bool dsml_token = false;
  uint32_t dsml_id = 0;
  std::string block;  // "function_calls" (V3.2) or "tool_calls" (V4)

  ExprId Dsml(GrammarBuilder& b) const;
  ExprId Open(GrammarBuilder& b, std::string_view rest) const;   // "<" DSML rest
  ExprId Close(GrammarBuilder& b, std::string_view rest) const;  // "</" DSML rest
  // Text markup a raw value or free text must not spell (empty when ｜DSML｜ is a token).
  std::vector<std::string> ValueClosersText() const;
  std::vector<std::string> ContentOpenersText() const;
};

// The parameter elements of one DSML invoke for a tool's `parameters` schema, from the `">`
// that ends the invoke tag up to (not including) </｜DSML｜invoke>: "\n", the present parameters
// joined by "\n", "\n" — as the encoders render it (tool_grammar_dsml.cc).
Result<ExprId> DsmlInvokeBody(GrammarBuilder& b, const frontend::Tool& tool, const DsmlSpelling& sp,
                              const grammar::JsonSchemaOptions& opts, grammar::CompileReport* report);

// Checks a tool name can be written in the call syntax and read back by the parser.
Status CheckToolName(std::string_view name);

}  // namespace ladle::structured::tool_grammar
