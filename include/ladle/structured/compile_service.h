// The compile service (issue 4, "Compile service"): every constrained request asks it for a
// CompiledConstraint before the request enters the engine queue; the engine never compiles.
//
//   * LRU cache keyed by KeyFor(spec, vocabulary fingerprint), bounded by entries and by
//     bytes (CompiledConstraint::MemoryBytes). Compile errors are cached too, briefly
//     (error_ttl_ms), so a client retrying a bad schema in a loop does not recompile it.
//   * Single flight: concurrent requests for the same key share one compile.
//   * Compiles run on the service's own threads (not the shared pool, so a burst of schemas
//     never starves tokenisation), either in-process or on `ladle grammar-worker` processes
//     (`workers`): least-loaded first, round-robin among equals; a worker that fails to answer
//     is marked down for worker_down_ms and the compile falls back to the next worker, and
//     finally to this process.
//   * Stats and Prometheus text for /metrics.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/structured/constraint.h"

namespace ladle::structured {

struct CompileServiceOptions {
  size_t max_entries = 512;
  size_t max_bytes = 1ull << 30;
  size_t threads = 2;
  uint32_t error_ttl_ms = 5000;
  size_t max_error_entries = 1024;
  grammar::CompileOptions compile;
  std::vector<std::string> workers;  // "host:port" of grammar workers; empty: in-process only
  uint32_t worker_timeout_ms = 10000;
  uint32_t worker_down_ms = 2000;
  // The destructor waits this long for compiles in flight, then abandons them (logged).
  uint32_t shutdown_timeout_ms = 10000;
};

struct CompileStats {
  uint64_t hits = 0, misses = 0, coalesced = 0, evictions = 0;
  uint64_t errors = 0, error_hits = 0;
  uint64_t local_compiles = 0, worker_compiles = 0, worker_failures = 0;
  size_t entries = 0, bytes = 0;
};

using CompileResult = Result<std::shared_ptr<const CompiledConstraint>>;

class CompileService {
 public:
  using Callback = std::function<void(const CompileResult&)>;

  static Result<std::unique_ptr<CompileService>> Create(std::shared_ptr<const grammar::TokenVocabulary> vocab,
                                                        CompileServiceOptions opts = {});
  ~CompileService();  // finishes the compiles in flight (their callbacks run) before returning

  // Calls `done` exactly once: inline on a cache hit, otherwise on a compile thread. `done`
  // must not block (hand off to the caller's executor).
  void GetAsync(const ConstraintSpec& spec, Callback done);
  // Blocking form (CLI, worker, tests).
  CompileResult Get(const ConstraintSpec& spec);

  CompileStats stats() const;
  // ladle_grammar_* lines in the Prometheus text format.
  void AppendMetrics(std::string* out) const;
  const std::shared_ptr<const grammar::TokenVocabulary>& vocab() const;

  struct Impl;

 private:
  explicit CompileService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The matcher vocabulary of a version's tokenizer view (TokenizerForVersion): EOS is the
// version's end-of-sentence id, 129,280 logit columns.
Result<std::shared_ptr<const grammar::TokenVocabulary>> VocabularyFor(const tokenizer::Tokenizer& version_tok,
                                                                      frontend::ModelVersion version);

}  // namespace ladle::structured
