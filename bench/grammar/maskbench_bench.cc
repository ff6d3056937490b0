// maskbench_bench: the MaskBench table of issue 4 — schema coverage, correctness on the test
// instances, compile time and per-token mask time — on the DeepSeek vocabulary, one core.
//
//   maskbench_bench [flags]
//     --archive=PATH     maskbench-dev.tar.zst (default $LADLE_SHARED/jsonschemabench/...)
//     --data-dir=DIR     an unpacked maskbench/data directory (skips unpacking)
//     --unpack-dir=DIR   where the archive is unpacked (default $LADLE_CACHE/maskbench-dev)
//     --tokenizer=PATH   tokenizer.json (default $LADLE_TOKENIZER, the set-up cache, ../shared)
//     --subset=A,B       only these subsets (names as printed in the table)
//     --limit=N          at most N schemas per subset (the first by file name)
//     --sample=N         a deterministic sample of N schemas over the chosen subsets (the N
//                        smallest name hashes, so the same files every run and roughly
//                        proportional per subset)
//     --json=PATH        machine-readable results      --svg=PATH   mask-time percentile plot
//     --cpu=N            pin to this CPU (default: the one we start on); --no-pin to not pin
//     --schema-seconds=S stop driving a schema's instances after S seconds (default 60)
//     --eager            CompileOptions::eager_mask_cache (compile time then includes masks)
//     --no-unit-sharing  CompileOptions::share_unit_dfas = false: every schema builds all its
//                        unit DFAs, as the first compile in a fresh process would
//     --clock=wall|cpu   which clock the per-subset table and the SVG show (default wall);
//                        both are always measured (thread CPU time: CLOCK_THREAD_CPUTIME_ID,
//                        what an idle core would show when the machine is shared)
//     --compile-ms=N     CompileOptions::max_compile_ms (default 2000, the production budget; a
//                        wall-clock budget, so raise it on a loaded machine)
//     --canonical-order  reorder instance keys by the document-wide rule of docs/json_schema.md
//                        (it misorders objects whose keys other subschemas rank differently,
//                        e.g. BFCL's anyOf of functions, so it is off by default)
//     --failures=N       print up to N wrong verdicts / compile errors on stderr (default 20)
//     --per-schema=PATH  one TSV line per schema: subset, name, compile CPU ms (or the error),
//                        its memory (KiB, after the run), tokens driven, mask CPU µs total and max
//     --slow-masks=PATH  one TSV line per mask of at least --slow-us CPU µs (default 1000):
//                        subset, name, instance, token index, CPU µs, the 40 bytes before it
//
// Per schema: JsonSchemaGrammar + CompiledGrammar::Compile (timed together: "compile"). Per
// test instance: the compact serialisation in the instance's own key order (upstream already put
// valid instances in the schema's `properties` order; llguidance feeds them as they are) —
// or, with --canonical-order, keys reordered by docs/json_schema.md's document-wide rule
// (CanonicalOrder in maskbench_data.h) — tokenized with EncodePlain, then
// driven token by token: FillNextTokenMask (timed: one "mask" sample per call), check the
// token's bit, AcceptToken. Accepted iff every token's bit was set and, at the end, the EOS
// bit. The final EOS mask is timed too (a real decoder computes it). A schema "passes" when
// it compiles and every one of its instances gets the right verdict (llguidance's
// definition in the MaskBench README). Progress goes to stderr, the table to stdout.
#include <fmt/format.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"
#include "ladle/json/json.h"
#include "ladle/tokenizer/tokenizer.h"
#include "maskbench_data.h"
#include "maskbench_report.h"

