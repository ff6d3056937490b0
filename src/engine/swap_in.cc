#include "swap_in.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "ladle/core/logging.h"

namespace ladle::engine {

using Clock = std::chrono::steady_clock;

SwapIn::SwapIn() : thread_([this] { Run(); }) {}

SwapIn::~SwapIn() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SwapIn::Start(std::vector<Op> ops) {
  std::stable_sort(ops.begin(), ops.end(), [](const Op& a, const Op& b) { return a.layer < b.layer; });
  {
    std::lock_guard lk(mu_);
    LADLE_CHECK(done_ == ops_.size());  // the previous batch's copies all landed
    ops_ = std::move(ops);
    next_ = done_ = 0;
  }
  cv_.notify_all();
}

void SwapIn::WaitLayer(int layer) {
  std::unique_lock lk(mu_);
  auto ready = [&] { return done_ == ops_.size() || ops_[done_].layer > layer; };
  if (ready()) return;
  ++waiters_;
  done_cv_.wait(lk, ready);
  --waiters_;
}

void SwapIn::WaitAll() { WaitLayer(std::numeric_limits<int>::max()); }

SwapIn::Totals SwapIn::totals() const {
  std::lock_guard lk(mu_);
  return totals_;
}

void SwapIn::Run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || next_ < ops_.size(); });
    if (next_ >= ops_.size()) return;  // stop_ and nothing left
    Op& op = ops_[next_++];
    lk.unlock();
    const auto t0 = Clock::now();
    op.copy();
    op.copy = nullptr;  // drops what kept the source alive (a host buffer, an shm pin)
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    lk.lock();
    totals_.copy_ns += ns;
    totals_.copies += 1;
    // Someone blocked while this copy ran: it was not hidden behind compute.
    if (waiters_ > 0) totals_.exposed_ns += ns;
    ++done_;
    done_cv_.notify_all();
  }
}

}  // namespace ladle::engine
