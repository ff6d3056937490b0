// The swap-in thread and its ready gate (src/engine/swap_in.h), driven directly: a copy's layer
// is never ready before the copy has run (a copy blocked on a gate holds back WaitLayer for its
// layer and above, not below); copies run in layer order (stable among equal layers) and
// WaitLayer(l) returns once every copy of a layer <= l has landed, for any number of waiters;
// a batch with no copies, or none at or below l, is ready at once; the copy's captures are
// dropped by the time it is ready; destroying the SwapIn with copies still pending runs them
// all, releases the waiter, and does not hang.
//
// Every wait in these tests is bounded: a waiter runs on a thread of its own and the test asks
// whether it returned within a deadline, so a bug fails the test instead of hanging it. A
// SwapIn under a waiter that never returned is leaked, not destroyed under it; everything a
// test's threads touch is held by shared_ptr so that a thread left behind stays valid.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "swap_in.h"

namespace ladle::engine {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kLong = 5s;     // how long something that must return may take
constexpr auto kShort = 50ms;  // how long something that must not return is given to (wrongly) do so

// The copies' side: gates they block on and the order they ran in.
struct World {
  explicit World(size_t gates) : open(gates, false) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> open;  // open[id]: copy `id` may finish
  std::vector<int> started;  // ids of the copies that began, in order
  std::vector<int> ran;      // ids of the copies that finished, in order
  bool abandoned = false;  // a failed test left threads behind: gates stay shut

  void Open(int id) {
    std::lock_guard lk(mu);
    if (!abandoned) open[static_cast<size_t>(id)] = true;
    cv.notify_all();
  }
  void OpenAll() {
    std::lock_guard lk(mu);
    if (!abandoned) std::fill(open.begin(), open.end(), true);
    cv.notify_all();
  }
  std::vector<int> Ran() {
    std::lock_guard lk(mu);
    return ran;
  }
  bool Started(int id, Clock::duration within) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, within, [&] { return std::find(started.begin(), started.end(), id) != started.end(); });
  }
};

// A copy that blocks until its gate opens (gated) and then logs its id; `keep` stands for what
// a real copy keeps alive (a host buffer, an shm pin).
std::function<void()> Copy(const std::shared_ptr<World>& w, int id, bool gated = true,
                           std::shared_ptr<void> keep = nullptr) {
  return [w, id, gated, keep = std::move(keep)] {
    std::unique_lock lk(w->mu);
    w->started.push_back(id);
    w->cv.notify_all();
    if (gated) w->cv.wait(lk, [&] { return w->open[static_cast<size_t>(id)]; });
    w->ran.push_back(id);
  };
}

// Runs fn on a thread of its own; Returned(within) says whether it has returned by then.
class Async {
 public:
  explicit Async(std::function<void()> fn) : st_(std::make_shared<St>()) {
    thread_ = std::thread([st = st_, fn = std::move(fn)] {
      fn();
      std::lock_guard lk(st->mu);
      st->done = true;
      st->cv.notify_all();
    });
  }
  ~Async() {
    if (!thread_.joinable()) return;
    if (Returned(kLong)) {
      thread_.join();
    } else {
      thread_.detach();  // stuck (the test has failed): what it touches is leaked, not freed
    }
  }
  Async(const Async&) = delete;
  Async& operator=(const Async&) = delete;
  bool Returned(Clock::duration within) {
    std::unique_lock lk(st_->mu);
    return st_->cv.wait_for(lk, within, [&] { return st_->done; });
  }

