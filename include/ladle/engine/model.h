// The reference model of the recipe's shape (V4.1-Flash "causal encoder-decoder", small and
// on the CPU) and the physical KV storage it reads and writes. The engine's block manager
// decides WHICH blocks and ring slots a sequence uses; the model only follows its tables.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/token.h"

namespace ladle::engine {

struct ModelConfig {
  int vocab_size = 129280;  // logit columns (DeepSeek)
  int hidden = 256;
  int encoder_layers = 2;  // SWA + MoE
  int decoder_layers = 2;  // SWA + attention over the global KV + MoE
  int heads = 4;
  int head_dim = 64;
  int experts = 8;          // routed experts
  int experts_top_k = 2;
  int expert_hidden = 256;  // FFN width of one expert (the shared expert too)
  int window = 128;         // sliding-window attention
  int block_size = 128;     // global-KV block (tokens)
  int swa_ring = 134;       // window + 6 slots for speculative rollback
  float rope_theta = 10000.0f;
  float rms_eps = 1e-6f;
  uint64_t seed = 20251130;  // built-in deterministic initialisation

  // The vision tower (vision_model.h): images are cut into vision_patch² patches, encoded by
  // vision_layers transformer layers of width vision_hidden, and every vision_merge × vision_merge
  // patch group is projected to one `hidden` row that replaces one image_token_id placeholder
  // in the prompt. vision_layers = 0 (or an image_token_id outside the vocabulary): no vision.
  int vision_layers = 2;
  int vision_hidden = 128;
  int vision_heads = 4;
  int vision_patch = 16;
  int vision_merge = 2;
  int vision_max_side = 1024;   // pixels: the longer side of a resized image, at most
  int image_token_id = 129279;  // DeepSeek V4's <｜image｜>

