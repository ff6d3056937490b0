// The tool-call grammar of each DeepSeek version (tool_grammar.h): which tools a turn may
// call, how many times, what may come before the calls, and the per-version markup around
// them. Argument grammars come from tool_grammar_text.cc (JSON) and tool_grammar_dsml.cc.
#include "ladle/structured/tool_grammar.h"

#include <fmt/format.h>

#include <algorithm>

#include "ladle/json/json.h"
#include "tool_grammar_internal.h"

namespace ladle::structured {

using frontend::ModelVersion;
using frontend::Tool;
using frontend::ToolChoice;
using grammar::ExprId;
using grammar::GrammarBuilder;
using grammar::kUnbounded;
using tool_grammar::DsmlSpelling;

namespace {

constexpr std::string_view kThinkText = "<think>";
constexpr std::string_view kEndThinkText = "</think>";

struct Syntax {
  ModelVersion version = ModelVersion::kV32;
  frontend::SpecialTokens st;
  bool dsml = false;      // V3.2, V4
  bool v3_fence = false;  // V3, R1
  bool think_token = false;
  DsmlSpelling sp;
};

Syntax SyntaxFor(ModelVersion v) {
  Syntax s;
  s.version = v;
  s.st = frontend::SpecialTokensFor(v);
  s.dsml = v == ModelVersion::kV32 || v == ModelVersion::kV4;
  s.v3_fence = v == ModelVersion::kV3 || v == ModelVersion::kR1;
  s.think_token = s.st.think.has_value() && s.st.end_think.has_value();
  s.sp.dsml_token = s.dsml && s.st.dsml.has_value();
  s.sp.dsml_id = s.st.dsml.value_or(0);
  s.sp.block = v == ModelVersion::kV4 ? "tool_calls" : "function_calls";
  return s;
}

// One grammar's worth of pieces. Each output grammar (the turn, each trigger's `after`) gets
// its own builder, so the pieces are rebuilt per grammar.
class TurnBuilder {
 public:
  TurnBuilder(const Syntax& syn, const std::vector<const Tool*>& tools, uint32_t max_calls,
              const ToolGrammarOptions& opts, grammar::CompileReport* report)
      : syn_(syn), tools_(tools), max_calls_(max_calls), opts_(opts), report_(report) {}

  GrammarBuilder& b() { return b_; }

  // Builds every call once; must run before the accessors below.
  Status BuildCalls() {
    std::vector<ExprId> rests, calls, after_names;
    for (const Tool* t : tools_) {
      LADLE_ASSIGN_OR_RETURN(ExprId rest, CallRest(*t, &after_names));
      rests.push_back(rest);
      calls.push_back(b_.Seq({CallOpener(), rest}));
    }
    any_rest_ = b_.Alt(rests);
    any_after_name_quote_ = b_.Alt(after_names);
    any_call_ = b_.Alt(calls);
    const ExprId sep = syn_.v3_fence || syn_.dsml ? b_.Literal("\n") : b_.Empty();
    more_ = b_.Repeat(b_.Seq({sep, any_call_}), 0, max_calls_ == kUnbounded ? kUnbounded : max_calls_ - 1);
    closer_ = syn_.dsml ? b_.Seq({b_.Literal("\n"), syn_.sp.Close(b_, syn_.sp.block + ">")})
                        : b_.SpecialToken(*syn_.st.tool_calls_end);
    return Status::Ok();
  }

  // What follows the block's opener: V3/V3.1 <｜tool▁calls▁begin｜>, DSML "<｜DSML｜function_calls>".
  ExprId AfterOpener() {
    return syn_.dsml ? b_.Seq({b_.Literal("\n"), any_call_, more_, closer_}) : b_.Seq({any_call_, more_, closer_});
  }
  ExprId Opener() {
    return syn_.dsml ? syn_.sp.Open(b_, syn_.sp.block + ">") : b_.SpecialToken(*syn_.st.tool_calls_begin);
  }
  ExprId Block() { return b_.Seq({Opener(), AfterOpener()}); }
  // A bare call with its opener already seen (V3/V3.1 after <｜tool▁call▁begin｜>, V4 after
  // "<｜DSML｜"): the parser accepts calls without the section wrapper.
  ExprId AfterBareOpener() {
    return syn_.dsml ? b_.Seq({any_rest_, more_}) : b_.Seq({any_rest_, more_, closer_});
  }
  // DSML: a bare invoke whose text `<｜DSML｜invoke name="` was seen (V3.2's text trigger).
  ExprId AfterInvokeNameQuote() { return b_.Seq({any_after_name_quote_, more_}); }

  // Reasoning left open by the prompt, closed by </think>.
  Result<ExprId> Reasoning() {
    if (!opts_.ends_in_thinking) return b_.Empty();
    if (syn_.think_token) return b_.Seq({tool_grammar::AnyText(b_), b_.SpecialToken(*syn_.st.end_think)});
    LADLE_ASSIGN_OR_RETURN(ExprId text, tool_grammar::TextAvoiding(b_, {std::string(kThinkText), std::string(kEndThinkText)}));
    return b_.Seq({text, b_.Literal(kEndThinkText)});
  }

