// `ladle grammar`: compile one constraint the way `ladle serve` does (same spec, same cache,
// optionally on a grammar worker) and print what it cost: compile time, cache-hit time,
// memory, approximations; `--dump` prints the grammar IR.
//   ladle grammar --schema person.json [--whitespace compact] [--worker 127.0.0.1:8100]
//   ladle grammar --regex '[0-9]{3}'      ladle grammar --ebnf g.gbnf --dump
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "ladle/frontend/model_version.h"
#include "ladle/json/json.h"
#include "ladle/structured/compile_service.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::app {

namespace {

struct GrammarOpts {
  std::string schema, regex, ebnf;
  bool json_object = false;
  std::string whitespace = "bounded";
  std::string model_version = "v3.2";
  std::string tokenizer = DefaultTokenizerPath();
  std::vector<std::string> workers;
  bool dump = false;
  int repeat = 3;
};

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IoError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

int RunGrammar(const GrammarOpts& o) {
  auto fail = [](const Status& s) {
    fmt::print(stderr, "ladle grammar: {}\n", s.ToString());
    return 1;
  };
  auto version = frontend::ParseModelVersion(o.model_version);
  if (!version.ok()) return fail(version.status());
  structured::ConstraintSpec spec;
  spec.version = *version;
  spec.param = "constraint";
  int given = !o.schema.empty() + !o.regex.empty() + !o.ebnf.empty() + o.json_object;
  if (given != 1) return fail(InvalidArgument("give exactly one of --schema, --regex, --ebnf, --json-object"));
  if (!o.schema.empty()) {
    auto text = ReadFile(o.schema);
    if (!text.ok()) return fail(text.status());
    auto v = json::Parse(*text);
    if (!v.ok()) return fail(v.status());
    spec.kind = structured::ConstraintKind::kJsonSchema;
    spec.payload = json::Dump(*v);
  } else if (!o.regex.empty()) {
    spec.kind = structured::ConstraintKind::kRegex;
    spec.payload = o.regex;
  } else if (!o.ebnf.empty()) {
    auto text = ReadFile(o.ebnf);
    if (!text.ok()) return fail(text.status());
    spec.kind = structured::ConstraintKind::kEbnf;
    spec.payload = *text;
  } else {
    spec.kind = structured::ConstraintKind::kJsonObject;
  }
  spec.whitespace = o.whitespace == "compact"  ? grammar::JsonSchemaOptions::Whitespace::kCompact
                    : o.whitespace == "pretty" ? grammar::JsonSchemaOptions::Whitespace::kPretty
                                               : grammar::JsonSchemaOptions::Whitespace::kBounded;

  const auto t0 = std::chrono::steady_clock::now();
  auto base = tokenizer::Tokenizer::FromFile(o.tokenizer);
  if (!base.ok()) return fail(base.status());
  auto tok = frontend::TokenizerForVersion(*base, *version);
  if (!tok.ok()) return fail(tok.status());
  auto vocab = structured::VocabularyFor(*tok, *version);
  if (!vocab.ok()) return fail(vocab.status());
  const auto t1 = std::chrono::steady_clock::now();
  structured::CompileServiceOptions so;
  so.workers = o.workers;
  auto svc = structured::CompileService::Create(*vocab, so);
  if (!svc.ok()) return fail(svc.status());
  fmt::print("vocabulary      {:.1f} ms (tokenizer load + TokenVocabulary, once per server)\n", Ms(t1 - t0));
  fmt::print("key             {}\n", structured::KeyFor(spec, (*vocab)->Fingerprint()).Hex());
  const auto c0 = std::chrono::steady_clock::now();
  auto r = (*svc)->Get(spec);
  const auto c1 = std::chrono::steady_clock::now();
  if (!r.ok()) return fail(r.status());
  fmt::print("compile         {:.3f} ms wall ({:.3f} ms reported by {})\n", Ms(c1 - c0), (*r)->compile_ms,
             (*r)->compiled_by);
  for (int i = 0; i < o.repeat; ++i) {
    const auto h0 = std::chrono::steady_clock::now();
    auto again = (*svc)->Get(spec);
    const auto h1 = std::chrono::steady_clock::now();
    if (!again.ok()) return fail(again.status());
    fmt::print("cache hit       {:.4f} ms\n", Ms(h1 - h0));
  }
  fmt::print("memory          {} bytes\n", (*r)->MemoryBytes());
  fmt::print("serialized      {} bytes\n", (*r)->grammar->Serialize().size());
  for (const auto& a : (*r)->report.approximations) fmt::print("approximation   {}: {}\n", a.path, a.what);
  if (o.dump) fmt::print("{}", (*r)->grammar->grammar().ToString());
  return 0;
}

void RegisterGrammar(CLI::App& app, RunFn* run) {
  auto opts = std::make_shared<GrammarOpts>();
  auto* cmd = app.add_subcommand("grammar", "Compile a structured-output constraint and report its cost");
  cmd->add_option("--schema", opts->schema, "JSON Schema file");
  cmd->add_option("--regex", opts->regex, "regular expression (whole-output match)");
  cmd->add_option("--ebnf", opts->ebnf, "GBNF grammar file");
  cmd->add_flag("--json-object", opts->json_object, "any JSON object");
  cmd->add_option("--whitespace", opts->whitespace, "bounded, compact or pretty")
      ->capture_default_str()->check(CLI::IsMember({"bounded", "compact", "pretty"}));
  cmd->add_option("--model-version", opts->model_version, "v3, r1, v3.1, v3.2, v4")->capture_default_str();
  cmd->add_option("--tokenizer", opts->tokenizer, "tokenizer.json path")->capture_default_str();
  cmd->add_option("--worker", opts->workers, "compile on this grammar worker (repeatable)");
  cmd->add_option("--repeat", opts->repeat, "cache-hit lookups to time")->capture_default_str();
  cmd->add_flag("--dump", opts->dump, "print the grammar IR");
  cmd->callback([run, opts] { *run = [opts] { return RunGrammar(*opts); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterGrammar);

}  // namespace ladle::app
