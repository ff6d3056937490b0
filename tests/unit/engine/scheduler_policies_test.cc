#include "ladle/engine/scheduler_policies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

namespace ladle::engine {
namespace {

CostModel Quadratic() { return CostModel{1000.0, 2.0, 5.0, 100000.0}; }

TEST(CostModel, MaxTokensIsTheLargestFittingQ) {
  const CostModel m = Quadratic();
  for (double budget : {0.0, 999.0, 1006.0, 5e4, 1e6, 3.3e7, 1e9}) {
    for (int64_t c : {0, 1, 300, 5000, 100000}) {
      const int64_t q = m.MaxTokens(budget, c);
      if (q > 0) {
        EXPECT_LE(m.TokenCost(q, c), budget) << budget << " " << c;
      }
      EXPECT_GT(m.TokenCost(q + 1, c), budget) << budget << " " << c;
    }
  }
  EXPECT_EQ(m.MaxTokens(-5, 0), 0);
}

TEST(CostModel, MaxTokensLinearWhenNoQuadraticTerm) {
  CostModel m{100.0, 0.0, 0.0, 10.0};
  EXPECT_EQ(m.MaxTokens(1000, 0), 10);
  EXPECT_EQ(m.MaxTokens(1099, 0), 10);
  EXPECT_EQ(m.MaxTokens(1100, 7), 11);
}

TEST(CostModel, FitRecoversCoefficients) {
  const CostModel truth = Quadratic();
  std::vector<CostSample> s;
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0, 1.0);
  for (int64_t c : {0, 256, 1024, 4096})
    for (int64_t q : {1, 16, 64, 256, 512}) s.push_back({q, c, truth.Cost(q, c) + noise(rng)});
  auto fit = CostModel::Fit(s);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->a, truth.a, 1.0);
  EXPECT_NEAR(fit->b, truth.b, 0.01);
  EXPECT_NEAR(fit->d, truth.d, 0.01);
  EXPECT_NEAR(fit->e, truth.e, 5.0);
}

TEST(CostModel, FitPinsNegativeCoefficients) {
  // Pure linear data with a slight downward curve: a free fit would give d < 0, which would
  // let the solver promise ever more tokens. It must come out ≥ 0.
  std::vector<CostSample> s;
  for (int64_t q : {1, 10, 100, 200, 400}) s.push_back({q, 0, 500.0 * q - 0.1 * q * q + 2000});
  for (int64_t q : {1, 100}) s.push_back({q, 100, 500.0 * q + 2000});
  auto fit = CostModel::Fit(s);
  ASSERT_TRUE(fit.ok());
  EXPECT_GE(fit->d, 0);
  EXPECT_GE(fit->b, 0);
  EXPECT_GT(fit->a, 0);
}

TEST(CostModel, FitNeverPutsTheConstantAboveTheCheapestMeasuredStep) {
  // Concave timings (as when large probes run on more idle cores): the non-negative linear
  // fit's intercept lands well above the one-token time; every step would be over-charged.
  std::vector<CostSample> s;
  for (int64_t q : {1, 4, 16, 64, 256, 512}) s.push_back({q, 0, 1e6 * std::sqrt(static_cast<double>(q))});
  auto fit = CostModel::Fit(s);
  ASSERT_TRUE(fit.ok());
  EXPECT_LE(fit->e, 1e6);
}

TEST(CostModel, FitsTheReplayTermAndDecodesSeparately) {
  CostModel truth{800.0, 0.5, 0.2, 2e6};
  truth.f = 70.0;
  std::vector<CostSample> s;
  for (int64_t c : {0, 256, 512, 2048}) {
    for (int64_t q : {1, 4, 16, 64, 256, 512}) s.push_back({q, c, truth.Cost(q, c)});
    if (c > 0) s.push_back({1, c, 2e6 + 300000 + 5.0 * c, true});
  }
  auto fit = CostModel::Fit(s);
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->f, 70.0, 0.5);
  EXPECT_NEAR(fit->a, 800.0, 5.0);
  ASSERT_TRUE(fit->has_decode);
  EXPECT_NEAR(fit->DecodeCost(1000), 300000 + 5000, 100);
  // A one-token chunk pays the replay: nothing fits until f·c does.
  EXPECT_EQ(fit->MaxTokens(70.0 * 2048 - 1, 2048), 0);
  EXPECT_GT(fit->MaxTokens(70.0 * 2048 + 1e6, 2048), 0);
  const auto path = (std::filesystem::temp_directory_path() / "ladle_cost_model_test2.txt").string();
  ASSERT_TRUE(fit->Save(path).ok());
  auto back = CostModel::Load(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->f, fit->f);
  EXPECT_EQ(back->g, fit->g);
  EXPECT_EQ(back->h, fit->h);
  EXPECT_TRUE(back->has_decode);
  std::remove(path.c_str());
}