namespace {

namespace fs = std::filesystem;
namespace grammar = ladle::grammar;
namespace json = ladle::json;
using Clock = std::chrono::steady_clock;
using ladle::bench::SubsetStats;

constexpr uint32_t kEos = 1;
constexpr size_t kVocab = 129280;

struct Config {
  std::string archive, data_dir, unpack_dir, tokenizer;
  std::vector<std::string> subsets;
  size_t limit = 0, sample = 0;
  std::string json_out, svg_out, per_schema, slow_masks;
  double slow_us = 1000;
  bool share_units = true;
  int cpu = -1;
  bool pin = true, eager = false, cpu_clock = false, canonical_order = false;
  double schema_seconds = 60;
  int failures = 20;
  uint32_t compile_ms = 2000;
};

bool ParseFlags(int argc, char** argv, Config* c) {
  c->archive = ladle::bench::DefaultArchive();
  c->unpack_dir = ladle::bench::DefaultUnpackDir();
  c->tokenizer = ladle::bench::DefaultTokenizer();
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto val = [&](std::string_view name, std::string* out) {
      if (a.substr(0, name.size()) != name) return false;
      if (a.size() > name.size() && a[name.size()] == '=') {
        *out = std::string(a.substr(name.size() + 1));
        return true;
      }
      if (a.size() == name.size() && i + 1 < argc) {
        *out = argv[++i];
        return true;
      }
      return false;
    };
    std::string v;
    if (val("--archive", &v)) c->archive = v;
    else if (val("--data-dir", &v)) c->data_dir = v;
    else if (val("--unpack-dir", &v)) c->unpack_dir = v;
    else if (val("--tokenizer", &v)) c->tokenizer = v;
    else if (val("--subset", &v)) c->subsets = ladle::bench::SplitComma(v);
    else if (val("--limit", &v)) c->limit = std::stoul(v);
    else if (val("--sample", &v)) c->sample = std::stoul(v);
    else if (val("--json", &v)) c->json_out = v;
    else if (val("--svg", &v)) c->svg_out = v;
    else if (val("--per-schema", &v)) c->per_schema = v;
    else if (val("--slow-masks", &v)) c->slow_masks = v;
    else if (val("--slow-us", &v)) c->slow_us = std::stod(v);
    else if (val("--cpu", &v)) c->cpu = std::stoi(v);
    else if (val("--schema-seconds", &v)) c->schema_seconds = std::stod(v);
    else if (val("--failures", &v)) c->failures = std::stoi(v);
    else if (val("--compile-ms", &v)) c->compile_ms = static_cast<uint32_t>(std::stoul(v));
    else if (val("--clock", &v)) {
      if (v != "wall" && v != "cpu") {
        std::fprintf(stderr, "maskbench_bench: --clock is wall or cpu\n");
        return false;
      }
      c->cpu_clock = v == "cpu";
    } else if (a == "--no-pin") c->pin = false;
    else if (a == "--canonical-order") c->canonical_order = true;
    else if (a == "--eager") c->eager = true;
    else if (a == "--no-unit-sharing") c->share_units = false;
    else if (a == "-h" || a == "--help") {
      std::fprintf(stderr, "see the comment at the top of bench/grammar/maskbench_bench.cc\n");
      std::exit(0);
    } else {
      std::fprintf(stderr, "maskbench_bench: unknown flag %s\n", argv[i]);
      return false;
    }
  }
  return true;
}

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

uint32_t Clamp32(int64_t ns) { return static_cast<uint32_t>(std::clamp<int64_t>(ns, 0, UINT32_MAX)); }

void PinToOneCore(const Config& c) {
  if (!c.pin) return;
  int cpu = c.cpu >= 0 ? c.cpu : sched_getcpu();
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::perror("maskbench_bench: sched_setaffinity");
  } else {
    std::fprintf(stderr, "maskbench_bench: pinned to CPU %d\n", cpu);
  }
}

