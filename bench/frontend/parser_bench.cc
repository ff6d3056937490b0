// Streaming output parser throughput: ns per token and MB/s of decoded output for one long
// response — reasoning, an answer, then a tool call with a long string argument (a file's
// contents) — per version's syntax, fed the way an engine does (one id per Push) and in
// larger chunks.
//
//   build-bench/bench/frontend/parser_bench [--benchmark_filter=...]
//
// Text comes from <cache>/corpus/english_prose.txt and chinese.txt when present (set-up
// cache), else from a built-in paragraph; the tokenizer as in the other benchmarks
// ($LADLE_TOKENIZER, else <cache>/..., else <shared>/...).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ladle/frontend/model_version.h"
#include "ladle/frontend/output_parser.h"
#include "ladle/tokenizer/tokenizer.h"

#ifndef LADLE_BENCH_CACHE_DIR
#define LADLE_BENCH_CACHE_DIR ".cache"
#endif
#ifndef LADLE_BENCH_SHARED_DIR
#define LADLE_BENCH_SHARED_DIR "../shared"
#endif

namespace {

using ladle::frontend::FinishReason;
using ladle::frontend::ModelVersion;
using ladle::frontend::StreamParser;
using ladle::tokenizer::TokenId;
using ladle::tokenizer::Tokenizer;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const Tokenizer* Base() {
  static std::unique_ptr<Tokenizer> tok = [] {
    std::vector<std::string> paths;
    if (const char* e = std::getenv("LADLE_TOKENIZER")) paths.push_back(e);
    paths.push_back(std::string(LADLE_BENCH_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json");
    paths.push_back(std::string(LADLE_BENCH_SHARED_DIR) + "/tokenizers/deepseek-v3/tokenizer.json");
    for (const auto& p : paths) {
      auto t = Tokenizer::FromFile(p);
      if (t.ok()) return std::make_unique<Tokenizer>(std::move(t).value());
    }
    return std::unique_ptr<Tokenizer>();
  }();
  return tok.get();
}

// About `bytes` of prose: the corpus when the set-up cache has it, else a fixed paragraph.
std::string Prose(size_t bytes, const char* file) {
  std::string src = ReadFile(std::string(LADLE_BENCH_CACHE_DIR) + "/corpus/" + file);
  if (src.empty()) {
    src = "The parser reads tokens as the engine produces them and sorts them into reasoning, "
          "answer text and tool calls; \"quotes\", back\\slashes and <angle> brackets appear too. "
          "混合的中文文本也会出现。\n";
  }
  std::string out;
  while (out.size() < bytes) out += src;
  out.resize(bytes);
  // Cut back to a whole code point.
  while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
  if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
  return out;
}

struct Stream {
  ModelVersion version;
  std::unique_ptr<Tokenizer> tok;
  std::vector<TokenId> ids;
  size_t bytes = 0;
};

// ~60 KB reasoning, ~15 KB answer, one call carrying a ~60 KB string argument.
const Stream& StreamFor(ModelVersion v) {
  static std::map<ModelVersion, std::unique_ptr<Stream>> cache;
  auto& s = cache[v];
  if (s) return *s;
  s = std::make_unique<Stream>();
  s->version = v;
  auto view = ladle::frontend::TokenizerForVersion(*Base(), v);
  s->tok = std::make_unique<Tokenizer>(std::move(view).value());
  const std::string reasoning = Prose(40000, "english_prose.txt") + Prose(20000, "chinese.txt");
  const std::string answer = Prose(15000, "english_prose.txt");
  const std::string file = Prose(60000, "english_prose.txt");
  std::string call;
  if (v == ModelVersion::kV32 || v == ModelVersion::kV4) {
    const char* wrap = v == ModelVersion::kV32 ? "function_calls" : "tool_calls";
    call = std::string("\n\n<｜DSML｜") + wrap + ">\n<｜DSML｜invoke name=\"write_file\">\n" +
           "<｜DSML｜parameter name=\"path\" string=\"true\">notes/out.md</｜DSML｜parameter>\n" +
           "<｜DSML｜parameter name=\"content\" string=\"true\">";
    // The argument text is what the model writes: plain, never markup (encoded plain below).
  } else if (v == ModelVersion::kV31) {
    call = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{\"path\": \"notes/out.md\", \"content\": \"";
  } else {
    call = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>write_file\n```json\n{\"path\": "
           "\"notes/out.md\", \"content\": \"";
  }
  std::string tail;
  if (v == ModelVersion::kV32 || v == ModelVersion::kV4) {
    tail = std::string("</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜") +
           (v == ModelVersion::kV32 ? "function_calls" : "tool_calls") + ">";
  } else if (v == ModelVersion::kV31) {
    tail = "\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  } else {
    tail = "\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  }
  // JSON formats need the file escaped; DSML carries it verbatim.
  std::string body = file;
  if (!(v == ModelVersion::kV32 || v == ModelVersion::kV4)) {
    std::string esc;
    for (char c : file) {
      if (c == '"' || c == '\\') esc.push_back('\\');
      if (c == '\n') {
        esc += "\\n";
        continue;
      }
      esc.push_back(c);
    }
    body = esc;
  }
  auto add = [&](const std::vector<TokenId>& part) { s->ids.insert(s->ids.end(), part.begin(), part.end()); };
  add(s->tok->EncodePlain(reasoning));
  add(s->tok->EncodeTrusted("</think>"));
  add(s->tok->EncodePlain(answer));
  add(s->tok->EncodeTrusted(call));
  add(s->tok->EncodePlain(body));
  add(s->tok->EncodeTrusted(tail));
  s->bytes = s->tok->Decode(s->ids)->size();
  return *s;
}

void BM_Parse(benchmark::State& state, ModelVersion v) {
  if (!Base()) {
    state.SkipWithError("no tokenizer (set LADLE_TOKENIZER)");
    return;
  }
  const Stream& s = StreamFor(v);
  const size_t chunk = static_cast<size_t>(state.range(0));
  size_t events = 0, calls = 0;
  for (auto _ : state) {
    auto p = StreamParser::Create(v, *s.tok, true);
    if (!p.ok()) {
      state.SkipWithError(p.status().ToString().c_str());
      return;
    }
    const std::span<const TokenId> all(s.ids);
    for (size_t at = 0; at < all.size(); at += chunk) {
      auto ev = p->Push(all.subspan(at, std::min(chunk, all.size() - at)));
      events += ev.size();
      benchmark::DoNotOptimize(ev.data());
    }
    auto fin = p->Finish(FinishReason::kStop);
    calls += fin.back().finish == FinishReason::kToolCalls;
    events += fin.size();
  }
  if (calls != static_cast<size_t>(state.iterations())) state.SkipWithError("the tool call did not parse");
  state.SetBytesProcessed(static_cast<int64_t>(s.bytes) * state.iterations());
  state.counters["tokens"] = static_cast<double>(s.ids.size());
  // Tokens per second, inverted: seconds per token (printed with an SI prefix, e.g. "95ns").
  state.counters["time_per_token"] = benchmark::Counter(static_cast<double>(s.ids.size()),
                                                      benchmark::Counter::kIsIterationInvariantRate |
                                                          benchmark::Counter::kInvert);
  state.counters["events_per_iter"] = static_cast<double>(events) / static_cast<double>(state.iterations());
}

}  // namespace

BENCHMARK_CAPTURE(BM_Parse, v3, ModelVersion::kV3)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Parse, v3_1, ModelVersion::kV31)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Parse, v3_2_dsml_text, ModelVersion::kV32)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Parse, v4_dsml_token, ModelVersion::kV4)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