  // Reads a config.json (keys as the field names above); missing keys keep defaults.
  static Result<ModelConfig> FromFile(const std::string& path);
};

// Whether the config has a usable vision tower.
bool VisionEnabled(const ModelConfig& c);

// Every field of the config, in a fixed order ("ladle-ref/v1 vocab_size=... seed=..."): the
// model part of a block's chain key when nothing better (a weights hash) is given.
std::string ModelFingerprint(const ModelConfig& c);

// Expert parallelism of the MoE layers (docs/eplb.md, the recipe's Expert-Parallel Load
// Balancer): the routed experts of every MoE layer live in physical slots spread over `ranks`
// EP ranks, each a worker thread with its own weight buffers, plus `redundant_per_rank` replica
// slots per rank (the total padded to a multiple of ranks). Tokens are dispatched to the rank
// holding their expert's chosen replica and combined back. Per-expert routed tokens are counted
// over the last `window_steps` forward steps, and every `interval_steps` a new placement is
// planned and the changed slots' weights are copied into fresh buffers off the forward path,
// switched in at a step boundary. A replica is an exact copy and a sequence's rows for one
// expert go to one replica together, so outputs are bit-identical with and without EP and
// under any placement.
struct ExpertParallelConfig {
  int ranks = 0;               // 0: off (experts run in the sequence's own thread)
  int redundant_per_rank = 0;  // replica slots per rank beyond the resident experts
  std::string replica_policy = "round-robin";  // or "least-loaded"
  std::string placement_policy = "eplb";       // or "layer-budget"
  int num_nodes = 1;           // hierarchical EPLB: nodes (divides ranks) and expert groups
  int num_groups = 1;
  uint64_t window_steps = 100;     // per-expert load window (steps = Forward calls)
  uint64_t interval_steps = 1000;  // re-arrange every this many steps; 0: never
  // The built-in router bias (off by default; outputs then depend on the step, so exactness
  // tests keep it off): a Zipf skew over each layer's experts with this exponent, drifting with
  // the given half-life in steps, so the balancer has work. 0: no bias.
  double router_skew = 0.0;
  uint64_t router_skew_half_life = 10000;
  uint64_t router_skew_seed = 1;
};

// What the EP ranks did (ExpertParallelConfig). moe_lb = slowest rank / mean rank, over the
// tokens of the last `recent_steps` steps.
struct ExpertParallelStats {
  int ranks = 0;
  int slots_per_rank = 0;          // per layer
  uint64_t steps = 0;              // forward steps seen
  uint64_t rearrangements = 0;     // placements switched in
  uint64_t bytes_moved = 0;        // weights copied into a slot from another rank (all-time)
  uint64_t bytes_copied_local = 0; // copied from a slot of the same rank
  double last_rearrange_ms = 0;    // plan + copy of the last switched-in placement
  uint64_t last_rearrange_step = 0;
  uint64_t recent_steps = 0;
  double moe_lb_max = 1.0, moe_lb_mean = 1.0;  // tokens: worst layer, mean over layers
  double moe_lb_static = 1.0;      // mean over layers the same tokens would give without EPLB
  double moe_lb_wall = 1.0;        // slowest rank's expert time / mean rank's, summed over layers
  std::vector<double> moe_lb_per_layer;
};

// Where the KV lives. `num_blocks` global-KV blocks of `block_size` tokens; `num_slots`
// per-sequence SWA rings (one per running sequence, every SWA layer).
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual int num_blocks() const = 0;
  virtual int num_slots() const = 0;
  // Copies ring `from` to ring `to` (n > 1 samples fork the prompt's window).
  virtual void CopySlot(int from, int to) = 0;
  virtual size_t bytes() const = 0;
  // Marks ring `slot` empty before it serves another sequence. A step at start_pos 0 resets
  // its ring by itself; a sequence that starts later (a prefix hit) needs this, or the model
  // would read the previous owner's window. No-op where a storage keeps no ring state.
  virtual void ResetSlot(int slot) {}
  // Copies global-KV block `from` to `to` (copy-on-write of a shared, partly filled block).
  virtual void CopyBlock(int from, int to) {}
  // Byte access to one global-KV block: every component the model keeps for it, in one fixed
  // layout, so a block written out (to the persistent store) and read back into any block of
  // any storage of the same model serves the same hit. block_bytes() is 0 where a storage has
  // no byte access; ReadBlock/WriteBlock then fail (false), as they do for a wrong size.
  virtual size_t block_bytes() const { return 0; }
  virtual bool ReadBlock(int block, std::span<uint8_t> out) const { return false; }
  virtual bool WriteBlock(int block, std::span<const uint8_t> in) { return false; }
  // Byte access to a slot's SWA state at a block boundary (the recipe's SWA KVCache entry):
  // what a sequence at `anchor` needs of its ring to continue exactly as it would have, in one
  // fixed layout. ReadSwa fails (false) when the ring no longer holds the whole window ending
  // at `anchor`; WriteSwa makes `slot` a sequence at `anchor`. 0 / false where unsupported.
  virtual size_t swa_bytes() const { return 0; }
  virtual bool ReadSwa(int slot, int64_t anchor, std::span<uint8_t> out) const { return false; }
  virtual bool WriteSwa(int slot, int64_t anchor, std::span<const uint8_t> in) { return false; }
  // Byte access to a slot's whole ring state at position `pos`, at any position (the PD
  // hand-off, engine.h HandoffState): every SWA layer's K/V ring, encoder and decoder (the
  // decoder's from the prefill's Decoder SWA Bounded Replay), the encoder-output ring and the
  // positions they hold, in one fixed layout. A slot written from it continues exactly as the
  // slot it was read from would have: its next step starts at `pos`. ReadSlotState fails
  // (false) unless every ring of the slot ends at `pos`; both fail for a wrong size.
  // 0 / false where unsupported.
  virtual size_t slot_state_bytes() const { return 0; }
  virtual bool ReadSlotState(int slot, int64_t pos, std::span<uint8_t> out) const { return false; }
  virtual bool WriteSlotState(int slot, int64_t pos, std::span<const uint8_t> in) { return false; }
  // Whether WriteSlotState(any slot, pos, in) would succeed (checked before it is queued).
  virtual bool SlotStateFits(int64_t pos, std::span<const uint8_t> in) const { return false; }
};

// Asks a forward to snapshot the sequence's SWA state (KvStorage::ReadSwa's layout) at the
// moment it reaches `anchor`, inside the step: a long prefill chunk overwrites the ring past
// the anchor's window before the step ends, so the copy cannot be taken afterwards. `ok` says
// whether the ring then held the whole window (it does not after a rollback or a replay that
// started less than a window before the anchor).
struct SwaCapture {
  int64_t anchor = -1;
  std::vector<uint8_t> bytes;
  bool ok = false;
};