 private:
  struct St {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  std::shared_ptr<St> st_;
  std::thread thread_;
};

// A forward's sequence calling WaitLayer(layer) (INT_MAX: WaitAll); notes which copies had
// run when it returned.
class Waiter {
 public:
  Waiter(SwapIn* sw, std::shared_ptr<World> w, int layer)
      : layer_(layer), ran_at_return_(std::make_shared<std::vector<int>>()),
        entering_(std::make_shared<std::atomic<bool>>(false)),
        async_([sw, w, layer, out = ran_at_return_, entering = entering_] {
          entering->store(true);
          if (layer == INT_MAX) {
            sw->WaitAll();
          } else {
            sw->WaitLayer(layer);
          }
          *out = w->Ran();  // published to the test by Async's mutex
        }) {}
  int layer() const { return layer_; }
  // Whether its thread has reached the WaitLayer call (it may not be blocked in it yet: a test
  // that needs it blocked waits a while longer).
  bool Entering(Clock::duration within) {
    const auto until = Clock::now() + within;
    while (!entering_->load()) {
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
  bool Returned(Clock::duration within) { return async_.Returned(within); }
  // Only after Returned(...) was true.
  const std::vector<int>& RanAtReturn() const { return *ran_at_return_; }

 private:
  int layer_;
  std::shared_ptr<std::vector<int>> ran_at_return_;
  std::shared_ptr<std::atomic<bool>> entering_;
  Async async_;
};

bool Contains(const std::vector<int>& v, int id) { return std::find(v.begin(), v.end(), id) != v.end(); }

class SwapInTest : public ::testing::Test {
 protected:
  void TearDown() override {
    world_->OpenAll();  // no copy stays blocked (unless the test abandoned them)
    bool stuck = false;
    const auto deadline = Clock::now() + kLong;  // one deadline for all: a lost wakeup fails fast
    for (auto& w : waiters_) stuck |= !w->Returned(std::max<Clock::duration>(deadline - Clock::now(), 0ms));
    if (stuck) {
      ADD_FAILURE() << "a waiter never returned: its SwapIn is leaked rather than destroyed under it";
      (void)sw_.release();
      for (auto& w : waiters_) (void)w.release();  // their threads stay blocked in it
    }
  }

  Waiter& Wait(int layer, SwapIn* sw = nullptr) {
    waiters_.push_back(std::make_unique<Waiter>(sw ? sw : sw_.get(), world_, layer));
    return *waiters_.back();
  }

  std::shared_ptr<World> world_ = std::make_shared<World>(16);
  std::unique_ptr<SwapIn> sw_ = std::make_unique<SwapIn>();
  std::vector<std::unique_ptr<Waiter>> waiters_;  // destroyed (joined) before sw_
};

TEST_F(SwapInTest, ACopysLayerIsNotReadyBeforeTheCopyHasRun) {
  auto keep = std::make_shared<int>(7);
  std::weak_ptr<int> kept = keep;
  sw_->Start({{0, Copy(world_, 0, true, std::move(keep))}});
  Waiter& below = Wait(-1);  // reads nothing that is swapped in
  Waiter& w0 = Wait(0);
  Waiter& all = Wait(INT_MAX);
  EXPECT_TRUE(below.Returned(kLong)) << "a layer below every copy's is ready at once";
  ASSERT_TRUE(world_->Started(0, kLong));
  ASSERT_TRUE(w0.Entering(kLong));
  ASSERT_TRUE(all.Entering(kLong));
  EXPECT_FALSE(w0.Returned(100ms)) << "layer 0 was announced ready while its copy was still blocked";
  EXPECT_FALSE(all.Returned(0ms)) << "WaitAll returned while a copy was still blocked";
  EXPECT_TRUE(world_->Ran().empty());
  EXPECT_FALSE(kept.expired());
  world_->Open(0);
  ASSERT_TRUE(w0.Returned(kLong));
  ASSERT_TRUE(all.Returned(kLong));
  EXPECT_EQ(w0.RanAtReturn(), std::vector<int>{0}) << "ready before the copy had run";
  EXPECT_EQ(all.RanAtReturn(), std::vector<int>{0});
  EXPECT_TRUE(kept.expired()) << "the copy (and what it kept alive) is dropped by the time it is ready";
  const SwapIn::Totals t = sw_->totals();
  EXPECT_EQ(t.copies, 1u);
  EXPECT_GE(t.copy_ns, std::chrono::duration_cast<std::chrono::nanoseconds>(100ms).count())
      << "the copy was held at least 100 ms after it began";
  // Both waiters were in WaitLayer for the 100 ms before the gate opened, so blocked when the copy
  // ended: the whole copy counts as exposed (the totals charge a copy whole or not at all).
  EXPECT_EQ(t.exposed_ns, t.copy_ns) << "waiters were blocked through the copy: none of it was hidden";
}

TEST_F(SwapInTest, LayersBecomeReadyInOrderAndWaitLayerReturnsOnceEveryLayerUpToItIsReady) {
  // Submitted out of order (id: layer); Start sorts them by layer, stably.
  const std::vector<int> layer_of = {3, 0, 2, 0, 1, 5};
  std::vector<SwapIn::Op> ops;
  for (int id = 0; id < static_cast<int>(layer_of.size()); ++id) ops.push_back({layer_of[static_cast<size_t>(id)], Copy(world_, id)});
  const std::vector<int> order = {1, 3, 4, 2, 0, 5};  // by layer, equal layers in submission order
  sw_->Start(std::move(ops));
  // Two sequences waiting on each layer from below every copy to past the last, plus WaitAll;
  // there is no copy at layer 4 (its waiters need layers <= 3 only) nor 6.
  for (int l = -1; l <= 6; ++l) {
    Wait(l);
    Wait(l);
  }
  Wait(INT_MAX);
  std::vector<int> opened;
  for (size_t step = 0; step <= order.size(); ++step) {
    std::this_thread::sleep_for(kShort);  // time for a wrong gate to open early
    for (auto& w : waiters_) {
      bool needs_closed = false;  // a copy it needs is still behind a shut gate
      for (int id = 0; id < static_cast<int>(layer_of.size()); ++id) {
        if (layer_of[static_cast<size_t>(id)] <= w->layer() && !Contains(opened, id)) needs_closed = true;
      }
      if (needs_closed) {
        EXPECT_FALSE(w->Returned(0ms)) << "WaitLayer(" << w->layer() << ") returned after " << step
                                       << " copies were let through";
        continue;
      }
      ASSERT_TRUE(w->Returned(kLong)) << "WaitLayer(" << w->layer() << ") still blocked after " << step
                                      << " copies were let through";
      for (int id = 0; id < static_cast<int>(layer_of.size()); ++id) {
        if (layer_of[static_cast<size_t>(id)] <= w->layer()) {
          EXPECT_TRUE(Contains(w->RanAtReturn(), id))
              << "WaitLayer(" << w->layer() << ") returned before copy " << id << " (layer "
              << layer_of[static_cast<size_t>(id)] << ") had run";
        }
      }
    }
    if (step < order.size()) {
      opened.push_back(order[step]);
      world_->Open(order[step]);
    }
  }
  EXPECT_EQ(world_->Ran(), order) << "copies run by layer, equal layers in the order given";
  EXPECT_EQ(sw_->totals().copies, order.size());
}

TEST_F(SwapInTest, ABatchWithNoCopiesIsReadyAtOnce) {
  // A fresh SwapIn (no batch yet), then an empty batch: every layer is ready.
  EXPECT_TRUE(Wait(0).Returned(kLong));
  EXPECT_TRUE(Wait(INT_MAX).Returned(kLong));
  sw_->Start({});
  EXPECT_TRUE(Wait(0).Returned(kLong));
  EXPECT_TRUE(Wait(1000).Returned(kLong));
  EXPECT_TRUE(Wait(INT_MAX).Returned(kLong));
  // A batch whose only copy is read from layer 5: layers below are ready at once.
  sw_->Start({{5, Copy(world_, 0)}});
  Waiter& w4 = Wait(4);
  Waiter& all = Wait(INT_MAX);
  EXPECT_TRUE(w4.Returned(kLong)) << "no copy at or below layer 4";
  EXPECT_FALSE(all.Returned(kShort));
  world_->Open(0);
  ASSERT_TRUE(all.Returned(kLong));
  // The next batch (the previous one landed), empty again: ready at once, nothing copied.
  sw_->Start({});
  EXPECT_TRUE(Wait(0).Returned(kLong));
  EXPECT_TRUE(Wait(INT_MAX).Returned(kLong));
  const SwapIn::Totals t = sw_->totals();
  EXPECT_EQ(t.copies, 1u);
  EXPECT_EQ(world_->Ran(), std::vector<int>{0});
}

TEST_F(SwapInTest, ShutdownWithCopiesPendingRunsThemReleasesTheWaiterAndDoesNotHang) {
  // Copy 0 (layer 0) is running, blocked; 1 (layer 1) blocked behind it; 2 (layer 2) not gated.
  SwapIn* sw = sw_.release();  // destroyed by `shutdown` below
  sw->Start({{0, Copy(world_, 0)}, {1, Copy(world_, 1)}, {2, Copy(world_, 2, /*gated=*/false)}});
  Waiter& w0 = Wait(0, sw);
  ASSERT_TRUE(world_->Started(0, kLong));
  ASSERT_TRUE(w0.Entering(kLong));
  EXPECT_FALSE(w0.Returned(kShort));
  auto shutdown = std::make_unique<Async>([sw] { delete sw; });
  // The destructor has set stop_ by now (it does so first), with all three copies pending.
  EXPECT_FALSE(shutdown->Returned(kShort)) << "the destructor returned with copies still pending";
  world_->Open(0);
  if (!w0.Returned(kLong)) {
    // Lost waiter: do not let the destructor finish under it (copy 1 stays blocked, leaked).
    ADD_FAILURE() << "a waiter blocked in WaitLayer(0) was not released once copy 0 ran during shutdown";
    {
      std::lock_guard lk(world_->mu);
      world_->abandoned = true;
    }
    (void)shutdown.release();
    (void)waiters_.back().release();
    waiters_.pop_back();
    return;
  }
  EXPECT_EQ(w0.RanAtReturn(), std::vector<int>{0});
  // w0 is out of WaitLayer: the SwapIn may now go away.
  EXPECT_FALSE(shutdown->Returned(kShort)) << "the destructor did not wait for copy 1";
  world_->Open(1);
  EXPECT_TRUE(shutdown->Returned(kLong)) << "shutdown hung";
  EXPECT_EQ(world_->Ran(), (std::vector<int>{0, 1, 2})) << "a copy pending at shutdown was dropped";
}

}  // namespace
}  // namespace ladle::engine
