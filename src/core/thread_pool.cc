#include "ladle/core/thread_pool.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <algorithm>
#include <string>

namespace ladle {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::Enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn, size_t max_threads) {
  if (n == 0) return;
  if (n == 1) {
    fn(0);
    return;
  }
  // Shared state lives on the heap so helpers that start late never touch a dead frame.
  struct State {
    std::atomic<size_t> next{0};
    std::atomic<size_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  auto st = std::make_shared<State>();
  auto run = [st, n, &fn] {
    for (;;) {
      size_t i = st->next.fetch_add(1);
      if (i >= n) return;
      fn(i);
      if (st->done.fetch_add(1) + 1 == n) {
        std::lock_guard<std::mutex> lock(st->mu);
        st->cv.notify_all();
      }
    }
  };
  size_t helpers = std::min(n - 1, workers_.size());
  if (max_threads > 0) helpers = std::min(helpers, max_threads - 1);
  // `fn` is referenced by helpers only while some index is unclaimed or running, and we wait
  // below until every index has finished, so the reference stays valid.
  for (size_t h = 0; h < helpers; ++h) Enqueue(run);
  run();
  std::unique_lock<std::mutex> lock(st->mu);
  st->cv.wait(lock, [&] { return st->done.load() == n; });
}

ThreadPool& SharedPool() {
  static ThreadPool* pool = [] {
    size_t n = std::max(1u, std::thread::hardware_concurrency());
    if (const char* env = std::getenv("LADLE_THREADS")) n = std::max(1ul, std::strtoul(env, nullptr, 10));
    // The caller of ParallelFor works too, so n threads need n - 1 workers (at least one).
    return new ThreadPool(std::max<size_t>(1, n - 1));  // intentionally leaked: workers may outlive static destructors
  }();
  return *pool;
}

}  // namespace ladle
