// matcher_bench: the grammar runtime on the DeepSeek vocabulary, one thread.
//
//   matcher_bench [--tokenizer=PATH] [--docs=N] [--eager]
//
// For each hand-built grammar (a recursive JSON grammar, a flat string-heavy one, and the
// JsonSchemaGrammar of a few schemas when that front-end is linked in): compile time, then
// documents of that grammar tokenized with EncodePlain and driven token by token —
// FillNextTokenMask timed per call (percentiles over all calls, cold = the first use of a
// state's cache included), AcceptToken checked. Prints one table; timing lives here, not in
// the unit tests. Times are thread CPU time (the development machine is shared).
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"
#include "ladle/json/json.h"
#include "ladle/tokenizer/tokenizer.h"
#include "mask_cache.h"
#include "reference_recognizer.h"
#include "matcher_impl.h"

namespace {

namespace grammar = ladle::grammar;
using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Thread CPU time: the machine this runs on is shared, and wall time then measures the
// neighbours as much as the code.
double CpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
    if (a == "--" + name) return "1";
  }
  return def;
}

std::string DefaultTokenizer() {
  if (const char* t = std::getenv("LADLE_TOKENIZER")) return t;
  std::string cache = std::getenv("LADLE_CACHE") ? std::getenv("LADLE_CACHE") : LADLE_BENCH_CACHE_DIR;
  std::string p = cache + "/tokenizers/deepseek-v3/tokenizer.json";
  if (std::filesystem::exists(p)) return p;
  std::string shared = std::getenv("LADLE_SHARED") ? std::getenv("LADLE_SHARED") : LADLE_BENCH_SHARED_DIR;
  return shared + "/tokenizers/deepseek-v3/tokenizer.json";
}

grammar::Grammar JsonGrammar() {
  grammar::GrammarBuilder b;
  auto value = b.DeclareRule("value");
  auto ws = b.AddRule("ws", b.Repeat(b.ByteRange(' ', ' '), 0, 4));
  auto esc = b.Seq({b.Literal("\\"), b.Alt({b.Literal("\""), b.Literal("\\"), b.Literal("n"), b.Literal("t")})});
  auto ch = b.Alt({b.CodePoints({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true), esc});
  auto str = b.AddRule("string", b.Seq({b.Literal("\""), b.Star(ch), b.Literal("\"")}));
  auto num = b.AddRule("number", b.Seq({b.Optional(b.Literal("-")), b.Plus(b.ByteRange('0', '9')),
                                        b.Optional(b.Seq({b.Literal("."), b.Plus(b.ByteRange('0', '9'))}))}));
  auto member = b.Seq({b.Ref(str), b.Ref(ws), b.Literal(":"), b.Ref(ws), b.Ref(value)});
  auto sep = b.Seq({b.Ref(ws), b.Literal(","), b.Ref(ws)});
  auto obj = b.AddRule("object", b.Seq({b.Literal("{"), b.Ref(ws),
                                        b.Optional(b.Seq({member, b.Star(b.Seq({sep, member}))})), b.Ref(ws),
                                        b.Literal("}")}));
  auto arr = b.AddRule("array", b.Seq({b.Literal("["), b.Ref(ws),
                                       b.Optional(b.Seq({b.Ref(value), b.Star(b.Seq({sep, b.Ref(value)}))})),
                                       b.Ref(ws), b.Literal("]")}));
  b.DefineRule(value, b.Alt({b.Ref(obj), b.Ref(arr), b.Ref(str), b.Ref(num), b.Literal("true"),
                             b.Literal("false"), b.Literal("null")}));
  return *b.Build(value);
}

grammar::Grammar StringHeavyGrammar() {
  grammar::GrammarBuilder b;
  auto ch = b.Alt({b.CodePoints({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true),
                   b.Seq({b.Literal("\\"), b.ByteRange('"', '"')})});
  auto s = b.Seq({b.Literal("\""), b.Star(ch), b.Literal("\"")});
  auto kv = b.Seq({s, b.Literal(": "), s});
  auto root = b.AddRule("root", b.Seq({b.Literal("{"), kv, b.Star(b.Seq({b.Literal(", "), kv})), b.Literal("}")}));
  return *b.Build(root);
}

struct Case {
  std::string name;
  grammar::Grammar g;
  std::vector<std::string> docs;
};

std::vector<std::string> JsonDocs() {
  return {
      R"({"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"], "active": false})",
      R"([{"id": 1, "v": [1.5, -2, 3]}, {"id": 2, "v": []}, null, true, "x\"y"])",
      R"({"query": "SELECT * FROM users WHERE name = \"bob\"", "limit": 10, "nested": {"a": {"b": {"c": [[], [[]]]}}}})",
      R"({"text": "Der schnelle braune Fuchs springt über den faulen Hund. 中文也可以。", "n": 42})",
  };
}

