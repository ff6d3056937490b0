// `ladle serve`: the reference engine behind the OpenAI/Anthropic-compatible HTTP server.
// Flags can also come from `--config FILE`, a JSON object with the flag names as keys
// (without dashes, e.g. {"port": 8080, "served-model-name": "ladle"}); a flag given on the
// command line wins over the file.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <stdlib.h>
#include <unistd.h>

#include "commands.h"
#include "fetcher_process.h"
#include "ladle/kvcache/fetcher_store.h"
#include "ladle/core/logging.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/frontend/model_version.h"
#include "ladle/json/json.h"
#include "ladle/kvcache/kv_store.h"
#include "ladle/server/server.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::app {

namespace {

// Error text JSON-escaped so a log line stays valid JSON (the logger does not escape).
std::string LogSafe(std::string_view s) {
  std::string out;
  json::AppendEscaped(s, &out);
  return out;
}

struct ServeOpts {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string config_file;
  std::vector<std::string> served_model_names{"ladle"};
  int64_t max_model_len = 65536;
  std::string model_version = "v3.2";
  std::string model;  // weights folder; empty: built-in seeded model
  std::string model_config;  // config.json for the built-in seeded model (e.g. a tiny one for load tests)
  std::string tokenizer = DefaultTokenizerPath();
  std::string api_key_file;
  int max_queue = 256;
  int default_max_tokens = 256;
  int max_tokens_cap = 0;
  double eos_logit_bias = 0;
  int64_t response_store_ttl_s = 3600;
  int64_t response_store_entries = 4096;
  int64_t response_store_mb = 256;
  int64_t max_body_bytes = 32 << 20;
  int io_threads = 2;
  int64_t drain_deadline_ms = 30000;
  int kv_blocks = 512;
  int max_running = 64;
  std::string kv_store;  // persistent block store URI; empty: none
  bool kv_store_no_read = false;
  bool exact_replay = false;
  int64_t kv_fetch_deadline_ms = 200;
  int64_t swa_pool_mb = 256;
  std::string kv_fetcher = "process";
  int64_t kv_fetcher_shm_mb = 256;
  int64_t swa_ttl_s = 180;
  // Expert parallelism (docs/eplb.md); -1: the phase's default (prefill: 4 redundant per rank,
  // window 100, every 1,000 steps; decode: 1, 1,000, 10,000).
  int ep = 0;
  std::string eplb_phase = "prefill";
  int redundant_experts = -1;
  int64_t eplb_window = -1;
  int64_t eplb_interval = -1;
  std::string replica_policy = "round-robin";
  std::string eplb_policy = "eplb";
  int ep_nodes = 1;
  int expert_groups = 1;
  double router_skew = 0;
  int64_t router_skew_half_life = 10000;
  std::string chunk_policy = "time";
  std::string cost_model;
  bool no_async = false;
  std::string log_format = "text";
  // Structured output (docs/structured_output.md).
  std::vector<std::string> grammar_workers;
  int grammar_threads = 2;
  int grammar_cache_entries = 512;
  int64_t grammar_cache_mb = 1024;
  int grammar_compile_ms = 2000;
  int64_t grammar_deadline_ms = 0;
  std::string grammar_whitespace = "bounded";
  bool no_grammar_budget = false;
};

// Applies the config file's keys to options the command line left unset.
Status ApplyConfigFile(CLI::App* cmd, const std::string& path) {
  std::ifstream in(path);
  if (!in) return IoError("cannot read config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = json::Parse(ss.str());
  if (!doc.ok()) return doc.status().WithContext("config file " + path);
  if (!doc->is_object()) return InvalidArgument("config file " + path + ": expected a JSON object");
  for (const auto& [key, value] : doc->as_object()) {
    CLI::Option* opt = nullptr;
    try {
      opt = cmd->get_option("--" + key);
    } catch (const CLI::OptionNotFound&) {
      return InvalidArgument("config file " + path + ": unknown key \"" + key + "\"");
    }
    if (opt->count() > 0) continue;  // the command line wins
    std::string text = value.is_string() || value.is_number() ? value.as_string()
                       : value.is_bool()                      ? (value.as_bool() ? "true" : "false")
                                                              : json::Dump(value);
    try {
      opt->add_result(text);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return InvalidArgument("config file " + path + ": key \"" + key + "\": " + e.what());
    }
  }
  return Status::Ok();
}

int RunServe(const ServeOpts& opts) {

  auto version = frontend::ParseModelVersion(opts.model_version);
  if (!version.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(version.status().ToString()));
    return 2;
  }
  const char* env_keys = std::getenv("LADLE_API_KEYS");
  auto keys = server::ApiKeys::Load(env_keys ? env_keys : "", opts.api_key_file);
  if (!keys.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(keys.status().ToString()));
    return 2;
  }
  auto base = tokenizer::Tokenizer::FromFile(opts.tokenizer);
  if (!base.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(base.status().ToString()));
    return 1;
  }
  auto version_tok = frontend::TokenizerForVersion(*base, *version);
  if (!version_tok.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(version_tok.status().ToString()));
    return 1;
  }

  engine::ModelConfig model_config;
  if (!opts.model.empty() && !opts.model_config.empty()) {
    LADLE_LOG_ERROR("serve.failed error='--model and --model-config exclude each other'");
    return 2;
  }
  if (!opts.model_config.empty()) {
    auto mc = engine::ModelConfig::FromFile(opts.model_config);
    if (!mc.ok()) {
      LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(mc.status().ToString()));
      return 1;
    }
    model_config = *mc;
  } else if (!opts.model.empty()) {
    auto mc = engine::ModelConfig::FromFile(opts.model + "/config.json");
    if (!mc.ok()) {
      LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(mc.status().ToString()));
      return 1;
    }
    model_config = *mc;
  }
  auto model = engine::Model::Create(model_config, opts.model);
  if (!model.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(model.status().ToString()));
    return 1;
  }
  if (opts.ep > 0) {
    const bool decode = opts.eplb_phase == "decode";
    engine::ExpertParallelConfig ep;
    ep.ranks = opts.ep;
    ep.redundant_per_rank = opts.redundant_experts >= 0 ? opts.redundant_experts : (decode ? 1 : 4);
    ep.window_steps = static_cast<uint64_t>(opts.eplb_window > 0 ? opts.eplb_window : (decode ? 1000 : 100));
    ep.interval_steps = static_cast<uint64_t>(opts.eplb_interval >= 0 ? opts.eplb_interval : (decode ? 10000 : 1000));
    ep.replica_policy = opts.replica_policy;
    ep.placement_policy = opts.eplb_policy;
    ep.num_nodes = opts.ep_nodes;
    ep.num_groups = opts.expert_groups;
    ep.router_skew = opts.router_skew;
    ep.router_skew_half_life = static_cast<uint64_t>(std::max<int64_t>(1, opts.router_skew_half_life));
    Status s = (*model)->ConfigureExpertParallel(ep);
    if (!s.ok()) {
      LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(s.ToString()));
      return 1;
    }
    LADLE_LOG_INFO("serve.expert_parallel ranks={} redundant_per_rank={} window={} interval={} replica_policy={} "
                   "placement={} router_skew={}",
                   ep.ranks, ep.redundant_per_rank, ep.window_steps, ep.interval_steps, ep.replica_policy,
                   ep.placement_policy, ep.router_skew);
  }
  engine::EngineConfig ec;
  ec.num_blocks = opts.kv_blocks;
  ec.max_running = opts.max_running;
  ec.max_queue = opts.max_queue;
  ec.chunk_policy = opts.chunk_policy;
  ec.cost_model_path = opts.cost_model;
  ec.async_scheduling = !opts.no_async;
  ec.eos_id = frontend::SpecialTokensFor(*version).eos;
  ec.shutdown_deadline_ms = opts.drain_deadline_ms;
  ec.max_model_len = opts.max_model_len;
  ec.eos_logit_bias = static_cast<float>(opts.eos_logit_bias);
  ec.exact_replay = opts.exact_replay;
  ec.swa_pool_bytes = static_cast<uint64_t>(opts.swa_pool_mb) << 20;
  ec.swa_ttl_ms = opts.swa_ttl_s * 1000;
  if (!opts.model.empty()) {
    // The config alone does not tell two checkpoints apart: add the weight files' names and
    // sizes, so blocks of different weights never share store keys.
    std::string fp = engine::ModelFingerprint(model_config) + " weights:";
    std::error_code err;
    std::vector<std::string> files;
    for (const auto& f : std::filesystem::directory_iterator(opts.model, err)) {
      if (f.path().extension() == ".safetensors") files.push_back(f.path().filename().string() + "=" + std::to_string(f.file_size(err)));
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) fp += " " + f;
    ec.model_fingerprint = fp;
  }
  // The store's owner: a `ladle kv-fetcher` child by default (reads land in its shm pool and
  // are copied into the KV from there; it is restarted if it dies), or this process.
  std::shared_ptr<app::FetcherProcess> fetcher;
  std::string fetcher_dir;
  if (!opts.kv_store.empty() && opts.kv_fetcher == "process") {
    char tmpl[] = "/tmp/ladle-serve-XXXXXX";
    char exe[4096];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    auto kv1 = (*model)->NewKvStorage(1, 1);
    if (::mkdtemp(tmpl) == nullptr || n <= 0 || !kv1 || kv1->block_bytes() == 0) {
      LADLE_LOG_ERROR("serve.failed error='kv fetcher: no private directory, own path or block size'");
      return 1;
    }
    exe[n] = '\0';
    fetcher_dir = tmpl;
    app::FetcherProcess::Options fo;
    fo.exe = exe;
    fo.store_uri = opts.kv_store;
    fo.socket_path = fetcher_dir + "/kvf.sock";
    fo.block_bytes = kv1->block_bytes();
    fo.shm_mb = opts.kv_fetcher_shm_mb;
    auto fp = app::FetcherProcess::Start(fo);
    if (!fp.ok()) {
      std::filesystem::remove_all(fetcher_dir);
      LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(fp.status().ToString()));
      return 1;
    }
    fetcher = std::move(fp).value();
    auto store = kvcache::FetcherStore::Create([fetcher] { return fetcher->Connect(); });
    if (!store.ok()) {
      fetcher->Stop();
      std::filesystem::remove_all(fetcher_dir);
      LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(store.status().ToString()));
      return 1;
    }
    ec.kv_store = std::move(store).value();
    LADLE_LOG_INFO("serve.kv_store uri={} fetcher_pid={} socket={}", LogSafe(opts.kv_store), fetcher->pid(), fo.socket_path);
  } else if (!opts.kv_store.empty()) {
    auto store = kvcache::KvStore::Open(opts.kv_store, kvcache::StoreOptions{});
    if (!store.ok()) {
      LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(store.status().ToString()));
      return 1;
    }
    ec.kv_store = std::shared_ptr<kvcache::KvStore>(std::move(store).value());
    LADLE_LOG_INFO("serve.kv_store uri={}", LogSafe(opts.kv_store));
  }
  if (ec.kv_store) {
    ec.kv_store_read = !opts.kv_store_no_read;
    ec.kv_fetch_deadline_base_ms = opts.kv_fetch_deadline_ms;
  }
  // Stops the fetcher after the engine and the store handle are gone (their writes drained).
  struct FetcherStop {
    std::shared_ptr<app::FetcherProcess>& f;
    std::string dir;
    ~FetcherStop() {
      if (f) f->Stop();
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } fetcher_stop{fetcher, fetcher_dir};
  auto eng = engine::CreateEngine(ec, std::move(model).value(), *version_tok);
  if (!eng.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(eng.status().ToString()));
    return 1;
  }

  server::ServerConfig sc;
  sc.host = opts.host;
  sc.port = static_cast<uint16_t>(opts.port);
  // The first name is the one /v1/models lists first; the rest are aliases (a comma list or
  // the flag repeated, as vLLM's --served-model-name takes several).
  sc.served_model_name.clear();
  for (const auto& name : opts.served_model_names) {
    if (name.empty()) continue;
    if (sc.served_model_name.empty()) {
      sc.served_model_name = name;
    } else {
      sc.model_aliases.push_back(name);
    }
  }
  if (sc.served_model_name.empty()) {
    LADLE_LOG_ERROR("serve.failed error='--served-model-name needs a name'");
    return 2;
  }
  // The context limit clients see: the engine's model length, and no more than the KV pool holds.
  sc.max_model_len = std::min<int64_t>(ec.max_model_len, int64_t{ec.num_blocks} * model_config.block_size);
  sc.version = *version;
  sc.limits.max_body_bytes = static_cast<size_t>(opts.max_body_bytes);
  sc.default_max_tokens = opts.default_max_tokens;
  sc.max_tokens_cap = opts.max_tokens_cap;
  sc.response_store_ttl_s = opts.response_store_ttl_s;
  sc.response_store_entries = static_cast<size_t>(opts.response_store_entries);
  sc.response_store_bytes = static_cast<size_t>(opts.response_store_mb) << 20;
  sc.max_queue = opts.max_queue;
  sc.drain_deadline_ms = opts.drain_deadline_ms;
  sc.io_threads = opts.io_threads;
  sc.keys = std::move(keys).value();
  sc.grammar_service.workers = opts.grammar_workers;
  sc.grammar_service.threads = static_cast<size_t>(opts.grammar_threads);
  sc.grammar_service.max_entries = static_cast<size_t>(opts.grammar_cache_entries);
  sc.grammar_service.max_bytes = static_cast<size_t>(opts.grammar_cache_mb) << 20;
  sc.grammar_service.compile.max_compile_ms = static_cast<uint32_t>(opts.grammar_compile_ms);
  sc.grammar_service.worker_timeout_ms = static_cast<uint32_t>(opts.grammar_compile_ms) + 5000;
  sc.grammar_budget_aware = !opts.no_grammar_budget;
  sc.grammar_deadline_ms = opts.grammar_deadline_ms;
  sc.grammar_whitespace = opts.grammar_whitespace == "compact" ? grammar::JsonSchemaOptions::Whitespace::kCompact
                          : opts.grammar_whitespace == "pretty" ? grammar::JsonSchemaOptions::Whitespace::kPretty
                                                                : grammar::JsonSchemaOptions::Whitespace::kBounded;
  auto srv = server::Server::Create(std::move(sc), eng->get(), *base);
  if (!srv.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(srv.status().ToString()));
    (*eng)->Shutdown();
    return 1;
  }
  Status run = (*srv)->Run();
  // The engine goes first: its threads hold sinks that post into the server's io context.
  (*eng)->Shutdown();
  eng->reset();
  srv->reset();
  ec.kv_store.reset();  // drains its queued writes into the fetcher before the fetcher stops
  if (!run.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(run.ToString()));
    return 1;
  }
  LADLE_LOG_INFO("serve.exit code=0");
  return 0;
}

