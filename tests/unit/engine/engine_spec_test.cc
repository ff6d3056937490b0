// Speculative decoding in the engine (engine_spec.cc): outputs with speculation are the
// outputs without it, token for token and logprob for logprob, across modes, batch sizes,
// async scheduling, sampling settings, stop strings, masks, n > 1, preemption and max_tokens;
// rejected drafts roll back at every position; the sampling distribution is unchanged.
//
// On the fake model (whose "hidden state" carries the history's hash) the test drafter
// continues the history exactly and then corrupts one position per pass, chosen by a hash, so
// every step rejects at a known position (or none). On the reference model a drafter replays
// the unspeculated run's continuations, right where the history repeats and wrong elsewhere.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>

#include "engine_test_util.h"
#include "fake_model.h"
#include "ladle/engine/drafter.h"
#include "ladle/engine/dspark_fit.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/spec_policy.h"
#include "runtime_harness.h"

namespace ladle::engine {
namespace {

using namespace testing;  // NOLINT: the harness

constexpr int kGamma = 5;

// Drafts the fake model's greedy continuation; with `corrupt`, position reject_at (a hash of
// the history, in [0, γ]; γ means none) is replaced by another token. Counts the positions.
class FakeDrafter : public Drafter {
 public:
  FakeDrafter(FakeOptions o, bool corrupt) : o_(o), corrupt_(corrupt) {
    c_.hidden = ModelConfig{}.hidden;
    c_.target_vocab = o.vocab;
    c_.draft_vocab = o.vocab;
    c_.draft_tokens = kGamma;
  }
  const DrafterConfig& config() const override { return c_; }
  void DraftPrefix(std::span<const DraftInput> in, int positions, std::vector<DraftOutput>* out) const override {
    {
      std::lock_guard lk(mu_);
      call_positions_.push_back(positions);
    }
    if (cost_per_position_us_ > 0) {
      // The cost of a drafter as large as the target's head: compute time, not a wait on anything.
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::microseconds(cost_per_position_us_ * static_cast<int64_t>(in.size()) * positions);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    out->assign(in.size(), {});
    std::vector<float> row(static_cast<size_t>(o_.vocab));
    for (size_t i = 0; i < in.size(); ++i) {
      uint64_t x;
      int64_t len;
      FakeHiddenDecode(in[i].hidden.data(), &x, &len);
      x = FakeHashStep(x, in[i].last);
      len += 1;
      const int reject_at = corrupt_ ? static_cast<int>((FakeMix(x ^ 0x5bd1) >> 7) % (kGamma + 1)) : kGamma;
      reject_counts_[static_cast<size_t>(reject_at)]++;
      for (int k = 0; k < std::min(positions, kGamma); ++k) {
        FakeLogitsOfHash(x, len, o_, row.data());
        TokenId d = 0;
        for (int v = 1; v < o_.vocab; ++v)
          if (row[static_cast<size_t>(v)] > row[d]) d = static_cast<TokenId>(v);
        if (k == reject_at) d = d + 1 < static_cast<TokenId>(o_.vocab) ? d + 1 : 3;
        (*out)[i].tokens.push_back(d);
        const double u = static_cast<double>(FakeMix(x ^ (0x77ull + k)) >> 11) * 0x1.0p-53;
        (*out)[i].confidences.push_back(fixed_conf_ > 0 ? fixed_conf_ : static_cast<float>(0.15 + 0.8 * u));
        x = FakeHashStep(x, d);
        len += 1;
      }
    }
  }
  mutable std::array<std::atomic<int>, kGamma + 1> reject_counts_{};
  float fixed_conf_ = -1;  // > 0: every draft's confidence
  int64_t cost_per_position_us_ = 0;  // busy time per drafted position
  // The positions asked of each DraftPrefix call, in order.
  std::vector<int> CallPositions() const {
    std::lock_guard lk(mu_);
    return call_positions_;
  }

 private:
  DrafterConfig c_;
  FakeOptions o_;
  bool corrupt_;
  mutable std::mutex mu_;
  mutable std::vector<int> call_positions_;
};

// A decreasing throughput curve with a knee, so Algorithm 1 picks varied lengths.
SpsTable TestSps() {
  SpsTable t;
  t.tokens = {1, 8, 16, 32, 64, 256};
  t.sps = {1000, 950, 800, 500, 260, 60};
  return t;
}

EngineConfig SpecConfig(bool async, const std::string& mode, std::shared_ptr<const Drafter> d) {
  EngineConfig c = FixedConfig(async);
  c.speculative = mode;
  c.drafter = std::move(d);
  c.draft_tokens = kGamma;
  c.spec_sps = TestSps();
  return c;
}

class EngineSpec : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }
};

TEST_F(EngineSpec, OutputsAreTheUnspeculatedOnesInEveryMode) {
  const auto jobs = MixedJobs();  // greedy and sampled, penalties, top-k/p, min-p, logprobs, n = 3, stops
  auto off = Make(FixedConfig(false));
  const auto want = RunJobs(*off.engine, jobs);
  for (const std::string mode : {"fixed:5", "fixed:2", "dspark"}) {
    for (bool async : {false, true}) {
      auto drafter = std::make_shared<FakeDrafter>(FakeOptions{}, /*corrupt=*/true);
      auto h = Make(SpecConfig(async, mode, drafter));
      ASSERT_TRUE(h.engine);
      SCOPED_TRACE(mode + (async ? " async" : " sync"));
      ExpectSame(want, RunJobs(*h.engine, jobs));
      const Stats st = h.engine->GetStats();
      EXPECT_GT(st.spec_accepted_tokens, 0u);
      EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);  // some drafts were rejected
      EXPECT_EQ(st.spec_verify_tokens - st.spec_draft_tokens, [&] {
        uint64_t n = 0;
        for (uint64_t c : st.spec_verify_lengths) n += c;
        return n;
      }());
      // Every rejection position (and none) occurred: rollback at each of them kept the output.
      for (int k = 0; k <= kGamma; ++k) EXPECT_GT(drafter->reject_counts_[static_cast<size_t>(k)].load(), 0) << k;
      if (mode == "fixed:2") {
        for (size_t l = 3; l < st.spec_verify_lengths.size(); ++l) EXPECT_EQ(st.spec_verify_lengths[l], 0u);
      }
      if (mode == "dspark") {
        // Variable length: more than one L was chosen.
        int used = 0;
        for (uint64_t c : st.spec_verify_lengths) used += c > 0;
        EXPECT_GE(used, 2);
      }
    }
  }
}

