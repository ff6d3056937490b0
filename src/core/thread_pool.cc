#include "ladle/core/thread_pool.h"

#include "ladle/core/logging.h"

#include <atomic>
#include <exception>
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
    // Submit's packaged_task already carries a job's exception to its future, and ParallelFor
    // rethrows its items' in the caller; this catch is the last line for anything else, so a
    // throwing job costs a log line, never the worker thread (std::terminate) or the process.
    try {
      job();
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("thread_pool.job_threw what='{}'", e.what());
    } catch (...) {
      LADLE_LOG_ERROR("thread_pool.job_threw what='(not a std::exception)'");
    }
  }
}

void ThreadPool::SubmitStatus(std::function<Status()> fn, std::function<void(Status)> done) {
  Enqueue([fn = std::move(fn), done = std::move(done)] {
    Status s;
    try {
      s = fn();
    } catch (const std::exception& e) {
      s = Internal(std::string("pool task threw: ") + e.what());
    } catch (...) {
      s = Internal("pool task threw a non-standard exception");
    }
    done(std::move(s));
  });
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
    std::exception_ptr error;  // the first item's exception, rethrown in the caller
  };
  auto st = std::make_shared<State>();
  auto run = [st, n, &fn] {
    for (;;) {
      size_t i = st->next.fetch_add(1);
      if (i >= n) return;
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(st->mu);
        if (!st->error) st->error = std::current_exception();
      }
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
  // Every item ran (an item that threw does not stop the others), so nothing still references
  // `fn` when the caller sees the exception.
  if (st->error) std::rethrow_exception(st->error);
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
