// A fixed-size worker pool shared by the tokenizer (segment-parallel encoding) and, later,
// the grammar compiler and the engine's host-side work. One process-wide pool avoids
// oversubscribing the machine when several modules want parallelism at once.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "ladle/core/status.h"

namespace ladle {

class ThreadPool {
 public:
  // `threads` workers; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();  // drains queued work, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }

  // Queues `fn`; the future carries its result or its exception. A caller that does not wait
  // on the future must catch inside `fn` (or use SubmitStatus): an exception nobody reads is
  // an answer that never comes.
  template <typename F>
  auto Submit(F&& fn) -> std::future<decltype(fn())> {
    using R = decltype(fn());
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(fn));
    std::future<R> fut = task->get_future();
    Enqueue([task] { (*task)(); });
    return fut;
  }

  // Runs `fn` and hands `done` its Status; an exception thrown by `fn` becomes kInternal
  // ("... threw: what"), so whoever waits on `done` always hears back. `done` itself must not
  // throw (it runs on the worker).
  void SubmitStatus(std::function<Status()> fn, std::function<void(Status)> done);

  // Runs fn(0..n-1), the calling thread taking part, and returns when all are done. Items
  // are handed out dynamically so uneven ones still balance. If items throw, the first
  // exception is rethrown here after every item has finished. At most `max_threads` threads
  // (caller included) work on it; 0 means size() + 1.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn, size_t max_threads = 0);

 private:
  void Enqueue(std::function<void()> job);
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// The process-wide pool. LADLE_THREADS sets the number of threads that work on a ParallelFor
// (caller included); the default is the hardware's core count, so the pool has one worker
// fewer than that. Created on first use; lives until exit.
ThreadPool& SharedPool();

}  // namespace ladle
