// generate_bench: the built-in model (random weights) generating under JSON-Schema masks.
//
// Two jobs, both through the real engine (engine::CreateEngine + the MaskProvider hook):
//   1. End-to-end sample (tests/e2e/schema_sample_run.sh): a deterministic sample of MaskBench
//      schemas that compile, one request each, written as JSONL
//      {"id","subset","schema","output","finish","forced","max_tokens","tokens","token_ids",
//       "approximations"}
//      for an independent validator (ajv) to check. With random weights the model wanders
//      everywhere the mask lets it, so this exercises the grammar far from the happy path.
//   2. Mask overhead (--compare): the same requests with and without the masks; prints
//      tokens/s for both and their ratio.
//
//   generate_bench --replay=FILE.jsonl --id=NAME   (per-step budget trace of one output)
//   generate_bench [--schemas=N] [--out=FILE] [--compare] [--max-tokens=N] [--concurrency=N]
//                  [--data-dir=DIR | --archive=PATH --unpack-dir=DIR] [--tokenizer=PATH]
//                  [--subset=A,B] [--seed=N] [--temperature=T]
//
// max_tokens per request is max(--max-tokens, the grammar's shortest completion + 8), capped
// at --max-tokens-cap: a schema whose shortest document is long still gets room to close, and
// budget-aware completion (on by default) must close every document within it. The mask
// adapter here is deliberately minimal (one matcher per request, n = 1); the server's own
// adapter lives in src/structured.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ladle/core/thread_pool.h"
#include "ladle/engine/engine.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"
#include "ladle/json/json.h"
#include "ladle/tokenizer/tokenizer.h"
#include "maskbench_data.h"

namespace {

namespace engine = ladle::engine;
namespace grammar = ladle::grammar;
namespace json = ladle::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kEos = 1;
constexpr size_t kVocab = 129280;

// One matcher per request. The engine calls FillMask on its mask pool or device thread and
// Accept on the device thread, never two at once for one request; the counters are read only
// after the engine has shut down.
class SchemaMask : public engine::MaskProvider {
 public:
  SchemaMask(std::shared_ptr<const grammar::CompiledGrammar> g, uint32_t max_tokens)
      : m_(std::move(g)), max_tokens_(max_tokens) {}
  void FillMask(int, uint64_t* bits, size_t) override {
    const auto t0 = Clock::now();
    m_.SetRemainingTokens(max_tokens_ > accepted_ ? max_tokens_ - accepted_ : 0);
    m_.FillNextTokenMask(bits);
    mask_ns_ += (Clock::now() - t0).count();
    ++masks_;
  }
  void Accept(int, engine::TokenId token) override {
    // After EOS the engine may still have one overlapped step in flight; its token is discarded.
    if (m_.IsTerminated()) return;
    if (m_.AcceptToken(token)) ++accepted_;
    else ++refused_;
  }
  bool forced() const { return m_.ForcedByBudget(); }
  uint32_t refused() const { return refused_; }
  double mask_ns() const { return mask_ns_; }
  uint64_t masks() const { return masks_; }

