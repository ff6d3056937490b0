// What `ladle serve`, `ladle engine` and `ladle entrypoint` share (serve_common.h).
#include "serve_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <stdlib.h>
#include <signal.h>
#include <unistd.h>

#include "commands.h"
#include "ladle/core/logging.h"
#include "ladle/core/numbers.h"
#include "ladle/engine/cost_model.h"
#include "ladle/json/json.h"
#include "ladle/kvcache/fetcher_store.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::app {

std::string LogSafe(std::string_view s) {
  std::string out;
  json::AppendEscaped(s, &out);
  return out;
}

namespace {

// The stack's private directory is /tmp/ladle-serve-<pid>-XXXXXX. A process killed with -9
// cannot remove its own, so each start removes those whose process is gone (kill(pid, 0) says
// ESRCH; a live process of another user answers EPERM and is left alone, and so is any name
// that does not parse).
constexpr std::string_view kPrivateDirPrefix = "ladle-serve-";
void SweepStalePrivateDirs(const std::string& root) {
  std::error_code ec;
  // increment(ec), not a range-for: its operator++ throws on a directory that changes under it.
  for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::filesystem::directory_entry& entry = *it;
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrivateDirPrefix, 0) != 0) continue;
    const std::string_view rest = std::string_view(name).substr(kPrivateDirPrefix.size());
    const size_t dash = rest.find('-');
    const std::optional<uint64_t> parsed = ParseU64(rest.substr(0, dash));
    if (dash == std::string_view::npos || !parsed || *parsed == 0 || *parsed > INT32_MAX) continue;
    const pid_t pid = static_cast<pid_t>(*parsed);
    if (pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    std::filesystem::remove_all(entry.path(), rm);
    if (!rm) LADLE_LOG_INFO("serve.stale_dir_removed path={}", LogSafe(entry.path().string()));
  }
}

}  // namespace

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

bool FinishFlags(CLI::App* cmd, const ServeOpts& o, const char* what) {
  if (!o.config_file.empty()) {
    Status s = ApplyConfigFile(cmd, o.config_file);
    if (!s.ok()) {
      LADLE_LOG_ERROR("{}.failed error='{}'", what, LogSafe(s.ToString()));
      return false;
    }
  }
  // A command's own --log-format (or the config key) overrides the global flag.
  if (cmd->get_option("--log-format")->count() > 0) log::Init(log::ParseFormat(o.log_format), spdlog::get_level());
  return true;
}

void AddCommonFlags(CLI::App* cmd, ServeOpts* o) {
  o->tokenizer = DefaultTokenizerPath();
  cmd->add_option("--config", o->config_file, "JSON file with any of these flags as keys");
  cmd->add_option("--max-model-len", o->max_model_len, "context limit in tokens (prompt + output)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--model-version", o->model_version, "prompt encoder: v3, r1, v3.1, v3.2, v4")->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json path")->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue, "generation requests held at once before 429/529")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--drain-deadline-ms", o->drain_deadline_ms, "SIGTERM: how long in-flight requests may finish")->capture_default_str();
  cmd->add_option("--log-format", o->log_format, "text or json (as the global flag)")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--grammar-worker", o->grammar_workers,
                  "host:port of a `ladle grammar-worker` (repeatable); none: compile in-process");
  cmd->add_option("--grammar-threads", o->grammar_threads, "grammar compile threads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--grammar-cache-entries", o->grammar_cache_entries, "compiled grammars kept (LRU)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--grammar-cache-mb", o->grammar_cache_mb, "memory bound of the grammar cache")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--grammar-compile-ms", o->grammar_compile_ms, "compile time budget per grammar")->capture_default_str()->check(CLI::PositiveNumber);
}

