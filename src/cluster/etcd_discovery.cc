// Discovery through etcd, on EtcdClient (etcd.cc): the engine's registration (its key on a
// lease kept alive, revoked on a graceful leave) and the entrypoint's watcher (range, then watch;
// a put adds the engine to the routed engine, a delete retires it).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "ladle/cluster/etcd.h"
#include "ladle/cluster/routed_engine.h"
#include "ladle/core/logging.h"
#include "ladle/net/http.h"

namespace ladle::cluster {

namespace {

// Waits `ms` or until stop is requested; false when stopped.
bool SleepFor(std::stop_token st, int64_t ms) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  cv.wait_for(lock, st, std::chrono::milliseconds(ms), [] { return false; });
  return !st.stop_requested();
}

// ---- EtcdRegistration ----

class EtcdRegistrationImpl final : public EtcdRegistration {
 public:
  EtcdRegistrationImpl(EtcdRegistrationOptions o, std::unique_ptr<EtcdClient> c)
      : o_(std::move(o)), c_(std::move(c)), key_(o_.prefix + o_.name) {
    value_ = EtcdEngineRecordJson({o_.address, o_.role, o_.name, o_.dp});
  }
  ~EtcdRegistrationImpl() override { Stop(true); }

  void Begin() {
    const Status first = Register();
    if (!first.ok()) {
      LADLE_LOG_WARN("cluster.etcd_register_failed key={} error=\"{}\" retry_in_ms={}", key_, first.ToString(),
                     o_.backoff_min_ms);
    }
    thread_ = std::jthread([this, wait = !first.ok()](std::stop_token st) {
      if (wait) SleepFor(st, o_.backoff_min_ms);
      Loop(st);
    });
  }

  void Stop(bool revoke) override {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
    int64_t lease;
    {
      std::lock_guard lock(mu_);
      lease = lease_;
      registered_ = false;
      if (revoke) lease_ = 0;
    }
    if (lease == 0) {
      LADLE_LOG_INFO("cluster.etcd_registration_stopped key={} (no lease held)", key_);
      return;
    }
    if (!revoke) {
      LADLE_LOG_INFO("cluster.etcd_keepalive_stopped key={} lease={:x} (the key lives until the lease expires)", key_, lease);
      return;
    }
    Status s = c_->LeaseRevoke(lease);
    if (s.ok() || s.code() == StatusCode::kNotFound) {
      LADLE_LOG_INFO("cluster.etcd_deregistered key={} lease={:x}", key_, lease);
    } else {
      LADLE_LOG_WARN("cluster.etcd_revoke_failed key={} lease={:x} error=\"{}\" (the key goes when the lease expires)", key_,
                     lease, s.ToString());
    }
  }

