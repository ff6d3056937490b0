// A fake engine::Engine for the server tests: every request streams a fixed token script,
// one token per sample per tick, on the fake's own thread (as the real engine delivers on its
// thread). Finishes with kLength at max_tokens or kEos at the script's end; Cancel finishes
// with kCancelled on the next tick. Counts what it saw so tests can assert on it. With
// top_logprobs >= 0 each token carries deterministic logprobs (see Loop). HoldOutputs(true)
// stands in for a long prefill: requests are accepted but produce nothing until released.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ladle/engine/engine.h"

namespace ladle::server::testing {

class FakeEngine : public engine::Engine {
 public:
  FakeEngine(std::vector<engine::TokenId> script, std::chrono::microseconds tick, size_t max_queue = 1000)
      : script_(std::move(script)), tick_(tick), max_queue_(max_queue), thread_([this] { Loop(); }) {}
  ~FakeEngine() override {
    Shutdown();
    thread_.join();
  }

  Result<engine::RequestId> Submit(engine::SubmitRequest request, engine::OutputSink sink) override {
    std::lock_guard lock(mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "engine stopped");
    if (jobs_.size() >= max_queue_) return ResourceExhausted("fake engine queue full");
    const engine::RequestId id = ++next_id_;
    Job job;
    job.prompt_tokens = static_cast<int64_t>(request.prompt.size());
    job.sampling = request.sampling;
    job.sink = std::move(sink);
    job.emitted.assign(std::max(1, request.sampling.n), 0);
    job.done.assign(job.emitted.size(), false);
    jobs_.emplace(id, std::move(job));
    last_sampling_ = request.sampling;
    last_prompt_ = request.prompt;
    last_images_ = request.images;
    ++submitted_;
    return id;
  }
  void Cancel(engine::RequestId id) override {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(id);
    if (it != jobs_.end()) it->second.cancelled = true;
  }
  engine::Stats GetStats() const override {
    std::lock_guard lock(mu_);
    engine::Stats s;
    s.running = jobs_.size();
    s.kv_blocks_used = jobs_.size();
    s.kv_blocks_total = 64;
    s.generated_tokens = generated_;
    return s;
  }
  void Shutdown() override {
    std::lock_guard lock(mu_);
    stop_ = true;
  }

  // While held, accepted requests emit no tokens (no first token exists yet); cancelled ones
  // and a shutdown still finish them, so a held engine never blocks teardown.
  void HoldOutputs(bool hold) {
    std::lock_guard lock(mu_);
    hold_ = hold;
  }
  uint64_t generated() const {
    std::lock_guard lock(mu_);
    return generated_;
  }
  int cancelled() const { return cancelled_.load(); }
  int submitted() const {
    std::lock_guard lock(mu_);
    return submitted_;
  }
  size_t running() const {
    std::lock_guard lock(mu_);
    return jobs_.size();
  }
  engine::SamplingParams last_sampling() const {
    std::lock_guard lock(mu_);
    return last_sampling_;
  }
  std::vector<engine::TokenId> last_prompt() const {
    std::lock_guard lock(mu_);
    return last_prompt_;
  }
  std::vector<engine::PromptImage> last_images() const {
    std::lock_guard lock(mu_);
    return last_images_;
  }

 private:
  struct Job {
    int64_t prompt_tokens = 0;
    engine::SamplingParams sampling;
    engine::OutputSink sink;
    std::vector<int> emitted;
    std::vector<bool> done;
    bool cancelled = false;
  };

  void Loop() {
    for (;;) {
      std::vector<std::pair<engine::OutputSink, engine::Output>> outs;
      {
        std::lock_guard lock(mu_);
        if (stop_ && jobs_.empty()) return;
        for (auto it = jobs_.begin(); it != jobs_.end();) {
          Job& j = it->second;
          if (hold_ && !j.cancelled && !stop_) {
            ++it;
            continue;
          }
          bool all_done = true;
          for (size_t i = 0; i < j.emitted.size(); ++i) {
            if (j.done[i]) continue;
            engine::Output o;
            o.id = it->first;
            o.prompt_tokens = j.prompt_tokens;
            if (j.cancelled || stop_) {
              o.finished = true;
              o.finish = engine::FinishKind::kCancelled;
            } else {
              engine::TokenEvent t;
              t.index = static_cast<int>(i);
              t.token = script_[j.emitted[i]];
              if (j.sampling.top_logprobs >= 0) {
                // Deterministic and exact in binary: -1/8 per position, -1 per sample index;
                // the alternatives are the next ids, 1 less likely each (the first is the pick).
                t.logprob = -0.125f * static_cast<float>(j.emitted[i] + 1) - static_cast<float>(i);
                for (int k = 0; k < j.sampling.top_logprobs; ++k) {
                  t.top_logprobs.emplace_back(t.token + static_cast<engine::TokenId>(k), t.logprob - static_cast<float>(k));
                }
              }
              o.tokens.push_back(t);
              ++j.emitted[i];
              ++generated_;
              if (j.emitted[i] >= j.sampling.max_tokens) {
                o.finished = true;
                o.finish = engine::FinishKind::kLength;
              } else if (j.emitted[i] >= static_cast<int>(script_.size())) {
                o.finished = true;
                o.finish = engine::FinishKind::kEos;
              }
            }
            o.finished_index = static_cast<int>(i);
            if (o.finished) {
              j.done[i] = true;
              if (o.finish == engine::FinishKind::kCancelled) ++cancelled_;
            }
            all_done = all_done && j.done[i];
            outs.emplace_back(j.sink, std::move(o));
          }
          it = all_done ? jobs_.erase(it) : std::next(it);
        }
      }
      for (auto& [sink, o] : outs) sink(o);
      std::this_thread::sleep_for(tick_);
    }
  }

  const std::vector<engine::TokenId> script_;
  const std::chrono::microseconds tick_;
  const size_t max_queue_;
  mutable std::mutex mu_;
  std::map<engine::RequestId, Job> jobs_;
  engine::RequestId next_id_ = 0;
  bool stop_ = false;
  bool hold_ = false;
  int submitted_ = 0;
  uint64_t generated_ = 0;
  std::atomic<int> cancelled_{0};
  engine::SamplingParams last_sampling_;
  std::vector<engine::TokenId> last_prompt_;
  std::vector<engine::PromptImage> last_images_;
  std::thread thread_;
};

}  // namespace ladle::server::testing
