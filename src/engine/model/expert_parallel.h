// Expert parallelism of the reference model's MoE layers (ExpertParallelConfig in
// ladle/engine/model.h; docs/eplb.md). Internal to the model.
//
// Ranks. Each EP rank is a worker thread that owns the weight buffers of its physical expert
// slots (slots_per_rank per MoE layer: its resident experts plus replicas). A sequence's
// thread routes its tokens, groups its rows by logical expert, and dispatches each group to
// the rank holding the replica the ReplicaPolicy chooses (the all-to-all's dispatch); the rank
// runs the expert FFN on exactly those rows and the sequence's thread combines the results
// (the all-to-all's combine). A group is never split: the FFN's GEMM then sees the same rows as
// without EP, so the bits match (OpenBLAS's sgemm gives a row different bits in batches of
// different sizes, measured in docs/eplb.md).
//
// Statistics and moves. Every step's per-expert routed tokens go into an ExpertLoadWindow at
// the model's step counter (one Forward = one step). At each re-arrangement step the mover
// thread plans a placement from the window and copies the experts of every slot that changes
// into fresh buffers of the target rank, reading the current buffers (which the ranks only
// read). The new placement is switched in at the first step boundary after the copy is done:
// no step waits for a copy, and a step runs entirely under one placement.
//
// Invariants (LADLE_CHECK): every slot's buffer holds the logical expert phy2log names; a
// placement is switched only between steps; every dispatched job completes (the rank thread
// catches what the FFN throws and fails the step instead).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "kernels.h"
#include "ladle/core/result.h"
#include "ladle/engine/model.h"
#include "ladle/eplb/load_window.h"
#include "ladle/eplb/placement.h"
#include "ladle/eplb/replica_policy.h"
#include "ladle/eplb/skewed_load.h"
#include "weights.h"

namespace ladle::engine::model {

class ExpertParallel {
 public:
  // `layers`: the model's MoE layers in forward order (encoder then decoder), which must
  // outlive this object; buffers are copied from their expert weights.
  static Result<std::unique_ptr<ExpertParallel>> Create(const ModelConfig& c, std::vector<const MoeWeights*> layers,
                                                        const ExpertParallelConfig& ep);
  ~ExpertParallel();  // stops the mover and the ranks (after their current job)

  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  // Around every Forward, on its thread; steps never overlap. BeginStep switches in a ready
  // placement and resets the step's counters; EndStep records the step's statistics, starts a
  // re-arrangement when one is due, and fails when a rank failed a job of this step.
  void BeginStep();
  Status EndStep();

  // The router bias of MoE layer `layer` for this step (empty when the skew is off): added to
  // the router logits for choosing experts only, not to the gate weights (DeepSeek's
  // selection-only expert bias).
  std::span<const float> RouterBias(int layer) const;

  // Runs the routed experts of one sequence's `n` tokens in MoE layer `layer`: h holds the
  // normed rows [n×hidden], rows_of[e] the (token·K + j) entries routed to expert e in token
  // order; writes expert_out[(token·K + j)·hidden]. Blocks until the ranks are done. Called by
  // many sequences' threads at once within a step.
  void RunExperts(int layer, const float* h, int K, const std::vector<std::vector<int>>& rows_of, float* expert_out);

  void GetStats(ExpertParallelStats* out) const;

  // The placement in use (tests).
  eplb::Placement CurrentPlacement() const;
  // Blocks until no re-arrangement is planned or copying (tests; bounded by `timeout_ms`).
  bool WaitIdle(int64_t timeout_ms) const;

 private:
  struct Buffer;     // one expert's weights, owned by a rank
  struct State;      // a placement and the buffer of every slot
  struct Rank;
  struct Job;
  struct Completion;

  ExpertParallel(const ModelConfig& c, std::vector<const MoeWeights*> layers, const ExpertParallelConfig& ep);
  void RankLoop(Rank& r);
  void MoverLoop();
  // Plans from `loads` and builds the next state (copies into fresh buffers); runs on the mover.
  Result<std::shared_ptr<State>> BuildNext(const eplb::ExpertLoads& loads, const eplb::ExpertLoads* previous,
                                           uint64_t* moved, uint64_t* local);

  const ModelConfig config_;
  const std::vector<const MoeWeights*> layers_;
  const ExpertParallelConfig ep_;
  eplb::PlacementConfig placement_cfg_;
  eplb::PlacementPolicy placement_policy_ = eplb::PlacementPolicy::kEplb;
  uint32_t slots_per_rank_ = 0;
  size_t expert_floats_ = 0;  // gate + up + down

  std::shared_ptr<State> state_;  // switched only in BeginStep, read by RunExperts in the step
  std::vector<std::unique_ptr<eplb::ReplicaPolicy>> policies_;  // per layer
  std::unique_ptr<std::mutex[]> policy_mu_;                     // per layer
  std::vector<std::unique_ptr<Rank>> ranks_;

  // This step's counters, added by RunExperts.
  std::unique_ptr<std::atomic<uint64_t>[]> step_expert_tokens_;  // [layer][expert]
  std::unique_ptr<std::atomic<uint64_t>[]> step_rank_tokens_;    // [layer][rank]
  std::atomic<bool> step_failed_{false};
  uint64_t step_ = 0;  // steps begun

  std::optional<eplb::SkewedLoadGenerator> skew_;
  std::vector<std::vector<float>> bias_;  // [layer] this step's router bias

  // Statistics (mu_): the load window, the recent per-step ring, totals.
  mutable std::mutex mu_;
  std::optional<eplb::ExpertLoadWindow> window_;
  std::optional<eplb::ExpertLoads> previous_window_;  // the window of the last re-arrangement
  static constexpr uint64_t kRecentSteps = 100;
  std::vector<uint64_t> recent_expert_;  // [kRecentSteps][layer][expert]
  std::vector<uint64_t> recent_rank_;    // [kRecentSteps][layer][rank]
  std::vector<uint64_t> recent_busy_ns_;  // [kRecentSteps][rank]
  uint64_t recorded_steps_ = 0;
  uint64_t rearrangements_ = 0, bytes_moved_ = 0, bytes_local_ = 0, last_step_ = 0;
  double last_ms_ = 0;

  // The mover (mover_mu_): a request to plan from a window, the result when copied.
  mutable std::mutex mover_mu_;
  mutable std::condition_variable mover_cv_;
  std::optional<eplb::ExpertLoads> request_;
  std::optional<eplb::ExpertLoads> request_previous_;
  bool busy_ = false;  // a request is planned or copying, or its result waits for a step boundary
  std::shared_ptr<State> ready_;
  uint64_t ready_moved_ = 0, ready_local_ = 0;
  double ready_ms_ = 0;
  bool stop_ = false;
  std::thread mover_;
};

}  // namespace ladle::engine::model
