// The parser against ../shared/golden/parser-parity (dynamo's cross-implementation fixtures):
// every batch and stream case of every DeepSeek family, with the fixture text turned into the
// ids the model would have produced (EncodeTrusted: marker text becomes its control-token id
// wherever the version has one) and run whole, token by token and split at every token.
//
// Stream cases are judged on their concatenated text: their `delta_text` cuts fall inside
// tokens (even inside "<｜tool▁calls▁begin｜>"), which a model can never do, so the cuts that
// matter — every token boundary — are all tried instead.
//
// Where the three references agree, that is the expectation. Where they diverge, or where
// this parser must deviate, kDecisions below says what it does and why; a divergent case
// missing from the table fails, so every choice is written down. The choices follow three
// rules, the same for every family:
//   1. Parser-owned syntax never reaches content (dynamo): reasoning spans are all reasoning,
//      stray </think> and stray closers are dropped, bare calls without the wrapper are parsed.
//   2. A tool-call section that breaks before any call in it was confirmed is returned as
//      content verbatim (the "degrades to content", SGLang's choice), malformed set.
//   3. A call whose name has been streamed cannot be retracted (the name is emitted as soon as
//      it is known, arguments stream as they arrive): if it breaks later it is closed with what
//      the model produced, malformed set, and finish_reason is not tool_calls on its account.
//      Where the references drop such a call after the fact, this parser cannot.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "ladle/json/json.h"
#include "parser_test_util.h"

