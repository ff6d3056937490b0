#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>

#include <atomic>
#include <set>
#include <thread>

#include "ladle/core/thread_pool.h"

namespace ladle {
namespace {

TEST(ThreadPool, ParallelForRunsEveryIndexOnce) {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](size_t i) { hits[i]++; });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << i;
  }
}

TEST(ThreadPool, MaxThreadsLimitsConcurrency) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> seen;
  pool.ParallelFor(
      200,
      [&](size_t) {
        std::lock_guard<std::mutex> lock(mu);
        seen.insert(std::this_thread::get_id());
      },
      1);
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen.count(std::this_thread::get_id()));
}

TEST(ThreadPool, SubmitReturnsResults) {
  ThreadPool pool(2);
  auto a = pool.Submit([] { return 40; });
  auto b = pool.Submit([] { return 2; });
  EXPECT_EQ(a.get() + b.get(), 42);
}

TEST(ThreadPool, NestedParallelForDoesNotDeadlock) {
  ThreadPool pool(1);
  std::atomic<int> total{0};
  pool.ParallelFor(4, [&](size_t) { pool.ParallelFor(4, [&](size_t) { total++; }); });
  EXPECT_EQ(total.load(), 16);
}

// Issue 12: an exception inside a pool task must reach whoever waits, and never kill a worker.
TEST(ThreadPool, SubmitCarriesTheExceptionAndTheWorkerSurvives) {
  ThreadPool pool(1);
  auto bad = pool.Submit([]() -> int { throw std::out_of_range("stoul"); });
  EXPECT_THROW(bad.get(), std::out_of_range);
  auto good = pool.Submit([] { return 7; });  // the only worker is still alive
  EXPECT_EQ(good.get(), 7);
}

TEST(ThreadPool, SubmitStatusTurnsAnExceptionIntoInternal) {
  ThreadPool pool(1);
  std::promise<Status> p;
  pool.SubmitStatus([]() -> Status { throw std::invalid_argument("bad index"); }, [&](Status s) { p.set_value(s); });
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const Status s = f.get();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("bad index"), std::string::npos) << s.ToString();
  std::promise<Status> q;
  pool.SubmitStatus([] { return Status(); }, [&](Status s2) { q.set_value(s2); });
  EXPECT_TRUE(q.get_future().get().ok());
}

TEST(ThreadPool, ParallelForRethrowsInTheCallerAfterEveryItem) {
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.ParallelFor(64, [&](size_t i) {
    ran++;
    if (i % 7 == 3) throw std::runtime_error("item");
  }), std::runtime_error);
  EXPECT_EQ(ran.load(), 64);  // a throwing item does not stop the others
  std::atomic<int> again{0};
  pool.ParallelFor(16, [&](size_t) { again++; });  // workers survived
  EXPECT_EQ(again.load(), 16);
}

}  // namespace
}  // namespace ladle