  // Answer text before any call: nothing the parser would read as markup.
  Result<ExprId> Content() {
    if (!syn_.think_token) {
      return tool_grammar::TextAvoiding(b_, {std::string(kThinkText), std::string(kEndThinkText)});
    }
    return tool_grammar::TextAvoiding(b_, syn_.sp.ContentOpenersText());
  }

  Result<grammar::Grammar> Finish(ExprId body) {
    return b_.Build(b_.AddRule("root", body));
  }

 private:
  ExprId CallOpener() {
    if (syn_.dsml) return b_.Seq({b_.Literal("<"), syn_.sp.Dsml(b_)});
    return b_.SpecialToken(*syn_.st.tool_call_begin);
  }

  grammar::JsonSchemaOptions JsonOptions(const Tool& t) const {
    grammar::JsonSchemaOptions o = opts_.json;
    if (t.strict) o.allow_unlisted_properties = false;
    return o;
  }

  // JSON arguments (V3/V3.1): the whole `parameters` schema.
  Result<ExprId> JsonArgs(const Tool& t) {
    const std::string path = fmt::format("/tools/{}/parameters", t.name);
    if (t.parameters.is_null()) {
      // No parameters: the empty object (OpenAI's meaning of an omitted schema).
      return tool_grammar::EmptyJsonObject(b_, JsonOptions(t));
    }
    // Arguments are an object whatever the schema leaves open ({} or a schema without type).
    json::Value schema = t.parameters;
    if (schema.is_bool() && schema.as_bool()) schema = json::Value::MakeObject();
    if (schema.is_object() && schema.Find("type") == nullptr) schema.Set("type", json::Value::String("object"));
    if (const json::Value* type = schema.is_object() ? schema.Find("type") : nullptr) {
      const bool object = type->is_string() ? type->as_string() == "object"
                                            : type->is_array() && std::any_of(type->as_array().begin(), type->as_array().end(),
                                                                               [](const json::Value& x) {
                                                                                 return x.is_string() && x.as_string() == "object";
                                                                               });
      if (!object) return InvalidArgument(fmt::format("{}/type: tool parameters must be an object", path));
    }
    auto args = tool_grammar::SchemaJson(b_, schema, JsonOptions(t), path, report_);
    if (args.ok()) return args;
    if (t.strict) return args.status();
    if (report_ != nullptr) {
      report_->approximations.push_back(
          {path, fmt::format("any JSON object: the schema did not compile ({})", args.status().message())});
    }
    return tool_grammar::AnyJsonObject(b_, JsonOptions(t));
  }

  // One call after its opener; DSML also adds what follows `invoke name="` to *after_names.
  Result<ExprId> CallRest(const Tool& t, std::vector<ExprId>* after_names) {
    if (syn_.dsml) {
      LADLE_ASSIGN_OR_RETURN(ExprId body, tool_grammar::DsmlInvokeBody(b_, t, syn_.sp, JsonOptions(t), report_));
      const ExprId named = b_.Seq({b_.Literal(t.name), b_.Literal("\">"), body, syn_.sp.Close(b_, "invoke>")});
      after_names->push_back(named);
      return b_.Seq({b_.Literal("invoke name=\""), named});
    }
    LADLE_ASSIGN_OR_RETURN(ExprId args, JsonArgs(t));
    const ExprId sep = b_.SpecialToken(*syn_.st.tool_sep);
    const ExprId end = b_.SpecialToken(*syn_.st.tool_call_end);
    if (syn_.v3_fence) {
      return b_.Seq({b_.Literal("function"), sep, b_.Literal(t.name), b_.Literal("\n```json\n"), args,
                     b_.Literal("\n```"), end});
    }
    return b_.Seq({b_.Literal(t.name), sep, args, end});
  }