namespace ladle::frontend::parser_test {
namespace {

namespace fs = std::filesystem;

std::string SharedDir() { return testing::EnvOr("LADLE_SHARED", LADLE_TEST_SHARED_DIR); }
std::string ParityDir() { return SharedDir() + "/golden/parser-parity"; }

// ---------------------------------------------------------------------------------------------
// Decisions. Key: "<kind>/<family>/<case>". `pick` is a reference name or "custom" (then
// `custom` is the expectation, in the fixtures' own YAML form). `prompt_tail` overrides how the
// prompt ended for that case.

struct Decision {
  const char* key;
  const char* pick;
  const char* why;
  const char* custom = nullptr;
  const char* prompt_tail = nullptr;  // "think" / "nothink"
};

// Shared wording.
#define RULE1 "Rule 1 (parser-owned syntax never reaches content): dynamo. "
#define RULE2 "Rule 2 (a section that breaks before its first confirmed call is returned as content): SGLang. "
#define RULE3 "Rule 3 (a streamed call cannot be retracted): "

const Decision kDecisions[] = {
    // ----- reasoning, all families: multiple spans and stray closers (rule 1).
    {"reasoning/deepseek_r1/REASONING.batch.6.a", "custom",
     RULE1 "Both spans are reasoning; content keeps its whitespace exactly (dynamo's batch output trims the "
           "leading space, its stream variant 2.b does not; we never trim).",
     "reasoning_text: firstsecond\nnormal_text: ' middle  done'"},
    {"reasoning/deepseek_v3/REASONING.batch.6.a", "custom", RULE1 "As R1 batch 6.a.",
     "reasoning_text: firstsecond\nnormal_text: ' middle  done'"},
    {"reasoning/deepseek_v4/REASONING.batch.6.a", "custom", RULE1 "As R1 batch 6.a.",
     "reasoning_text: firstsecond\nnormal_text: ' middle  done'"},
    {"reasoning/deepseek_r1/REASONING.stream.2.b", "dynamo", RULE1 "Every <think> span is reasoning."},
    {"reasoning/deepseek_v3/REASONING.stream.2.b", "dynamo", RULE1 "Every <think> span is reasoning."},
    {"reasoning/deepseek_v4/REASONING.stream.2.b", "dynamo", RULE1 "Every <think> span is reasoning."},
    {"reasoning/deepseek_r1/REASONING.batch.6.b", "dynamo", RULE1 "A stray </think> in content is dropped."},
    {"reasoning/deepseek_v3/REASONING.batch.6.b", "dynamo", RULE1 "A stray </think> in content is dropped."},
    {"reasoning/deepseek_v4/REASONING.batch.6.b", "dynamo", RULE1 "A stray </think> in content is dropped."},
    {"reasoning/deepseek_r1/REASONING.stream.2.c", "dynamo", RULE1 "A stray </think> in content is dropped."},
    {"reasoning/deepseek_v3/REASONING.stream.2.c", "dynamo", RULE1 "A stray </think> in content is dropped."},
    {"reasoning/deepseek_v4/REASONING.stream.2.c", "dynamo", RULE1 "A stray </think> in content is dropped."},
    // Split markers: the ids are the same however the text was cut; <think> right after a
    // prompt that opened reasoning is dropped, </think> ends it (dynamo and SGLang agree).
    {"reasoning/deepseek_r1/REASONING.stream.2.a", "dynamo", "Markers are never reasoning text (vLLM leaks <think>)."},
    {"reasoning/deepseek_v3/REASONING.stream.2.a", "dynamo", "Markers are never reasoning text (vLLM leaks <think>)."},
    {"reasoning/deepseek_v4/REASONING.stream.2.a", "dynamo", "Markers are never reasoning text (vLLM leaks <think>)."},
    {"reasoning/deepseek_r1/REASONING.stream.3.a", "dynamo", "Markers are never reasoning text (vLLM leaks <think>)."},
    {"reasoning/deepseek_v3/REASONING.stream.3.a", "dynamo", "Markers are never reasoning text (vLLM leaks <think>)."},
    {"reasoning/deepseek_v4/REASONING.stream.3.a", "dynamo", "Markers are never reasoning text (vLLM leaks <think>)."},
    {"reasoning/deepseek_r1/REASONING.stream.3.b", "dynamo", "</think> ends reasoning however the text was chunked."},
    {"reasoning/deepseek_v3/REASONING.stream.3.b", "dynamo", "</think> ends reasoning however the text was chunked."},
    {"reasoning/deepseek_v4/REASONING.stream.3.b", "dynamo", "</think> ends reasoning however the text was chunked."},
    // V3.x with thinking on: the prompt ended with <think>, so marker-free text is reasoning
    // (dynamo and vLLM; SGLang's V3 parser waits for an explicit <think>).
    {"reasoning/deepseek_v3/REASONING.batch.1.b", "dynamo", "Thinking on: the prompt opened reasoning."},
    {"reasoning/deepseek_v3/REASONING.batch.4", "dynamo", "Thinking on: the prompt opened reasoning."},
    {"reasoning/deepseek_v3/REASONING.stream.3.c", "dynamo", "Thinking on: the prompt opened reasoning."},
    {"reasoning/deepseek_v3/REASONING.stream.1.b", "dynamo", "Thinking on: the prompt opened reasoning."},
    {"reasoning/deepseek_v4/REASONING.batch.4", "dynamo",
     "Thinking on (no enable_thinking:false): the prompt ended with <think>, so text before </think> is reasoning."},
    {"reasoning/deepseek_v4/REASONING.batch.2.d", "dynamo",
     "Text before an explicit <think> is only possible when the prompt did not open reasoning, so this case runs "
     "with the non-thinking prompt tail: 'before ' is content, the span is reasoning, ' after' is content.",
     nullptr, "nothink"},
    // Reasoning followed by tool-call text: the reasoning-only references leave the call in
    // normal_text for a later tool parser; this parser is both stages, so the call is parsed.
    {"reasoning/deepseek_v3/REASONING.batch.3.a", "custom",
     "Combined parser: the V3 tool call after </think> is parsed (as toolcalling/deepseek_v3 batch.1 expects).",
     "reasoning_text: choose tool\nnormal_text: ''\ncalls: [{name: get_weather, arguments: {location: NYC}}]"},
    {"reasoning/deepseek_v4/REASONING.batch.3.a", "custom",
     "Combined parser: the DSML call after </think> is parsed (as toolcalling/deepseek_v4 batch.1 expects).",
     "reasoning_text: choose tool\nnormal_text: ''\ncalls: [{name: get_weather, arguments: {location: NYC}}]"},
    // R1 batch 3.a has V3.1-style call text (no "function", no fence), which is not R1's
    // syntax: rule 2 returns it as content, which is what all three references show.

    // ----- toolcalling V3 / V3.1: markers are tokens.
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.2.c", "dynamo", "Narration is kept exactly (SGLang trims it)."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.8.a", "dynamo", "Narration is kept exactly (SGLang trims it)."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.8.c", "dynamo", "Narration is kept exactly (SGLang trims it)."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.8.d", "dynamo", "Narration is kept exactly (SGLang trims it)."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.5.d", "custom",
     RULE3 "the second call was committed at its ```json fence and its body is complete, so it is returned "
           "(closed at end of stream, malformed); the references drop it for lacking <｜tool▁call▁end｜>. "
           "Narration kept exactly.",
     "calls: [{name: get_weather, arguments: {location: Boston}}, {name: get_weather, arguments: {location: New York}}]\n"
     "normal_text: \"I'll start by fetching the weather for both Boston and New York at the same time!\\n\""},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.5.e", "custom",
     RULE3 "the truncated second call keeps the arguments the model produced (invalid JSON, malformed).",
     "calls: [{name: get_weather, arguments: {location: Boston}}, {name: get_weather, arguments: '{\"location\": \"New York'}]\n"
     "normal_text: \"I'll start by fetching the weather for both Boston and New York at the same time!\\n\""},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.4.a", "custom",
     RULE2 "All three references drop the text; the issue requires malformed output to degrade to content, "
           "and a wrapper holding no call is returned as it was.",
     "calls: []\nnormal_text: '<｜tool▁calls▁begin｜>nonsense<｜tool▁calls▁end｜>'"},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.4.b", "vllm",
     RULE3 "committed at the fence, the unterminated JSON is what the client receives (vLLM's raw string)."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.4.c", "custom",
     RULE2 "An empty name is never confirmed; the section is returned as content.",
     "calls: []\nnormal_text: \"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>\\n```json\\n{\\\"location\\\": \\\"NYC\\\"}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>\""},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.4.d", "sglang", RULE2 "No ```json fence: the name never confirms."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.5.a", "custom",
     RULE3 "committed at the fence with a complete body: returned, closed at end of stream, malformed.",
     "calls: [{name: get_weather, arguments: {location: NYC}}]\nnormal_text: ''"},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.5.b", "dynamo", RULE1 "A bare call without the wrapper is parsed."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.5.c", "custom",
     RULE3 "the arguments streamed so far stay, as the model wrote them.",
     "calls: [{name: get_weather, arguments: '{\"loc'}]\nnormal_text: ''"},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.6.b", "dynamo", "'{\\n}' is a valid empty object."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.6.c", "sglang", RULE2 "No fence: the name never confirms."},
    {"toolcalling/deepseek_v3/TOOLCALLING.batch.13", "dynamo", "Unknown tool names are forwarded (validation is the API layer's)."},
    {"toolcalling/deepseek_v3/TOOLCALLING.stream.1.a", "dynamo", "Markers are ids, so chunking cannot hide them."},
    {"toolcalling/deepseek_v3/TOOLCALLING.stream.1.b", "dynamo", "Markers are ids, so chunking cannot hide them."},
    {"toolcalling/deepseek_v3/TOOLCALLING.stream.2", "dynamo", "Markers are ids, so chunking cannot hide them."},
    {"toolcalling/deepseek_v3/TOOLCALLING.stream.3", "dynamo", "Markers are ids, so chunking cannot hide them."},
    {"toolcalling/deepseek_v3/TOOLCALLING.stream.4.a", "sglang", RULE3 "committed with a complete body: returned (malformed)."},
    {"toolcalling/deepseek_v3/TOOLCALLING.stream.4.b", "custom", RULE3 "as batch 5.c.",
     "calls: [{name: get_weather, arguments: '{\"loc'}]\nnormal_text: ''"},
    {"toolcalling/deepseek_v3/TOOLCALLING.stream.4.c", "dynamo", RULE1 "Bare call parsed; repeated closers dropped."},

    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.2.c", "dynamo", "Narration is kept exactly (SGLang trims it)."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.8.a", "dynamo", "Narration is kept exactly (SGLang trims it)."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.8.c", "dynamo", "Narration is kept exactly (SGLang trims it)."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.8.d", "dynamo", "Narration is kept exactly (SGLang trims it)."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.13", "dynamo", "Unknown tool names are forwarded."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.4.a", "custom", RULE2 "As deepseek_v3 batch.4.a.",
     "calls: []\nnormal_text: '<｜tool▁calls▁begin｜>nonsense<｜tool▁calls▁end｜>'"},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.4.b", "vllm", RULE3 "committed at <｜tool▁sep｜>; the unterminated JSON stays."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.4.c", "custom", RULE2 "An empty name is never confirmed.",
     "calls: []\nnormal_text: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜><｜tool▁sep｜>{\"location\":\"NYC\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'"},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.4.d", "custom",
     RULE3 "committed at <｜tool▁sep｜> with complete arguments; closed by <｜tool▁calls▁end｜> (malformed, not "
           "counted as complete).",
     "calls: [{name: get_weather, arguments: {location: NYC}}]\nnormal_text: ''"},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.5.b", "dynamo", RULE1 "A bare call without the wrapper is parsed."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.5.c", "custom", RULE3 "as deepseek_v3 batch.5.c.",
     "calls: [{name: get_weather, arguments: '{\"loc'}]\nnormal_text: ''"},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.5.d", "custom", RULE3 "as deepseek_v3 batch.5.d.",
     "calls: [{name: get_weather, arguments: {location: Boston}}, {name: get_weather, arguments: {location: New York}}]\n"
     "normal_text: I'll start by fetching the weather for both Boston and New York at the same time!"},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.5.e", "custom", RULE3 "as deepseek_v3 batch.5.e.",
     "calls: [{name: get_weather, arguments: {location: Boston}}, {name: get_weather, arguments: '{\"location\":\"New York'}]\n"
     "normal_text: I'll start by fetching the weather for both Boston and New York at the same time!"},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.batch.6.c", "sglang", RULE2 "No <｜tool▁sep｜>: the name never confirms."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.stream.1.a", "dynamo", "Markers are ids, so chunking cannot hide them."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.stream.1.b", "dynamo", "Markers are ids, so chunking cannot hide them."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.stream.2", "dynamo", "Markers are ids, so chunking cannot hide them."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.stream.3", "dynamo", "Markers are ids, so chunking cannot hide them."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.stream.4.a", "dynamo", "The call closed; only the wrapper's closer is missing."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.stream.4.b", "sglang", RULE3 "the arguments streamed so far stay."},
    {"toolcalling/deepseek_v3_1/TOOLCALLING.stream.4.c", "dynamo", RULE1 "Bare call parsed; repeated closers dropped."},
};

// DSML families (V3.2 function_calls, V4 tool_calls) share one list; the key uses "*".
const Decision kDsmlDecisions[] = {
    {"toolcalling/*/TOOLCALLING.batch.2.b", "dynamo", "Back-to-back wrappers: both calls; text between sections is dropped."},
    {"toolcalling/*/TOOLCALLING.batch.2.c", "dynamo", "Narration kept exactly; text after the section dropped."},
    {"toolcalling/*/TOOLCALLING.batch.8.a", "dynamo", "Narration kept exactly."},
    {"toolcalling/*/TOOLCALLING.batch.8.b", "dynamo", "Text after the section dropped (all three agree where present)."},
    {"toolcalling/*/TOOLCALLING.batch.8.c", "dynamo", "Narration kept exactly; text after the section dropped."},
    {"toolcalling/*/TOOLCALLING.batch.8.d", "dynamo", "Later sections are parsed too; text between them dropped."},
    {"toolcalling/*/TOOLCALLING.batch.13", "dynamo", "Unknown tool names are forwarded."},
    {"toolcalling/*/TOOLCALLING.batch.4.a", "vllm", RULE2 "A wrapper holding no invoke is returned as it was."},
    {"toolcalling/*/TOOLCALLING.batch.4.c", "vllm", RULE2 "<｜DSML｜invoke> without a name never confirms."},
    {"toolcalling/*/TOOLCALLING.batch.4.d", "custom",
     RULE3 "the value was streamed piece by piece, so it cannot be withdrawn when </｜DSML｜invoke> arrives "
           "instead of </｜DSML｜parameter>; the value is closed there (malformed). All references return {}, "
           "which would need every parameter held until it closes — no streaming.",
     "calls: [{name: get_weather, arguments: {location: \"NYC\\n\"}}]\nnormal_text: ''"},
    {"toolcalling/*/TOOLCALLING.batch.5.a", "dynamo", "The invoke closed; only the wrapper's closer is missing."},
    {"toolcalling/*/TOOLCALLING.batch.5.b", "dynamo", RULE1 "A bare invoke is parsed; the orphan closer dropped."},
    {"toolcalling/*/TOOLCALLING.batch.5.c", "custom", RULE3 "the truncated value stays as streamed (not closed).",
     "calls: [{name: get_weather, arguments: '{\"location\": \"NY'}]\nnormal_text: ''"},
    {"toolcalling/*/TOOLCALLING.batch.5.d", "dynamo", "Both invokes closed; only the wrapper's closer is missing."},
    {"toolcalling/*/TOOLCALLING.batch.5.e", "custom", RULE3 "the truncated second call keeps what was streamed.",
     "calls: [{name: get_weather, arguments: {location: Boston}}, {name: get_weather, arguments: '{\"location\": \"New York'}]\n"
     "normal_text: \"I'll start by fetching the weather for both Boston and New York at the same time!\\n\""},
    {"toolcalling/*/TOOLCALLING.batch.5.f", "dynamo", RULE1 "Bare invoke parsed, then the wrapped one."},
    {"toolcalling/*/TOOLCALLING.batch.5.g", "custom",
     RULE1 "Bare invoke parsed, orphan closer dropped; narration kept exactly (dynamo trims its trailing space "
           "here but not in batch.2.c/8.a; we never trim).",
     "calls: [{name: get_weather, arguments: {location: NYC}}]\nnormal_text: 'I will check that. '"},
    {"toolcalling/*/TOOLCALLING.batch.7.f", "dynamo", "Raw values pass through as written: no float rounding."},
    {"toolcalling/*/TOOLCALLING.stream.4.b", "custom", RULE3 "the truncated value stays as streamed.",
     "calls: [{name: get_weather, arguments: '{\"location\": \"NY'}]\nnormal_text: ''"},
    {"toolcalling/*/TOOLCALLING.stream.4.c", "dynamo", RULE1 "Bare invoke parsed; repeated closers dropped."},
};

const Decision* FindDecision(const std::string& kind, const std::string& family, const std::string& id) {
  const std::string key = kind + "/" + family + "/" + id;
  for (const Decision& d : kDecisions) {
    if (key == d.key) return &d;
  }
  if (family == "deepseek_v3_2" || family == "deepseek_v4") {
    const std::string wild = kind + "/*/" + id;
    for (const Decision& d : kDsmlDecisions) {
      if (wild == d.key) return &d;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// YAML expectations as JSON values.

json::Value YamlToJson(const YAML::Node& n) {
  if (n.IsMap()) {
    json::Value::Object o;
    for (const auto& kv : n) o.emplace_back(kv.first.as<std::string>(), YamlToJson(kv.second));
    return json::Value::MakeObject(std::move(o));
  }
  if (n.IsSequence()) {
    json::Value::Array a;
    for (const auto& x : n) a.push_back(YamlToJson(x));
    return json::Value::MakeArray(std::move(a));
  }
  if (n.IsNull()) return json::Value::Null();
  const std::string s = n.Scalar();
  if (n.Tag() == "!") return json::Value::String(s);  // quoted: always a string
  if (s == "null" || s == "~") return json::Value::Null();
  if (s == "true" || s == "false") return json::Value::Bool(s == "true");
  // A JSON number, exactly (no surrounding space): our own JSON parser decides, which keeps
  // <regex> (the slowest header of this test's sanitizer build) out.
  if (!s.empty() && s.find_first_of(" \t\r\n") == std::string::npos) {
    if (auto v = json::Parse(s); v.ok() && v->is_number()) return json::Value::NumberText(s);
  }
  return json::Value::String(s);
}

bool JsonEqual(const json::Value& a, const json::Value& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case json::Value::Type::kNull: return true;
    case json::Value::Type::kBool: return a.as_bool() == b.as_bool();
    case json::Value::Type::kNumber:
      if (a.is_integer() && b.is_integer()) return a.as_string() == b.as_string();
      return a.as_double() == b.as_double();
    case json::Value::Type::kString: return a.as_string() == b.as_string();
    case json::Value::Type::kArray:
      if (a.as_array().size() != b.as_array().size()) return false;
      for (size_t i = 0; i < a.as_array().size(); ++i) {
        if (!JsonEqual(a.as_array()[i], b.as_array()[i])) return false;
      }
      return true;
    case json::Value::Type::kObject:
      if (a.as_object().size() != b.as_object().size()) return false;
      for (const auto& [k, v] : a.as_object()) {
        const json::Value* w = b.Find(k);
        if (!w || !JsonEqual(v, *w)) return false;
      }
      return true;
  }
  return false;
}

// One reference's (or our chosen) outcome.
struct Outcome {
  std::string reasoning, content;
  struct ExpCall {
    std::string name;
    std::optional<json::Value> args;  // parsed arguments
    std::optional<std::string> raw;   // or the exact text when the fixture gives a string
  };
  std::vector<ExpCall> calls;
};

Outcome FromYaml(const YAML::Node& n) {
  Outcome o;
  if (n["reasoning_text"]) o.reasoning = n["reasoning_text"].as<std::string>();
  if (n["normal_text"]) o.content = n["normal_text"].as<std::string>();
  if (n["calls"]) {
    for (const auto& c : n["calls"]) {
      Outcome::ExpCall e;
      e.name = c["name"].as<std::string>();
      const YAML::Node a = c["arguments"];
      if (a.IsScalar()) {
        e.raw = a.as<std::string>();
      } else {
        e.args = YamlToJson(a);
      }
      o.calls.push_back(std::move(e));
    }
  }
  return o;
}

bool SameOutcome(const Outcome& a, const Outcome& b) {
  if (a.reasoning != b.reasoning || a.content != b.content || a.calls.size() != b.calls.size()) return false;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    const auto &x = a.calls[i], &y = b.calls[i];
    if (x.name != y.name || x.raw != y.raw) return false;
    if (x.args.has_value() != y.args.has_value()) return false;
    if (x.args && !JsonEqual(*x.args, *y.args)) return false;
  }
  return true;
}

// Our result against an expected outcome; "" when it matches.
std::string Compare(const Parsed& got, const Outcome& want) {
  std::string err;
  if (got.reasoning != want.reasoning) err += "reasoning: got [" + got.reasoning + "] want [" + want.reasoning + "]\n";
  if (got.content != want.content) err += "content: got [" + got.content + "] want [" + want.content + "]\n";
  if (got.calls.size() != want.calls.size()) {
    err += "calls: got " + std::to_string(got.calls.size()) + " want " + std::to_string(want.calls.size()) + "\n";
    return err;
  }
  for (size_t i = 0; i < got.calls.size(); ++i) {
    const Call& g = got.calls[i];
    const auto& w = want.calls[i];
    if (g.name != w.name) err += "call " + std::to_string(i) + " name: got " + g.name + " want " + w.name + "\n";
    if (w.raw) {
      if (g.args != *w.raw) err += "call " + std::to_string(i) + " args: got [" + g.args + "] want [" + *w.raw + "]\n";
    } else {
      auto parsed = json::Parse(g.args);
      if (!parsed.ok() || !JsonEqual(*parsed, *w.args)) {
        err += "call " + std::to_string(i) + " args: got [" + g.args + "] want " + json::Dump(*w.args) + "\n";
      }
    }
  }
  return err;
}

// ---------------------------------------------------------------------------------------------
// Families.

struct Family {
  std::string kind;    // "toolcalling" / "reasoning"
  std::string family;  // directory name
  std::vector<ParserSetup> setups;
};

std::vector<Family> Families() {
  // A placeholder id of the V3 vocabulary, given the ｜DSML｜ text to run V3.2 with DSML as a
  // token (the version table has it as text there); V4 is also run with DSML as text.
  constexpr TokenId kDsmlTryId = 128825;
  return {
      {"toolcalling", "deepseek_v3", {ParserSetup::Of(ModelVersion::kV3, false)}},
      {"toolcalling", "deepseek_v3_1", {ParserSetup::Of(ModelVersion::kV31, false)}},
      {"toolcalling", "deepseek_v3_2",
       {ParserSetup::Of(ModelVersion::kV32, false), ParserSetup::Of(ModelVersion::kV32, false).WithDsml(kDsmlTryId)}},
      {"toolcalling", "deepseek_v4", {ParserSetup::Of(ModelVersion::kV4, false), ParserSetup::Of(ModelVersion::kV4, false).WithDsml(std::nullopt)}},
      {"reasoning", "deepseek_r1", {ParserSetup::Of(ModelVersion::kR1, true)}},
      // "DeepSeek V3.x" with thinking: run as V3 (think markers as text) and as V3.1 (tokens).
      {"reasoning", "deepseek_v3", {ParserSetup::Of(ModelVersion::kV3, true), ParserSetup::Of(ModelVersion::kV31, true)}},
      {"reasoning", "deepseek_v4", {ParserSetup::Of(ModelVersion::kV4, true), ParserSetup::Of(ModelVersion::kV4, true).WithDsml(std::nullopt)}},
  };
}

bool ThinkingDisabled(const YAML::Node& c) {
  const YAML::Node k = c["chat_template_kwargs"];
  return k && k["enable_thinking"] && !k["enable_thinking"].as<bool>();
}

struct Stats {
  int cases = 0, runs = 0, consensus = 0, decided = 0, not_applicable = 0;
  std::vector<std::string> against_consensus;  // decided cases where the references agreed
};

void RunFamily(const Family& fam, Stats* stats) {
  const fs::path dir = fs::path(ParityDir()) / fam.kind / fam.family;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir;

  for (const ParserSetup& base_setup : fam.setups) {
    const Runner base_runner(base_setup);
    for (const fs::path& file : files) {
      const YAML::Node doc = YAML::LoadFile(file.string());
      for (const auto& kv : doc["cases"]) {
        const std::string id = kv.first.as<std::string>();
        const YAML::Node c = kv.second;
        const std::string what = fam.kind + "/" + fam.family + "/" + id + " [" + base_setup.label + "]";
        std::string text;
        FinishReason finish = FinishReason::kStop;
        if (c["model_text"]) {
          text = c["model_text"].as<std::string>();
        } else if (c["chunks"]) {
          for (const auto& ch : c["chunks"]) {
            if (ch.IsScalar()) {
              text += ch.as<std::string>();
              continue;
            }
            text += ch["delta_text"].as<std::string>();
            if (ch["finish_reason"]) {
              auto f = ParseFinishReason(ch["finish_reason"].as<std::string>());
              ASSERT_TRUE(f.ok()) << what;
              finish = *f;
            }
          }
        } else {
          ++stats->not_applicable;  // documented n/a case (reason only)
          continue;
        }
        const Decision* decision = FindDecision(fam.kind, fam.family, id);
        // V3.1 reads the V3-style call text of this case as a different syntax.
        if (fam.family == "deepseek_v3" && id == "REASONING.batch.3.a" && base_setup.version == ModelVersion::kV31) continue;

        ParserSetup setup = base_setup;
        if (fam.kind == "reasoning" && ThinkingDisabled(c)) setup.think = false;
        if (decision && decision->prompt_tail) setup.think = std::string(decision->prompt_tail) == "think";
        const Runner runner = setup.think == base_setup.think ? base_runner : Runner(setup);

        const std::vector<TokenId> ids = runner.tok.EncodeTrusted(text);
        const std::vector<Event> events = RunAllChunkings(runner, ids, finish, what);
        const Parsed got = Collect(events);
        ++stats->runs;

        // The expectation: the references' consensus, or the documented decision.
        std::map<std::string, Outcome> refs;
        for (const char* r : {"dynamo", "vllm", "sglang"}) {
          const YAML::Node e = c["expected"][r];
          if (e && !e["unavailable"]) refs.emplace(r, FromYaml(e));
        }
        ASSERT_FALSE(refs.empty()) << what;
        bool agree = true;
        for (const auto& [name, o] : refs) agree = agree && SameOutcome(o, refs.begin()->second);

        Outcome want;
        if (decision) {
          ++stats->decided;
          if (std::string(decision->pick) == "custom") {
            want = FromYaml(YAML::Load(decision->custom));
          } else {
            auto it = refs.find(decision->pick);
            ASSERT_NE(it, refs.end()) << what << ": decision picks a missing reference";
            want = it->second;
          }
          if (agree && !SameOutcome(want, refs.begin()->second)) {
            stats->against_consensus.push_back(id + " [" + setup.label + "]");
          }
        } else {
          if (!agree) {
            ADD_FAILURE() << what << ": the references diverge and no decision is recorded\nevents:\n"
                          << Describe(events);
            continue;
          }
          ++stats->consensus;
          want = refs.begin()->second;
        }
        const std::string diff = Compare(got, want);
        EXPECT_EQ(diff, "") << what << (decision ? std::string("\ndecision: ") + decision->why : "") << "\nevents:\n"
                            << Describe(events);

        // Finish: tool_calls only with a complete call, never without any call.
        if (got.finish == FinishReason::kToolCalls) {
          EXPECT_FALSE(got.calls.empty()) << what;
        }
        if (got.calls.empty()) {
          EXPECT_NE(got.finish, FinishReason::kToolCalls) << what;
        }
      }
      ++stats->cases;
    }
  }
}

class ParserParity : public ::testing::TestWithParam<std::string> {};

TEST(ParserParityData, Present) {
  LADLE_REQUIRE_DATA(ParityDir());
  LADLE_REQUIRE_DATA(testing::TokenizerPath());
  EXPECT_TRUE(fs::is_directory(fs::path(ParityDir()) / "toolcalling"));
  EXPECT_TRUE(fs::is_directory(fs::path(ParityDir()) / "reasoning"));
}

TEST_P(ParserParity, Family) {
  LADLE_REQUIRE_DATA(ParityDir());
  LADLE_REQUIRE_DATA(testing::TokenizerPath());
  ASSERT_NE(BaseTokenizer(), nullptr);
  for (const Family& f : Families()) {
    if (f.kind + "/" + f.family != GetParam()) continue;
    Stats stats;
    RunFamily(f, &stats);
    // Every fixture file must contribute runs: a schema change must not turn into silence.
    EXPECT_GT(stats.runs, 5) << GetParam();
    RecordProperty("runs", stats.runs);
    std::printf("[ parity ] %s: %d runs (%d consensus, %d decided), %d n/a entries\n", GetParam().c_str(), stats.runs,
                stats.consensus, stats.decided, stats.not_applicable);
    for (const std::string& c : stats.against_consensus) std::printf("[ parity ]   against the references' consensus: %s\n", c.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(All, ParserParity,
                         ::testing::Values("toolcalling/deepseek_v3", "toolcalling/deepseek_v3_1",
                                           "toolcalling/deepseek_v3_2", "toolcalling/deepseek_v4",
                                           "reasoning/deepseek_r1", "reasoning/deepseek_v3", "reasoning/deepseek_v4"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '/', '_');
                           return s;
                         });

// Every decision names a case that exists (a renamed fixture must not orphan its decision).
TEST(ParserParityData, DecisionsNameRealCases) {
  LADLE_REQUIRE_DATA(ParityDir());
  std::map<std::string, bool> seen;
  for (const Family& f : Families()) {
    for (const auto& e : fs::directory_iterator(fs::path(ParityDir()) / f.kind / f.family)) {
      if (e.path().extension() != ".yaml") continue;
      const YAML::Node doc = YAML::LoadFile(e.path().string());
      for (const auto& kv : doc["cases"]) {
        const std::string id = kv.first.as<std::string>();
        seen[f.kind + "/" + f.family + "/" + id] = true;
        if (f.family == "deepseek_v3_2" || f.family == "deepseek_v4") seen[f.kind + "/*/" + id] = true;
      }
    }
  }
  for (const Decision& d : kDecisions) EXPECT_TRUE(seen.count(d.key)) << d.key;
  for (const Decision& d : kDsmlDecisions) EXPECT_TRUE(seen.count(d.key)) << d.key;
}

}  // namespace
}  // namespace ladle::frontend::parser_test
