// The scheduler's decisions, each a small class chosen at runtime (EngineConfig) and tested
// on its own: which waiting sequence may start (admission), how many prompt tokens a
// sequence gets this step (chunk sizing), and whom to evict under KV pressure (preemption).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ladle/core/result.h"
#include "ladle/engine/cost_model.h"

namespace ladle::engine {

// What admission sees about the engine and the candidate (the head of the FIFO queue).
struct AdmissionView {
  int running = 0, max_running = 0;
  int free_slots = 0;
  int available_blocks = 0;
  int blocks_needed = 0;   // blocks for the candidate's first chunk
  int reserve_blocks = 0;  // headroom kept for running sequences' decode growth
};

class AdmissionPolicy {
 public:
  virtual ~AdmissionPolicy() = default;
  virtual bool Admit(const AdmissionView& v) const = 0;
};

// Admits while a batch slot, a ring slot and the first chunk's blocks (plus headroom) exist.
// The queue is strict FIFO: when the head does not fit, nothing behind it starts.
class FifoAdmission : public AdmissionPolicy {
 public:
  bool Admit(const AdmissionView& v) const override;
};

// The step's prefill allowance, consumed as sequences take chunks.
struct StepBudget {
  double ns_left = 0;       // time-budget policies
  int64_t tokens_left = 0;  // token-budget policies
  bool batch_empty = true;  // no prefill chunk yet this step (one must make progress)
};

class ChunkPolicy {
 public:
  virtual ~ChunkPolicy() = default;
  // Starts a step: decodes of the given contexts are already in the batch.
  virtual StepBudget Begin(std::span<const int64_t> decode_contexts) const = 0;
  // Prompt tokens for a sequence with `remaining` uncached tokens after `cached` computed
  // ones; charges `budget`. 0 means "not this step".
  virtual int64_t Take(int64_t remaining, int64_t cached, StepBudget* budget) const = 0;
};

// The recipe's per-GPU layer: each step has a budget in ns; decodes are charged first, then
// FIFO prefills take the largest q whose cost fits what is left. The first prefill of a step
// always gets at least `min_chunk` tokens, so neither a budget smaller than one token nor a
// decode batch that fills the budget can stall waiting prompts. The model's fixed cost e is
// charged at most half the budget, so an over-fitted constant cannot shrink every chunk to
// min_chunk (and with it admission to one prompt at a time).
class TimeBudgetChunk : public ChunkPolicy {
 public:
  TimeBudgetChunk(CostModel model, double step_budget_ns, int64_t min_chunk, int64_t max_chunk);
  StepBudget Begin(std::span<const int64_t> decode_contexts) const override;
  int64_t Take(int64_t remaining, int64_t cached, StepBudget* budget) const override;
  const CostModel& cost_model() const { return model_; }

 private:
  CostModel model_;
  double budget_ns_;
  double fixed_ns_;  // e as charged per step: min(e, budget / 2)
  int64_t min_chunk_, max_chunk_;
};

// A fixed number of prompt tokens per sequence per step, independent of timing (so chunk
// boundaries are reproducible; used by tests and when no cost model is wanted).
class FixedChunk : public ChunkPolicy {
 public:
  explicit FixedChunk(int64_t chunk) : chunk_(chunk) {}
  StepBudget Begin(std::span<const int64_t> decode_contexts) const override;
  int64_t Take(int64_t remaining, int64_t cached, StepBudget* budget) const override;

 private:
  int64_t chunk_;
};

struct VictimView {
  uint64_t arrival = 0;  // admission order of the request (smaller = older)
  int index = 0;         // sample index within the request
  int blocks = 0;        // blocks it holds
};

class PreemptionPolicy {
 public:
  virtual ~PreemptionPolicy() = default;
  // Index into `running` of the sequence to preempt (free and requeue for recompute).
  virtual size_t PickVictim(std::span<const VictimView> running) const = 0;
};

// Evicts the newest arrival (the least work lost in FIFO order; vLLM's recompute policy).
class NewestFirstPreemption : public PreemptionPolicy {
 public:
  size_t PickVictim(std::span<const VictimView> running) const override;
};

// Evicts the sequence holding the most blocks (frees the most memory per recompute).
class LargestFirstPreemption : public PreemptionPolicy {
 public:
  size_t PickVictim(std::span<const VictimView> running) const override;
};

// Runtime choice by name: "fifo"; "newest" | "largest".
Result<std::unique_ptr<AdmissionPolicy>> MakeAdmissionPolicy(const std::string& name);
Result<std::unique_ptr<PreemptionPolicy>> MakePreemptionPolicy(const std::string& name);

}  // namespace ladle::engine