  bool registered() const override {
    std::lock_guard lock(mu_);
    return registered_;
  }
  int64_t lease() const override {
    std::lock_guard lock(mu_);
    return lease_;
  }
  std::string key() const override { return key_; }
  bool WaitRegistered(int64_t timeout_ms) const override {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return registered_; });
  }

 private:
  // A lease (granted when there is none) and the key put with it.
  Status Register() {
    int64_t lease, ttl;
    {
      std::lock_guard lock(mu_);
      lease = lease_;
      ttl = ttl_s_;
    }
    if (lease == 0) {
      LADLE_ASSIGN_OR_RETURN(EtcdLease l, c_->LeaseGrant(o_.ttl_s));
      lease = l.id;
      ttl = std::max<int64_t>(1, l.ttl_s);
      std::lock_guard lock(mu_);
      lease_ = lease;
      ttl_s_ = ttl;
    }
    auto put = c_->Put(key_, value_, lease);
    if (!put.ok()) {
      if (put.status().code() == StatusCode::kNotFound) {
        std::lock_guard lock(mu_);
        lease_ = 0;  // the lease went meanwhile: a new one next time
      }
      return put.status();
    }
    {
      std::lock_guard lock(mu_);
      registered_ = true;
    }
    cv_.notify_all();
    LADLE_LOG_INFO("cluster.etcd_registered key={} address={} lease={:x} ttl_s={}", key_, o_.address, lease, ttl);
    return Status::Ok();
  }

  void Loop(std::stop_token st) {
    int64_t backoff = o_.backoff_min_ms;
    auto fail = [&](std::string_view what, const Status& s) {
      LADLE_LOG_WARN("cluster.etcd_{} key={} error=\"{}\" retry_in_ms={}", what, key_, s.ToString(), backoff);
      SleepFor(st, backoff);
      backoff = std::min(o_.backoff_max_ms, backoff * 2);
    };
    bool retry_now = false;  // a keep-alive that failed is retried after its backoff, not a TTL/3 later
    while (!st.stop_requested()) {
      try {
        bool registered;
        int64_t lease, ttl;
        {
          std::lock_guard lock(mu_);
          registered = registered_;
          lease = lease_;
          ttl = ttl_s_;
        }
        if (!registered) {
          if (Status s = Register(); !s.ok()) {
            fail("register_failed", s);
          } else {
            backoff = o_.backoff_min_ms;
          }
          continue;
        }
        if (!std::exchange(retry_now, false) && !SleepFor(st, std::max<int64_t>(100, ttl * 1000 / 3))) break;
        auto r = c_->LeaseKeepAlive(lease);
        if (r.ok()) {
          backoff = o_.backoff_min_ms;
          continue;
        }
        if (r.status().code() == StatusCode::kNotFound) {
          // Expired while etcd or the network was away: register anew, now.
          LADLE_LOG_WARN("cluster.etcd_lease_lost key={} lease={:x} (registering again)", key_, lease);
          std::lock_guard lock(mu_);
          lease_ = 0;
          registered_ = false;
          continue;
        }
        // Not answered: try again soon (a lease that expires meanwhile is found lost then).
        fail("keepalive_failed", r.status());
        retry_now = true;
      } catch (const std::exception& e) {
        LADLE_LOG_ERROR("cluster.etcd_registration_error key={} what=\"{}\"", key_, e.what());
        SleepFor(st, o_.backoff_max_ms);
      } catch (...) {
        LADLE_LOG_ERROR("cluster.etcd_registration_error key={}", key_);
        SleepFor(st, o_.backoff_max_ms);
      }
    }
  }

  EtcdRegistrationOptions o_;
  std::unique_ptr<EtcdClient> c_;
  const std::string key_;
  std::string value_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int64_t lease_ = 0, ttl_s_ = 0;
  bool registered_ = false, stopped_ = false;
  std::jthread thread_;
};

// ---- EtcdWatcher ----

class EtcdWatcherImpl final : public EtcdWatcher {
 public:
  EtcdWatcherImpl(EtcdWatcherOptions o, EtcdWatcher::Members m, std::unique_ptr<EtcdClient> c)
      : o_(std::move(o)), eng_(std::move(m)), c_(std::move(c)) {}
  ~EtcdWatcherImpl() override { Stop(); }

  void Begin() {
    auto rev = Resync();
    if (!rev.ok()) LADLE_LOG_WARN("cluster.etcd_range_failed prefix={} error=\"{}\" (retrying)", o_.prefix, rev.status().ToString());
    const int64_t first = rev.ok() ? *rev : -1;
    thread_ = std::jthread([this, first](std::stop_token st) {
      if (first < 0) SleepFor(st, o_.backoff_min_ms);
      Loop(st, first);
    });
  }

  void Stop() override {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
  }

  std::vector<std::string> addresses() const override {
    std::lock_guard lock(mu_);
    std::set<std::string> s;
    for (const auto& [k, a] : by_key_) s.insert(a);
    return {s.begin(), s.end()};
  }
  uint64_t resyncs() const override { return resyncs_.load(); }

 private:
  bool ReferencedLocked(const std::string& address) const {
    return std::any_of(by_key_.begin(), by_key_.end(), [&](const auto& kv) { return kv.second == address; });
  }

