#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ladle