TEST_F(EngineSpec, APerfectDrafterEmitsSeveralTokensPerStep) {
  auto drafter = std::make_shared<FakeDrafter>(FakeOptions{}, /*corrupt=*/false);
  auto h = Make(SpecConfig(false, "fixed:5", drafter));
  std::vector<Job> jobs(1);
  jobs[0].prompt = Prompt(40, 3);
  jobs[0].params.temperature = 0;
  jobs[0].params.max_tokens = 61;
  const int steps_before = h.model->steps.load();
  auto res = RunJobs(*h.engine, jobs);
  ASSERT_EQ(res[0][0].tokens, RefGreedy(jobs[0].prompt, {}, 61));
  // Prefill, then 60 tokens at 6 per step: 10 verify steps.
  EXPECT_EQ(h.model->steps.load() - steps_before, 11);
  const Stats st = h.engine->GetStats();
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
}

TEST_F(EngineSpec, MaxTokensCapsTheLastSpan) {
  auto drafter = std::make_shared<FakeDrafter>(FakeOptions{}, false);
  for (bool async : {false, true}) {
    auto h = Make(SpecConfig(async, "fixed:5", drafter));
    for (int max : {1, 2, 6, 7, 13}) {
      std::vector<Job> jobs(1);
      jobs[0].prompt = Prompt(30, max);
      jobs[0].params.temperature = 0;
      jobs[0].params.max_tokens = max;
      auto res = RunJobs(*h.engine, jobs);
      EXPECT_EQ(res[0][0].tokens, RefGreedy(jobs[0].prompt, {}, max)) << max;
      EXPECT_EQ(res[0][0].finish, FinishKind::kLength);
    }
  }
}