  std::optional<std::string> AddressOf(const EtcdKv& kv) {
    auto r = ParseEtcdEngineRecord(kv.value);
    if (!r.ok()) {
      LADLE_LOG_WARN("cluster.etcd_bad_record key={} error=\"{}\" (ignored)", kv.key, r.status().ToString());
      return std::nullopt;
    }
    return r->address;
  }

  // The whole prefix: engines not there any more leave, every one there joins. The revision read.
  Result<int64_t> Resync() {
    LADLE_ASSIGN_OR_RETURN(EtcdRange r, c_->RangePrefix(o_.prefix));
    std::map<std::string, std::string> now;
    for (const EtcdKv& kv : r.kvs) {
      if (auto a = AddressOf(kv)) now[kv.key] = *a;
    }
    std::vector<std::string> gone, added;
    {
      std::lock_guard lock(mu_);
      std::set<std::string> before, after;
      for (const auto& [k, a] : by_key_) before.insert(a);
      for (const auto& [k, a] : now) after.insert(a);
      for (const auto& a : before) {
        if (!after.count(a)) gone.push_back(a);
      }
      for (const auto& a : after) {
        if (!before.count(a)) added.push_back(a);
      }
      by_key_ = std::move(now);
    }
    resyncs_.fetch_add(1);
    for (const auto& a : gone) {
      LADLE_LOG_INFO("cluster.etcd_engine_left address={} (not in the prefix)", a);
      eng_.remove(a);
    }
    for (const auto& a : added) LADLE_LOG_INFO("cluster.etcd_engine_joined address={}", a);
    for (const auto& [k, a] : by_key_snapshot()) eng_.add(a);  // a no-op for those known and live
    return r.revision;
  }

  std::vector<std::pair<std::string, std::string>> by_key_snapshot() const {
    std::lock_guard lock(mu_);
    return {by_key_.begin(), by_key_.end()};
  }

  // One watch message's events, in order.
  void Apply(const EtcdWatchResponse& w) {
    for (const EtcdEvent& ev : w.events) {
      std::string add, remove;
      {
        std::lock_guard lock(mu_);
        auto it = by_key_.find(ev.kv.key);
        const std::string old = it == by_key_.end() ? std::string() : it->second;
        if (ev.type == EtcdEvent::Type::kPut) {
          auto a = AddressOf(ev.kv);
          if (!a) continue;
          by_key_[ev.kv.key] = *a;
          add = *a;
          if (!old.empty() && old != *a && !ReferencedLocked(old)) remove = old;
        } else if (it != by_key_.end()) {
          by_key_.erase(it);
          if (!ReferencedLocked(old)) remove = old;
        }
      }
      if (!remove.empty()) {
        LADLE_LOG_INFO("cluster.etcd_engine_left address={} key={} revision={}", remove, ev.kv.key, w.revision);
        eng_.remove(remove);
      }
      if (!add.empty()) {
        LADLE_LOG_INFO("cluster.etcd_engine_joined address={} key={} revision={}", add, ev.kv.key, w.revision);
        eng_.add(add);
      }
    }
  }

