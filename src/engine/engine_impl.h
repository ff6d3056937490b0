// The reference engine's internals: requests and their samples (sequences), the batches
// handed to the device, and EngineImpl, which runs the scheduler thread. Only the scheduler
// thread touches Request/Seq state and the BlockManager; the device thread touches only a
// launched Batch and each sequence's DevSeq (sampler state), in launch order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device.h"
#include "ladle/engine/block_manager.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/kv_hit_policy.h"
#include "ladle/engine/sampler.h"
#include "ladle/engine/scheduler_policies.h"
#include "ladle/engine/swa_pool.h"
#include "ladle/kvcache/fetcher_store.h"
#include "stop_checker.h"
#include "swap_in.h"

namespace ladle::engine {

struct Request {
  RequestId id = 0;
  std::vector<TokenId> prompt;
  std::vector<PromptImage> images;  // SubmitRequest::images
  SamplingParams params;
  std::shared_ptr<MaskProvider> mask;
  OutputSink sink;
  uint64_t arrival = 0;
  int unfinished = 0;
  int64_t cached_tokens = 0;
  bool counted_queued = true;  // still counted in the queue depth
  bool agent_traffic = false;  // the store's traffic class of its blocks
  int64_t swa_anchor_for_len = 0;  // SubmitRequest::swa_anchor_for_len
  bool handoff_export = false;     // SubmitRequest::handoff_export
  std::shared_ptr<const HandoffState> resume;  // SubmitRequest::resume until AddRequest checks it
};

// A hand-off export's full prompt blocks: which were queued to the store (set by the device
// thread's copy-out; read in post-processing after the final sample, which the device runs
// after every copy-out of the request's blocks).
struct HandoffPersist {
  std::vector<uint8_t> queued;  // one per full block of the prompt
};

// What the device thread owns of a sequence: its sampler state and the last sampled token,
// which is the input of its next decode (the CPU may not know it yet: async scheduling).
struct DevSeq {
  SamplingParams params;
  std::shared_ptr<MaskProvider> mask;
  int index = 0;
  SamplerState sampler;
  TokenId last_token = 0;
  std::vector<uint64_t> mask_bits;
  // Speculative decoding (engine_spec.cc): the position last_token goes to, tokens sampled so
  // far (the max_tokens cap), and the drafts after last_token with their confidences.
  int64_t pos = 0;
  int64_t emitted = 0;
  std::vector<TokenId> drafts;
  std::vector<float> conf;
  // The decode copy area under speculation (engine_spec.cc, SpecSwaCopy): spec decodes'
  // positions are the device's, so the device keeps their copier; empty until the first spec
  // decode after a prefill.
  std::optional<SwaDecodeCopier> swa_copier;
  // Whether to draft (engine_spec.cc, DraftAfterSample): the last first-draft confidence
  // (-1: none yet), steps not drafted since, and the refresh interval.
  double pi1 = -1;
  uint32_t skipped = 0;
  uint32_t refresh_every = 16;
};

// A store read for a waiting sequence (EngineConfig::kv_store_read). Filled on the store's
// threads under FetchInbox::mu; the scheduler reads a chunk's blocks only once it is done.
struct Fetch {
  std::vector<BlockHash> keys;                // the prefix blocks the pool lacked
  std::vector<std::vector<uint8_t>> values;   // host buffers, one block each (a plain store)
  std::vector<kvcache::FetcherStore::Pinned> pinned;  // or blocks pinned in the fetcher's shm
  std::vector<Result<size_t>> results;        // per key, once its chunk is done
  std::vector<uint8_t> chunk_done;            // per Get of kv_fetch_chunk_blocks keys
  size_t present = 0;                         // Match's answer (keys fetched)
  size_t chunks_left = 0;
  bool matched = false, done = false;
  std::chrono::steady_clock::time_point started, deadline, finished;
};
// Where store completions report; outlives the engine (a completion may come late).
struct FetchInbox {
  std::mutex mu;
  std::function<void()> wake;  // wakes the scheduler; null once the engine is gone
};

// One of a request's n samples.
struct Seq {
  enum class State : uint8_t { kWaiting, kRunning, kFinished };
  std::shared_ptr<Request> req;
  int index = 0;
  State state = State::kWaiting;
  std::vector<TokenId> tokens;  // prompt + generated tokens the scheduler knows
  int64_t target = 0;     // prefill runs until `computed` reaches this
  int64_t computed = 0;   // positions whose forward has been launched
  int64_t sampled = 0;    // samples launched (tokens that will come back)
  int64_t generated = 0;  // tokens post-processed
  bool decoding = false;
  int64_t kv_written = 0;  // global KV below this is already in the blocks (a prefix hit)
  std::vector<int32_t> blocks;
  std::vector<BlockHash> hashes;  // chain key of each full block of `tokens`
  size_t registered = 0;         // blocks offered to the prefix cache
  int32_t slot = -1;
  int inflight = 0;              // launched batches not yet post-processed
  uint64_t last_step = 0;        // the last step that scheduled it
  // n > 1: sample 0 prefills the shared part; the others fork from it at `fork_at`.
  Seq* fork_parent = nullptr;
  int64_t fork_at = 0;
  int pending_forks = 0;
  std::shared_ptr<DevSeq> dev;
  std::unique_ptr<StopChecker> stop;  // only with stop strings
  // Store reads: a fetch in flight (the sequence waits, others pass it), whether one was
  // considered, and what the pool held then / what the store added.
  std::shared_ptr<Fetch> fetch;
  bool fetch_tried = false;
  size_t pool_prefix = 0, store_blocks = 0;
  // SWA KVCache (engine_swa.cc): the prefill's anchor (-1: none), its snapshot once taken
  // (stored when the prefill's last chunk is done), the decode copy area and its latest copy
  // (stored at request end).
  int64_t swa_anchor = -1;
  std::shared_ptr<SwaCapture> swa_prefill_cap;
  std::optional<SwaDecodeCopier> swa_copier;
  std::shared_ptr<SwaCapture> swa_last_copy;
  // PD hand-off (engine_handoff.cc): the state to resume from until the sequence is admitted
  // (null once used or fallen back), and for an export its blocks' copy-outs and the state to
  // deliver on the final Output.
  std::shared_ptr<const HandoffState> resume;
  std::shared_ptr<HandoffPersist> handoff_persist;
  std::shared_ptr<const HandoffState> handoff_out;
  // Speculative decoding: the latest draft confidences post-processing has seen (in async
  // scheduling those of two steps earlier), which size the next step's verify capacity.
  std::vector<float> spec_conf;
};

struct Entry {
  std::shared_ptr<Seq> seq;
  std::shared_ptr<DevSeq> dev;
  std::vector<TokenId> tokens;  // prefill: the chunk; decode: filled on the device
  bool decode = false;
  int64_t start_pos = 0;
  int64_t kv_written = 0;
  std::vector<int32_t> table;
  int32_t slot = -1;
  bool sample = false;
  Sampled result;
  std::shared_ptr<SwaCapture> swa_capture;  // filled by the forward (SeqStep::swa_capture)
  // A hand-off export's last prefill chunk: the rings and partial block are read right after
  // the forward, the sampler state right after the sample (device thread).
  std::shared_ptr<HandoffState> handoff;
  // Speculative decoding (engine_spec.cc). A spec decode's position and verify length L are
  // set on the device (they depend on the previous step's acceptance); it samples up to L + 1
  // tokens into `results` (the first rejected draft's replacement, or the bonus token, last).
  // L = -1: nothing to run (the sample's max_tokens was reached). `conf` returns the new
  // drafts' confidences to the scheduler.
  bool spec = false;
  int verify = 0;
  std::vector<float> hidden;  // final-normed hidden rows of the step's logits rows
  std::vector<Sampled> results;
  std::vector<float> conf;
};

// The batch's masks, filled on the shared pool while the device runs the forward; the
// device thread claims whatever the pool has not started once the logits are ready, so the
// sample never waits on a busy pool (only on masks already being computed).
struct MaskWork {
  std::vector<DevSeq*> seqs;
  size_t vocab = 0;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
  // Claims and fills masks until none is left unclaimed.
  void Drain();
  // Drain(), then waits for masks other threads are still filling.
  void Finish();
};

struct Batch {
  uint64_t step = 0;
  std::shared_ptr<MaskWork> masks;  // null when no entry has a mask provider
  std::vector<Entry> entries;
  std::vector<int32_t> resets;                       // ResetSlot before the forward (new owners)
  std::vector<std::pair<int32_t, int32_t>> copies;  // CopySlot(from, to) before the forward
  // Swap-in, overlapped with this batch's forward (SwapIn): WriteBlock(block, bytes) of blocks
  // fetched from the store, already named in the pool (a sequence of this batch may read
  // them), and WriteSwa(slot, anchor, bytes) of SWA entries hit in the host pool. `keep` owns
  // the bytes (a host buffer or a pinned shm slot) until the copy is done.
  struct Install {
    int32_t block = -1;
    std::span<const uint8_t> bytes;
    std::shared_ptr<void> keep;
  };
  std::vector<Install> installs;
  struct SwaRestore {
    int32_t slot = -1;
    int64_t anchor = 0;
    std::shared_ptr<const std::vector<uint8_t>> bytes;
  };
  std::vector<SwaRestore> swa_restores;
  // WriteSlotState(slot, position, ring) of resumed hand-offs (their partial block is an Install).
  struct SlotRestore {
    int32_t slot = -1;
    std::shared_ptr<const HandoffState> state;
  };
  std::vector<SlotRestore> slot_restores;
  int64_t spec_capacity = 0;  // speculative decoding: the step's token budget B (SpecPolicy)
  std::vector<float> logits;
  Status status;
  StepRecord record;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

// The verification policy EngineConfig::speculative names (null for "off"), after checking the
// drafter against the model; "dspark" loads or profiles its SPS table (engine_spec.cc).
Result<std::unique_ptr<SpecPolicy>> MakeEngineSpecPolicy(const EngineConfig& config, Model& model, KvStorage& kv);

class EngineImpl : public Engine {
 public:
  EngineImpl(EngineConfig config, std::unique_ptr<Model> model, std::unique_ptr<KvStorage> kv,
             tokenizer::Tokenizer tok, std::unique_ptr<ChunkPolicy> chunk,
             std::unique_ptr<AdmissionPolicy> admission, std::unique_ptr<PreemptionPolicy> preemption,
             std::optional<CostModel> cost, std::unique_ptr<SpecPolicy> spec);
  ~EngineImpl() override;