TEST_F(EngineSpec, EosInsideAnAcceptedSpanEndsTheSample) {
  FakeOptions o;
  o.eos_at_len = 60;  // EOS wins once the history reaches 60 tokens
  auto drafter = std::make_shared<FakeDrafter>(o, false);
  auto h = Make(SpecConfig(true, "fixed:5", drafter), o);
  std::vector<Job> jobs(1);
  jobs[0].prompt = Prompt(41, 9);
  jobs[0].params.temperature = 0;
  jobs[0].params.max_tokens = 100;
  auto res = RunJobs(*h.engine, jobs);
  EXPECT_EQ(res[0][0].tokens, RefGreedy(jobs[0].prompt, o, 100));
  EXPECT_EQ(res[0][0].finish, FinishKind::kEos);
  EXPECT_EQ(res[0][0].tokens.size(), 20u);
}

TEST_F(EngineSpec, PreemptionUnderMemoryPressureKeepsOutputsExact) {
  EngineConfig base = FixedConfig(true);
  base.num_blocks = 12;  // 1536 tokens for 10 requests of up to ~460: preemption
  std::vector<Job> jobs;
  for (int i = 0; i < 10; ++i) {
    Job j;
    j.prompt = Prompt(150 + i * 30, i);
    j.params.temperature = 0;
    j.params.max_tokens = 60;
    jobs.push_back(j);
  }
  auto off = Make(base);
  const auto want = RunJobs(*off.engine, jobs);
  EngineConfig c = SpecConfig(true, "dspark", std::make_shared<FakeDrafter>(FakeOptions{}, true));
  c.num_blocks = base.num_blocks;
  auto h = Make(c);
  const auto got = RunJobs(*h.engine, jobs);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i][0].error, "") << i;
  ExpectSame(want, got);
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(want[i][0].tokens.size(), 60u);
}

// Allows only tokens whose id has the parity of the number accepted so far: the mask changes
// every token, so a verify row's mask must follow the previous row's Accept.
// A request that exactly fills the block pool without speculation fits with it too: the verify
// span's γ + 1 positions are bounded by what the request can still write (prompt + max_tokens
// - 1 positions in all), so the spare room speculation asks for never exceeds the pool.
TEST_F(EngineSpec, ARequestThatExactlyFillsThePoolStillFits) {
  EngineConfig base = FixedConfig(true);
  base.num_blocks = 4;  // 512 positions
  std::vector<Job> jobs(1);
  jobs[0].prompt = Prompt(400, 21);
  jobs[0].params.temperature = 0;
  jobs[0].params.max_tokens = 113;  // 400 + 113 - 1 = 512 positions: every block
  auto off = Make(base);
  const auto want = RunJobs(*off.engine, jobs);
  ASSERT_EQ(want[0][0].error, "");
  ASSERT_EQ(want[0][0].tokens.size(), 113u);
  for (bool corrupt : {false, true}) {
    for (bool async : {false, true}) {
      EngineConfig c = SpecConfig(async, corrupt ? "dspark" : "fixed:5", std::make_shared<FakeDrafter>(FakeOptions{}, corrupt));
      c.num_blocks = base.num_blocks;
      auto h = Make(c);
      const auto got = RunJobs(*h.engine, jobs);
      SCOPED_TRACE(std::string(corrupt ? "dspark" : "fixed:5") + (async ? " async" : " sync"));
      EXPECT_EQ(got[0][0].error, "");
      ExpectSame(want, got);
      EXPECT_GT(h.engine->GetStats().spec_accepted_tokens, 0u);
    }
  }
  // One position more than the pool is refused the same way with and without speculation.
  jobs[0].params.max_tokens = 114;
  auto off2 = Make(base);
  EXPECT_NE(RunJobs(*off2.engine, jobs)[0][0].error, "");
  EngineConfig c = SpecConfig(true, "fixed:5", std::make_shared<FakeDrafter>(FakeOptions{}, false));
  c.num_blocks = base.num_blocks;
  auto h = Make(c);
  EXPECT_NE(RunJobs(*h.engine, jobs)[0][0].error, "");
}