void AddEngineFlags(CLI::App* cmd, ServeOpts* o) {
  cmd->add_option("--model", o->model, "weights folder (config.json + *.safetensors); default: built-in");
  cmd->add_option("--model-config", o->model_config,
                  "config.json sizing the built-in seeded model (no weights file; e.g. bench/serve/tiny_model.json)");
  cmd->add_option("--eos-logit-bias", o->eos_logit_bias,
                  "added to the end-of-sentence logit (random-weight test/demo models, so answers end)")
      ->capture_default_str();
  cmd->add_option("--kv-blocks", o->kv_blocks, "global-KV blocks of 128 tokens")->capture_default_str();
  cmd->add_option("--max-running", o->max_running, "sequences in the running batch")->capture_default_str();
  cmd->add_option("--kv-store", o->kv_store,
                  "persistent KV block store (fs:DIR or ec:K+M:DIR0,...): every full block of a prompt or answer is written "
                  "to it (see `ladle kv`)");
  cmd->add_option("--ep", o->ep, "expert parallelism: EP ranks for the routed experts (0: off; docs/eplb.md)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--eplb-phase", o->eplb_phase,
                  "defaults for the options below: prefill (4 redundant, window 100, every 1000 steps) or decode "
                  "(1, 1000, 10000)")
      ->capture_default_str()->check(CLI::IsMember({"prefill", "decode"}));
  cmd->add_option("--redundant-experts", o->redundant_experts, "replica slots per EP rank (-1: the phase's default)")
      ->capture_default_str();
  cmd->add_option("--eplb-window", o->eplb_window, "per-expert load window in steps (-1: the phase's default)")
      ->capture_default_str();
  cmd->add_option("--eplb-interval", o->eplb_interval,
                  "re-arrange experts every this many steps (0: never; -1: the phase's default)")
      ->capture_default_str();
  cmd->add_option("--replica-policy", o->replica_policy, "which replica a token goes to")
      ->capture_default_str()->check(CLI::IsMember({"round-robin", "least-loaded"}));
  cmd->add_option("--eplb-policy", o->eplb_policy, "placement: eplb (DeepSeek) or layer-budget")
      ->capture_default_str()->check(CLI::IsMember({"eplb", "layer-budget"}));
  cmd->add_option("--ep-nodes", o->ep_nodes, "nodes of the EP ranks (hierarchical EPLB)")->capture_default_str();
  cmd->add_option("--expert-groups", o->expert_groups, "expert groups (hierarchical EPLB)")->capture_default_str();
  cmd->add_option("--router-skew", o->router_skew,
                  "built-in model: Zipf exponent of a drifting router bias so the balancer has work (0: off; changes "
                  "outputs)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--router-skew-half-life", o->router_skew_half_life, "steps over which the skew's hot set halves its correlation")
      ->capture_default_str();
  cmd->add_flag("--kv-store-no-read", o->kv_store_no_read, "write blocks to --kv-store but never read hits from it");
  cmd->add_option("--kv-fetch-deadline-ms", o->kv_fetch_deadline_ms,
                  "a store read's deadline (plus 5 ms per block, at most 5 s); past it the rest recomputes")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--speculative", o->speculative,
                  "speculative decoding: off, fixed:N (verify N drafts per step) or dspark (variable-length "
                  "verification over the profiled throughput curve); needs --draft")
      ->capture_default_str();
  cmd->add_option("--draft", o->draft, "drafter folder (drafter.json + drafter.safetensors, from `ladle dspark fit`)");
  cmd->add_option("--draft-tokens", o->draft_tokens, "γ: tokens the drafter proposes per step (at most 5)")
      ->capture_default_str()->check(CLI::Range(1, 5));
  cmd->add_option("--spec-sps", o->spec_sps,
                  "dspark: the SPS(B) table file (loaded if present, else profiled at start-up and saved there)");
  cmd->add_flag("--exact-replay", o->exact_replay,
                "on a prefix hit, rebuild the SWA ring by replaying the whole prefix (exact) instead of its last 128 "
                "tokens (Encoder SWA Bounded Replay)");
  cmd->add_option("--kv-fetcher", o->kv_fetcher,
                  "who owns --kv-store: process (a `ladle kv-fetcher` child that reads blocks into a shared-memory pool "
                  "and is restarted if it dies), in-process, or socket:PATH (a fetcher already running on this machine, "
                  "as `ladle cluster` shares one)")
      ->capture_default_str()
      ->check([](const std::string& v) {
        return v == "process" || v == "in-process" || v.rfind("socket:", 0) == 0 ? std::string()
                                                                                 : std::string("process, in-process or socket:PATH");
      });
  cmd->add_option("--kv-fetcher-shm-mb", o->kv_fetcher_shm_mb, "the fetcher's shared-memory block pool")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--swa-pool-mb", o->swa_pool_mb,
                  "SWA KVCache host pool: window snapshots at block boundaries, so a prompt extending an earlier one "
                  "skips its whole prefix exactly (0: off; hits then replay the last 128 tokens)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--swa-ttl-s", o->swa_ttl_s, "lifetime of an SWA KVCache entry")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--chunk-policy", o->chunk_policy, "chunked prefill: time or fixed")->capture_default_str();
  cmd->add_option("--cost-model", o->cost_model, "cost model file (loaded if present, else profiled and saved)");
  cmd->add_flag("--no-async", o->no_async, "turn off asynchronous scheduling");
}

