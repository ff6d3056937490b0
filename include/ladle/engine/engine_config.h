// Configuration of the reference engine and its factory. Scheduling knobs pick the policy
// classes of scheduler_policies.h; the cost model is loaded from `cost_model_path` when the
// file exists, otherwise profiled at start-up (and saved there when a path is given).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/block_manager.h"
#include "ladle/engine/drafter.h"
#include "ladle/engine/engine.h"
#include "ladle/engine/model.h"
#include "ladle/engine/spec_policy.h"
#include "ladle/engine/swa_pool.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::engine {

// One scheduler step as it ran (for the benchmark and tests; called on the engine thread).
struct StepRecord {
  uint64_t step = 0;
  int decodes = 0;
  int prefills = 0;
  int64_t prefill_tokens = 0;
  double budget_ns = 0;     // 0 when the chunk policy has no time budget
  double predicted_ns = 0;  // the cost model's estimate of the batch
  double forward_ns = 0;    // measured forward + sample on the device thread
  bool budget_bound = false;  // a prefill chunk was cut to fit the budget
};

// A change to the prefix cache of one engine (its pool), for a cluster's KV-event subscribers
// (docs/cluster.md, "Wire protocol"). kStored: consecutive full blocks of one sequence newly
// named in the pool, each by its 128-bit chain key, with the key of the block before the first
// (none for a sequence's first block) and block_size tokens per key. kRemoved: keys evicted.
struct BlockEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  std::vector<BlockHash> keys;
  std::optional<BlockHash> parent;
  std::vector<TokenId> tokens;
  int block_size = 128;
};

struct EngineConfig {
  int num_blocks = 512;       // global-KV blocks of 128 tokens
  int max_running = 64;       // sequences in the running batch (= SWA ring slots)
  int max_queue = 1024;       // waiting requests before Submit answers kResourceExhausted
  int64_t max_model_len = 65536;  // prompt + max_tokens

  // Chunked prefill. "time": the cost-model budget below; "fixed": `chunk_tokens` per step.
  std::string chunk_policy = "time";
  // Per-step budget. The default suits the CPU reference model (a batch-8 decode step takes
  // ≈ 60–100 ms on 2 shared cores); a GPU engine would use a few ms.
  int64_t step_budget_ns = 200'000'000;
  int64_t chunk_tokens = 512;     // "fixed" chunk; also the cap of a "time" chunk
  int64_t min_chunk_tokens = 16;  // the first prefill of a step gets at least this
  std::string admission_policy = "fifo";
  std::string preemption_policy = "newest";
  int reserve_blocks = 1;     // headroom admission leaves for decode growth

  std::string cost_model_path;  // load if present; else profile and save here if set
  int profile_repeats = 3;     // timings per profiled point (the median is kept)
  int64_t profile_max_q = 512;

  bool async_scheduling = true;
  // Grammar masks of a step are filled on the shared thread pool while the device runs that
  // step's forward (the device thread takes the rest once the logits are ready). false: all
  // masks are filled one after another on the device thread after the forward.
  bool overlap_masks = true;
  bool prefix_cache = true;
  uint64_t cache_salt = 0;  // extra key of every block hash (e.g. model revision)
  // The model's identity in every block's chain key (ExtraTag::kModel). Empty: derived from the
  // ModelConfig (ModelFingerprint), which does not see the weights: a server loading weights
  // from files should set it (e.g. from their hashes) before blocks go to a shared store.
  std::string model_fingerprint;
  TokenId eos_id = 1;
  // Added to the end-of-sentence logit before sampling (0: off). For random-weight test and demo
  // models only, whose EOS is otherwise ~1 in the vocabulary size: with a bias their answers
  // end on their own, as a real model's do, so agents that treat a max_tokens stop as an error
  // (Claude Code) can be tested. Logprobs then describe the biased distribution.
  float eos_logit_bias = 0.0f;
  uint64_t seed = 0x1ad1e;  // seeds requests that carry no seed of their own
  int64_t shutdown_deadline_ms = 30'000;