  Result<RequestId> Submit(SubmitRequest request, OutputSink sink) override;
  void Cancel(RequestId id) override;
  Stats GetStats() const override;
  void Shutdown() override;

 private:
  // Scheduler thread.
  void Loop();
  void DrainInbox();
  void AddRequest(std::shared_ptr<Request> r);
  std::shared_ptr<Batch> Schedule();  // engine_schedule.cc
  bool ScheduleDecode(const std::shared_ptr<Seq>& s, Batch* b, std::vector<Seq*>* in_batch);
  bool TryAdmit(const std::shared_ptr<Seq>& s, Batch* b, StepBudget* budget, std::vector<Seq*>* in_batch);
  void AddPrefillChunk(const std::shared_ptr<Seq>& s, int64_t q, Batch* b);
  bool GrowBlocks(Seq* s, int64_t positions);
  void Preempt(Seq* s);
  void RegisterBlocks(Seq* s);
  // Block events (EngineConfig::on_block_event): block i of s joins `ev` (a run of one chain),
  // which is sent first when i does not continue it; FlushStored sends what `ev` holds.
  void NoteStored(const Seq* s, size_t i, BlockEvent* ev);
  void FlushStored(BlockEvent* ev);
  void StartMasks(const std::shared_ptr<Batch>& b);  // device thread, before the forward
  void LaunchForward(const std::shared_ptr<Batch>& b, bool after_gap);
  void LaunchSample(const std::shared_ptr<Batch>& b);
  // Device thread: one row of logits → the sample's next token (EOS bias, its mask bits as
  // filled, the sampler), accepted by its mask provider; it becomes last_token.
  Sampled SampleRow(DevSeq& d, std::span<float> logits);
  void PostProcess(const std::shared_ptr<Batch>& b);
  void AcceptToken(Seq* s, const Sampled& r);
  void FinishSeq(Seq* s, FinishKind kind, TokenEvent* last, std::string matched, std::string error);
  void CancelRequest(RequestId id);
  void PublishStats();