void AddServerFlags(CLI::App* cmd, ServeOpts* o) {
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", o->served_model_names,
                  "the model name clients use; several (comma-separated or repeated) are aliases")
      ->capture_default_str()->delimiter(',');
  cmd->add_option("--api-key-file", o->api_key_file, "file with one API key per line (plus $LADLE_API_KEYS)");
  cmd->add_option("--default-max-tokens", o->default_max_tokens, "max_tokens when a request gives none")->capture_default_str();
  cmd->add_option("--response-store-ttl-s", o->response_store_ttl_s,
                  "Responses API store: seconds a stored response stays resolvable (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--response-store-entries", o->response_store_entries, "Responses API store: responses kept")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--response-store-mb", o->response_store_mb, "Responses API store: memory bound")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--max-tokens-cap", o->max_tokens_cap,
                  "at most this many output tokens per request whatever it asks (0: no cap; for demo/test models)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "largest request body")->capture_default_str();
  cmd->add_option("--io-threads", o->io_threads, "HTTP threads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--grammar-deadline-ms", o->grammar_deadline_ms,
                  "longest wait of a request for its grammar (0: compile budget + 10 s)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--grammar-whitespace", o->grammar_whitespace, "JSON whitespace: bounded, compact or pretty")
      ->capture_default_str()->check(CLI::IsMember({"bounded", "compact", "pretty"}));
  cmd->add_flag("--no-grammar-budget", o->no_grammar_budget,
                "do not close JSON outputs within max_tokens (budget-aware completion)");
}

Result<VersionedTokenizer> LoadTokenizer(const ServeOpts& o) {
  VersionedTokenizer t;
  LADLE_ASSIGN_OR_RETURN(t.version, frontend::ParseModelVersion(o.model_version));
  LADLE_ASSIGN_OR_RETURN(auto base, tokenizer::Tokenizer::FromFile(o.tokenizer));
  t.base = std::make_unique<tokenizer::Tokenizer>(std::move(base));
  LADLE_ASSIGN_OR_RETURN(auto vt, frontend::TokenizerForVersion(*t.base, t.version));
  t.version_tok = std::make_unique<tokenizer::Tokenizer>(std::move(vt));
  return t;
}

EngineStack::~EngineStack() {
  for (auto& r : ranks) r->Shutdown();
  ranks.clear();
  config.kv_store.reset();  // drains its queued writes into the fetcher before the fetcher stops
  if (fetcher) fetcher->Stop();
  if (!fetcher_dir.empty()) std::filesystem::remove_all(fetcher_dir);
}

std::vector<engine::Engine*> EngineStack::Ranks() const {
  std::vector<engine::Engine*> v;
  for (const auto& r : ranks) v.push_back(r.get());
  return v;
}