TEST(CostModel, FitRejectsTooFewSamples) {
  std::vector<CostSample> s = {{1, 0, 1}, {2, 0, 2}};
  EXPECT_FALSE(CostModel::Fit(s).ok());
}

TEST(CostModel, SaveLoadRoundTripAndBadFiles) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / "ladle_cost_model_test.txt").string();
  const CostModel m{123.456, 0.000789, 1.5e-3, 98765.4321};
  ASSERT_TRUE(m.Save(path).ok());
  auto back = CostModel::Load(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->a, m.a);
  EXPECT_EQ(back->b, m.b);
  EXPECT_EQ(back->d, m.d);
  EXPECT_EQ(back->e, m.e);
  std::ofstream(path) << "not a cost model\n";
  EXPECT_FALSE(CostModel::Load(path).ok());
  std::ofstream(path) << "ladle-cost-model 1\na 1\nb 2\n";
  EXPECT_FALSE(CostModel::Load(path).ok());
  std::remove(path.c_str());
  EXPECT_FALSE(CostModel::Load(path).ok());
}

TEST(FifoAdmission, NeedsBatchSlotRingAndBlocks) {
  FifoAdmission a;
  AdmissionView v{.running = 1, .max_running = 4, .free_slots = 3, .available_blocks = 10, .blocks_needed = 4,
                  .reserve_blocks = 2};
  EXPECT_TRUE(a.Admit(v));
  v.blocks_needed = 9;  // 10 − 2 reserve < 9
  EXPECT_FALSE(a.Admit(v));
  v.running = 0;  // idle engine: no reserve
  EXPECT_TRUE(a.Admit(v));
  v.blocks_needed = 1;
  v.free_slots = 0;
  EXPECT_FALSE(a.Admit(v));
  v.free_slots = 1;
  v.running = 4;
  EXPECT_FALSE(a.Admit(v));
}

TEST(TimeBudgetChunk, DecodesChargedFirstThenLargestFittingChunk) {
  const CostModel m{1000.0, 0.0, 0.0, 10000.0};
  TimeBudgetChunk p(m, 110000.0, 16, 4096);
  std::vector<int64_t> decodes = {5, 9};  // 2 × 1000 ns
  StepBudget b = p.Begin(decodes);
  EXPECT_DOUBLE_EQ(b.ns_left, 110000.0 - 10000.0 - 2000.0);
  EXPECT_EQ(p.Take(1000, 0, &b), 98);
  EXPECT_EQ(p.Take(1000, 0, &b), 0);  // budget spent, a prefill already ran: next step
}

TEST(TimeBudgetChunk, DecodesUseTheirOwnCostAndNeverStarvePrefill) {
  CostModel m{1000.0, 0.0, 0.0, 10000.0};
  m.has_decode = true;
  m.g = 50.0;
  m.h = 0.5;
  TimeBudgetChunk p(m, 20000.0, 16, 4096);
  std::vector<int64_t> decodes = {100, 300};  // 100 + 200 ns
  StepBudget b = p.Begin(decodes);
  EXPECT_DOUBLE_EQ(b.ns_left, 20000.0 - 10000.0 - 300.0);
  std::vector<int64_t> many(1000, 1000);  // decodes alone overrun the budget
  StepBudget full = p.Begin(many);
  EXPECT_LT(full.ns_left, 0);
  EXPECT_EQ(p.Take(500, 0, &full), 16);  // the step's first prefill still progresses
  EXPECT_EQ(p.Take(500, 0, &full), 0);
}

TEST(TimeBudgetChunk, CapsAtRemainingAndMaxChunk) {
  const CostModel m{1.0, 0.0, 0.0, 0.0};
  TimeBudgetChunk p(m, 1e9, 16, 300);
  StepBudget b = p.Begin({});
  EXPECT_EQ(p.Take(50, 0, &b), 50);
  EXPECT_EQ(p.Take(1000, 0, &b), 300);
}

TEST(TimeBudgetChunk, EmptyBatchAlwaysProgresses) {
  const CostModel m{1e6, 0.0, 0.0, 0.0};
  TimeBudgetChunk p(m, 10.0, 16, 4096);  // budget below one token
  StepBudget b = p.Begin({});
  EXPECT_EQ(p.Take(1000, 0, &b), 16);
  EXPECT_EQ(p.Take(1000, 0, &b), 0);
}

