// KvStore::Open (URI parsing) and the blocking forms of the asynchronous calls.
#include <condition_variable>
#include <mutex>

#include "ladle/core/numbers.h"
#include "ladle/kvcache/kv_store.h"
#include "store.h"

namespace ladle::kvcache {
namespace {

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t at = s.find(sep, start);
    out.emplace_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

// Waits for one completion. The async calls bound their own waits (domain_timeout), so this
// deadline is a backstop against a bug, not the mechanism.
template <typename T>
class Waiter {
 public:
  std::function<void(T)> Callback() {
    return [s = state_](T v) {
      std::lock_guard lock(s->mu);
      s->value = std::move(v);
      s->done = true;
      s->cv.notify_all();
    };
  }
  std::optional<T> Wait(std::chrono::milliseconds deadline) {
    std::unique_lock lock(state_->mu);
    if (!state_->cv.wait_for(lock, deadline, [&] { return state_->done; })) return std::nullopt;
    return std::move(state_->value);
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<T> value;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

constexpr std::chrono::milliseconds kSyncBackstop{120000};

}  // namespace

Result<std::unique_ptr<KvStore>> KvStore::Open(std::string_view uri, StoreOptions options) {
  if (uri.rfind("fs:", 0) == 0) {
    std::string dir(uri.substr(3));
    if (dir.empty()) return InvalidArgument("kvcache: fs: needs a directory");
    LADLE_ASSIGN_OR_RETURN(auto store, Store::Open({dir}, 1, 0, std::move(options)));
    return std::unique_ptr<KvStore>(std::move(store));
  }
  if (uri.rfind("ec:", 0) == 0) {
    std::string_view rest = uri.substr(3);
    size_t colon = rest.find(':');
    size_t plus = rest.find('+');
    if (colon == std::string_view::npos || plus == std::string_view::npos || plus > colon) {
      return InvalidArgument("kvcache: want ec:K+M:DIR0,...");
    }
    const auto pk = ParseU64(rest.substr(0, plus));
    const auto pm = ParseU64(rest.substr(plus + 1, colon - plus - 1));
    // ISA-L's GF(2^8) codes take at most 255 chunks in all.
    if (!pk || !pm || *pk == 0 || *pk > 255 || *pm > 255 || *pk + *pm > 255) {
      return InvalidArgument("kvcache: bad K+M in " + std::string(uri) + " (K >= 1, K + M <= 255)");
    }
    const unsigned k = static_cast<unsigned>(*pk), m = static_cast<unsigned>(*pm);
    std::vector<std::string> dirs = Split(rest.substr(colon + 1), ',');
    if (dirs.size() != k + m) {
      return InvalidArgument("kvcache: ec:" + std::to_string(k) + "+" + std::to_string(m) + " needs " +
                             std::to_string(k + m) + " directories, got " + std::to_string(dirs.size()));
    }
    LADLE_ASSIGN_OR_RETURN(auto store, Store::Open(dirs, k, m, std::move(options)));
    return std::unique_ptr<KvStore>(std::move(store));
  }
  return InvalidArgument("kvcache: unknown store URI (want fs:DIR or ec:K+M:DIR,...): " + std::string(uri));
}

Result<size_t> KvStore::MatchSync(std::span<const BlockKey> keys) {
  Waiter<Result<size_t>> w;
  Match(keys, w.Callback());
  auto r = w.Wait(kSyncBackstop);
  if (!r) return Status(StatusCode::kDeadlineExceeded, "kvcache match: no completion");
  return std::move(*r);
}

std::vector<Result<size_t>> KvStore::GetSync(std::span<const BlockKey> keys, std::span<const MutableBuffer> buffers) {
  Waiter<std::vector<Result<size_t>>> w;
  Get(keys, buffers, w.Callback());
  auto r = w.Wait(kSyncBackstop);
  // Past the backstop the buffers may still be written: this is a bug path, crash loudly.
  if (!r) std::abort();
  return std::move(*r);
}

std::vector<Status> KvStore::PutSync(std::span<const BlockKey> keys, std::span<const std::span<const uint8_t>> values,
                                     TrafficClass cls) {
  Waiter<std::vector<Status>> w;
  Put(keys, values, cls, w.Callback());
  auto r = w.Wait(kSyncBackstop);
  if (!r) return std::vector<Status>(keys.size(), Status(StatusCode::kDeadlineExceeded, "kvcache put: no completion"));
  return std::move(*r);
}

std::vector<Status> KvStore::DeleteSync(std::span<const BlockKey> keys) {
  Waiter<std::vector<Status>> w;
  Delete(keys, w.Callback());
  auto r = w.Wait(kSyncBackstop);
  if (!r) return std::vector<Status>(keys.size(), Status(StatusCode::kDeadlineExceeded, "kvcache delete: no completion"));
  return std::move(*r);
}

}  // namespace ladle::kvcache