  EngineConfig config_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvStorage> kv_;
  tokenizer::Tokenizer tok_;
  std::unique_ptr<ChunkPolicy> chunk_;
  std::unique_ptr<AdmissionPolicy> admission_;
  std::unique_ptr<PreemptionPolicy> preemption_;
  std::optional<CostModel> cost_;
  BlockManager blocks_;
  size_t vocab_ = 0, valid_vocab_ = 0;
  int block_size_ = 128;
  SwaGeometry swa_;  // block, window and rollback of the model (the hit policy's geometry)
  // Tagged extras of every block's chain key: the model fingerprint and the cache salt, so two
  // models (or salts) never share a block in the pool or in a store they share.
  std::vector<kvcache::ExtraKey> key_extras_;

  // Blocks named since the last flush, to write to config_.kv_store: a chain piece of one
  // sequence each. Flushed onto the device right after the forward that computed them is
  // launched (and at the end of post-processing), so the copy-out runs after that forward and
  // before any later forward that could reuse the block (the device is FIFO).
  struct PersistPiece {
    std::vector<int32_t> blocks;
    std::vector<BlockHash> keys;
    std::optional<BlockHash> parent;
    bool agent = false;
    // A hand-off export's blocks (never dropped under back-pressure): the first one's index.
    std::shared_ptr<HandoffPersist> handoff;
    size_t handoff_first = 0;
  };
  std::vector<PersistPiece> persist_;  // scheduler thread only
  void FlushPersists();
  // Store reads (engine_fetch.cc). FetchWaits: true while `s` must keep waiting for its fetch
  // (started here when it is worth one); at completion or deadline it installs what arrived.
  bool FetchWaits(const std::shared_ptr<Seq>& s, Batch* b);
  void StartFetch(Seq* s, size_t first, size_t full);
  void InstallFetched(Seq* s, Batch* b);
  void HashPrefix(Seq* s, int64_t blocks);
  // Block i's chain key: the parent's, the block's tokens, the engine's extras and the content
  // hash of every image whose placeholders the block covers.
  BlockHash SeqBlockHash(const Seq* s, size_t i) const;
  Status CheckImages(const SubmitRequest& request) const;
  // A prefill entry's image embeddings (SeqStep::embeds) for the positions it covers.
  void ImageRows(const Entry& e, std::vector<EmbedRow>* rows);
  // SWA KVCache (engine_swa.cc). DecideWithSwa: the hit policy for a sequence whose pool hit is
  // `kv_written` tokens, with the SWA entry to restore on an SWA hit (and the prefill anchor). PlanSwaCapture:
  // asks the entry's forward for a snapshot where one is due. OnSwaDone: after the entry's
  // batch, keeps or stores the snapshot. StoreSwa: puts a snapshot in the pool.
  HitDecision DecideWithSwa(Seq* s, int64_t kv_written, std::shared_ptr<const std::vector<uint8_t>>* entry);
  void PlanSwaCapture(Seq* s, Entry* e);
  void OnSwaDone(Seq* s, const Entry& e);
  void StoreSwa(Seq* s, const SwaCapture& c);
  // Device thread: starts the batch's swap-in and marks the steps that must wait for it.
  bool StartSwapIn(Batch* b, std::vector<SeqStep>* steps);
  // PD hand-off (engine_handoff.cc). CheckResume: whether a submitted state fits this engine
  // (else the request takes the ordinary path, counted). QueueHandoffBlocks: an export's reused
  // full blocks go to the store too. TryAdmitResume: admits a resumed sequence straight into
  // decode at L (kFallback: a full block is missing; the ordinary path follows). The capture:
  // on the device after the forward and after the sample, completed in post-processing.
  bool CheckResume(const Request& r, const HandoffState& h) const;
  void QueueHandoffBlocks(Seq* s, const std::vector<int32_t>& blocks);
  enum class ResumeAdmit { kAdmitted, kNotNow, kFallback };
  ResumeAdmit TryAdmitResume(const std::shared_ptr<Seq>& s, Batch* b, AdmissionView v);
  void CaptureHandoffRings(const Entry& e);    // device thread, after the forward
  void CaptureHandoffSampler(const Entry& e);  // device thread, after the sample
  void FinishHandoffCapture(Seq* s, const Entry& e);
  std::atomic<uint64_t> stat_handoff_exports_{0}, stat_handoff_imports_{0}, stat_handoff_fallbacks_{0};
  // Speculative decoding (engine_spec.cc). A spec decode is scheduled by ScheduleDecode with
  // blocks for its longest outcome; the device sets its position and length. PlanSpecCapacity: the step's
  // budget from the confidences the scheduler has. PrepareSpecSteps (device, before the
  // forward): each spec decode's L under that budget from its current confidences, its tokens
  // and rows. SampleSpec (device): samples the rows in order and stops at the first rejected
  // draft; DraftAfterSample then drafts for every sequence that sampled. PostProcessSpec: the
  // accepted tokens, in order, and the scheduler's bounds.
  void PlanSpecCapacity(Batch* b);
  void PrepareSpecSteps(Batch* b);
  void SampleSpec(Batch* b, Entry& e, size_t* row);
  void SpecSwaCopy(Entry& e);
  void DraftAfterSample(Batch* b);
  void PostProcessSpec(Seq* s, Entry& e);
  bool spec_on() const { return spec_ != nullptr; }
  std::unique_ptr<SpecPolicy> spec_;
  std::shared_ptr<const Drafter> drafter_;
  int gamma_ = 0;
  double spec_draft_cost_ = -1;  // device thread: drafter seconds per drafted position (-1: unmeasured)
  std::atomic<uint64_t> stat_spec_drafts_{0}, stat_spec_accepted_{0}, stat_spec_verify_{0};
  std::vector<std::atomic<uint64_t>> stat_spec_lengths_ = std::vector<std::atomic<uint64_t>>(17);
  std::shared_ptr<SwaPool> swa_pool_;
  std::unique_ptr<SwapIn> swap_in_ = std::make_unique<SwapIn>();
  std::atomic<uint64_t> stat_swa_hits_{0}, stat_swa_misses_{0}, stat_replayed_{0};
  std::atomic<size_t> stat_loading_{0};
  std::shared_ptr<FetchInbox> fetch_inbox_ = std::make_shared<FetchInbox>();
  // kv_store when it is a fetcher process's (reads are then pinned in its shm, copied once).
  std::shared_ptr<kvcache::FetcherStore> fetcher_;
  bool fetch_ready_ = false;  // mu_: a completion arrived since the scheduler last looked
  size_t fetches_inflight_ = 0;
  std::atomic<uint64_t> stat_store_hit_tokens_{0}, stat_fetches_{0}, stat_fetch_blocks_{0}, stat_fetch_timeouts_{0};
  std::atomic<int64_t> stat_fetch_ns_{0};
  // Shared with store completions, which may run after the engine is gone.
  struct StoreCounters {
    std::atomic<int64_t> inflight_bytes{0};
    std::atomic<uint64_t> writes{0}, drops{0}, errors{0}, agent{0}, chatbot{0};
  };
  std::shared_ptr<StoreCounters> store_counters_ = std::make_shared<StoreCounters>();
  bool warned_no_block_bytes_ = false;

  std::unordered_map<RequestId, std::vector<std::shared_ptr<Seq>>> requests_;
  std::deque<std::shared_ptr<Seq>> waiting_;
  std::vector<std::shared_ptr<Seq>> running_;  // arrival order
  std::deque<std::shared_ptr<Batch>> inflight_;
  uint64_t step_ = 0;
  uint64_t arrivals_ = 0;
  uint64_t seed_state_;

  // Shared with other threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Request>> inbox_;
  std::vector<RequestId> cancels_;
  bool stopping_ = false;
  bool shutdown_done_ = false;
  std::atomic<RequestId> next_id_{1};
  std::atomic<int64_t> queued_{0};
  std::atomic<size_t> stat_running_{0}, stat_blocks_used_{0};
  std::atomic<uint64_t> stat_prefix_hits_{0}, stat_generated_{0};

  std::unique_ptr<Device> device_;
  std::thread thread_;
};

}  // namespace ladle::engine