class Alternate : public MaskProvider {
 public:
  void FillMask(int, uint64_t* bits, size_t vocab) override {
    const size_t parity = static_cast<size_t>(accepted_.load() % 2);
    for (size_t t = parity; t < vocab; t += 2) bits[t / 64] |= 1ull << (t % 64);
  }
  void Accept(int, TokenId t) override {
    if (static_cast<int>(t % 2) != accepted_.load() % 2) wrong_.fetch_add(1);
    accepted_.fetch_add(1);
  }
  std::atomic<int> accepted_{0}, wrong_{0};
};

TEST_F(EngineSpec, GrammarMasksFollowEveryAcceptedToken) {
  auto run = [&](const EngineConfig& c) {
    auto h = Make(c);
    auto mask = std::make_shared<Alternate>();
    Collector col(1);
    SamplingParams p;
    p.max_tokens = 40;
    p.temperature = 0;
    EXPECT_TRUE(h.engine->Submit({Prompt(50, 5), p, mask}, col.Sink()).ok());
    EXPECT_TRUE(col.Wait());
    EXPECT_EQ(mask->wrong_.load(), 0);
    return col.results()[0].tokens;
  };
  const auto want = run(FixedConfig(false));
  ASSERT_EQ(want.size(), 40u);
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(want[k] % 2, k % 2);
  for (bool async : {false, true}) {
    EXPECT_EQ(run(SpecConfig(async, "fixed:5", std::make_shared<FakeDrafter>(FakeOptions{}, false))), want);
    EXPECT_EQ(run(SpecConfig(async, "dspark", std::make_shared<FakeDrafter>(FakeOptions{}, true))), want);
  }
}