  // Optional persistent block store (kvcache, the recipe's 3FS role): every full block a
  // forward computes (prefill and decode) is written to it asynchronously, in the request's
  // traffic class, as a chain piece linked to the sequence's previous block. A write never
  // delays a step: past kv_store_max_inflight_bytes of writes in flight, blocks are dropped and
  // counted (Stats::kv_store_write_drops), never queued without bound.
  std::shared_ptr<kvcache::KvStore> kv_store;
  int64_t kv_store_max_inflight_bytes = 256ll << 20;
  // Reads from kv_store (the recipe's "Block KVCache" hit: Match, then fetch): a waiting request
  // whose prompt prefix the pool lacks asks the store for the rest (Match, metadata only, then
  // Get into host buffers) and waits in its own state while the requests behind it run. What
  // arrived by the deadline (base + per block, capped), as a contiguous prefix, is installed
  // into pool blocks by device-ordered copies before the next forward; the rest recomputes.
  bool kv_store_read = true;
  int64_t kv_fetch_deadline_base_ms = 200;
  int64_t kv_fetch_deadline_per_block_ms = 5;
  int64_t kv_fetch_deadline_max_ms = 5000;
  size_t kv_fetch_chunk_blocks = 4;  // blocks per Get: a deadline keeps the chunks that arrived
  // On a prefix hit, rebuild the SWA ring exactly by replaying the whole prefix through the
  // encoder (global KV still read from the blocks, not rewritten), instead of the last 128
  // tokens with truncated attention (Encoder SWA Bounded Replay). For tests and to measure the
  // approximation; costs the prefix's encoder compute.
  bool exact_replay = false;
  // The SWA KVCache host pool (recipe "SWA KVCache"): snapshots of a sequence's SWA state at
  // block boundaries (after prefill at (end − 1) rounded down to a block; during decode at each
  // block crossing, the latest stored at request end), bounded, expiring after swa_ttl_ms. A
  // prefix hit whose entry exists at L1 skips the whole prefix exactly; without one the last
  // window is replayed. null: the engine makes a pool of swa_pool_bytes (0: no pool). Shared
  // by handle, so engines of one process (DP ranks) can share one pool.
  std::shared_ptr<SwaPool> swa_pool;
  uint64_t swa_pool_bytes = 256ull << 20;
  int64_t swa_ttl_ms = 180'000;
  // Optional: where the pool's entries are recorded (key → holder), for a cluster's directory.
  std::shared_ptr<SwaDirectory> swa_directory;
  std::string swa_holder = "local";
  std::function<void(const StepRecord&)> on_step;  // optional; must not block
  // Optional: the pool's block events (BlockEvent), on the scheduler thread; must not block.
  // Unset, the engine builds none.
  std::function<void(BlockEvent)> on_block_event;

  // Speculative decoding (docs/engine.md, "Speculative decoding"): "off", "fixed:N" (verify N
  // drafts per request per step) or "dspark" (variable-length verification, Algorithm 1 over
  // the SPS table). Needs a drafter. Greedy output is token-identical to "off", and sampled
  // output keeps its distribution (a draft token is accepted exactly when the target's own
  // sample equals it: rejection sampling with a deterministic drafter).
  std::string speculative = "off";
  std::shared_ptr<const Drafter> drafter;
  int draft_tokens = 5;  // γ (at most the drafter's, and at most the ring's rollback slots − 1)
  // dspark: the SPS(B) table. Loaded from spec_sps_path when that file exists, else profiled
  // at start-up (and saved there when a path is given), unless spec_sps is given.
  std::optional<SpsTable> spec_sps;
  std::string spec_sps_path;
  int64_t spec_max_step_tokens = 512;  // cap of B in Algorithm 1 (and of the profile)
};

// Builds the engine and starts its threads. Fails on bad settings or an unreadable cost
// model file; profiles the model when no cost model is available ("time" policy only).
// Sinks run on the engine's scheduler thread: they may call Submit, Cancel and GetStats,
// but not Shutdown (or destroy the engine).
Result<std::unique_ptr<Engine>> CreateEngine(const EngineConfig& config, std::unique_ptr<Model> model,
                                             tokenizer::Tokenizer tokenizer);

}  // namespace ladle::engine