// Lets a forward start before the KV it reads has all been copied in (the recipe's
// layer-overlapped swap-in): the model calls WaitLayer(l) before forward layer l (encoder
// layers first, then decoder layers) first reads KV that may still be arriving; the engine's
// swap-in thread returns once the copies layer l needs have landed. Must not throw.
class KvReadyGate {
 public:
  virtual ~KvReadyGate() = default;
  virtual void WaitLayer(int layer) = 0;
};

// An input embedding that replaces the token embedding of one of a step's tokens: an image's
// patch-group embedding at its placeholder token. `row` holds ModelConfig::hidden floats.
struct EmbedRow {
  int32_t index = 0;  // in SeqStep::tokens
  const float* row = nullptr;
};

// One sequence's work in a forward pass.
struct SeqStep {
  std::span<const TokenId> tokens;         // new tokens, at positions start_pos...
  int64_t start_pos = 0;                   // tokens before this are in the KV already
  std::span<const int32_t> block_table;    // global-KV blocks covering [0, start_pos + tokens.size())
  int32_t swa_slot = -1;                   // this sequence's SWA ring
  bool prefill = false;                    // prefill: encoder over `tokens`; decoder only over the
                                           // prompt's last 128 (Decoder SWA Bounded Replay)
  bool exact = false;                      // prefill with the decoder over everything (tests)
  bool want_logits = true;                 // logits of the last token
  // Global KV of positions below this is already in the blocks and is read, not rewritten:
  // Encoder SWA Bounded Replay recomputes those tokens only to rebuild the SWA ring.
  int64_t kv_written = 0;
  int logits_count = 1;                    // with want_logits: rows for the last this-many
                                           // tokens, oldest first (verifying a draft span)
  // Optional: snapshot the SWA state when the step passes swa_capture->anchor (the step must
  // cover it: start_pos <= anchor <= start_pos + tokens.size()).
  SwaCapture* swa_capture = nullptr;
  // Optional: KV of this step that is still being swapped in (see KvReadyGate).
  KvReadyGate* ready = nullptr;
  // Optional, with want_logits: receives the final-normed hidden state of each logits row
  // (logits_count × hidden floats, row-major): what the LM head reads, and what a speculative
  // drafter (drafter.h) conditions on.
  float* hidden_out = nullptr;
  // Optional: embeddings that replace the token embeddings at some of `tokens` (images), in
  // increasing index order. The encoder sees them as it sees a token's embedding; a replay of
  // those positions must pass them again.
  std::span<const EmbedRow> embeds;
};

class Model {
 public:
  virtual ~Model() = default;
  // `weights_dir` empty: the built-in seeded initialisation (no file needed). Otherwise a
  // folder with config.json and *.safetensors (mmap).
  static Result<std::unique_ptr<Model>> Create(const ModelConfig& config, const std::string& weights_dir);

  virtual const ModelConfig& config() const = 0;
  // nullptr when the memory cannot be allocated.
  virtual std::unique_ptr<KvStorage> NewKvStorage(int num_blocks, int num_slots) const = 0;

  // Runs the batch and writes logits_count rows of vocab_size logits per step with
  // want_logits, in order. Batch-invariant: a sequence's logits are bit-identical alone or
  // in any batch.
  virtual Status Forward(std::span<const SeqStep> batch, KvStorage& kv, std::vector<float>* logits) = 0;

  // Whether Forward calls SeqStep::ready before each layer (else the engine finishes every
  // swap-in copy before the forward starts), and the first forward layer that reads the global
  // (block) KV, which a fetched block must reach before; SWA entries are needed from layer 0.
  virtual bool honours_ready_gate() const { return false; }
  virtual int global_kv_first_layer() const { return 0; }

  // Turns expert parallelism on (before the first Forward; not thread-safe with Forward).
  // kInvalidArgument for a bad shape or policy name; kUnsupported where a model has no EP.
  virtual Status ConfigureExpertParallel(const ExpertParallelConfig& ep) {
    return Status(StatusCode::kUnsupported, "this model has no expert parallelism");
  }
  // False when EP is off. Thread-safe with Forward.
  virtual bool GetExpertParallelStats(ExpertParallelStats* out) const { return false; }
};

}  // namespace ladle::engine