  const Syntax& syn_;
  const std::vector<const Tool*>& tools_;
  uint32_t max_calls_;
  const ToolGrammarOptions& opts_;
  grammar::CompileReport* report_;
  GrammarBuilder b_;
  ExprId any_rest_ = -1, any_after_name_quote_ = -1, any_call_ = -1, more_ = -1, closer_ = -1;
};

// The tools a call may name under `choice`, in request order, first of each name.
Result<std::vector<const Tool*>> AllowedTools(const std::vector<Tool>& tools, const ToolChoice& choice) {
  std::vector<const Tool*> out;
  auto listed = [&](std::string_view name) {
    return std::any_of(out.begin(), out.end(), [&](const Tool* t) { return t->name == name; });
  };
  for (const Tool& t : tools) {
    if (listed(t.name)) continue;
    if (choice.mode == ToolChoice::Mode::kNamed && t.name != choice.name) continue;
    if (choice.mode == ToolChoice::Mode::kAllowed &&
        std::find(choice.allowed.begin(), choice.allowed.end(), t.name) == choice.allowed.end()) {
      continue;
    }
    LADLE_RETURN_IF_ERROR(tool_grammar::CheckToolName(t.name));
    out.push_back(&t);
  }
  if (choice.mode == ToolChoice::Mode::kNamed && out.empty()) {
    return InvalidArgument(fmt::format("tool_choice names '{}', which is not among the tools", choice.name));
  }
  if (choice.mode == ToolChoice::Mode::kAllowed) {
    for (const std::string& n : choice.allowed) {
      if (std::none_of(tools.begin(), tools.end(), [&](const Tool& t) { return t.name == n; })) {
        return InvalidArgument(fmt::format("allowed_tools names '{}', which is not among the tools", n));
      }
    }
  }
  return out;
}

}  // namespace

std::vector<ToolCallTrigger> ToolCallTriggers(ModelVersion version) {
  const Syntax syn = SyntaxFor(version);
  std::vector<ToolCallTrigger> out;
  if (!syn.dsml) {
    out.push_back({syn.st.tool_calls_begin, "", {}});
    out.push_back({syn.st.tool_call_begin, "", {}});
  } else if (syn.sp.dsml_token) {
    out.push_back({syn.sp.dsml_id, "<", {}});
  } else {
    out.push_back({std::nullopt, fmt::format("<｜DSML｜{}>", syn.sp.block), {}});
    out.push_back({std::nullopt, "<｜DSML｜invoke name=\"", {}});
  }
  return out;
}

Result<ToolGrammar> BuildToolCallGrammar(const std::vector<Tool>& tools, const ToolChoice& choice,
                                         bool parallel_tool_calls, const ToolGrammarOptions& opts) {
  ToolGrammar out;
  if (choice.mode == ToolChoice::Mode::kNone) return out;
  LADLE_ASSIGN_OR_RETURN(std::vector<const Tool*> allowed, AllowedTools(tools, choice));
  out.forced = choice.mode == ToolChoice::Mode::kRequired || choice.mode == ToolChoice::Mode::kNamed ||
               (choice.mode == ToolChoice::Mode::kAllowed && choice.allowed_required);
  if (allowed.empty()) {
    if (out.forced) return InvalidArgument("tool_choice requires a tool call but no tool is available");
    return out;
  }
  for (const Tool* t : allowed) out.allowed.push_back(t->name);
  const Syntax syn = SyntaxFor(opts.version);
  const uint32_t max_calls = choice.mode == ToolChoice::Mode::kNamed || !parallel_tool_calls ? 1 : kUnbounded;
  const bool any_strict = std::any_of(allowed.begin(), allowed.end(), [](const Tool* t) { return t->strict; });

  // The whole turn; the only build that reports (the others rebuild the same pieces).
  {
    TurnBuilder tb(syn, allowed, max_calls, opts, &out.report);
    LADLE_RETURN_IF_ERROR(tb.BuildCalls());
    GrammarBuilder& b = tb.b();
    LADLE_ASSIGN_OR_RETURN(ExprId reasoning, tb.Reasoning());
    ExprId body;
    if (out.forced) {
      // No answer text, but the blank line models write before a DSML block (the encoders
      // render one even after an empty answer) or after </think>.
      const ExprId lead = b.Repeat(b.Literal("\n"), 0, 2);
      body = b.Seq({lead, tb.Block()});
    } else {
      LADLE_ASSIGN_OR_RETURN(ExprId content, tb.Content());
      body = b.Seq({content, b.Optional(tb.Block())});
    }
    LADLE_ASSIGN_OR_RETURN(out.turn, tb.Finish(b.Seq({reasoning, body})));
  }
  out.kind = out.forced || any_strict ? ToolConstraintKind::kTurn : ToolConstraintKind::kLazy;
  if (out.kind != ToolConstraintKind::kLazy) return out;

  for (ToolCallTrigger& trig : ToolCallTriggers(opts.version)) {
    TurnBuilder tb(syn, allowed, max_calls, opts, nullptr);
    LADLE_RETURN_IF_ERROR(tb.BuildCalls());
    GrammarBuilder& b = tb.b();
    ExprId after;
    if (!syn.dsml) {
      after = trig.token_id == syn.st.tool_calls_begin ? tb.AfterOpener() : tb.AfterBareOpener();
    } else if (syn.sp.dsml_token) {
      // After "<｜DSML｜": either the wrapper's name or a bare invoke.
      after = b.Alt({b.Seq({b.Literal(syn.sp.block + ">"), tb.AfterOpener()}), tb.AfterBareOpener()});
    } else {
      after = trig.text.ends_with("name=\"") ? tb.AfterInvokeNameQuote() : tb.AfterOpener();
    }
    LADLE_ASSIGN_OR_RETURN(trig.after, tb.Finish(after));
    out.triggers.push_back(std::move(trig));
  }
  return out;
}

Result<ToolGrammar> BuildToolCallGrammar(const frontend::Request& request, const ToolGrammarOptions& opts) {
  return BuildToolCallGrammar(request.tools, request.tool_choice, request.parallel_tool_calls, opts);
}

}  // namespace ladle::structured
