// The bridge from a kToolCall spec to the tool-call grammar builder (tool_grammar.h).
#include "ladle/json/json.h"
#include "ladle/structured/tool_grammar.h"
#include "structured_internal.h"

namespace ladle::structured {

namespace {

Result<ToolGrammar> Build(const ConstraintSpec& spec) {
  LADLE_ASSIGN_OR_RETURN(json::Value payload, json::Parse(spec.payload));
  const frontend::Request req = ToolRequestFromPayload(payload);
  ToolGrammarOptions opts;
  opts.version = spec.version;
  opts.ends_in_thinking = spec.ends_in_thinking;
  opts.json.whitespace = spec.whitespace;
  opts.json.max_whitespace = spec.max_whitespace;
  return BuildToolCallGrammar(req, opts);
}

}  // namespace

Result<std::vector<CompiledTrigger>> CompileLazyTriggers(const ConstraintSpec& spec,
                                                        std::shared_ptr<const grammar::TokenVocabulary> vocab,
                                                        const grammar::CompileOptions& opts,
                                                        grammar::CompileReport* report) {
  LADLE_ASSIGN_OR_RETURN(ToolGrammar tg, Build(spec));
  if (report) {
    for (auto& a : tg.report.approximations) report->approximations.push_back(std::move(a));
  }
  std::vector<CompiledTrigger> out;
  for (auto& t : tg.triggers) {
    CompiledTrigger c;
    c.token_id = t.token_id;
    c.text = t.text;
    LADLE_ASSIGN_OR_RETURN(c.after, grammar::CompiledGrammar::Compile(std::move(t.after), vocab, opts));
    out.push_back(std::move(c));
  }
  return out;
}

Result<grammar::Grammar> BuildToolCallSpecGrammar(const ConstraintSpec& spec, grammar::CompileReport* report) {
  LADLE_ASSIGN_OR_RETURN(ToolGrammar tg, Build(spec));
  if (report) {
    for (auto& a : tg.report.approximations) report->approximations.push_back(std::move(a));
  }
  // Only forced choices and strict tools reach here; both give a whole-turn grammar (a lazy
  // one still fills `turn`, the free-text-or-calls form).
  if (tg.kind == ToolConstraintKind::kNone) return InvalidArgument("no tool is left to call under this tool_choice");
  return std::move(tg.turn);
}

}  // namespace ladle::structured
