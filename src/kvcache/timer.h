// A single thread running callbacks at deadlines (steady clock). Used for hedges, domain
// timeouts and the fault target's delays. Callbacks must be short; they run one at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "ladle/core/logging.h"

namespace ladle::kvcache {

class TimerThread {
 public:
  using Clock = std::chrono::steady_clock;
  TimerThread() : thread_([this] { Loop(); }) {}
  ~TimerThread() { Stop(); }

  // False (and `fn` not kept) once stopped.
  bool At(Clock::time_point when, std::function<void()> fn) {
    std::lock_guard lock(mu_);
    if (stop_) return false;
    queue_.push(Item{when, seq_++, std::move(fn)});
    cv_.notify_one();
    return true;
  }
  bool After(std::chrono::milliseconds d, std::function<void()> fn) { return At(Clock::now() + d, std::move(fn)); }

  // Joins the thread; pending callbacks are dropped, or run now when `run_pending`.
  void Stop(bool run_pending = false) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      stop_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard lock(mu_);
      while (!queue_.empty()) {
        fns.push_back(std::move(const_cast<Item&>(queue_.top()).fn));
        queue_.pop();
      }
    }
    if (run_pending) {
      for (auto& fn : fns) fn();
    }
  }

 private:
  struct Item {
    Clock::time_point when;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Item& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };

  void Loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      // A copy: wait_until keeps reading its argument while pushes may reallocate the heap.
      Clock::time_point when = queue_.top().when;
      if (when > Clock::now()) {
        cv_.wait_until(lock, when);
        continue;
      }
      std::function<void()> fn = std::move(const_cast<Item&>(queue_.top()).fn);
      queue_.pop();
      lock.unlock();
      try {
        fn();
      } catch (const std::exception& e) {
        LADLE_LOG_ERROR("kvcache.timer_callback_threw what={}", e.what());
      } catch (...) {
        LADLE_LOG_ERROR("kvcache.timer_callback_threw what=unknown");
      }
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ladle::kvcache