 private:
  grammar::GrammarMatcher m_;
  uint32_t max_tokens_;
  uint32_t accepted_ = 0, refused_ = 0;
  double mask_ns_ = 0;
  uint64_t masks_ = 0;
};

struct Item {
  ladle::bench::SchemaFile file;
  std::string schema_json;  // compact
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::vector<grammar::Approximation> approximations;
  uint32_t max_tokens = 0;
  // results
  std::string output;
  engine::FinishKind finish = engine::FinishKind::kError;
  std::string error;
  size_t tokens = 0;
  std::vector<uint32_t> token_ids;  // as sampled (for reproducing a failure with a matcher)
  std::shared_ptr<SchemaMask> mask;
};

const char* FinishName(engine::FinishKind k) {
  switch (k) {
    case engine::FinishKind::kEos: return "eos";
    case engine::FinishKind::kStopString: return "stop";
    case engine::FinishKind::kStopToken: return "stop_token";
    case engine::FinishKind::kLength: return "length";
    case engine::FinishKind::kCancelled: return "cancelled";
    case engine::FinishKind::kError: return "error";
  }
  return "?";
}

// --replay: re-drives one recorded output's token ids through a fresh matcher with the same
// budget and prints, per step, the remaining budget, the shortest completion and whether the
// token was allowed: the reproduction to hand to whoever owns the runtime.
int Replay(const std::string& path, const std::string& id, const ladle::tokenizer::Tokenizer& tok,
           std::shared_ptr<const grammar::TokenVocabulary> vocab, uint32_t compile_ms) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto rec = json::Parse(line);
    if (!rec.ok() || !rec->Find("id") || rec->Find("id")->as_string() != id) continue;
    grammar::CompileOptions copts;
    copts.max_compile_ms = compile_ms;
    auto g = grammar::JsonSchemaGrammar(*rec->Find("schema"));
    if (!g.ok()) return std::fprintf(stderr, "%s\n", g.status().ToString().c_str()), 1;
    auto cg = grammar::CompiledGrammar::Compile(*g, vocab, copts);
    if (!cg.ok()) return std::fprintf(stderr, "%s\n", cg.status().ToString().c_str()), 1;
    const auto max_tokens = static_cast<uint32_t>(rec->Find("max_tokens")->as_int64().value());
    grammar::GrammarMatcher m(*cg);
    std::vector<uint64_t> bits(kVocab / 64 + 1);
    uint32_t k = 0;
    for (const auto& t : rec->Find("token_ids")->as_array()) {
      const auto tid = static_cast<uint32_t>(t.as_int64().value());
      const uint32_t shortest_before = m.ShortestCompletionTokens();
      m.SetRemainingTokens(max_tokens - k);
      m.FillNextTokenMask(bits.data());
      const bool allowed = (bits[tid >> 6] >> (tid & 63)) & 1;
      size_t n_allowed = 0;
      for (uint64_t w : bits) n_allowed += static_cast<size_t>(__builtin_popcountll(w));
      auto piece = tok.Decode(std::span<const uint32_t>(&tid, 1));
      std::printf("%3u remaining %3u shortest %3u allowed-tokens %6zu token %6u %-12s %s%s\n", k, max_tokens - k,
                  shortest_before, n_allowed, tid, fmt::format("{:?}", piece.ok() ? *piece : "?").c_str(),
                  allowed ? "" : "NOT ALLOWED ", m.ForcedByBudget() ? "(forced so far)" : "");
      if (!allowed || !m.AcceptToken(tid)) return 1;
      ++k;
    }
    std::printf("end: can terminate %d, shortest %u\n", m.CanTerminate(), m.ShortestCompletionTokens());
    return 0;
  }
  std::fprintf(stderr, "generate_bench: %s not in %s\n", id.c_str(), path.c_str());
  return 1;
}

struct RunStats {
  double wall_s = 0;
  uint64_t tokens = 0;
};

