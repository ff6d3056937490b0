// The engine's one narrow interface (issue: `ladle serve`). The server — or later an
// entrypoint driving prefill/decode workers in other processes — submits token ids with
// sampling settings and an optional per-step mask provider, receives token events and a
// finish, and may cancel. No HTTP or JSON crosses this line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/model.h"
#include "ladle/engine/token.h"

namespace ladle::engine {

using RequestId = uint64_t;

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0 = off
  float min_p = 0.0f;
  std::optional<uint64_t> seed;  // per-request RNG seed; unset = engine-chosen
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int max_tokens = 256;
  // Stop strings: the sample ends at the token whose decoded text completes one (the engine
  // decides; Output::stop_matched names it). The engine emits token ids only: cutting the
  // client's text at the string is the server's (docs/server.md, "Stop strings").
  std::vector<std::string> stop;
  std::vector<TokenId> stop_token_ids;  // in addition to the model's EOS
  bool ignore_eos = false;
  int n = 1;              // independent samples sharing the prompt's KV
  int top_logprobs = -1;  // -1: no logprobs; 0: the chosen token's; k: plus the top k
};

// Filled per step by the structured-output issue: the set of allowed next tokens.
// Thread model: the engine may call FillMask for different indices of one provider at the
// same time (from its mask pool, while the forward runs); calls for one index never overlap,
// and FillMask(i) always sees every earlier Accept(i).
class MaskProvider {
 public:
  virtual ~MaskProvider() = default;
  // Writes a bitset of `vocab_size` bits (1 = allowed) for the next token of sample `index`.
  virtual void FillMask(int index, uint64_t* bits, size_t vocab_size) = 0;
  // The token sampled for `index` (so the automaton advances).
  virtual void Accept(int index, TokenId token) = 0;
  // Why sample `index` got a mask that allows nothing, if the provider knows (the request
  // then ends with this error). Called on the scheduler thread, possibly while FillMask runs.
  virtual std::string Failure(int index) { return {}; }
  // The constraint as data, so that an engine in another process can build the same provider
  // (the cluster's engine server, through its injected factory). Empty: it cannot travel, and
  // a remote engine refuses the request rather than run it unconstrained.
  virtual std::string Describe() const { return {}; }
};

enum class FinishKind : uint8_t { kEos, kStopString, kStopToken, kLength, kCancelled, kError };

struct TokenEvent {
  int index = 0;  // which of the n samples
  TokenId token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<TokenId, float>> top_logprobs;
};

// PD hand-off (docs/engine.md, "PD hand-off"): everything a sequence at position L (its prompt
// length) needs to continue decoding in another engine of the same model exactly as the engine
// that prefilled it would have. Captured by an engine for a request with
// SubmitRequest::handoff_export when the prefill that samples its first token completes, and
// delivered on the request's final Output; resumed by SubmitRequest::resume. The full blocks
// [0, L / 128) travel through the persistent store (EngineConfig::kv_store); the rest is here.
struct HandoffState {
  std::string model;               // the model's chain-key identity (model_fingerprint or ModelFingerprint)
  int64_t position = 0;            // L: the next decode consumes first_token at position L
  TokenId first_token = 0;         // the token sampled after the prompt
  std::vector<uint8_t> ring;       // KvStorage::ReadSlotState at L
  std::vector<uint8_t> partial_block;  // KvStorage::ReadBlock of block L / 128; empty when L % 128 == 0
  int64_t partial_tokens = 0;      // L % 128: the positions of partial_block that hold KV
  int64_t full_blocks = 0;         // L / 128: expected from the resuming engine's pool or store
  // Of the full blocks, how many (from the first) were queued to the exporting engine's store
  // (those it reused from its pool too). Fewer than full_blocks: some could not be written (no
  // store, no prefix cache, a read-out error), and the resume falls back unless its own pool
  // has them. Queued is not yet written: check the store (Match) before resuming, or the
  // resume may fall back.
  int64_t blocks_persisted = 0;
  // The sampler after first_token (SamplerState): with it, sampling continues exactly too.
  uint64_t rng = 0;
  std::vector<std::pair<TokenId, int>> counts;  // penalty counts of generated tokens, sorted
};
// A flat little-endian encoding of a HandoffState (to carry it between processes), and back.
std::vector<uint8_t> EncodeHandoff(const HandoffState& h);
Result<HandoffState> DecodeHandoff(std::span<const uint8_t> bytes);

