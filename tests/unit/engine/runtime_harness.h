// The engine runtime tests' harness on the fake model (fake_model.h): a collector of a
// request's outputs, jobs with mixed sampling settings, and an exact comparison of two runs.
// Shared by engine_runtime_test.cc and engine_spec_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "fake_model.h"
#include "ladle/engine/engine_config.h"

namespace ladle::engine::testing {

struct SampleResult {
  std::vector<TokenId> tokens;
  FinishKind finish = FinishKind::kError;
  std::string matched, error;
  bool finished = false;
  int64_t cached = -1;
  std::vector<float> logprobs;
};

// Collects a request's outputs; Wait() returns when all n samples finished.
class Collector {
 public:
  explicit Collector(int n) : samples_(n) {}
  OutputSink Sink() {
    return [this](const Output& o) {
      std::lock_guard lk(mu_);
      for (const auto& ev : o.tokens) {
        auto& s = samples_[ev.index];
        s.tokens.push_back(ev.token);
        s.logprobs.push_back(ev.logprob);
      }
      if (o.finished) {
        auto& s = samples_[o.finished_index];
        s.finished = true;
        s.finish = o.finish;
        s.matched = o.stop_matched;
        s.error = o.error;
        s.cached = o.cached_tokens;
        ++done_;
      }
      first_token_ = true;
      cv_.notify_all();
    };
  }
  bool Wait(int ms = 20000) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return done_ == static_cast<int>(samples_.size()); });
  }
  bool WaitFirst(int ms = 20000) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return first_token_; });
  }
  std::vector<SampleResult> results() {
    std::lock_guard lk(mu_);
    return samples_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SampleResult> samples_;
  int done_ = 0;
  bool first_token_ = false;
};

inline std::vector<TokenId> Prompt(int len, int salt) {
  std::vector<TokenId> p(len);
  for (int i = 0; i < len; ++i) p[i] = static_cast<TokenId>(3 + (i * 31 + salt * 17) % 900);
  return p;
}

// Independent greedy reference over the fake model's logits (ties to the lower id).
inline std::vector<TokenId> RefGreedy(std::vector<TokenId> h, const FakeOptions& o, int max_tokens) {
  std::vector<TokenId> out;
  std::vector<float> row(o.vocab);
  for (int i = 0; i < max_tokens; ++i) {
    FakeLogits(h, o, row.data());
    TokenId best = 0;
    for (int v = 1; v < o.vocab; ++v)
      if (row[v] > row[best]) best = v;
    out.push_back(best);
    h.push_back(best);
    if (best == 1) break;
  }
  return out;
}

inline EngineConfig FixedConfig(bool async) {
  EngineConfig c;
  c.num_blocks = 64;
  c.max_running = 16;
  c.chunk_policy = "fixed";
  c.chunk_tokens = 64;
  c.async_scheduling = async;
  return c;
}

struct Harness {
  std::unique_ptr<Engine> engine;
  FakeModel* model = nullptr;
};

inline Harness Make(const EngineConfig& c, FakeOptions o = {}) {
  auto m = std::make_unique<FakeModel>(o);
  Harness h;
  h.model = m.get();
  auto e = CreateEngine(c, std::move(m), *EngineTokenizer());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (e.ok()) h.engine = std::move(e).value();
  return h;
}

struct Job {
  std::vector<TokenId> prompt;
  SamplingParams params;
};

inline std::vector<std::vector<SampleResult>> RunJobs(Engine& e, const std::vector<Job>& jobs) {
  std::vector<std::unique_ptr<Collector>> cs;
  for (const auto& j : jobs) {
    cs.push_back(std::make_unique<Collector>(j.params.n));
    auto id = e.Submit({j.prompt, j.params, nullptr}, cs.back()->Sink());
    EXPECT_TRUE(id.ok()) << id.status().ToString();
  }
  std::vector<std::vector<SampleResult>> out;
  for (auto& c : cs) {
    EXPECT_TRUE(c->Wait());
    out.push_back(c->results());
  }
  return out;
}

inline std::vector<Job> MixedJobs() {
  std::vector<Job> jobs;
  for (int i = 0; i < 14; ++i) {
    Job j;
    j.prompt = Prompt(5 + i * 37, i);
    j.params.max_tokens = 8 + (i * 5) % 40;
    j.params.temperature = i % 3 == 0 ? 0.0f : 0.9f;
    j.params.top_p = i % 4 == 1 ? 0.9f : 1.0f;
    j.params.top_k = i % 5 == 2 ? 20 : 0;
    j.params.min_p = i % 6 == 3 ? 0.05f : 0.0f;
    j.params.seed = 1000 + i;
    j.params.presence_penalty = i % 2 ? 0.3f : 0.0f;
    j.params.frequency_penalty = i % 7 == 1 ? 0.2f : 0.0f;
    j.params.top_logprobs = i % 3;
    j.params.n = i % 5 == 4 ? 3 : 1;
    if (i % 4 == 3) j.params.stop = {"e", "zz"};
    jobs.push_back(j);
  }
  return jobs;
}

inline void ExpectSame(const std::vector<std::vector<SampleResult>>& a, const std::vector<std::vector<SampleResult>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].size(), b[r].size());
    for (size_t i = 0; i < a[r].size(); ++i) {
      EXPECT_EQ(a[r][i].tokens, b[r][i].tokens) << "request " << r << " sample " << i;
      EXPECT_EQ(a[r][i].matched, b[r][i].matched) << "request " << r << " sample " << i;
      EXPECT_EQ(a[r][i].finish, b[r][i].finish) << "request " << r << " sample " << i;
      EXPECT_EQ(a[r][i].logprobs, b[r][i].logprobs) << "request " << r << " sample " << i;
    }
  }
}

}  // namespace ladle::engine::testing