// The distribution test: with a small vocabulary, the second generated token (the first one a
// verify step emits) over many seeds against its exact probability Σ p(t1)·p(t2 | t1).
TEST_F(EngineSpec, SampledTokensKeepTheTargetDistribution) {
  FakeOptions o;
  o.vocab = 12;
  auto drafter = std::make_shared<FakeDrafter>(o, /*corrupt=*/true);
  EngineConfig c = SpecConfig(true, "fixed:5", drafter);
  c.max_running = 32;
  c.max_queue = 4096;
  auto h = Make(c, o);
  const std::vector<TokenId> prompt = {5, 7, 3, 9};
  auto softmax = [&](const std::vector<TokenId>& hist, float temp) {
    std::vector<float> row(static_cast<size_t>(o.vocab));
    FakeLogits(hist, o, row.data());
    std::vector<double> p(row.size());
    double z = 0;
    const float mx = *std::max_element(row.begin(), row.end());
    for (size_t v = 0; v < row.size(); ++v) z += p[v] = std::exp((row[v] - mx) / temp);
    for (double& x : p) x /= z;
    return p;
  };
  const float temp = 6.0f;  // flattens the fake logits (range ~8) so every token has mass
  std::vector<double> expect(static_cast<size_t>(o.vocab), 0.0);
  const auto p1 = softmax(prompt, temp);
  for (int t1 = 0; t1 < o.vocab; ++t1) {
    auto hist = prompt;
    hist.push_back(static_cast<TokenId>(t1));
    const auto p2 = softmax(hist, temp);
    for (int t2 = 0; t2 < o.vocab; ++t2) expect[static_cast<size_t>(t2)] += p1[static_cast<size_t>(t1)] * p2[static_cast<size_t>(t2)];
  }
  constexpr int kDraws = 3000;
  std::vector<Job> jobs(kDraws);
  for (int i = 0; i < kDraws; ++i) {
    jobs[static_cast<size_t>(i)].prompt = prompt;
    jobs[static_cast<size_t>(i)].params.temperature = temp;
    jobs[static_cast<size_t>(i)].params.max_tokens = 4;
    jobs[static_cast<size_t>(i)].params.ignore_eos = true;
    jobs[static_cast<size_t>(i)].params.seed = 100000 + static_cast<uint64_t>(i);
  }
  const auto res = RunJobs(*h.engine, jobs);
  std::vector<int> seen(static_cast<size_t>(o.vocab), 0);
  for (const auto& r : res) {
    ASSERT_GE(r[0].tokens.size(), 2u);
    seen[r[0].tokens[1]]++;
  }
  double chi2 = 0;
  int dof = -1;
  for (int v = 0; v < o.vocab; ++v) {
    const double e = expect[static_cast<size_t>(v)] * kDraws;
    if (e < 5) continue;  // pooled out: too rare for the test
    chi2 += (seen[static_cast<size_t>(v)] - e) * (seen[static_cast<size_t>(v)] - e) / e;
    ++dof;
  }
  ASSERT_GE(dof, 4);
  // The 0.999 quantile of χ²(dof) is below 3.3·dof + 10 for dof in [4, 11].
  EXPECT_LT(chi2, 3.3 * dof + 10) << "dof " << dof;
  EXPECT_GT(h.engine->GetStats().spec_accepted_tokens, 0u);
}

// The reference model, with a drafter fitted on it (dspark_fit.h): a verify span's rows are
// bit-identical to one-by-one decodes (Linear is row-wise for short spans), so greedy tokens
// and their logprobs match the unspeculated run exactly, with async scheduling on and off.
// A target the drafter cannot predict (every confidence 0.05) on a curve where only a certain
// draft could pay: the engine stops running the drafter, refreshing π_1 with one-position
// drafts at growing intervals (16, 32, 64, ... skipped steps), and the output is off's.
TEST_F(EngineSpec, AnUnpredictableTargetBacksTheDrafterOff) {
  const std::vector<std::vector<TokenId>> prompts = {Prompt(20, 3)};
  auto off = Make(FixedConfig(false));
  const auto want = testing::RunGreedy(*off.engine, prompts, 300);
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    auto drafter = std::make_shared<FakeDrafter>(FakeOptions{}, /*corrupt=*/false);
    drafter->fixed_conf_ = 0.05f;
    EngineConfig c = SpecConfig(async, "dspark", drafter);
    SpsTable steep;  // SPS(1)/SPS(2) − 1 = 0.43: a draft pays only above π 0.43
    steep.tokens = {1, 2, 64};
    steep.sps = {1000, 700, 20};
    c.spec_sps = steep;
    auto h = Make(c);
    const auto got = testing::RunGreedy(*h.engine, prompts, 300);
    ASSERT_EQ(got[0].tokens, want[0].tokens);
    const std::vector<int> calls = drafter->CallPositions();
    // One call at the start (π unknown), then refreshes after 16, 32, 64 and 128 skipped steps
    // within 300 tokens; every 16th step (the old rule) would have made 18 calls of 5.
    EXPECT_GE(calls.size(), 4u);
    EXPECT_LE(calls.size(), 7u);
    for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i], 1) << "call " << i << " drafts π_1 only";
    EXPECT_EQ(h.engine->GetStats().spec_accepted_tokens, 0u);  // nothing was worth verifying
  }
}