void RegisterServe(CLI::App& app, RunFn* run) {
  auto opts = std::make_shared<ServeOpts>();
  auto* cmd = app.add_subcommand("serve", "Serve the engine over OpenAI- and Anthropic-compatible HTTP");
  cmd->add_option("--config", opts->config_file, "JSON file with any of these flags as keys");
  cmd->add_option("--host", opts->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", opts->port, "port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", opts->served_model_names,
                  "the model name clients use; several (comma-separated or repeated) are aliases")
      ->capture_default_str()->delimiter(',');
  cmd->add_option("--max-model-len", opts->max_model_len, "context limit in tokens (prompt + output)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--model-version", opts->model_version, "prompt encoder: v3, r1, v3.1, v3.2, v4")->capture_default_str();
  cmd->add_option("--model", opts->model, "weights folder (config.json + *.safetensors); default: built-in");
  cmd->add_option("--model-config", opts->model_config,
                  "config.json sizing the built-in seeded model (no weights file; e.g. bench/serve/tiny_model.json)");
  cmd->add_option("--tokenizer", opts->tokenizer, "tokenizer.json path")->capture_default_str();
  cmd->add_option("--api-key-file", opts->api_key_file, "file with one API key per line (plus $LADLE_API_KEYS)");
  cmd->add_option("--max-queue", opts->max_queue, "generation requests held at once before 429/529")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--default-max-tokens", opts->default_max_tokens, "max_tokens when a request gives none")->capture_default_str();
  cmd->add_option("--response-store-ttl-s", opts->response_store_ttl_s,
                  "Responses API store: seconds a stored response stays resolvable (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--response-store-entries", opts->response_store_entries, "Responses API store: responses kept")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--response-store-mb", opts->response_store_mb, "Responses API store: memory bound")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--eos-logit-bias", opts->eos_logit_bias,
                  "added to the end-of-sentence logit (random-weight test/demo models, so answers end)")
      ->capture_default_str();
  cmd->add_option("--max-tokens-cap", opts->max_tokens_cap,
                  "at most this many output tokens per request whatever it asks (0: no cap; for demo/test models)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-body-bytes", opts->max_body_bytes, "largest request body")->capture_default_str();
  cmd->add_option("--io-threads", opts->io_threads, "HTTP threads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--drain-deadline-ms", opts->drain_deadline_ms, "SIGTERM: how long in-flight requests may finish")->capture_default_str();
  cmd->add_option("--kv-blocks", opts->kv_blocks, "global-KV blocks of 128 tokens")->capture_default_str();
  cmd->add_option("--max-running", opts->max_running, "sequences in the running batch")->capture_default_str();
  cmd->add_option("--kv-store", opts->kv_store,
                  "persistent KV block store (fs:DIR or ec:K+M:DIR0,...): every full block of a prompt or answer is written "
                  "to it (see `ladle kv`)");
  cmd->add_option("--ep", opts->ep, "expert parallelism: EP ranks for the routed experts (0: off; docs/eplb.md)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--eplb-phase", opts->eplb_phase,
                  "defaults for the options below: prefill (4 redundant, window 100, every 1000 steps) or decode "
                  "(1, 1000, 10000)")
      ->capture_default_str()->check(CLI::IsMember({"prefill", "decode"}));
  cmd->add_option("--redundant-experts", opts->redundant_experts, "replica slots per EP rank (-1: the phase's default)")
      ->capture_default_str();
  cmd->add_option("--eplb-window", opts->eplb_window, "per-expert load window in steps (-1: the phase's default)")
      ->capture_default_str();
  cmd->add_option("--eplb-interval", opts->eplb_interval,
                  "re-arrange experts every this many steps (0: never; -1: the phase's default)")
      ->capture_default_str();
  cmd->add_option("--replica-policy", opts->replica_policy, "which replica a token goes to")
      ->capture_default_str()->check(CLI::IsMember({"round-robin", "least-loaded"}));
  cmd->add_option("--eplb-policy", opts->eplb_policy, "placement: eplb (DeepSeek) or layer-budget")
      ->capture_default_str()->check(CLI::IsMember({"eplb", "layer-budget"}));
  cmd->add_option("--ep-nodes", opts->ep_nodes, "nodes of the EP ranks (hierarchical EPLB)")->capture_default_str();
  cmd->add_option("--expert-groups", opts->expert_groups, "expert groups (hierarchical EPLB)")->capture_default_str();
  cmd->add_option("--router-skew", opts->router_skew,
                  "built-in model: Zipf exponent of a drifting router bias so the balancer has work (0: off; changes "
                  "outputs)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--router-skew-half-life", opts->router_skew_half_life, "steps over which the skew's hot set halves its correlation")
      ->capture_default_str();
  cmd->add_flag("--kv-store-no-read", opts->kv_store_no_read, "write blocks to --kv-store but never read hits from it");
  cmd->add_option("--kv-fetch-deadline-ms", opts->kv_fetch_deadline_ms,
                  "a store read's deadline (plus 5 ms per block, at most 5 s); past it the rest recomputes")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--exact-replay", opts->exact_replay,
                "on a prefix hit, rebuild the SWA ring by replaying the whole prefix (exact) instead of its last 128 "
                "tokens (Encoder SWA Bounded Replay)");
  cmd->add_option("--kv-fetcher", opts->kv_fetcher,
                  "who owns --kv-store: process (a `ladle kv-fetcher` child that reads blocks into a shared-memory pool "
                  "and is restarted if it dies) or in-process")
      ->capture_default_str()->check(CLI::IsMember({"process", "in-process"}));
  cmd->add_option("--kv-fetcher-shm-mb", opts->kv_fetcher_shm_mb, "the fetcher's shared-memory block pool")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--swa-pool-mb", opts->swa_pool_mb,
                  "SWA KVCache host pool: window snapshots at block boundaries, so a prompt extending an earlier one "
                  "skips its whole prefix exactly (0: off; hits then replay the last 128 tokens)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--swa-ttl-s", opts->swa_ttl_s, "lifetime of an SWA KVCache entry")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--chunk-policy", opts->chunk_policy, "chunked prefill: time or fixed")->capture_default_str();
  cmd->add_option("--cost-model", opts->cost_model, "cost model file (loaded if present, else profiled and saved)");
  cmd->add_flag("--no-async", opts->no_async, "turn off asynchronous scheduling");
  cmd->add_option("--log-format", opts->log_format, "text or json (as the global flag)")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--grammar-worker", opts->grammar_workers,
                  "host:port of a `ladle grammar-worker` (repeatable); none: compile in-process");
  cmd->add_option("--grammar-threads", opts->grammar_threads, "grammar compile threads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--grammar-cache-entries", opts->grammar_cache_entries, "compiled grammars kept (LRU)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--grammar-cache-mb", opts->grammar_cache_mb, "memory bound of the grammar cache")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--grammar-compile-ms", opts->grammar_compile_ms, "compile time budget per grammar")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--grammar-deadline-ms", opts->grammar_deadline_ms,
                  "longest wait of a request for its grammar (0: compile budget + 10 s)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--grammar-whitespace", opts->grammar_whitespace, "JSON whitespace: bounded, compact or pretty")
      ->capture_default_str()->check(CLI::IsMember({"bounded", "compact", "pretty"}));
  cmd->add_flag("--no-grammar-budget", opts->no_grammar_budget,
                "do not close JSON outputs within max_tokens (budget-aware completion)");
  cmd->callback([run, opts, cmd] {
    *run = [opts, cmd] {
      if (!opts->config_file.empty()) {
        Status s = ApplyConfigFile(cmd, opts->config_file);
        if (!s.ok()) {
          LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(s.ToString()));
          return 2;
        }
      }
      // `ladle serve --log-format json` (or the config key) overrides the global flag.
      if (cmd->get_option("--log-format")->count() > 0) {
        log::Init(log::ParseFormat(opts->log_format), spdlog::get_level());
      }
      return RunServe(*opts);
    };
  });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterServe);

}  // namespace ladle::app
