#include "ladle/structured/compile_service.h"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "ladle/core/logging.h"
#include "ladle/core/thread_pool.h"
#include "ladle/structured/grammar_worker.h"

namespace ladle::structured {

using Clock = std::chrono::steady_clock;

Result<std::shared_ptr<const grammar::TokenVocabulary>> VocabularyFor(const tokenizer::Tokenizer& version_tok,
                                                                      frontend::ModelVersion version) {
  return grammar::TokenVocabulary::FromTokenizer(version_tok, {frontend::SpecialTokensFor(version).eos});
}

namespace {

// Compile-time histogram bounds (seconds), spanning a trivial regex to a budget-sized schema.
constexpr double kBounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
constexpr size_t kNumBounds = std::size(kBounds);

bool IsTransportFailure(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kIoError;
}

}  // namespace

struct CompileService::Impl {
  struct Entry {
    ConstraintKey key;
    std::shared_ptr<const CompiledConstraint> value;
    size_t bytes = 0;
  };
  struct ErrorEntry {
    Status status;
    Clock::time_point expires;
  };
  struct Flight {
    std::vector<Callback> waiters;
  };
  struct Worker {
    std::string endpoint;
    int in_flight = 0;
    Clock::time_point down_until{};
  };

  std::shared_ptr<const grammar::TokenVocabulary> vocab;
  CompileServiceOptions opts;
  uint64_t fingerprint = 0;

  mutable std::mutex mu;
  std::list<Entry> lru;  // front = most recently used
  std::unordered_map<ConstraintKey, std::list<Entry>::iterator, ConstraintKeyHash> index;
  std::unordered_map<ConstraintKey, ErrorEntry, ConstraintKeyHash> errors;
  std::deque<ConstraintKey> error_order;
  std::unordered_map<ConstraintKey, std::shared_ptr<Flight>, ConstraintKeyHash> flights;
  std::vector<Worker> workers;
  size_t next_worker = 0;
  size_t bytes = 0;
  CompileStats stats;
  uint64_t buckets[kNumBounds + 1] = {};
  double sum_s = 0;
  uint64_t pending = 0;  // compiles queued or running
  std::condition_variable idle;

  std::unique_ptr<ThreadPool> pool;
  // Keep-alive connections to the grammar workers (null without workers).
  std::unique_ptr<net::HttpClient> http;

  // Under mu.
  void Insert(const ConstraintKey& key, std::shared_ptr<const CompiledConstraint> value) {
    const size_t size = value->MemoryBytes();
    lru.push_front(Entry{key, std::move(value), size});
    index[key] = lru.begin();
    bytes += size;
    // The newest entry stays even if it alone is over the byte bound: the request that
    // compiled it is about to use it anyway.
    while (lru.size() > 1 && (lru.size() > opts.max_entries || bytes > opts.max_bytes)) {
      Entry& victim = lru.back();
      bytes -= victim.bytes;
      index.erase(victim.key);
      lru.pop_back();
      ++stats.evictions;
    }
  }

  void InsertError(const ConstraintKey& key, const Status& status) {
    if (opts.error_ttl_ms == 0) return;
    if (errors.emplace(key, ErrorEntry{status, Clock::now() + std::chrono::milliseconds(opts.error_ttl_ms)}).second) {
      error_order.push_back(key);
    }
    while (error_order.size() > opts.max_error_entries) {
      errors.erase(error_order.front());
      error_order.pop_front();
    }
  }

  void Observe(double seconds) {
    size_t i = 0;
    while (i < kNumBounds && seconds > kBounds[i]) ++i;
    ++buckets[i];
    sum_s += seconds;
  }

  // A worker to try, or -1 for none available (all down). Under mu.
  int PickWorker(const std::vector<bool>& tried) {
    const auto now = Clock::now();
    int best = -1;
    for (size_t k = 0; k < workers.size(); ++k) {
      const size_t i = (next_worker + k) % workers.size();
      if (tried[i] || workers[i].down_until > now) continue;
      if (best < 0 || workers[i].in_flight < workers[static_cast<size_t>(best)].in_flight) best = static_cast<int>(i);
    }
    if (best >= 0) next_worker = (static_cast<size_t>(best) + 1) % workers.size();
    return best;
  }