// The drafter's cost is part of the step: a confident drafter (every confidence 0.9) on a flat
// curve, where a free drafter gets long spans verified, stops being run once it is measured at
// 2 ms per drafted position against the curve's 1 ms steps; the output is off's either way.
TEST_F(EngineSpec, ACostlyDrafterIsWeighedAgainstTheStep) {
  const std::vector<std::vector<TokenId>> prompts = {Prompt(20, 5)};
  auto off = Make(FixedConfig(false));
  const auto want = testing::RunGreedy(*off.engine, prompts, 300);
  for (int64_t cost_us : {0, 2000}) {
    SCOPED_TRACE("drafter cost " + std::to_string(cost_us) + " us per position");
    auto drafter = std::make_shared<FakeDrafter>(FakeOptions{}, /*corrupt=*/false);
    drafter->fixed_conf_ = 0.9f;
    drafter->cost_per_position_us_ = cost_us;
    EngineConfig c = SpecConfig(false, "dspark", drafter);
    SpsTable flat;
    flat.tokens = {1, 2, 64};
    flat.sps = {1000, 990, 900};
    c.spec_sps = flat;
    auto h = Make(c);
    const auto got = testing::RunGreedy(*h.engine, prompts, 300);
    ASSERT_EQ(got[0].tokens, want[0].tokens);
    const Stats st = h.engine->GetStats();
    const std::vector<int> calls = drafter->CallPositions();
    if (cost_us == 0) {
      EXPECT_GT(st.spec_accepted_tokens, 150u);  // free: long spans, most tokens from drafts
    } else {
      // The first draft (one position) measures the cost; after it only refreshes, at growing
      // intervals, and nothing is verified.
      EXPECT_LE(calls.size(), 7u);
      for (int n : calls) EXPECT_EQ(n, 1);
      EXPECT_EQ(st.spec_draft_tokens, 0u);
    }
  }
}

// A drafter fitted on the tiny reference model (window 16, ring 22 with 6 spare, blocks of 16),
// fitted once for the tests that use it.
struct TinyFit {
  ModelConfig mc = TinyModelConfig(4096);
  Status status;
  DrafterWeights weights;
  std::shared_ptr<const Drafter> drafter;
};
const TinyFit& FittedTinyDrafter() {
  static const TinyFit fit = [] {
    TinyFit f;
    auto target = Model::Create(f.mc, "");
    if (!target.ok()) {
      f.status = target.status();
      return f;
    }
    FitOptions fo;
    fo.prompts = 32;
    fo.gen_tokens = 120;
    fo.prompt_min = 8;
    fo.prompt_max = 24;
    fo.draft_vocab = 2048;
    fo.rank = 16;
    fo.seed = 11;
    auto rep = FitDrafter(**target, fo);
    if (!rep.ok()) {
      f.status = rep.status();
      return f;
    }
    auto drafter = MakeDrafter(rep->weights);
    if (!drafter.ok()) {
      f.status = drafter.status();
      return f;
    }
    f.weights = rep->weights;
    f.drafter = std::move(drafter).value();
    return f;
  }();
  return fit;
}

