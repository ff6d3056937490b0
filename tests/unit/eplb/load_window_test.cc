// The sliding window's arithmetic (which steps a snapshot covers, buckets, laps of the ring)
// and the re-arrangement schedule.
#include "ladle/eplb/load_window.h"

#include <gtest/gtest.h>

#include <vector>

namespace ladle::eplb {
namespace {

std::vector<uint64_t> Counts(uint64_t a, uint64_t b) { return {a, b}; }

TEST(EplbSchedule, RecipeDefaults) {
  EXPECT_EQ(RearrangeSchedule::Prefill().window_steps, 100u);
  EXPECT_EQ(RearrangeSchedule::Prefill().interval_steps, 1000u);
  EXPECT_EQ(RearrangeSchedule::Decode().window_steps, 1000u);
  EXPECT_EQ(RearrangeSchedule::Decode().interval_steps, 10000u);
}

TEST(EplbSchedule, IntervalArithmetic) {
  const RearrangeSchedule s = RearrangeSchedule::Prefill();
  EXPECT_FALSE(s.IsRearrangeStep(0));
  EXPECT_FALSE(s.IsRearrangeStep(999));
  EXPECT_TRUE(s.IsRearrangeStep(1000));
  EXPECT_FALSE(s.IsRearrangeStep(1001));
  EXPECT_TRUE(s.IsRearrangeStep(3000));
  EXPECT_EQ(s.NextRearrangeStep(0), 1000u);
  EXPECT_EQ(s.NextRearrangeStep(999), 1000u);
  EXPECT_EQ(s.NextRearrangeStep(1000), 2000u);
  EXPECT_EQ(s.WindowFirst(1000), 901u);  // steps 901..1000: the last 100
  EXPECT_EQ(s.WindowFirst(99), 0u);
  EXPECT_EQ(s.WindowFirst(5), 0u);
  int rearrangements = 0;
  for (uint64_t step = 0; step <= 10000; ++step) rearrangements += s.IsRearrangeStep(step);
  EXPECT_EQ(rearrangements, 10);
}

TEST(EplbWindow, ExactWindowDropsOldSteps) {
  auto w = ExpertLoadWindow::Create(1, 2, {.window_steps = 3, .interval_steps = 10});
  ASSERT_TRUE(w.ok());
  for (uint64_t step = 1; step <= 5; ++step) ASSERT_TRUE(w->Add(step, 0, Counts(step, 1)).ok());
  // Steps 3, 4, 5.
  auto snap = w->Snapshot(5);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->At(0, 0), 3 + 4 + 5);
  EXPECT_EQ(snap->At(0, 1), 3);
  // Later steps with no data age the window out: at 7 only step 5 is left, at 8 nothing.
  EXPECT_EQ(w->Snapshot(7)->At(0, 0), 5);
  EXPECT_EQ(w->Snapshot(8)->At(0, 0), 0);
}

TEST(EplbWindow, SameStepAccumulatesAndLayersAreSeparate) {
  auto w = ExpertLoadWindow::Create(2, 2, {.window_steps = 4, .interval_steps = 4});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Add(7, 0, Counts(1, 2)).ok());
  ASSERT_TRUE(w->Add(7, 0, Counts(10, 20)).ok());  // a second micro-batch of the same step
  ASSERT_TRUE(w->Add(7, 1, Counts(5, 5)).ok());
  auto snap = w->Snapshot(7);
  EXPECT_EQ(snap->At(0, 0), 11);
  EXPECT_EQ(snap->At(0, 1), 22);
  EXPECT_EQ(snap->At(1, 0), 5);
}

TEST(EplbWindow, RingLapsDoNotLeakOldCounts) {
  // A slot reused a lap later must not keep the old lap's counts, including when steps are
  // skipped so the slot is reached without being the next one.
  auto w = ExpertLoadWindow::Create(1, 1, {.window_steps = 4, .interval_steps = 8});
  ASSERT_TRUE(w.ok());
  std::vector<uint64_t> added(100, 0);
  for (uint64_t step = 0; step < 100; step += 1 + step % 3) {
    added[step] = step + 1;
    ASSERT_TRUE(w->Add(step, 0, std::vector<uint64_t>{step + 1}).ok());
    uint64_t expect = 0;
    for (uint64_t s = step >= 3 ? step - 3 : 0; s <= step; ++s) expect += added[s];
    ASSERT_EQ(w->Snapshot(step)->At(0, 0), static_cast<double>(expect)) << "step " << step;
  }
}

TEST(EplbWindow, BucketsAreExactAtMultiples) {
  // Decode's layout: 1000-step window in buckets of 10; at a re-arrangement step (a multiple
  // of the bucket) the snapshot is exactly steps (step - 1000, step].
  auto w = ExpertLoadWindow::ForDecode(1, 1);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->bucket_steps(), 10u);
  for (uint64_t step = 1; step <= 10000; ++step) ASSERT_TRUE(w->Add(step, 0, std::vector<uint64_t>{step}).ok());
  const double expect = (9001.0 + 10000.0) * 1000 / 2;  // sum of 9001..10000
  EXPECT_EQ(w->Snapshot(10000)->At(0, 0), expect);
}

TEST(EplbWindow, Errors) {
  EXPECT_FALSE(ExpertLoadWindow::Create(1, 1, {.window_steps = 0, .interval_steps = 1}).ok());
  EXPECT_FALSE(ExpertLoadWindow::Create(1, 1, {.window_steps = 10, .interval_steps = 0}).ok());
  EXPECT_FALSE(ExpertLoadWindow::Create(1, 1, {.window_steps = 10, .interval_steps = 10}, 3).ok());
  EXPECT_FALSE(ExpertLoadWindow::Create(0, 1, RearrangeSchedule::Prefill()).ok());
  auto w = ExpertLoadWindow::ForPrefill(2, 2);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->Add(0, 2, Counts(1, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->Add(0, 0, std::vector<uint64_t>{1}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(w->Add(5, 0, Counts(1, 1)).ok());
  EXPECT_EQ(w->Add(4, 0, Counts(1, 1)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w->Snapshot(4).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ladle::eplb