struct Output {
  RequestId id = 0;
  std::vector<TokenEvent> tokens;
  // Set on the last Output of a sample.
  bool finished = false;
  int finished_index = 0;
  FinishKind finish = FinishKind::kEos;
  std::string stop_matched;  // kStopString: the stop string the last token completed
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  std::string error;          // kError only
  // SubmitRequest::handoff_export: set on the final Output when the state was captured.
  std::shared_ptr<const HandoffState> handoff;
};

// One DP rank's load (an entrypoint reports every rank of every live engine): what the balancers
// see. requests, kv_tokens and quota_seconds are counted at dispatch by the entrypoint (its own
// requests), running and waiting as the engine last reported them.
struct RankLoad {
  std::string engine, role;
  int rank = 0;
  int requests = 0;
  int64_t kv_tokens = 0;
  double quota_seconds = 0;        // compute-quota outstanding now
  double quota_seconds_total = 0;  // compute-quota ever dispatched to it (a counter)
  int running = 0, waiting = 0;
};

// Upper bounds (seconds) of Stats::handoff_latency_buckets, as /metrics renders them.
inline constexpr double kHandoffLatencyBoundsS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                    0.05,   0.1,   0.25,   0.5,   1,    2.5};

struct Stats {
  size_t queue_depth = 0;
  size_t running = 0;
  size_t kv_blocks_used = 0, kv_blocks_total = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t generated_tokens = 0;
  // Blocks written to the persistent store (EngineConfig::kv_store), dropped under its
  // back-pressure, and failed; by traffic class for the written ones.
  uint64_t kv_store_writes = 0, kv_store_write_drops = 0, kv_store_write_errors = 0;
  uint64_t kv_store_writes_agent = 0, kv_store_writes_chatbot = 0;
  // Reads: prompt tokens whose KV came from the store (a subset of prefix_hit_tokens' blocks),
  // fetches started, blocks installed, fetches cut by their deadline, and their total latency.
  uint64_t prefix_hit_tokens_store = 0;
  uint64_t kv_store_fetches = 0, kv_store_fetch_blocks = 0, kv_store_fetch_timeouts = 0;
  double kv_store_fetch_seconds_total = 0;
  // Sequences waiting for a fetch (the "loading" state), now.
  size_t kv_loading = 0;
  // With a fetcher process (kvcache::FetcherStore): whether it is connected, reconnects, its
  // blocks served from shm vs read from the store, and its shm pool (as of about a second ago).
  bool kv_fetcher = false, kv_fetcher_connected = false;
  uint64_t kv_fetcher_reconnects = 0, kv_fetcher_shm_hit_blocks = 0, kv_fetcher_store_read_blocks = 0;
  uint64_t kv_fetcher_slots = 0, kv_fetcher_slots_used = 0, kv_fetcher_slots_pinned = 0;
  uint64_t kv_fetcher_write_drops = 0;
  // The SWA KVCache host pool (EngineConfig::swa_pool) and the hit policy: prefix hits whose
  // SWA entry existed (the whole prefix skipped exactly) or not (the last window replayed),
  // tokens replayed, and the pool's entries, bytes, stores, expiries and evictions.
  uint64_t swa_hits = 0, swa_misses = 0, replayed_tokens = 0;
  uint64_t swa_pool_entries = 0, swa_pool_bytes = 0, swa_pool_stored = 0, swa_pool_expired = 0, swa_pool_evicted = 0;
  // Swap-in (blocks and SWA entries copied into the KV storage while the forward runs): copy
  // time, the part of it a forward had to wait for, and the copies.
  double swap_in_copy_seconds_total = 0, swap_in_exposed_seconds_total = 0;
  uint64_t swap_in_copies = 0;
  double device_idle_fraction = 0.0;
  // PD hand-off: states captured for export, resumes that continued from one, and resumes that
  // fell back to the ordinary path (a full block missing from pool and store, a size or model
  // mismatch): they recompute, with the hit policy.
  uint64_t handoff_exports = 0, handoff_imports = 0, handoff_fallbacks = 0;
  // The hand-off's latency as an entrypoint sees it (a prefill's first token to the decode
  // engine's first): counts per bucket of kHandoffLatencyBoundsS (one more: above the last),
  // and their sum in seconds. Empty where there is no hand-off (one engine).
  std::vector<uint64_t> handoff_latency_buckets;
  double handoff_latency_seconds_total = 0;
  // Per DP rank (an entrypoint; empty for a local engine): docs/cluster.md, "Metrics".
  std::vector<RankLoad> rank_loads;
  // Speculative decoding: drafts verified (Σ L over requests and steps), of them accepted, the
  // verify tokens (Σ (L + 1)), and how many request-steps verified L drafts (index L).
  uint64_t spec_draft_tokens = 0, spec_accepted_tokens = 0, spec_verify_tokens = 0;
  std::vector<uint64_t> spec_verify_lengths;
  // The model's EP ranks (Model::ConfigureExpertParallel), when it has them.
  bool expert_parallel = false;
  ExpertParallelStats ep;
};