  CompileResult Compile(const ConstraintSpec& spec) {
    std::vector<bool> tried(workers.size(), false);
    // Lazy tool constraints are several grammars; the worker protocol ships one, so they
    // compile here (they are small: the call syntax plus the tools' arguments).
    while (!spec.lazy) {
      int w;
      std::string endpoint;
      {
        std::lock_guard lock(mu);
        w = PickWorker(tried);
        if (w < 0) break;
        tried[static_cast<size_t>(w)] = true;
        ++workers[static_cast<size_t>(w)].in_flight;
        endpoint = workers[static_cast<size_t>(w)].endpoint;
      }
      CompileResult r = CompileRemote(*http, endpoint, spec, vocab, opts.worker_timeout_ms);
      std::lock_guard lock(mu);
      Worker& wk = workers[static_cast<size_t>(w)];
      --wk.in_flight;
      if (r.ok() || !IsTransportFailure(r.status())) {
        ++stats.worker_compiles;
        return r;
      }
      ++stats.worker_failures;
      wk.down_until = Clock::now() + std::chrono::milliseconds(opts.worker_down_ms);
      LADLE_LOG_WARN("grammar.worker_failed endpoint={} error='{}' action=fallback", endpoint, r.status().message());
    }
    {
      std::lock_guard lock(mu);
      ++stats.local_compiles;
    }
    return CompileLocally(spec, vocab, opts.compile);
  }