  void Loop(std::stop_token st, int64_t revision) {
    int64_t backoff = o_.backoff_min_ms;
    auto wait = [&](std::string_view what, const Status& s) {
      LADLE_LOG_WARN("cluster.etcd_{} prefix={} error=\"{}\" retry_in_ms={}", what, o_.prefix, s.ToString(), backoff);
      SleepFor(st, backoff);
      backoff = std::min(o_.backoff_max_ms, backoff * 2);
    };
    while (!st.stop_requested()) {
      try {
        if (revision < 0) {
          auto r = Resync();
          if (!r.ok()) {
            wait("range_failed", r.status());
            continue;
          }
          revision = *r;
        }
        EtcdClient::WatchRequest req;
        req.key = o_.prefix;
        req.range_end = EtcdPrefixEnd(o_.prefix);
        req.start_revision = revision + 1;
        req.timeout_ms = o_.resync_ms;
        std::atomic<bool> created{false};
        Status s = c_->Watch(
            req,
            [&](const EtcdWatchResponse& w) {
              if (w.created) created = true;
              Apply(w);
              return true;
            },
            st);
        revision = -1;  // whatever ended it, read the prefix again before the next watch
        if (st.stop_requested()) break;
        if (created) backoff = o_.backoff_min_ms;
        if (s.code() == StatusCode::kDeadlineExceeded && created) continue;  // the periodic resync
        wait("watch_ended", s);
      } catch (const std::exception& e) {
        LADLE_LOG_ERROR("cluster.etcd_watcher_error prefix={} what=\"{}\"", o_.prefix, e.what());
        revision = -1;
        SleepFor(st, o_.backoff_max_ms);
      } catch (...) {
        LADLE_LOG_ERROR("cluster.etcd_watcher_error prefix={}", o_.prefix);
        revision = -1;
        SleepFor(st, o_.backoff_max_ms);
      }
    }
  }

  EtcdWatcherOptions o_;
  EtcdWatcher::Members eng_;
  std::unique_ptr<EtcdClient> c_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> by_key_;  // key → engine address
  std::atomic<uint64_t> resyncs_{0};
  std::jthread thread_;
};

}  // namespace

Result<std::unique_ptr<EtcdRegistration>> EtcdRegistration::Start(EtcdRegistrationOptions o) {
  if (o.name.empty()) return InvalidArgument("etcd registration: no engine name");
  if (o.address.empty()) return InvalidArgument("etcd registration: no address to advertise");
  if (auto ep = net::Endpoint::Parse(o.address); !ep.ok() || ep->port == 0) {
    return InvalidArgument(fmt::format("etcd registration: the advertised address '{}' is not host:port", o.address));
  }
  if (o.ttl_s < 1) return InvalidArgument("etcd registration: the lease TTL must be at least 1 s");
  if (o.prefix.empty()) return InvalidArgument("etcd registration: empty key prefix");
  o.backoff_min_ms = std::max<int64_t>(1, o.backoff_min_ms);
  o.backoff_max_ms = std::max(o.backoff_min_ms, o.backoff_max_ms);
  LADLE_ASSIGN_OR_RETURN(auto c, EtcdClient::Create(o.etcd));
  auto r = std::make_unique<EtcdRegistrationImpl>(std::move(o), std::move(c));
  r->Begin();
  return std::unique_ptr<EtcdRegistration>(std::move(r));
}

Result<std::unique_ptr<EtcdWatcher>> EtcdWatcher::Start(EtcdWatcherOptions o, RoutedEngine* engine) {
  if (engine == nullptr) return InvalidArgument("etcd watcher: no routed engine");
  Members m;
  m.add = [engine](const std::string& a) { engine->AddEngine(a); };
  m.remove = [engine](const std::string& a) { engine->RemoveEngine(a); };
  return Start(std::move(o), std::move(m));
}

Result<std::unique_ptr<EtcdWatcher>> EtcdWatcher::Start(EtcdWatcherOptions o, Members members) {
  if (!members.add || !members.remove) return InvalidArgument("etcd watcher: no add/remove callbacks");
  if (o.prefix.empty()) return InvalidArgument("etcd watcher: empty key prefix");
  o.resync_ms = std::max<int64_t>(100, o.resync_ms);
  o.backoff_min_ms = std::max<int64_t>(1, o.backoff_min_ms);
  o.backoff_max_ms = std::max(o.backoff_min_ms, o.backoff_max_ms);
  LADLE_ASSIGN_OR_RETURN(auto c, EtcdClient::Create(o.etcd));
  auto w = std::make_unique<EtcdWatcherImpl>(std::move(o), std::move(members), std::move(c));
  w->Begin();
  return std::unique_ptr<EtcdWatcher>(std::move(w));
}

}  // namespace ladle::cluster