std::vector<std::string> StringDocs() {
  return {
      R"({"title": "A long title with many words in it", "body": "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua."})",
      R"({"a": "short", "b": "with \"quotes\" inside", "c": "unicode: naïve café — 東京"})",
  };
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

// --schema-dir=DIR [--limit=N]: compile every MaskBench file's schema and list the slowest
// compiles with their automaton sizes (where compile time goes); --unit-sharing=off compiles
// every unit cold (CompileOptions::share_unit_dfas). With LADLE_DIGESTS=PATH, one
// line per schema (file name, XXH64 of CompiledGrammar::Serialize()) goes to PATH: two builds
// whose lines agree built the same automata (a check for compile-side refactors).
int SchemaCompiles(const std::shared_ptr<const grammar::TokenVocabulary>& vocab, const std::string& dir,
                   size_t limit, bool share_units) {
  grammar::CompileOptions copts;
  copts.share_unit_dfas = share_units;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.size() > limit) files.resize(limit);
  struct Row {
    double us;
    std::string name, what;
  };
  std::vector<Row> rows;
  std::vector<double> all;
  double front = 0;  // JsonSchemaGrammar, summed
  std::FILE* digests = std::getenv("LADLE_DIGESTS") ? std::fopen(std::getenv("LADLE_DIGESTS"), "w") : nullptr;
  for (const auto& f : files) {
    std::FILE* fp = std::fopen(f.c_str(), "rb");
    if (!fp) continue;
    std::string text;
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, fp)) > 0;) text.append(buf, n);
    std::fclose(fp);
    auto doc = ladle::json::Parse(text);
    const ladle::json::Value* schema = doc.ok() ? doc->Find("schema") : nullptr;
    if (!schema) continue;
    const double f0 = CpuUs();
    auto g = grammar::JsonSchemaGrammar(*schema);
    if (!g.ok()) continue;
    front += CpuUs() - f0;
    if (std::getenv("LADLE_DUMP_GRAMMAR")) std::printf("%s\n", g->ToString().c_str());
    double t = CpuUs();
    auto cg = grammar::CompiledGrammar::Compile(*g, vocab, copts);
    double us = CpuUs() - t;
    all.push_back(us);
    std::string what;
    if (!cg.ok()) {
      what = cg.status().ToString();
    } else {
      if (digests) {
        const std::string blob = (*cg)->Serialize();
        std::fprintf(digests, "%s\t%016llx\n", f.filename().c_str(),
                     static_cast<unsigned long long>(XXH64(blob.data(), blob.size(), 0)));
      }
      const auto& a = (*cg)->impl().automaton;
      what = fmt::format("{} exprs, {} rules, {} units, {} states, {} table entries", g->exprs.size(), g->rules.size(),
                         a.unit_start.size(), a.num_states(), a.next.size());
      std::vector<std::pair<size_t, size_t>> sizes;  // states, unit
      for (size_t u = 0; u < a.unit_start.size(); ++u) {
        size_t end = u + 1 < a.unit_start.size() ? a.unit_start[u + 1] : a.num_states();
        sizes.push_back({end - a.unit_start[u], u});
      }
      std::sort(sizes.rbegin(), sizes.rend());
      for (size_t k = 0; k < sizes.size() && k < 3; ++k) {
        size_t u = sizes[k].second;
        what += fmt::format("; {}:{} states x {} classes", g->rules[a.unit_rule[u]].name, sizes[k].first,
                            a.num_classes[u]);
      }
    }
    rows.push_back({us, f.filename().string(), what});
  }
  if (digests) std::fclose(digests);
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.us > b.us; });
  double sum = 0;
  for (double x : all) sum += x;
  std::printf("%zu schemas compiled (automaton only, thread CPU time): mean %.1f us, p50 %.1f us, p99 %.1f us; "
              "JsonSchemaGrammar mean %.1f us\n",
              all.size(), all.empty() ? 0 : sum / all.size(), Pct(all, 50), Pct(all, 99),
              all.empty() ? 0 : front / all.size());
  const size_t show = std::getenv("LADLE_ALL_ROWS") ? rows.size() : 12;
  for (size_t i = 0; i < rows.size() && i < show; ++i) {
    std::printf("  %10.1f us  %s: %s\n", rows[i].us, rows[i].name.c_str(), rows[i].what.c_str());
  }
  return 0;
}