TEST_F(EngineSpec, OnTheReferenceModelGreedyOutputIsIdentical) {
  const TinyFit& fit = FittedTinyDrafter();
  ASSERT_TRUE(fit.status.ok()) << fit.status.ToString();
  const ModelConfig& mc = fit.mc;
  const DrafterWeights* rep = &fit.weights;
  std::shared_ptr<const Drafter> d = fit.drafter;
  {
    // A prefix pass (what the engine runs when only k drafts can pay) is the full pass's prefix.
    std::vector<std::vector<float>> hs(3, std::vector<float>(static_cast<size_t>(mc.hidden)));
    for (size_t i = 0; i < hs.size(); ++i)
      for (size_t j = 0; j < hs[i].size(); ++j) hs[i][j] = std::sin(static_cast<float>(i * 31 + j));
    std::vector<DraftInput> in;
    for (size_t i = 0; i < hs.size(); ++i) in.push_back({hs[i], static_cast<TokenId>(rep->d2t[i * 5])});
    std::vector<DraftOutput> full, part;
    d->Draft(in, &full);
    for (int k = 0; k <= d->config().draft_tokens; ++k) {
      d->DraftPrefix(in, k, &part);
      for (size_t i = 0; i < in.size(); ++i) {
        ASSERT_EQ(part[i].tokens.size(), static_cast<size_t>(k));
        EXPECT_TRUE(std::equal(part[i].tokens.begin(), part[i].tokens.end(), full[i].tokens.begin()));
        EXPECT_TRUE(std::equal(part[i].confidences.begin(), part[i].confidences.end(), full[i].confidences.begin()));
      }
    }
  }

  std::vector<std::vector<TokenId>> prompts;
  for (int len : {5, 15, 16, 17, 40, 100}) {
    std::vector<TokenId> p;
    for (int i = 0; i < len; ++i) p.push_back(static_cast<TokenId>(3 + (i * 131 + len * 7919) % 4000));
    prompts.push_back(p);
  }
  auto run = [&](const std::string& mode, bool async) {
    auto m = Model::Create(mc, "");
    EXPECT_TRUE(m.ok());
    EngineConfig c;
    c.num_blocks = 128;
    c.max_running = 16;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 32;
    c.async_scheduling = async;
    c.speculative = mode;
    c.drafter = d;
    c.spec_max_step_tokens = 48;
    c.profile_repeats = 1;
    // A nearly flat curve, so Algorithm 1 verifies long spans on this model (profiled, a model
    // this small is so cheap per token that dspark would rightly verify little).
    SpsTable flat;
    flat.tokens = {1, 512};
    flat.sps = {100.0, 99.0};
    c.spec_sps = flat;
    auto e = CreateEngine(c, std::move(m).value(), *EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    auto got = testing::RunGreedy(**e, prompts, 48);
    return std::make_pair(got, (*e)->GetStats());
  };
  const auto want = run("off", false).first;
  for (const std::string mode : {"fixed:5", "dspark"}) {
    for (bool async : {false, true}) {
      SCOPED_TRACE(mode + (async ? " async" : " sync"));
      const auto [got, st] = run(mode, async);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].error, "");
        EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i;
        EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "prompt " << i;
      }
      EXPECT_GT(st.spec_accepted_tokens, 0u);  // the fitted drafter really drafts
    }
  }
}