Result<std::unique_ptr<EngineStack>> BuildEngineStack(const ServeOpts& o, const VersionedTokenizer& t, int dp,
                                                      std::shared_ptr<engine::SwaDirectory> swa_directory,
                                                      std::string swa_holder,
                                                      std::function<std::function<void(engine::BlockEvent)>(int)> block_events) {
  auto stack = std::make_unique<EngineStack>();
  engine::ModelConfig& model_config = stack->model_config;
  if (!o.model.empty() && !o.model_config.empty()) return InvalidArgument("--model and --model-config exclude each other");
  if (!o.model_config.empty()) {
    LADLE_ASSIGN_OR_RETURN(model_config, engine::ModelConfig::FromFile(o.model_config));
  } else if (!o.model.empty()) {
    LADLE_ASSIGN_OR_RETURN(model_config, engine::ModelConfig::FromFile(o.model + "/config.json"));
  }
  // One model per DP rank: each rank is its own engine loop with its own weights buffers and
  // KV pool, as DP ranks of one instance are separate GPUs.
  std::vector<std::unique_ptr<engine::Model>> models;
  for (int i = 0; i < dp; ++i) {
    LADLE_ASSIGN_OR_RETURN(auto model, engine::Model::Create(model_config, o.model));
    if (o.ep > 0) {
      const bool decode = o.eplb_phase == "decode";
      engine::ExpertParallelConfig ep;
      ep.ranks = o.ep;
      ep.redundant_per_rank = o.redundant_experts >= 0 ? o.redundant_experts : (decode ? 1 : 4);
      ep.window_steps = static_cast<uint64_t>(o.eplb_window > 0 ? o.eplb_window : (decode ? 1000 : 100));
      ep.interval_steps = static_cast<uint64_t>(o.eplb_interval >= 0 ? o.eplb_interval : (decode ? 10000 : 1000));
      ep.replica_policy = o.replica_policy;
      ep.placement_policy = o.eplb_policy;
      ep.num_nodes = o.ep_nodes;
      ep.num_groups = o.expert_groups;
      ep.router_skew = o.router_skew;
      ep.router_skew_half_life = static_cast<uint64_t>(std::max<int64_t>(1, o.router_skew_half_life));
      LADLE_RETURN_IF_ERROR(model->ConfigureExpertParallel(ep));
      if (i == 0) {
        LADLE_LOG_INFO("serve.expert_parallel ranks={} redundant_per_rank={} window={} interval={} replica_policy={} "
                       "placement={} router_skew={}",
                       ep.ranks, ep.redundant_per_rank, ep.window_steps, ep.interval_steps, ep.replica_policy,
                       ep.placement_policy, ep.router_skew);
      }
    }
    models.push_back(std::move(model));
  }
  engine::EngineConfig& ec = stack->config;
  ec.num_blocks = o.kv_blocks;
  ec.max_running = o.max_running;
  ec.max_queue = o.max_queue;
  ec.chunk_policy = o.chunk_policy;
  ec.cost_model_path = o.cost_model;
  ec.async_scheduling = !o.no_async;
  ec.eos_id = frontend::SpecialTokensFor(t.version).eos;
  ec.shutdown_deadline_ms = o.drain_deadline_ms;
  ec.max_model_len = o.max_model_len;
  ec.eos_logit_bias = static_cast<float>(o.eos_logit_bias);
  ec.exact_replay = o.exact_replay;
  ec.speculative = o.speculative;
  ec.draft_tokens = o.draft_tokens;
  ec.spec_sps_path = o.spec_sps;
  if (!o.draft.empty()) {
    LADLE_ASSIGN_OR_RETURN(auto drafter, engine::Drafter::Load(o.draft));
    ec.drafter = std::shared_ptr<const engine::Drafter>(std::move(drafter));
  }
  ec.swa_pool_bytes = static_cast<uint64_t>(o.swa_pool_mb) << 20;
  ec.swa_ttl_ms = o.swa_ttl_s * 1000;
  ec.swa_directory = std::move(swa_directory);
  ec.swa_holder = std::move(swa_holder);
  if (ec.swa_pool_bytes > 0) {
    // DP ranks of one instance share the host's SWA pool (and an engine server serves it).
    ec.swa_pool = std::make_shared<engine::SwaPool>(engine::SwaPoolOptions{ec.swa_pool_bytes, ec.swa_ttl_ms});
  }
  // Blocks of different weights never share store keys.
  if (!o.model.empty()) ec.model_fingerprint = WeightsFingerprint(model_config, o.model);
  stack->key_extras.push_back({kvcache::ExtraTag::kModel,
                               ec.model_fingerprint.empty() ? engine::ModelFingerprint(model_config) : ec.model_fingerprint});
  if (ec.cache_salt != 0) stack->key_extras.push_back({kvcache::ExtraTag::kCacheSalt, std::to_string(ec.cache_salt)});
  // The store's owner: a `ladle kv-fetcher` child by default (reads land in its shm pool and
  // are copied into the KV from there; it is restarted if it dies), one already running
  // (socket:PATH, as `ladle cluster` shares one per machine), or this process.
  // The stack's private directory (the fetcher's socket, files the ranks share), made once.
  auto private_dir = [&]() -> Status {
    if (!stack->fetcher_dir.empty()) return Status::Ok();
    SweepStalePrivateDirs("/tmp");
    std::string tmpl = fmt::format("/tmp/{}{}-XXXXXX", kPrivateDirPrefix, ::getpid());
    if (::mkdtemp(tmpl.data()) == nullptr) return IoError("cannot make a private directory");
    stack->fetcher_dir = tmpl;
    return Status::Ok();
  };
  if (!o.kv_store.empty() || o.kv_fetcher.rfind("socket:", 0) == 0) LADLE_RETURN_IF_ERROR(private_dir());
  if (o.kv_fetcher.rfind("socket:", 0) == 0) {
    const std::string path = o.kv_fetcher.substr(7);
    auto store = kvcache::FetcherStore::Create(
        [path] { return kvcache::FetcherClient::Connect(path, std::chrono::milliseconds(10000)); });
    if (!store.ok()) return store.status();
    ec.kv_store = std::move(store).value();
    LADLE_LOG_INFO("serve.kv_store fetcher_socket={}", LogSafe(path));
  } else if (!o.kv_store.empty() && o.kv_fetcher == "process") {
    char exe[4096];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    auto kv1 = models[0]->NewKvStorage(1, 1);
    if (n <= 0 || !kv1 || kv1->block_bytes() == 0) return Internal("kv fetcher: no own path or block size");
    exe[n] = '\0';
    FetcherProcess::Options fo;
    fo.exe = exe;
    fo.store_uri = o.kv_store;
    fo.socket_path = stack->fetcher_dir + "/kvf.sock";
    fo.block_bytes = kv1->block_bytes();
    fo.shm_mb = o.kv_fetcher_shm_mb;
    LADLE_ASSIGN_OR_RETURN(auto fp, FetcherProcess::Start(fo));
    stack->fetcher = std::move(fp);
    auto fetcher = stack->fetcher;
    auto store = kvcache::FetcherStore::Create([fetcher] { return fetcher->Connect(); });
    if (!store.ok()) return store.status();
    ec.kv_store = std::move(store).value();
    LADLE_LOG_INFO("serve.kv_store uri={} fetcher_pid={} socket={}", LogSafe(o.kv_store), fetcher->pid(), fo.socket_path);
  } else if (!o.kv_store.empty()) {
    LADLE_ASSIGN_OR_RETURN(auto store, kvcache::KvStore::Open(o.kv_store, kvcache::StoreOptions{}));
    ec.kv_store = std::shared_ptr<kvcache::KvStore>(std::move(store));
    LADLE_LOG_INFO("serve.kv_store uri={}", LogSafe(o.kv_store));
  }
  if (ec.kv_store) {
    ec.kv_store_read = !o.kv_store_no_read;
    ec.kv_fetch_deadline_base_ms = o.kv_fetch_deadline_ms;
  }
  // The cost model: profiled once (by the first rank) into a file the other ranks load, and
  // reported to entrypoints (compute-quota).
  if (ec.chunk_policy == "time" && ec.cost_model_path.empty() && (dp > 1 || !stack->fetcher_dir.empty())) {
    LADLE_RETURN_IF_ERROR(private_dir());
    ec.cost_model_path = stack->fetcher_dir + "/cost_model.txt";
  }
  // Likewise the SPS table of dspark: profiled once, by the first rank.
  if (ec.speculative != "off" && ec.spec_sps_path.empty() && dp > 1) {
    LADLE_RETURN_IF_ERROR(private_dir());
    ec.spec_sps_path = stack->fetcher_dir + "/sps.txt";
  }
  for (int i = 0; i < dp; ++i) {
    engine::EngineConfig rc = ec;
    if (block_events) rc.on_block_event = block_events(i);
    LADLE_ASSIGN_OR_RETURN(auto eng, engine::CreateEngine(rc, std::move(models[static_cast<size_t>(i)]), *t.version_tok));
    stack->ranks.push_back(std::move(eng));
  }
  if (!ec.cost_model_path.empty()) {
    if (auto cm = engine::CostModel::Load(ec.cost_model_path); cm.ok()) stack->cost = *cm;
  }
  return stack;
}

