// `ladle grammar-worker`: the grammar compiler as its own process (the recipe's dedicated
// structured-output machines). `ladle serve --grammar-worker host:port` sends it constraint
// specs and gets compiled grammars back (include/ladle/structured/grammar_worker.h has the
// protocol). Runs until SIGINT/SIGTERM.
#include <fmt/format.h>

#include <csignal>

#include "commands.h"
#include "ladle/core/logging.h"
#include "ladle/json/json.h"
#include "ladle/structured/grammar_worker.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::app {

namespace {

struct WorkerOpts {
  std::string host = "127.0.0.1";
  int port = 8100;
  std::string tokenizer = DefaultTokenizerPath();
  int threads = 2;
  int io_threads = 2;
  int cache_entries = 512;
  int64_t cache_mb = 1024;
  int compile_ms = 2000;
};

std::string LogSafe(std::string_view s) {
  std::string out;
  json::AppendEscaped(s, &out);
  return out;
}

int RunWorker(const WorkerOpts& opts) {
  // Block the stop signals before any thread starts, so only sigwait below sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto base = tokenizer::Tokenizer::FromFile(opts.tokenizer);
  if (!base.ok()) {
    LADLE_LOG_ERROR("grammar_worker.failed error='{}'", LogSafe(base.status().ToString()));
    return 1;
  }
  structured::GrammarWorkerOptions wo;
  wo.host = opts.host;
  wo.port = static_cast<uint16_t>(opts.port);
  wo.io_threads = opts.io_threads;
  wo.service.threads = static_cast<size_t>(opts.threads);
  wo.service.max_entries = static_cast<size_t>(opts.cache_entries);
  wo.service.max_bytes = static_cast<size_t>(opts.cache_mb) << 20;
  wo.service.compile.max_compile_ms = static_cast<uint32_t>(opts.compile_ms);
  auto worker = structured::GrammarWorker::Create(wo, std::move(base).value());
  if (!worker.ok()) {
    LADLE_LOG_ERROR("grammar_worker.failed error='{}'", LogSafe(worker.status().ToString()));
    return 1;
  }
  (*worker)->Start();
  LADLE_LOG_INFO("grammar_worker.listening host={} port={} threads={}", opts.host, (*worker)->port(), opts.threads);
  int sig = 0;
  sigwait(&set, &sig);
  LADLE_LOG_INFO("grammar_worker.signal signal={} served={}", sig, (*worker)->compiles_served());
  (*worker)->Stop();
  return 0;
}

void RegisterGrammarWorker(CLI::App& app, RunFn* run) {
  auto opts = std::make_shared<WorkerOpts>();
  auto* cmd = app.add_subcommand("grammar-worker", "Compile grammars for `ladle serve --grammar-worker` over HTTP");
  cmd->add_option("--host", opts->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", opts->port, "port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--tokenizer", opts->tokenizer, "DeepSeek V3 tokenizer.json (versions are derived from it)")->capture_default_str();
  cmd->add_option("--threads", opts->threads, "compile threads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--io-threads", opts->io_threads, "HTTP threads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--cache-entries", opts->cache_entries, "compiled grammars kept (LRU)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--cache-mb", opts->cache_mb, "memory bound of the cache")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--compile-ms", opts->compile_ms, "compile time budget per grammar")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([run, opts] { *run = [opts] { return RunWorker(*opts); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterGrammarWorker);

}  // namespace ladle::app