TEST(TimeBudgetChunk, LongerCachedPrefixGetsSmallerChunk) {
  const CostModel m{100.0, 0.5, 0.01, 0.0};
  TimeBudgetChunk p(m, 1e6, 1, 1 << 20);
  StepBudget b1 = p.Begin({}), b2 = p.Begin({});
  EXPECT_GT(p.Take(1 << 20, 0, &b1), p.Take(1 << 20, 10000, &b2));
}

// Regression: a profiled fit once gave e = 88.7 ms against a 50 ms budget. Every step then
// had only the forced min_chunk for one prompt, so admission went one prompt at a time. The
// over-fitted constant is charged at most half the budget; several waiting prompts must be
// admitted (take a chunk) over successive steps while earlier ones decode.
TEST(TimeBudgetChunk, ConstantAboveBudgetStillAdmitsWaitingPrompts) {
  CostModel m{100000.0, 0.0, 0.0, 88.7e6};  // 0.1 ms a token, e far above the budget
  m.has_decode = true;
  m.g = 1e6;
  TimeBudgetChunk p(m, 50e6, 16, 512);
  StepBudget first = p.Begin({});
  EXPECT_GT(first.ns_left, 0);  // e does not eat the whole budget
  EXPECT_GT(p.Take(300, 0, &first), 16);

  // A small FIFO scheduler over the policy: running prefills first, then admissions.
  struct Prompt {
    int64_t len, done = 0;
    bool admitted = false;
  };
  std::vector<Prompt> prompts(6, Prompt{300});
  int max_prefills_in_a_step = 0;
  int steps = 0;
  for (; steps < 100; ++steps) {
    std::vector<int64_t> decodes;
    for (const auto& q : prompts)
      if (q.admitted && q.done == q.len) decodes.push_back(q.len);
    StepBudget b = p.Begin(decodes);
    int prefills = 0;
    for (auto& q : prompts) {  // FIFO: admitted part-way prompts, then the queue's head onwards
      if (q.done == q.len) continue;
      const int64_t t = p.Take(q.len - q.done, q.done, &b);
      if (t <= 0) break;
      q.admitted = true;
      q.done += t;
      ++prefills;
    }
    max_prefills_in_a_step = std::max(max_prefills_in_a_step, prefills);
    if (std::all_of(prompts.begin(), prompts.end(), [](const Prompt& q) { return q.done == q.len; })) break;
  }
  for (const auto& q : prompts) EXPECT_TRUE(q.admitted && q.done == q.len);
  EXPECT_GT(max_prefills_in_a_step, 1);  // not one prompt at a time
  EXPECT_LT(steps, 20);                  // 6 × 300 tokens at ≈ 250 a step, not 16
}

// With e inside half the budget nothing changes: it is charged in full.
TEST(TimeBudgetChunk, PlausibleConstantIsChargedInFull) {
  const CostModel m{1000.0, 0.0, 0.0, 20000.0};
  TimeBudgetChunk p(m, 50000.0, 16, 4096);
  EXPECT_DOUBLE_EQ(p.Begin({}).ns_left, 30000.0);
}

TEST(FixedChunk, PerSequenceAndIndependentOfBatch) {
  FixedChunk p(64);
  std::vector<int64_t> decodes(50, 1000);
  StepBudget b = p.Begin(decodes);
  EXPECT_EQ(p.Take(1000, 0, &b), 64);
  EXPECT_EQ(p.Take(1000, 0, &b), 64);
  EXPECT_EQ(p.Take(10, 0, &b), 10);
}

TEST(Preemption, NewestFirstAndLargestFirst) {
  std::vector<VictimView> v = {{1, 0, 9}, {3, 0, 2}, {3, 1, 1}, {2, 0, 5}};
  EXPECT_EQ(NewestFirstPreemption().PickVictim(v), 2u);
  EXPECT_EQ(LargestFirstPreemption().PickVictim(v), 0u);
  std::vector<VictimView> tie = {{1, 0, 4}, {2, 0, 4}};
  EXPECT_EQ(LargestFirstPreemption().PickVictim(tie), 1u);
}

TEST(Policies, ChosenByName) {
  EXPECT_TRUE(MakeAdmissionPolicy("fifo").ok());
  EXPECT_FALSE(MakeAdmissionPolicy("lifo").ok());
  EXPECT_TRUE(MakePreemptionPolicy("newest").ok());
  EXPECT_TRUE(MakePreemptionPolicy("largest").ok());
  EXPECT_EQ(MakePreemptionPolicy("x").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ladle::engine