Result<size_t> KvBlockBytes(const std::string& model_config, const std::string& model_dir) {
  engine::ModelConfig mc;
  if (!model_config.empty() || !model_dir.empty()) {
    LADLE_ASSIGN_OR_RETURN(mc, engine::ModelConfig::FromFile(!model_config.empty() ? model_config : model_dir + "/config.json"));
  }
  LADLE_ASSIGN_OR_RETURN(auto model, engine::Model::Create(mc, model_dir));
  auto kv1 = model->NewKvStorage(1, 1);
  if (!kv1 || kv1->block_bytes() == 0) return Internal("the model has no KV block size");
  return kv1->block_bytes();
}

std::string WeightsFingerprint(const engine::ModelConfig& model, const std::string& model_dir) {
  std::string fp = engine::ModelFingerprint(model);
  if (model_dir.empty()) return fp;
  fp += " weights:";
  std::error_code err;
  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(model_dir, err)) {
    if (f.path().extension() == ".safetensors") {
      files.push_back(f.path().filename().string() + "=" + std::to_string(f.file_size(err)));
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) fp += " " + f;
  return fp;
}

Result<server::ServerConfig> BuildServerConfig(const ServeOpts& o, frontend::ModelVersion version, int64_t max_model_len) {
  const char* env_keys = std::getenv("LADLE_API_KEYS");
  LADLE_ASSIGN_OR_RETURN(auto keys, server::ApiKeys::Load(env_keys ? env_keys : "", o.api_key_file));
  server::ServerConfig sc;
  sc.host = o.host;
  sc.port = static_cast<uint16_t>(o.port);
  // The first name is the one /v1/models lists first; the rest are aliases (a comma list or
  // the flag repeated, as vLLM's --served-model-name takes several).
  sc.served_model_name.clear();
  for (const auto& name : o.served_model_names) {
    if (name.empty()) continue;
    if (sc.served_model_name.empty()) {
      sc.served_model_name = name;
    } else {
      sc.model_aliases.push_back(name);
    }
  }
  if (sc.served_model_name.empty()) return InvalidArgument("--served-model-name needs a name");
  sc.max_model_len = max_model_len;
  sc.version = version;
  sc.limits.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
  sc.default_max_tokens = o.default_max_tokens;
  sc.max_tokens_cap = o.max_tokens_cap;
  sc.response_store_ttl_s = o.response_store_ttl_s;
  sc.response_store_entries = static_cast<size_t>(o.response_store_entries);
  sc.response_store_bytes = static_cast<size_t>(o.response_store_mb) << 20;
  sc.max_queue = o.max_queue;
  sc.drain_deadline_ms = o.drain_deadline_ms;
  sc.io_threads = o.io_threads;
  sc.keys = std::move(keys);
  sc.grammar_service.workers = o.grammar_workers;
  sc.grammar_service.threads = static_cast<size_t>(o.grammar_threads);
  sc.grammar_service.max_entries = static_cast<size_t>(o.grammar_cache_entries);
  sc.grammar_service.max_bytes = static_cast<size_t>(o.grammar_cache_mb) << 20;
  sc.grammar_service.compile.max_compile_ms = static_cast<uint32_t>(o.grammar_compile_ms);
  sc.grammar_service.worker_timeout_ms = static_cast<uint32_t>(o.grammar_compile_ms) + 5000;
  sc.grammar_budget_aware = !o.no_grammar_budget;
  sc.grammar_deadline_ms = o.grammar_deadline_ms;
  sc.grammar_whitespace = o.grammar_whitespace == "compact" ? grammar::JsonSchemaOptions::Whitespace::kCompact
                          : o.grammar_whitespace == "pretty" ? grammar::JsonSchemaOptions::Whitespace::kPretty
                                                             : grammar::JsonSchemaOptions::Whitespace::kBounded;
  return sc;
}

}  // namespace ladle::app
