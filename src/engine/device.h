// The CPU stand-in for the GPU stream: one thread running launched tasks strictly in order
// (forward(N), sample(N), forward(N+1), ...). FIFO order is what makes it safe for the
// scheduler to reuse a freed block or ring slot at once: any task that still touches the old
// owner's data was launched earlier and so runs earlier. Also measures its idle time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ladle::engine {

class Device {
 public:
  Device();
  ~Device();  // runs what is queued, then joins
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Queues `task`. `after_gap`: the scheduler had no work before this launch, so the wait
  // that ends here is not idle time the engine could have avoided.
  void Launch(std::function<void()> task, bool after_gap);
  // Idle / (idle + busy) over the periods the engine had work.
  double idle_fraction() const;

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, bool>> queue_;
  bool stop_ = false;
  std::atomic<int64_t> busy_ns_{0}, idle_ns_{0};
  std::thread thread_;
};

}  // namespace ladle::engine