// An image in a prompt: its run of placeholder tokens and the embeddings that replace them
// (VisionModel::Encode's rows, one per placeholder), with the content hash that keys every
// block the run touches, so prompts that differ only in an image never share KV.
struct PromptImage {
  int64_t pos = 0;      // first placeholder in the prompt
  int32_t tokens = 0;   // consecutive placeholders
  uint64_t hash_hi = 0, hash_lo = 0;
  std::shared_ptr<const std::vector<float>> embeds;  // tokens × hidden
};

struct SubmitRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  std::shared_ptr<MaskProvider> mask;  // may be null
  // The traffic class of the blocks this request writes to a persistent store (its TTL there):
  // agent (recipe: 3 days) or chatbot (7 days, the default).
  bool agent_traffic = false;
  // PD hand-off (the cluster's prefill engines): store the prefill's SWA snapshot at the anchor
  // a request of this many tokens will hit (its L1 under the hit policy's cap), instead of at
  // (end − 1) rounded down, so the decode engine continuing with prompt + first token restores
  // the ring exactly. 0: the usual anchor.
  int64_t swa_anchor_for_len = 0;
  // PD hand-off, exporting side (n == 1, max_tokens == 1): capture the sequence's state once
  // its prefill completes and deliver it on the final Output (Output::handoff). Every full
  // block of the prompt is queued to EngineConfig::kv_store, exempt from its back-pressure.
  bool handoff_export = false;
  // PD hand-off, resuming side (n == 1): `prompt` is the exported prompt + its first token
  // (L + 1 tokens). The full blocks come from the pool or the store (the request waits in its
  // loading state meanwhile), the partial block and the rings are restored, and the first
  // decode step consumes the first token at L. Anything missing or mismatched: the ordinary
  // path (Stats::handoff_fallbacks). A mask provider must already have accepted first_token.
  std::shared_ptr<const HandoffState> resume;
  // Images: in increasing, non-overlapping order; each run within the prompt.
  std::vector<PromptImage> images;
};

// Outputs are delivered on the engine's thread; the sink must not block (hand off to a queue).
using OutputSink = std::function<void(const Output&)>;

class Engine {
 public:
  virtual ~Engine() = default;
  // Fails fast with kInvalidArgument (bad ids, prompt too long) or kResourceExhausted (queue full).
  virtual Result<RequestId> Submit(SubmitRequest request, OutputSink sink) = 0;
  // Frees the request's KV blocks at once; its sink receives a kCancelled finish.
  virtual void Cancel(RequestId id) = 0;
  virtual Stats GetStats() const = 0;
  // Stops taking requests; in-flight ones finish (or are cancelled at the deadline).
  virtual void Shutdown() = 0;
};

}  // namespace ladle::engine