// The decode copy area under speculation: a spec decode that reaches a block boundary takes
// the window there (planned on the device, kept only when every token before the boundary was
// accepted), so the next turn hits the SWA entry where the unspeculated engine's does, with no
// replay, and answers as a cold engine does.
TEST_F(EngineSpec, SpecDecodesTakeTheDecodeSwaCopy) {
  const TinyFit& fit = FittedTinyDrafter();
  ASSERT_TRUE(fit.status.ok()) << fit.status.ToString();
  auto make = [&](const std::string& mode, bool async, bool cache) {
    auto m = Model::Create(fit.mc, "");
    EXPECT_TRUE(m.ok());
    EngineConfig c;
    c.num_blocks = 128;
    c.max_running = 8;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 32;
    c.async_scheduling = async;
    c.prefix_cache = cache;
    c.swa_pool_bytes = cache ? (16ull << 20) : 0;
    c.speculative = mode;
    c.drafter = fit.drafter;
    c.spec_max_step_tokens = 48;
    SpsTable flat;  // long spans, so copies land at every overshoot 0..5 past a boundary
    flat.tokens = {1, 512};
    flat.sps = {100.0, 99.0};
    c.spec_sps = flat;
    auto e = CreateEngine(c, std::move(m).value(), *EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  };
  // Turn 1: prompts of 20..41 tokens decode 45 more, across two or three boundaries of 16.
  std::vector<std::vector<TokenId>> turn1;
  for (int len : {20, 27, 33, 41}) {
    std::vector<TokenId> p;
    for (int i = 0; i < len; ++i) p.push_back(static_cast<TokenId>(3 + (i * 389 + len * 104729) % 4000));
    turn1.push_back(p);
  }
  auto turn2_of = [&](const std::vector<testing::Got>& answers) {
    std::vector<std::vector<TokenId>> t2;
    for (size_t i = 0; i < turn1.size(); ++i) {
      auto p = turn1[i];
      p.insert(p.end(), answers[i].tokens.begin(), answers[i].tokens.end());
      for (int j = 0; j < 24; ++j) p.push_back(static_cast<TokenId>(11 + j * 13 + i));  // ≥ the ring (22): L1 is the last boundary
      t2.push_back(p);
    }
    return t2;
  };
  // The unspeculated engine's next-turn hits, and a cold engine's answers.
  auto off = make("off", false, true);
  const auto off1 = testing::RunGreedy(*off, turn1, 45);
  const auto turn2 = turn2_of(off1);
  std::vector<testing::Got> off2;
  for (const auto& p : turn2) off2.push_back(testing::RunGreedy(*off, {p}, 6)[0]);
  const auto cold = make("off", false, false);
  const auto cold2 = testing::RunGreedy(*cold, turn2, 6);
  for (size_t i = 0; i < turn2.size(); ++i) {
    ASSERT_GT(off2[i].cached, static_cast<int64_t>(turn1[i].size()) / 16 * 16) << "a decode copy served turn 2";
  }
  for (const std::string mode : {"fixed:5", "dspark"}) {
    for (bool async : {false, true}) {
      SCOPED_TRACE(mode + (async ? " async" : " sync"));
      auto e = make(mode, async, true);
      const auto got1 = testing::RunGreedy(*e, turn1, 45);
      for (size_t i = 0; i < turn1.size(); ++i) ASSERT_EQ(got1[i].tokens, off1[i].tokens) << i;
      const uint64_t accepted = e->GetStats().spec_accepted_tokens;
      EXPECT_GT(accepted, 0u);
      for (size_t i = 0; i < turn2.size(); ++i) {
        const testing::Got hit = testing::RunGreedy(*e, {turn2[i]}, 6)[0];
        EXPECT_EQ(hit.error, "");
        EXPECT_EQ(hit.cached, off2[i].cached) << "turn 2 of prompt " << i;
        EXPECT_EQ(hit.tokens, cold2[i].tokens) << i;
        EXPECT_EQ(hit.logprobs, cold2[i].logprobs) << i;
      }
      const Stats st = e->GetStats();
      EXPECT_EQ(st.swa_hits, turn2.size());
      EXPECT_EQ(st.replayed_tokens, 0u);
    }
  }
}

TEST_F(EngineSpec, ConfigurationErrorsAreClear) {
  auto model = std::make_unique<FakeModel>();
  EngineConfig c = FixedConfig(false);
  c.speculative = "dspark";
  auto e = CreateEngine(c, std::make_unique<FakeModel>(), *EngineTokenizer());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("drafter"), std::string::npos) << e.status().ToString();
  c.drafter = std::make_shared<FakeDrafter>(FakeOptions{}, false);
  for (const std::string bad : {"fixed:0", "fixed:9", "fixed:x", "sometimes"}) {
    c.speculative = bad;
    EXPECT_FALSE(CreateEngine(c, std::make_unique<FakeModel>(), *EngineTokenizer()).ok()) << bad;
  }
  c.speculative = "fixed:5";
  c.draft_tokens = 6;  // 7-token spans: more than the ring's 6 spare slots
  EXPECT_FALSE(CreateEngine(c, std::make_unique<FakeModel>(), *EngineTokenizer()).ok());
  FakeOptions small;
  small.vocab = 500;
  c.draft_tokens = 5;
  c.drafter = std::make_shared<FakeDrafter>(small, false);  // a drafter for another vocabulary
  EXPECT_FALSE(CreateEngine(c, std::make_unique<FakeModel>(), *EngineTokenizer()).ok());
}

}  // namespace
}  // namespace ladle::engine