  void Run(const ConstraintSpec& spec, const ConstraintKey& key) {
    const auto t0 = Clock::now();
    // Whatever the compiler does, the waiters hear back: an exception (a front-end bug, an
    // allocation failure) becomes kInternal, never a flight that never lands.
    CompileResult r = Internal("compile did not run");
    try {
      r = Compile(spec);
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("grammar.compile_threw kind={} what='{}'", static_cast<int>(spec.kind), e.what());
      r = Internal(fmt::format("the grammar compiler failed: {}", e.what()));
    } catch (...) {
      LADLE_LOG_ERROR("grammar.compile_threw kind={} what='(not a std::exception)'", static_cast<int>(spec.kind));
      r = Internal("the grammar compiler failed");
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<Callback> waiters;
    {
      std::lock_guard lock(mu);
      Observe(seconds);
      if (r.ok()) {
        Insert(key, *r);
      } else {
        ++stats.errors;
        InsertError(key, r.status());
      }
      auto it = flights.find(key);
      if (it != flights.end()) {
        waiters = std::move(it->second->waiters);
        flights.erase(it);
      }
    }
    for (auto& w : waiters) {
      try {
        w(r);
      } catch (const std::exception& e) {
        LADLE_LOG_ERROR("grammar.callback_threw what='{}'", e.what());
      } catch (...) {
        LADLE_LOG_ERROR("grammar.callback_threw what='(not a std::exception)'");
      }
    }
    std::lock_guard lock(mu);
    if (--pending == 0) idle.notify_all();
  }
};

CompileService::CompileService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CompileService::~CompileService() {
  // Compiles stop at their own budget (max_compile_ms) and remote ones at worker_timeout_ms, so
  // this wait ends; the deadline is there so that shutdown never hangs on a compiler bug. Past
  // it the service is leaked on purpose: a thread still compiling keeps its Impl alive.
  const auto limit = std::chrono::milliseconds(impl_->opts.shutdown_timeout_ms);
  bool idle;
  {
    std::unique_lock lock(impl_->mu);
    idle = impl_->idle.wait_for(lock, limit, [&] { return impl_->pending == 0; });
  }
  if (!idle) {
    LADLE_LOG_ERROR("grammar.shutdown_timeout pending={} waited_ms={} action=abandon", impl_->pending,
                    impl_->opts.shutdown_timeout_ms);
    (void)impl_.release();
    return;
  }
  impl_->pool.reset();
}

Result<std::unique_ptr<CompileService>> CompileService::Create(std::shared_ptr<const grammar::TokenVocabulary> vocab,
                                                               CompileServiceOptions opts) {
  if (!vocab) return InvalidArgument("compile service needs a vocabulary");
  if (opts.max_entries == 0) return InvalidArgument("the grammar cache needs room for at least one entry");
  auto impl = std::make_unique<Impl>();
  impl->fingerprint = vocab->Fingerprint();
  impl->vocab = std::move(vocab);
  for (const auto& w : opts.workers) {
    if (w.find(':') == std::string::npos) return InvalidArgument("grammar worker '" + w + "': expected host:port");
    impl->workers.push_back(Impl::Worker{w});
  }
  if (!impl->workers.empty()) {
    net::HttpClientOptions ho;
    // A connection per compile thread and worker at most: compiles never wait for one.
    ho.max_connections_per_endpoint = std::max<size_t>(1, opts.threads);
    auto http = net::HttpClient::Create(ho);
    if (!http.ok()) return http.status();
    impl->http = std::move(http).value();
  }
  impl->pool = std::make_unique<ThreadPool>(std::max<size_t>(1, opts.threads));
  impl->opts = std::move(opts);
  return std::unique_ptr<CompileService>(new CompileService(std::move(impl)));
}

void CompileService::GetAsync(const ConstraintSpec& spec, Callback done) {
  Impl& m = *impl_;
  const ConstraintKey key = KeyFor(spec, m.fingerprint);
  std::shared_ptr<const CompiledConstraint> hit;
  std::optional<Status> cached_error;
  {
    std::lock_guard lock(m.mu);
    if (auto it = m.index.find(key); it != m.index.end()) {
      m.lru.splice(m.lru.begin(), m.lru, it->second);
      ++m.stats.hits;
      hit = it->second->value;
    } else if (auto e = m.errors.find(key); e != m.errors.end() && e->second.expires > Clock::now()) {
      ++m.stats.error_hits;
      cached_error = e->second.status;
    } else {
      if (e != m.errors.end()) m.errors.erase(e);  // expired (its order slot ages out later)
      auto [f, fresh] = m.flights.try_emplace(key, nullptr);
      if (!fresh) {
        ++m.stats.coalesced;
        f->second->waiters.push_back(std::move(done));
        return;
      }
      ++m.stats.misses;
      f->second = std::make_shared<Impl::Flight>();
      f->second->waiters.push_back(std::move(done));
      ++m.pending;
      m.pool->Submit([&m, spec, key] { m.Run(spec, key); });
      return;
    }
  }
  if (hit) {
    done(CompileResult(std::move(hit)));
  } else {
    done(CompileResult(*cached_error));
  }
}

CompileResult CompileService::Get(const ConstraintSpec& spec) {
  // Shared, not on this frame: if the wait below gives up, a late callback must not touch a
  // dead stack.
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<CompileResult> out;
  };
  auto w = std::make_shared<Wait>();
  GetAsync(spec, [w](const CompileResult& r) {
    std::lock_guard lock(w->mu);
    w->out.emplace(r);
    w->cv.notify_all();
  });
  // The callback always comes (Run catches everything); the bound is a second guard so that
  // a blocking caller (CLI, worker) gets an error instead of hanging if it ever did not.
  std::unique_lock lock(w->mu);
  const auto limit = std::chrono::milliseconds(uint64_t{impl_->opts.compile.max_compile_ms} +
                                               impl_->opts.worker_timeout_ms * (impl_->opts.workers.size() + 1) +
                                               impl_->opts.shutdown_timeout_ms);
  if (!w->cv.wait_for(lock, limit, [&] { return w->out.has_value(); })) {
    return Status(StatusCode::kDeadlineExceeded, "grammar compile did not finish in time");
  }
  return std::move(*w->out);
}

CompileStats CompileService::stats() const {
  std::lock_guard lock(impl_->mu);
  CompileStats s = impl_->stats;
  s.entries = impl_->lru.size();
  s.bytes = impl_->bytes;
  return s;
}

const std::shared_ptr<const grammar::TokenVocabulary>& CompileService::vocab() const { return impl_->vocab; }

void CompileService::AppendMetrics(std::string* out) const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  auto it = std::back_inserter(*out);
  auto counter = [&](std::string_view name, std::string_view help, uint64_t v) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  auto gauge = [&](std::string_view name, std::string_view help, uint64_t v) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  counter("ladle_grammar_cache_hits_total", "Constrained requests served from the grammar cache.", m.stats.hits);
  counter("ladle_grammar_cache_misses_total", "Grammar compiles started.", m.stats.misses);
  counter("ladle_grammar_cache_coalesced_total", "Requests that joined an identical compile in flight.",
          m.stats.coalesced);
  counter("ladle_grammar_cache_evictions_total", "Grammars evicted from the cache (LRU).", m.stats.evictions);
  counter("ladle_grammar_compile_errors_total", "Compiles that failed.", m.stats.errors);
  counter("ladle_grammar_cache_error_hits_total", "Requests answered from the cached compile error.",
          m.stats.error_hits);
  counter("ladle_grammar_local_compiles_total", "Compiles run in this process.", m.stats.local_compiles);
  counter("ladle_grammar_worker_compiles_total", "Compiles answered by a grammar worker.", m.stats.worker_compiles);
  counter("ladle_grammar_worker_failures_total", "Grammar worker calls that failed (then fell back).",
          m.stats.worker_failures);
  gauge("ladle_grammar_cache_entries", "Compiled grammars in the cache.", m.lru.size());
  gauge("ladle_grammar_cache_bytes", "Bytes held by cached grammars.", m.bytes);
  *out += "# HELP ladle_grammar_compile_seconds Compile time per grammar (worker round trip included).\n"
          "# TYPE ladle_grammar_compile_seconds histogram\n";
  uint64_t cumulative = 0, count = 0;
  for (uint64_t b : m.buckets) count += b;
  for (size_t i = 0; i < kNumBounds; ++i) {
    cumulative += m.buckets[i];
    fmt::format_to(it, "ladle_grammar_compile_seconds_bucket{{le=\"{}\"}} {}\n", kBounds[i], cumulative);
  }
  fmt::format_to(it, "ladle_grammar_compile_seconds_bucket{{le=\"+Inf\"}} {}\n", count);
  fmt::format_to(it, "ladle_grammar_compile_seconds_sum {}\nladle_grammar_compile_seconds_count {}\n", m.sum_s, count);
}

}  // namespace ladle::structured
