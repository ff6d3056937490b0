#include "device.h"

#include <chrono>

namespace ladle::engine {

using Clock = std::chrono::steady_clock;

Device::Device() : thread_([this] { Run(); }) {}

Device::~Device() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Device::Launch(std::function<void()> task, bool after_gap) {
  {
    std::lock_guard lk(mu_);
    queue_.emplace_back(std::move(task), after_gap);
  }
  cv_.notify_one();
}

double Device::idle_fraction() const {
  const double busy = static_cast<double>(busy_ns_.load());
  const double idle = static_cast<double>(idle_ns_.load());
  return busy + idle > 0 ? idle / (busy + idle) : 0.0;
}

void Device::Run() {
  bool started = false;  // no idle before the first task
  for (;;) {
    std::function<void()> task;
    bool after_gap;
    const auto wait_start = Clock::now();
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front().first);
      after_gap = queue_.front().second;
      queue_.pop_front();
    }
    const auto t0 = Clock::now();
    if (started && !after_gap) idle_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(t0 - wait_start).count();
    started = true;
    task();
    busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  }
}

}  // namespace ladle::engine
