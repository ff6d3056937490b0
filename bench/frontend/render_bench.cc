// Render + tokenize of a long agent conversation (the recipe's "very long requests" case):
// a synthetic DeepSeek-V3.2 conversation of about 128K tokens: system prompt with tools, then
// many rounds of reasoning, two tool calls and two long tool results each.
//
//   render_bench [--benchmark_filter=...]     tokenizer: $LADLE_TOKENIZER, else the set-up cache,
//                                             else ../shared
//
// Reported per iteration in ms, with counters: tokens, bytes, and for the full path tokens/s.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ladle/frontend/conversation.h"
#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"
#include "ladle/json/json.h"
#include "ladle/tokenizer/tokenizer.h"

#ifndef LADLE_BENCH_CACHE_DIR
#define LADLE_BENCH_CACHE_DIR ".cache"
#endif
#ifndef LADLE_BENCH_SHARED_DIR
#define LADLE_BENCH_SHARED_DIR "../shared"
#endif

namespace {

using namespace ladle;            // NOLINT
using namespace ladle::frontend;  // NOLINT

constexpr ModelVersion kVersion = ModelVersion::kV32;
constexpr size_t kTargetTokens = 128 * 1024;

// Deterministic text with the mix an agent sees: prose, identifiers, JSON, numbers and CJK.
// Most words are random syllable strings, so the tokenizer's word cache does not turn the
// benchmark into a lookup of a few dozen words.
class TextGen {
 public:
  std::string Words(size_t n) {
    static const char* kCommon[] = {"the", "result", "function", "returns", "value", "error", "file", "None",
                                    "return", "self", "import", "def", "class", "async", "await", "if", "for"};
    static const char* kSyllables[] = {"ka", "to", "ri", "men", "sal", "dor", "pe", "qua", "lin", "ex", "str",
                                       "ob", "ject", "ver", "tion", "al", "ing", "con", "fig", "pro", "ces",
                                       "sor", "buf", "fer", "han", "dle", "re", "quest", "lat", "en", "cy",
                                       "Tok", "Map", "get", "set", "_id", "_ms", "Node", "io", "zen"};
    std::string out;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = Next();
      if (i) out += (r % 17 == 0) ? "\n" : (r % 11 == 0 ? ", " : " ");
      switch (r % 10) {
        case 0:
          out += kCommon[Next() % (sizeof(kCommon) / sizeof(kCommon[0]))];
          break;
        case 1:
          out += fmt::format("{}", Next() % 1000000);
          break;
        case 2:
          out += fmt::format("\"k{}\": {}.{}", Next() % 500, Next() % 100, Next() % 10);
          break;
        case 3:
          for (uint64_t k = 0, len = 2 + Next() % 3; k < len; ++k) AppendUtf8(0x4E00 + Next() % 0x5000, &out);
          break;
        default:
          for (uint64_t k = 0, len = 1 + Next() % 4; k < len; ++k) {
            out += kSyllables[Next() % (sizeof(kSyllables) / sizeof(kSyllables[0]))];
          }
          break;
      }
    }
    return out;
  }

 private:
  static void AppendUtf8(uint32_t cp, std::string* out) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  uint64_t Next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return state_ >> 33;
  }
  uint64_t state_ = 42;
};

Tool MakeTool(const std::string& name) {
  Tool t;
  t.name = name;
  t.description = "Tool " + name + " for the agent benchmark";
  t.has_description = true;
  t.parameters = *json::Parse(
      R"({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}, "paths": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]})");
  return t;
}

Message Text(Role role, std::string text) {
  Message m;
  m.role = role;
  m.content.push_back({ContentPart::Kind::kText, std::move(text), {}});
  return m;
}

Request AgentConversation(size_t rounds) {
  TextGen gen;
  Request r;
  r.thinking.enabled = true;
  for (const char* name : {"search", "read_file", "run_tests", "edit_file", "list_dir"}) r.tools.push_back(MakeTool(name));
  r.messages.push_back(Text(Role::kSystem, "You are a coding agent. " + gen.Words(200)));
  r.messages.push_back(Text(Role::kUser, "Fix the failing test. " + gen.Words(150)));
  for (size_t i = 0; i < rounds; ++i) {
    Message a;
    a.role = Role::kAssistant;
    a.content_null = true;
    a.reasoning = gen.Words(120);
    for (int k = 0; k < 2; ++k) {
      ToolCall c;
      c.id = fmt::format("call_{}_{}", i, k);
      c.name = k == 0 ? "search" : "read_file";
      std::string query;
      json::AppendQuoted(gen.Words(6), &query);
      c.arguments = fmt::format(R"({{"query": {}, "limit": {}, "paths": ["src/a{}.cc", "src/b.cc"]}})", query,
                                10 + i, i);
      a.tool_calls.push_back(std::move(c));
    }
    r.messages.push_back(std::move(a));
    for (int k = 0; k < 2; ++k) {
      Message t = Text(Role::kTool, gen.Words(700));
      t.tool_call_id = fmt::format("call_{}_{}", i, k);
      r.messages.push_back(std::move(t));
    }
  }
  return r;
}

