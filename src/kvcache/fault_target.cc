#include "fault_target.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "ladle/core/logging.h"
#include "object_format.h"
#include "timer.h"

namespace ladle::kvcache {
namespace {

Status Hung() { return Status(StatusCode::kDeadlineExceeded, "kvcache fault: target hangs"); }

class FaultTarget final : public Target {
 public:
  FaultTarget(std::unique_ptr<Target> inner, std::shared_ptr<FaultControl> c) : inner_(std::move(inner)), c_(std::move(c)) {}
  ~FaultTarget() override {
    // Delayed operations start now (they need inner_), then inner_ drains and closes.
    timer_.Stop(/*run_pending=*/true);
    inner_.reset();
    // Parked callbacks of a hung target answer now: nothing may wait on them past close.
    std::vector<std::function<void()>> parked;
    {
      std::lock_guard lock(mu_);
      parked.swap(parked_);
    }
    for (auto& fn : parked) fn();
  }

  const std::string& path() const override { return inner_->path(); }
  Index& index() override { return inner_->index(); }
  Status Adopt(const BlockKey& key, const IndexMeta& meta) override { return inner_->Adopt(key, meta); }
  uint64_t used_bytes() const override { return inner_->used_bytes(); }
  uint64_t objects() const override { return inner_->objects(); }
  uint64_t capacity_bytes() const override { return inner_->capacity_bytes(); }
  bool healthy() const override { return inner_->healthy(); }
  void Scan(const std::function<void(const BlockKey&)>& fn) override { inner_->Scan(fn); }

  void ReadAsync(const BlockKey& key, ReadDone done) override {
    ++c_->reads;
    if (c_->dead) return Park([done] { done(Hung()); });
    // A slow target is slow to start: the file is opened after the delay, so an unlink in
    // between is seen (that is what the read lease protects against).
    Later([this, key, done] {
      if (c_->eio) return done(IoError("kvcache fault: EIO"));
      auto c = c_;
      inner_->ReadAsync(key, [c, done](Result<std::vector<uint8_t>> r) mutable {
        if (r.ok() && c->corrupt_reads) Corrupt(*r);
        done(std::move(r));
      });
    });
  }
  Result<std::vector<uint8_t>> ReadSync(const BlockKey& key) override {
    ++c_->reads;
    if (c_->dead) return Hung();
    if (c_->eio) return IoError("kvcache fault: EIO");
    auto r = inner_->ReadSync(key);
    if (r.ok() && c_->corrupt_reads) Corrupt(*r);
    return r;
  }
  void WriteAsync(ChunkWrite w, StatusDone done) override {
    ++c_->writes;
    if (c_->dead) return Park([done] { done(Hung()); });
    auto shared = std::make_shared<ChunkWrite>(std::move(w));
    Later([this, shared, done] {
      if (c_->enospc) return done(ErrnoStatus(ENOSPC, "kvcache fault"));
      inner_->WriteAsync(std::move(*shared), done);
    });
  }
  Status WriteSync(const ChunkWrite& w) override {
    ++c_->writes;
    if (c_->dead) return Hung();
    if (c_->enospc) return ErrnoStatus(ENOSPC, "kvcache fault");
    return inner_->WriteSync(w);
  }
  void RemoveAsync(const BlockKey& key, StatusDone done) override {
    if (c_->dead) return Park([done] { done(Hung()); });
    inner_->RemoveAsync(key, done);
  }
  Status RemoveSync(const BlockKey& key) override {
    if (c_->dead) return Hung();
    return inner_->RemoveSync(key);
  }

 private:
  static void Corrupt(std::vector<uint8_t>& bytes) {
    if (bytes.empty()) return;
    size_t at = bytes.size() > kChunkHeaderBytes ? kChunkHeaderBytes + (bytes.size() - kChunkHeaderBytes) / 2 : 0;
    bytes[at] ^= 0x40;
  }
  void Park(std::function<void()> fn) {
    std::lock_guard lock(mu_);
    parked_.push_back(std::move(fn));
  }
  void Later(std::function<void()> fn) {
    int ms = c_->delay_ms;
    if (ms <= 0 || !timer_.After(std::chrono::milliseconds(ms), fn)) fn();
  }

  std::unique_ptr<Target> inner_;
  std::shared_ptr<FaultControl> c_;
  std::mutex mu_;
  std::vector<std::function<void()>> parked_;
  TimerThread timer_;
};

}  // namespace

std::shared_ptr<FaultControl> FaultControl::Named(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<FaultControl>> registry;
  std::lock_guard lock(mu);
  auto& slot = registry[name];
  if (!slot) slot = std::make_shared<FaultControl>();
  return slot;
}

std::unique_ptr<Target> WrapFaults(std::unique_ptr<Target> inner, std::shared_ptr<FaultControl> control) {
  return std::make_unique<FaultTarget>(std::move(inner), std::move(control));
}

Result<std::unique_ptr<Target>> OpenTarget(const std::string& spec, const TargetOptions& options) {
  if (spec.rfind("fault:", 0) == 0) {
    size_t colon = spec.find(':', 6);
    if (colon == std::string::npos) return InvalidArgument("kvcache: want fault:NAME:DIR, got " + spec);
    std::string name = spec.substr(6, colon - 6);
    std::shared_ptr<FaultControl> c = FaultControl::Named(name);
    TargetOptions o = options;
    o.reader_fault = [c] {
      int n = c->reader_throws.load();
      while (n > 0 && !c->reader_throws.compare_exchange_weak(n, n - 1)) {
      }
      if (n > 0) throw std::runtime_error("kvcache fault: reader throws");
    };
    LADLE_ASSIGN_OR_RETURN(std::unique_ptr<Target> inner, OpenFsTarget(spec.substr(colon + 1), o));
    return WrapFaults(std::move(inner), std::move(c));
  }
  return OpenFsTarget(spec, options);
}

}  // namespace ladle::kvcache