// --check-dir=DIR: for every MaskBench test instance (compact, own key order), the matcher's
// verdict (AcceptString + CanTerminate) against the reference recognizer over the same IR.
int CheckAgainstReference(const std::shared_ptr<const grammar::TokenVocabulary>& vocab, const std::string& dir) {
  size_t checked = 0, disagree = 0;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::FILE* fp = std::fopen(f.c_str(), "rb");
    if (!fp) continue;
    std::string text;
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, fp)) > 0;) text.append(buf, n);
    std::fclose(fp);
    auto doc = ladle::json::Parse(text);
    const ladle::json::Value* schema = doc.ok() ? doc->Find("schema") : nullptr;
    const ladle::json::Value* tests = doc.ok() ? doc->Find("tests") : nullptr;
    if (!schema || !tests || !tests->is_array()) continue;
    auto g = grammar::JsonSchemaGrammar(*schema);
    if (!g.ok()) continue;
    auto cg = grammar::CompiledGrammar::Compile(*g, vocab);
    if (!cg.ok()) continue;
    auto ref = grammar::ReferenceRecognizer::Create(*g);
    if (!ref.ok()) continue;
    for (const auto& t : tests->as_array()) {
      const ladle::json::Value* data = t.Find("data");
      if (!data) continue;
      std::string inst = ladle::json::Dump(*data, ladle::json::Style::kCompact);
      grammar::GrammarMatcher m(*cg);
      bool mine = m.AcceptString(inst) && m.CanTerminate();
      bool theirs = ref->Matches(inst);
      ++checked;
      if (mine != theirs) {
        ++disagree;
        std::printf("DISAGREE %s: matcher %d reference %d: %.200s\n", f.filename().c_str(), mine, theirs, inst.c_str());
      }
    }
  }
  std::printf("%zu instances checked, %zu disagreements\n", checked, disagree);
  return disagree ? 1 : 0;
}

int main(int argc, char** argv) {
  const std::string tok_path = Arg(argc, argv, "tokenizer", DefaultTokenizer());
  const bool eager = Arg(argc, argv, "eager", "") == "1";
  const int reps = std::atoi(Arg(argc, argv, "reps", "20").c_str());
  auto tok = ladle::tokenizer::Tokenizer::FromFile(tok_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "matcher_bench: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  auto t0 = Clock::now();
  auto vocab = grammar::TokenVocabulary::FromTokenizer(*tok, {1});
  if (!vocab.ok()) return 1;
  std::printf("vocabulary: %.1f ms (%zu ids)\n", Us(Clock::now() - t0) / 1000, (*vocab)->vocab_size());
  if (std::string dir = Arg(argc, argv, "check-dir", ""); !dir.empty()) return CheckAgainstReference(*vocab, dir);
  if (std::string dir = Arg(argc, argv, "schema-dir", ""); !dir.empty()) {
    return SchemaCompiles(*vocab, dir, std::stoul(Arg(argc, argv, "limit", "100000")),
                          Arg(argc, argv, "unit-sharing", "on") != "off");
  }

  std::vector<Case> cases = {{"json (recursive rules)", JsonGrammar(), JsonDocs()},
                             {"string-heavy (one rule)", StringHeavyGrammar(), StringDocs()}};
  std::printf("%-26s %10s %10s %9s %9s %9s %9s %9s %7s\n", "grammar", "compile_us", "1st_mask", "cold_p50",
              "cold_p99", "warm_p50", "warm_p99", "warm_p999", "tokens");
  grammar::CompileOptions copts;
  copts.eager_mask_cache = eager;
  for (const Case& c : cases) {
    // Compile time: mean over reps (the process-wide mask cache is warm after the first,
    // which is the production situation for repeated sub-automata).
    double compile_total = 0;
    std::shared_ptr<const grammar::CompiledGrammar> cg;
    for (int r = 0; r < reps; ++r) {
      double t = CpuUs();
      auto x = grammar::CompiledGrammar::Compile(c.g, *vocab, copts);
      compile_total += CpuUs() - t;
      if (!x.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name.c_str(), x.status().ToString().c_str());
        return 1;
      }
      if (r == 0) cg = *x;
    }
    std::vector<uint64_t> bits(((*vocab)->vocab_size() + 63) / 64);
    std::vector<double> cold, warm;
    double first = 0;
    size_t tokens = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (const std::string& doc : c.docs) {
        auto ids = tok->EncodePlain(doc);
        ids.push_back(1);
        grammar::GrammarMatcher m(cg);
        for (auto id : ids) {
          double t = CpuUs();
          m.FillNextTokenMask(bits.data());
          double us = CpuUs() - t;
          if (pass == 0 && cold.empty()) first = us;
          (pass == 0 ? cold : warm).push_back(us);
          if (!((bits[id >> 6] >> (id & 63)) & 1) || !m.AcceptToken(id)) {
            std::fprintf(stderr, "%s: token %u rejected in '%s'\n", c.name.c_str(), id, doc.c_str());
            return 1;
          }
          tokens += pass == 0;
        }
      }
    }
    std::printf("%-26s %10.1f %10.1f %9.1f %9.1f %9.1f %9.1f %9.1f %7zu\n", c.name.c_str(), compile_total / reps,
                first, Pct(cold, 50), Pct(cold, 99), Pct(warm, 50), Pct(warm, 99), Pct(warm, 99.9), tokens);
  }
  auto st = grammar::GetSharedMaskCacheStats();
  std::printf("shared mask cache: %zu entries, %.1f MiB, %zu hits, %zu misses\n", st.entries,
              static_cast<double>(st.bytes) / (1 << 20), st.hits, st.misses);
  return 0;
}
