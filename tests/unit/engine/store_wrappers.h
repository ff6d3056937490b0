// KvStore wrappers the engine tests fault stores with: ForwardingStore delegates every call to a
// real store (a test overrides what it faults), HeldCompletions keeps completions until Release,
// StallingStore holds every Get's completion (a store that stalls).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ladle/kvcache/kv_store.h"

namespace ladle::engine::testing {

class ForwardingStore : public kvcache::KvStore {
 public:
  explicit ForwardingStore(std::shared_ptr<kvcache::KvStore> inner) : inner_(std::move(inner)) {}
  void Match(std::span<const kvcache::BlockKey> keys, MatchDone done) override { inner_->Match(keys, std::move(done)); }
  void Get(std::span<const kvcache::BlockKey> keys, std::span<const kvcache::MutableBuffer> buffers,
           GetDone done) override {
    inner_->Get(keys, buffers, std::move(done));
  }
  void Put(std::span<const kvcache::BlockKey> keys, std::span<const std::span<const uint8_t>> values,
           kvcache::TrafficClass cls, PutDone done, std::optional<kvcache::BlockKey> parent) override {
    inner_->Put(keys, values, cls, std::move(done), parent);
  }
  void Delete(std::span<const kvcache::BlockKey> keys, DeleteDone done) override { inner_->Delete(keys, std::move(done)); }
  kvcache::StoreStat Stat() override { return inner_->Stat(); }
  Result<uint64_t> RunGcOnce() override { return inner_->RunGcOnce(); }
  Result<FsckReport> Fsck() override { return inner_->Fsck(); }

 protected:
  std::shared_ptr<kvcache::KvStore> inner_;
};

// Get completions kept until Release (thread-safe).
class HeldCompletions {
 public:
  // A completion that, instead of running, waits for Release.
  kvcache::KvStore::GetDone Hold(kvcache::KvStore::GetDone done) {
    return [this, done = std::move(done)](std::vector<Result<size_t>> r) mutable {
      std::lock_guard lk(mu_);
      held_.emplace_back([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
    };
  }
  size_t Held() {
    std::lock_guard lk(mu_);
    return held_.size();
  }
  void Release() {
    std::vector<std::function<void()>> h;
    {
      std::lock_guard lk(mu_);
      h.swap(held_);
    }
    for (auto& f : h) f();
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> held_;
};

// Holds every Get's completion until Release (a store that stalls), delegating the rest.
class StallingStore final : public ForwardingStore, public HeldCompletions {
 public:
  using ForwardingStore::ForwardingStore;
  void Get(std::span<const kvcache::BlockKey> keys, std::span<const kvcache::MutableBuffer> buffers,
           GetDone done) override {
    inner_->Get(keys, buffers, Hold(std::move(done)));
  }
};

}  // namespace ladle::engine::testing