std::string TokenizerPath() {
  if (const char* env = std::getenv("LADLE_TOKENIZER"); env && *env) return env;
  const std::string cached = std::string(LADLE_BENCH_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
  if (std::filesystem::exists(cached)) return cached;
  return std::string(LADLE_BENCH_SHARED_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
}

struct Fixture {
  tokenizer::Tokenizer tok;
  Request request;
  size_t tokens = 0;
  size_t bytes = 0;
};

// Loads the tokenizer once and grows the conversation until it encodes to ~128K tokens. On
// failure, *error says why.
const Fixture* GetFixture(std::string* error) {
  static std::string failure;
  static const Fixture* fixture = []() -> const Fixture* {
    auto base = tokenizer::Tokenizer::FromFile(TokenizerPath());
    if (!base.ok()) {
      failure = base.status().ToString() + " (set LADLE_TOKENIZER)";
      return nullptr;
    }
    auto tok = TokenizerForVersion(*base, kVersion);
    if (!tok.ok()) {
      failure = tok.status().ToString();
      return nullptr;
    }
    auto* f = new Fixture{*tok, {}, 0, 0};
    auto measure = [&](size_t rounds) -> bool {
      f->request = AgentConversation(rounds);
      auto p = RenderPrompt(f->request, kVersion);
      if (!p.ok()) {
        failure = p.status().ToString();
        return false;
      }
      auto enc = EncodePrompt(*p, f->tok);
      if (!enc.ok()) {
        failure = enc.status().ToString();
        return false;
      }
      f->tokens = enc->ids.size();
      f->bytes = p->text.size();
      return true;
    };
    // Estimate the cost of a round from 16 of them, then take the fewest rounds reaching 128K.
    if (!measure(0)) return nullptr;
    const size_t fixed = f->tokens;
    if (!measure(16)) return nullptr;
    const size_t per_round = std::max<size_t>(1, (f->tokens - fixed) / 16);
    size_t rounds = (kTargetTokens - fixed + per_round - 1) / per_round;
    if (!measure(rounds)) return nullptr;
    while (f->tokens < kTargetTokens) {
      if (!measure(++rounds)) return nullptr;
    }
    while (rounds > 0) {
      if (!measure(rounds - 1)) return nullptr;
      if (f->tokens < kTargetTokens) break;
      --rounds;
    }
    if (!measure(rounds)) return nullptr;
    return f;
  }();
  *error = failure;
  return fixture;
}

void SetCounters(benchmark::State& state, const Fixture& f) {
  state.counters["tokens"] = static_cast<double>(f.tokens);
  state.counters["bytes"] = static_cast<double>(f.bytes);
  state.counters["turns"] = static_cast<double>(f.request.messages.size());
}

void BM_Render(benchmark::State& state) {
  std::string error;
  const Fixture* f = GetFixture(&error);
  if (f == nullptr) return state.SkipWithError(error.c_str());
  for (auto _ : state) {
    auto p = RenderPrompt(f->request, kVersion);
    benchmark::DoNotOptimize(p);
  }
  SetCounters(state, *f);
}

void BM_Encode(benchmark::State& state, size_t max_parallelism) {
  std::string error;
  const Fixture* f = GetFixture(&error);
  if (f == nullptr) return state.SkipWithError(error.c_str());
  auto p = RenderPrompt(f->request, kVersion);
  tokenizer::EncodeOptions opts;
  opts.max_parallelism = max_parallelism;
  for (auto _ : state) {
    auto enc = EncodePrompt(*p, f->tok, opts);
    benchmark::DoNotOptimize(enc);
  }
  SetCounters(state, *f);
}

void BM_RenderAndEncode(benchmark::State& state, size_t max_parallelism) {
  std::string error;
  const Fixture* f = GetFixture(&error);
  if (f == nullptr) return state.SkipWithError(error.c_str());
  tokenizer::EncodeOptions opts;
  opts.max_parallelism = max_parallelism;
  for (auto _ : state) {
    auto p = RenderPrompt(f->request, kVersion);
    auto enc = EncodePrompt(*p, f->tok, opts);
    benchmark::DoNotOptimize(enc);
  }
  SetCounters(state, *f);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(f->tokens), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Render)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, serial, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Encode, parallel, 0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_RenderAndEncode, serial, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_RenderAndEncode, parallel, 0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