// Submits every item (masked or not) and waits for all; outputs land in the items.
ladle::Result<RunStats> Run(std::vector<Item>& items, const ladle::tokenizer::Tokenizer& tok, int concurrency,
                            bool masked, uint64_t seed, float temperature, bool serial_masks) {
  engine::EngineConfig ec;
  ec.overlap_masks = !serial_masks;
  ec.max_running = concurrency;
  ec.num_blocks = std::max(64, concurrency * 8);
  ec.chunk_policy = "fixed";  // no cost-model profiling at start-up
  ec.chunk_tokens = 512;
  LADLE_ASSIGN_OR_RETURN(auto model, engine::Model::Create(engine::ModelConfig{}, ""));
  LADLE_ASSIGN_OR_RETURN(auto eng, engine::CreateEngine(ec, std::move(model), tok));
  const std::vector<uint32_t> prompt = tok.EncodePlain("Reply with one JSON document that matches the schema.");
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    it.output.clear();
    it.tokens = 0;
    it.token_ids.clear();
    engine::SubmitRequest req;
    req.prompt = prompt;
    req.sampling.temperature = temperature;
    req.sampling.seed = seed + i;
    req.sampling.max_tokens = static_cast<int>(it.max_tokens);
    if (masked) {
      it.mask = std::make_shared<SchemaMask>(it.grammar, it.max_tokens);
      req.mask = it.mask;
    } else {
      it.mask.reset();
    }
    // Submit blocks nothing; a full queue would be kResourceExhausted, so the queue is sized
    // by the caller (max_queue 1024 > any sample here).
    auto id = eng->Submit(std::move(req), [&, i](const engine::Output& o) {
      Item& x = items[i];
      std::lock_guard lk(mu);
      for (const auto& ev : o.tokens) {
        ++x.tokens;
        x.token_ids.push_back(ev.token);
      }
      if (o.finished) {
        // The engine sends ids only; the text is theirs without the EOS or stop token.
        std::span<const uint32_t> ids(x.token_ids);
        if (!ids.empty() && (o.finish == engine::FinishKind::kEos || o.finish == engine::FinishKind::kStopToken))
          ids = ids.first(ids.size() - 1);
        auto text = tok.Decode(ids);
        x.output = text.ok() ? std::move(text).value() : std::string();
        x.finish = o.finish;
        x.error = o.error;
        ++done;
        cv.notify_all();
      }
    });
    if (!id.ok()) return id.status();
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done == items.size(); });
  }
  RunStats rs;
  rs.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  rs.tokens = eng->GetStats().generated_tokens;
  eng->Shutdown();
  return rs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"generate_bench: the built-in model generating under JSON-Schema masks"};
  size_t schemas = 500;
  std::string out_path, data_dir, archive = ladle::bench::DefaultArchive(),
                                  unpack_dir = ladle::bench::DefaultUnpackDir(),
                                  tokenizer_path = ladle::bench::DefaultTokenizer(), subsets;
  bool compare = false, serial_masks = false;
  uint32_t max_tokens = 48, max_tokens_cap = 384, compile_ms = 2000;
  int concurrency = 64;
  uint64_t seed = 1;
  float temperature = 1.0f;
  app.add_option("--schemas", schemas, "compiled schemas in the sample");
  app.add_option("--out", out_path, "JSONL output (one line per schema)");
  app.add_flag("--compare", compare, "also run the same requests unmasked and print the tokens/s ratio");
  app.add_flag("--serial-masks", serial_masks,
               "fill masks one after another on the device thread after the forward (EngineConfig::overlap_masks off)");
  app.add_option("--max-tokens", max_tokens, "max_tokens per request (raised to shortest completion + 8)");
  app.add_option("--max-tokens-cap", max_tokens_cap, "upper bound of the raised max_tokens");
  app.add_option("--concurrency", concurrency, "engine batch (max running requests)");
  app.add_option("--compile-ms", compile_ms, "CompileOptions::max_compile_ms (wall clock)");
  std::string replay, replay_id;
  app.add_option("--replay", replay, "re-drive a recorded output of this JSONL (with --id) through a matcher");
  app.add_option("--id", replay_id, "the record --replay re-drives");
  app.add_option("--data-dir", data_dir, "unpacked maskbench/data directory");
  app.add_option("--archive", archive, "maskbench-dev.tar.zst");
  app.add_option("--unpack-dir", unpack_dir, "where to unpack the archive");
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json");
  app.add_option("--subset", subsets, "comma-separated subsets (default all)");
  app.add_option("--seed", seed, "first request seed");
  app.add_option("--temperature", temperature, "sampling temperature");
  CLI11_PARSE(app, argc, argv);

  if (data_dir.empty() && !ladle::bench::EnsureUnpacked(archive, unpack_dir, &data_dir)) return 1;
  auto tok = ladle::tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "generate_bench: tokenizer %s: %s\n", tokenizer_path.c_str(), tok.status().ToString().c_str());
    return 1;
  }
  auto vocab = grammar::TokenVocabulary::FromTokenizer(*tok, {kEos}, kVocab);
  if (!vocab.ok()) {
    std::fprintf(stderr, "generate_bench: vocabulary: %s\n", vocab.status().ToString().c_str());
    return 1;
  }

  if (!replay.empty()) return Replay(replay, replay_id, *tok, *vocab, compile_ms);

  // The sample: files in hash order, the first `schemas` that compile. Compiles run in
  // parallel (chunks of files over the shared pool) and are then taken in hash order, so the
  // sample is the same whatever the thread count; only a schema whose compile time sits at
  // the wall-clock budget can fall either way.
  auto files = ladle::bench::ListSchemaFiles(data_dir, ladle::bench::SplitComma(subsets));
  ladle::bench::SortBySampleOrder(&files);
  grammar::CompileOptions copts;
  copts.max_compile_ms = compile_ms;
  std::vector<Item> items;
  size_t tried = 0, compile_errors = 0, too_long = 0;
  const auto c0 = Clock::now();
  for (size_t begin = 0; begin < files.size() && items.size() < schemas;) {
    const size_t want = schemas - items.size();
    const size_t n = std::min(files.size() - begin, want + want / 4 + 8);
    std::vector<std::optional<Item>> chunk(n);
    std::vector<char> failed(n, 0), long_doc(n, 0);
    ladle::SharedPool().ParallelFor(n, [&](size_t k) {
      const auto& f = files[begin + k];
      std::string text;
      if (!ladle::bench::ReadFile(f.path, &text)) return;
      auto doc = json::Parse(text);
      const json::Value* schema = doc.ok() ? doc->Find("schema") : nullptr;
      if (!schema) return;
      grammar::CompileReport report;
      auto g = grammar::JsonSchemaGrammar(*schema, {}, &report);
      auto cg = g.ok() ? grammar::CompiledGrammar::Compile(*g, *vocab, copts)
                       : ladle::Result<std::shared_ptr<const grammar::CompiledGrammar>>(g.status());
      if (!cg.ok()) {
        failed[k] = 1;
        return;
      }
      Item it;
      it.file = f;
      it.schema_json = json::Dump(*schema, json::Style::kCompact);
      it.grammar = *cg;
      it.approximations = std::move(report.approximations);
      grammar::GrammarMatcher probe(it.grammar);
      // A schema whose shortest document does not fit under the cap cannot be completed by
      // any engine within it: it is counted apart, not sampled (and not hidden).
      if (probe.ShortestCompletionTokens() + 8 > max_tokens_cap) {
        long_doc[k] = 1;
        return;
      }
      it.max_tokens = std::min(max_tokens_cap, std::max(max_tokens, probe.ShortestCompletionTokens() + 8));
      chunk[k] = std::move(it);
    });
    for (size_t k = 0; k < n && items.size() < schemas; ++k) {
      ++tried;
      compile_errors += failed[k];
      too_long += long_doc[k];
      if (chunk[k]) items.push_back(std::move(*chunk[k]));
    }
    begin += n;
  }
  const double compile_s = std::chrono::duration<double>(Clock::now() - c0).count();
  std::fprintf(stderr, "generate_bench: %zu schemas compiled of %zu tried (%zu compile errors) in %.1f s\n",
               items.size(), tried, compile_errors, compile_s);
  if (too_long) {
    std::fprintf(stderr, "generate_bench: %zu schemas skipped: shortest completion + 8 exceeds --max-tokens-cap %u\n",
                 too_long, max_tokens_cap);
  }
  if (items.empty()) return 1;

  RunStats unmasked;
  if (compare) {
    auto r = Run(items, *tok, concurrency, /*masked=*/false, seed, temperature, serial_masks);
    if (!r.ok()) {
      std::fprintf(stderr, "generate_bench: %s\n", r.status().ToString().c_str());
      return 1;
    }
    unmasked = *r;
  }
  auto masked = Run(items, *tok, concurrency, /*masked=*/true, seed, temperature, serial_masks);
  if (!masked.ok()) {
    std::fprintf(stderr, "generate_bench: %s\n", masked.status().ToString().c_str());
    return 1;
  }

  size_t forced = 0, refused = 0, by_finish[6] = {};
  double mask_ns = 0;
  uint64_t masks = 0;
  for (const auto& it : items) {
    forced += it.mask->forced();
    refused += it.mask->refused();
    mask_ns += it.mask->mask_ns();
    masks += it.mask->masks();
    ++by_finish[static_cast<int>(it.finish)];
  }
  std::printf("generate_bench: %zu requests (concurrency %d), %llu tokens in %.1f s = %.1f tokens/s with masks; "
              "finish eos %zu, length %zu, error %zu; forced by budget %zu; mask mean %.1f µs over %llu masks; "
              "tokens the matcher refused after sampling %zu\n",
              items.size(), concurrency, static_cast<unsigned long long>(masked->tokens), masked->wall_s,
              masked->tokens / masked->wall_s, by_finish[static_cast<int>(engine::FinishKind::kEos)],
              by_finish[static_cast<int>(engine::FinishKind::kLength)],
              by_finish[static_cast<int>(engine::FinishKind::kError)], forced, masks ? mask_ns / masks / 1e3 : 0.0,
              static_cast<unsigned long long>(masks), refused);
  if (compare) {
    const double a = unmasked.tokens / unmasked.wall_s, b = masked->tokens / masked->wall_s;
    std::printf("generate_bench: without masks %llu tokens in %.1f s = %.1f tokens/s; with/without = %.3f "
                "(mask overhead %.1f%%)\n",
                static_cast<unsigned long long>(unmasked.tokens), unmasked.wall_s, a, b / a, 100 * (1 - b / a));
  }

  if (!out_path.empty()) {
    std::ofstream out(out_path);
    for (const auto& it : items) {
      json::Value o = json::Value::MakeObject();
      o.Set("id", json::Value::String(it.file.name));
      o.Set("subset", json::Value::String(it.file.subset));
      auto schema = json::Parse(it.schema_json);
      o.Set("schema", schema.ok() ? std::move(*schema) : json::Value());
      o.Set("output", json::Value::String(it.output));
      o.Set("finish", json::Value::String(FinishName(it.finish)));
      if (!it.error.empty()) o.Set("error", json::Value::String(it.error));
      o.Set("forced", json::Value::Bool(it.mask->forced()));
      o.Set("max_tokens", json::Value::Int(it.max_tokens));
      o.Set("tokens", json::Value::Int(static_cast<int64_t>(it.tokens)));
      json::Value ids = json::Value::MakeArray();
      for (uint32_t t : it.token_ids) ids.as_array().push_back(json::Value::Int(t));
      o.Set("token_ids", std::move(ids));
      json::Value approx = json::Value::MakeArray();
      for (const auto& a : it.approximations) {
        json::Value x = json::Value::MakeObject();
        x.Set("path", json::Value::String(a.path));
        x.Set("what", json::Value::String(a.what));
        approx.as_array().push_back(std::move(x));
      }
      o.Set("approximations", std::move(approx));
      out << json::Dump(o, json::Style::kCompact) << "\n";
    }
    if (!out) {
      std::fprintf(stderr, "generate_bench: cannot write %s\n", out_path.c_str());
      return 1;
    }
  }
  return 0;
}
