// What `ladle serve`, `ladle engine` and `ladle entrypoint` share: their flags (one options
// struct, registered in groups), the engine stack (model, KV store and its fetcher, DP ranks)
// and the HTTP server's configuration. Internal to the `ladle` binary.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fetcher_process.h"
#include "ladle/core/result.h"
#include "ladle/engine/cost_model.h"
#include "ladle/engine/engine_config.h"
#include "ladle/frontend/model_version.h"
#include "ladle/server/server.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::app {

// Error text JSON-escaped so a log line stays valid JSON (the logger does not escape).
std::string LogSafe(std::string_view s);

struct ServeOpts {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string config_file;
  std::vector<std::string> served_model_names{"ladle"};
  int64_t max_model_len = 65536;
  std::string model_version = "v3.2";
  std::string model;  // weights folder; empty: built-in seeded model
  std::string model_config;  // config.json for the built-in seeded model (e.g. a tiny one for load tests)
  std::string tokenizer;
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
  // Speculative decoding (docs/engine.md): off, fixed:N or dspark, with a drafter folder from
  // `ladle dspark fit`.
  std::string speculative = "off";
  std::string draft;
  int draft_tokens = 5;
  std::string spec_sps;
  int64_t kv_fetch_deadline_ms = 200;
  int64_t swa_pool_mb = 256;
  std::string kv_fetcher = "process";  // process, in-process, or socket:PATH (a fetcher already running)
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

// Flag groups. Common: model version, tokenizer, context length, queue, drain, logging, grammar.
void AddCommonFlags(CLI::App* cmd, ServeOpts* o);
void AddEngineFlags(CLI::App* cmd, ServeOpts* o);  // model, KV, store, EP, scheduling
void AddServerFlags(CLI::App* cmd, ServeOpts* o);  // HTTP, auth, API limits, response store
// Applies `--config FILE` (a JSON object of flag names) to options the command line left unset.
Status ApplyConfigFile(CLI::App* cmd, const std::string& path);
// --config, then a command's own --log-format; returns false (exit 2) after logging an error.
bool FinishFlags(CLI::App* cmd, const ServeOpts& o, const char* what);

struct VersionedTokenizer {
  frontend::ModelVersion version;
  std::unique_ptr<tokenizer::Tokenizer> base, version_tok;
};
Result<VersionedTokenizer> LoadTokenizer(const ServeOpts& o);

// The model, the store (and its fetcher), and `dp` engines (DP ranks) sharing one SWA pool.
// Destruction shuts the engines down, drains the store's writes, then stops the fetcher.
struct EngineStack {
  engine::ModelConfig model_config;
  engine::EngineConfig config;  // as given to every rank
  std::vector<kvcache::ExtraKey> key_extras;
  engine::CostModel cost;
  std::vector<std::unique_ptr<engine::Engine>> ranks;
  std::shared_ptr<FetcherProcess> fetcher;
  std::string fetcher_dir;
  ~EngineStack();
  std::vector<engine::Engine*> Ranks() const;
};
Result<std::unique_ptr<EngineStack>> BuildEngineStack(const ServeOpts& o, const VersionedTokenizer& t, int dp,
                                                      std::shared_ptr<engine::SwaDirectory> swa_directory = nullptr,
                                                      std::string swa_holder = "local",
                                                      // Optional: rank i's EngineConfig::on_block_event.
                                                      std::function<std::function<void(engine::BlockEvent)>(int)> block_events = nullptr);

// A model's identity for keys and peers: engine::ModelFingerprint of the config, plus the weight
// files' names and sizes when the weights come from a folder (the config alone does not tell two
// checkpoints apart). Block store keys and remote vision encoders both compare it.
std::string WeightsFingerprint(const engine::ModelConfig& model, const std::string& model_dir);
// The KV block's size in bytes for the model the engines build from model_config (a config.json)
// or model_dir (its config.json and weights); the built-in default with neither. A machine's
// `ladle kv-fetcher` sizes its slots by it.
Result<size_t> KvBlockBytes(const std::string& model_config, const std::string& model_dir);

// The HTTP server's settings from the flags. `max_model_len` is the limit clients see.
Result<server::ServerConfig> BuildServerConfig(const ServeOpts& o, frontend::ModelVersion version, int64_t max_model_len);

}  // namespace ladle::app