// First line of a status message, shortened: the key the compile-error histogram groups by
// (JSON paths differ per schema, so only the part before the path-ish tail is kept).
std::string ErrorKey(const ladle::Status& s) {
  std::string m = s.message();
  if (size_t nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  // Paths look like "/properties/x/..." or "at /..."; cut at the first " /" or ": /".
  for (std::string_view cut : {std::string_view(" at /"), std::string_view(": /"), std::string_view(" /")}) {
    if (size_t p = m.find(cut); p != std::string::npos) {
      // keep what follows the path's last component when the message continues after it
      size_t after = m.find(' ', p + cut.size());
      std::string tail = after == std::string::npos ? "" : m.substr(after);
      m = m.substr(0, p) + " <path>" + tail;
      break;
    }
  }
  if (m.size() > 90) m = m.substr(0, 87) + "...";
  return std::string(ladle::StatusCodeName(s.code())) + ": " + m;
}

std::string Shorten(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  return std::string(s.substr(0, n)) + "...";
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  if (!ParseFlags(argc, argv, &cfg)) return 2;
  std::string data_dir = cfg.data_dir;
  if (data_dir.empty() && !ladle::bench::EnsureUnpacked(cfg.archive, cfg.unpack_dir, &data_dir)) return 1;

  auto tok = ladle::tokenizer::Tokenizer::FromFile(cfg.tokenizer);
  if (!tok.ok()) {
    std::fprintf(stderr, "maskbench_bench: tokenizer %s: %s\n", cfg.tokenizer.c_str(),
                 tok.status().ToString().c_str());
    return 1;
  }
  auto vocab = grammar::TokenVocabulary::FromTokenizer(*tok, {kEos}, kVocab);
  if (!vocab.ok()) {
    std::fprintf(stderr, "maskbench_bench: vocabulary: %s\n", vocab.status().ToString().c_str());
    return 1;
  }

  // The schema files, filtered and sampled.
  std::vector<ladle::bench::SchemaFile> files = ladle::bench::ListSchemaFiles(data_dir, cfg.subsets);
  if (cfg.limit > 0) {
    std::map<std::string, size_t> taken;
    std::erase_if(files, [&](const auto& f) { return ++taken[f.subset] > cfg.limit; });
  }
  if (cfg.sample > 0 && cfg.sample < files.size()) {
    ladle::bench::SortBySampleOrder(&files);
    files.resize(cfg.sample);
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) {
    std::fprintf(stderr, "maskbench_bench: no schema files selected in %s\n", data_dir.c_str());
    return 1;
  }
  std::fprintf(stderr, "maskbench_bench: %zu schemas from %s\n", files.size(), data_dir.c_str());

  PinToOneCore(cfg);

  std::map<std::string, SubsetStats> by_subset;
  std::map<std::string, size_t> error_hist;
  std::vector<std::string> failure_lines;
  std::vector<uint64_t> mask(kVocab / 64 + 1);
  grammar::JsonSchemaOptions schema_opts;  // defaults: bounded whitespace, spec-conformant
  grammar::CompileOptions compile_opts;
  compile_opts.eager_mask_cache = cfg.eager;
  compile_opts.share_unit_dfas = cfg.share_units;
  compile_opts.max_compile_ms = cfg.compile_ms;
  const auto run_start = Clock::now();
  std::FILE* per_schema = cfg.per_schema.empty() ? nullptr : std::fopen(cfg.per_schema.c_str(), "w");
  std::FILE* slow = cfg.slow_masks.empty() ? nullptr : std::fopen(cfg.slow_masks.c_str(), "w");
  if (slow) std::fputs("subset\tname\tinstance\ttoken\tmask_cpu_us\tbefore\n", slow);
  if (per_schema) std::fputs("subset\tname\tcompile_cpu_ms\tkib\ttokens\tmask_cpu_us_total\tmask_cpu_us_max\n", per_schema);
  int printed_failures = 0;
  auto note_failure = [&](std::string line) {
    if (printed_failures++ < cfg.failures) std::fprintf(stderr, "  %s\n", line.c_str());
    if (failure_lines.size() < 500) failure_lines.push_back(std::move(line));
  };

  for (size_t fi = 0; fi < files.size(); ++fi) {
    if (fi > 0 && fi % 250 == 0) {
      const double el = std::chrono::duration<double>(Clock::now() - run_start).count();
      std::fprintf(stderr, "maskbench_bench: %zu/%zu schemas, %.0f s\n", fi, files.size(), el);
    }
    const std::string& subset = files[fi].subset;
    const std::string& name = files[fi].name;
    SubsetStats& st = by_subset[subset];
    st.name = subset;
    ++st.schemas;
    std::string text;
    if (!ladle::bench::ReadFile(files[fi].path, &text)) {
      ++st.unreadable;
      continue;
    }
    auto doc = json::Parse(text);
    const json::Value* schema = doc.ok() ? doc->Find("schema") : nullptr;
    if (!schema) {
      ++st.unreadable;
      continue;
    }
    const json::Value* tests = doc->Find("tests");

    const auto c0 = Clock::now();
    const int64_t c0_cpu = ThreadCpuNs();
    grammar::CompileReport report;
    auto g = grammar::JsonSchemaGrammar(*schema, schema_opts, &report);
    ladle::Result<std::shared_ptr<const grammar::CompiledGrammar>> cg =
        g.ok() ? grammar::CompiledGrammar::Compile(std::move(*g), *vocab, compile_opts)
               : ladle::Result<std::shared_ptr<const grammar::CompiledGrammar>>(g.status());
    const double compile_us = std::chrono::duration<double, std::micro>(Clock::now() - c0).count();
    const double compile_cpu_us = (ThreadCpuNs() - c0_cpu) / 1e3;
    if (!cg.ok()) {
      if (per_schema) {
        std::fprintf(per_schema, "%s\t%s\t%s\t0\t0\t0\t0\n", subset.c_str(), name.c_str(),
                     ErrorKey(cg.status()).c_str());
      }
      ++st.compile_errors;
      ++error_hist[ErrorKey(cg.status())];
      if (tests && tests->is_array()) {
        for (const auto& t : tests->as_array()) {
          const json::Value* valid = t.Find("valid");
          (valid && valid->is_bool() && valid->as_bool() ? st.valid_not_compiled : st.invalid_not_compiled)++;
        }
      }
      continue;
    }
    ++st.compiled;
    st.compile_us.push_back(compile_us);
    st.compile_cpu_us.push_back(compile_cpu_us);
    if (!report.approximations.empty()) ++st.approximated;

    bool schema_ok = true;
    const size_t tokens_before = st.tokens;
    const size_t masks_before = st.mask_cpu_ns.size();
    const ladle::bench::CanonicalOrder order(*schema);
    const auto schema_start = Clock::now();
    if (tests && tests->is_array()) {
      size_t ti = 0;
      for (const auto& t : tests->as_array()) {
        const size_t index = ti++;
        const json::Value* valid_v = t.Find("valid");
        const json::Value* data = t.Find("data");
        if (!valid_v || !valid_v->is_bool() || !data) continue;
        const bool valid = valid_v->as_bool();
        if (std::chrono::duration<double>(Clock::now() - schema_start).count() > cfg.schema_seconds) {
          ++st.instances_timed_out;
          schema_ok = false;
          continue;
        }
        const std::string instance =
            cfg.canonical_order ? order.Serialise(*data) : json::Dump(*data, json::Style::kCompact);
        const std::vector<uint32_t> ids = tok->EncodePlain(instance);
        grammar::GrammarMatcher m(*cg);
        bool accepted = true;
        size_t reject_at = ids.size();
        for (size_t k = 0; k <= ids.size(); ++k) {
          const int64_t m0_cpu = ThreadCpuNs();
          const auto m0 = Clock::now();
          m.FillNextTokenMask(mask.data());
          const auto m1 = Clock::now();
          st.mask_cpu_ns.push_back(Clamp32(ThreadCpuNs() - m0_cpu));
          if (slow && st.mask_cpu_ns.back() >= cfg.slow_us * 1e3) {
            auto text = tok->Decode(std::span<const uint32_t>(ids.data(), k));
            std::string before = text.ok() ? *text : std::string("?");
            if (before.size() > 40) before = before.substr(before.size() - 40);
            for (char& c : before) {
              if (c == '\t' || c == '\n') c = ' ';
            }
            std::fprintf(slow, "%s\t%s\t%zu\t%zu\t%.1f\t%s\n", subset.c_str(), name.c_str(), index, k,
                         st.mask_cpu_ns.back() / 1e3, before.c_str());
          }
          st.mask_ns.push_back(Clamp32((m1 - m0).count()));
          const uint32_t id = k < ids.size() ? ids[k] : kEos;
          const bool allowed = (mask[id >> 6] >> (id & 63)) & 1;
          ++st.tokens;
          if (!allowed) {
            accepted = false;
            reject_at = k;
            // The mask and the matcher must agree: a token outside the mask is refused.
            if (k < ids.size() && m.AcceptToken(id)) ++st.mask_accept_disagreements;
            break;
          }
          if (k < ids.size() && !m.AcceptToken(id)) {
            ++st.mask_accept_disagreements;
            accepted = false;
            reject_at = k;
            break;
          }
        }
        if (valid) {
          ++st.valid;
          if (accepted) ++st.valid_accepted;
        } else {
          ++st.invalid;
          if (!accepted) ++st.invalid_rejected;
        }
        if (accepted != valid) {
          schema_ok = false;
          std::string where;
          if (!accepted) {
            std::string prefix;
            for (size_t k = 0; k < reject_at && k < ids.size(); ++k) {
              auto piece = tok->Decode(std::span<const uint32_t>(&ids[k], 1));
              if (piece.ok()) prefix += *piece;
            }
            where = fmt::format(" rejected at token {} after {:?}",
                                reject_at, Shorten(prefix.size() > 60 ? prefix.substr(prefix.size() - 60) : prefix, 60));
            if (reject_at == ids.size()) where = " EOS not allowed at the end";
          }
          note_failure(fmt::format("{} test {} ({}): {}{} — {}", name, index, valid ? "valid" : "invalid",
                                   valid ? "rejected" : "accepted", where, Shorten(instance, 160)));
        }
      }
    }
    if (schema_ok) ++st.passing;
    if (per_schema) {
      double total = 0, mx = 0;
      for (size_t k = masks_before; k < st.mask_cpu_ns.size(); ++k) {
        total += st.mask_cpu_ns[k] / 1e3;
        mx = std::max(mx, st.mask_cpu_ns[k] / 1e3);
      }
      std::fprintf(per_schema, "%s\t%s\t%.3f\t%zu\t%zu\t%.1f\t%.1f\n", subset.c_str(), name.c_str(),
                   compile_cpu_us / 1e3, (*cg)->MemoryBytes() / 1024, st.tokens - tokens_before, total, mx);
    }

  }

  ladle::bench::MaskBenchReport rep;
  for (auto& [name, st] : by_subset) rep.subsets.push_back(std::move(st));
  rep.error_hist.assign(error_hist.begin(), error_hist.end());
  rep.failures = std::move(failure_lines);
  rep.wall_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  rep.cpu_pinned = cfg.pin;
  rep.eager = cfg.eager;
  rep.cpu_clock = cfg.cpu_clock;
  if (per_schema) std::fclose(per_schema);
  if (slow) std::fclose(slow);
  rep.Finish();
  std::fputs(rep.Table().c_str(), stdout);
  if (!cfg.json_out.empty() && !rep.WriteJson(cfg.json_out)) return 1;
  if (!cfg.svg_out.empty() && !rep.WriteSvg(cfg.svg_out)) return 1;
  return 0;
}
