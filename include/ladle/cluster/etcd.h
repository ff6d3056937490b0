// Discovery through etcd (v3, its JSON gRPC-gateway over HTTP/1.1; etcd 3.4 and later): a
// small client, an engine's registration, and the entrypoint's watcher (docs/cluster.md,
// "Discovery").
//
//   // engine: <prefix><name> = {"address","role","dp","name"}, on a lease kept alive
//   EtcdRegistrationOptions r; r.etcd.endpoints = "http://10.0.0.5:2379"; r.name = "decode-0";
//   r.address = "10.0.0.7:9002"; r.role = "decode";
//   auto reg = EtcdRegistration::Start(r);   // ... (*reg)->Stop();   // revokes: a graceful leave
//
//   // entrypoint: every engine under the prefix joins the routed engine, and leaves with its key
//   EtcdWatcherOptions w; w.etcd.endpoints = "http://10.0.0.5:2379";
//   auto watcher = EtcdWatcher::Start(w, routed.get());
//
// Every call has a deadline; errors are Status values, never exceptions. Keys and values
// travel base64-encoded in the gateway's JSON, int64 fields as strings (numbers are read too).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::cluster {

class RoutedEngine;

struct EtcdOptions {
  // "http://host:port" (or "host:port"); several, comma-separated, are tried in turn when one
  // does not answer. https is not supported.
  std::string endpoints = "http://127.0.0.1:2379";
  int64_t timeout_ms = 2000;          // every unary call, connect included
  int64_t connect_timeout_ms = 1000;  // a new connection's TCP connect
};

struct EtcdKv {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

struct EtcdRange {
  int64_t revision = 0;  // the store's revision when it was read
  std::vector<EtcdKv> kvs;
};

struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_s = 0;  // as granted (etcd may raise a TTL below its minimum)
};

struct EtcdEvent {
  enum class Type : uint8_t { kPut, kDelete };
  Type type = Type::kPut;
  EtcdKv kv;  // a delete carries the key and its mod_revision only
};

// One message of a watch stream.
struct EtcdWatchResponse {
  int64_t revision = 0;
  bool created = false, canceled = false;
  int64_t compact_revision = 0;  // set when the start revision was compacted away (canceled)
  std::string cancel_reason;
  std::vector<EtcdEvent> events;
};

// The end of the key range that holds every key starting with `prefix` (etcd's "range_end").
std::string EtcdPrefixEnd(std::string_view prefix);

class EtcdClient {
 public:
  static Result<std::unique_ptr<EtcdClient>> Create(EtcdOptions o);
  virtual ~EtcdClient() = default;

  // The store's revision after the write.
  virtual Result<int64_t> Put(std::string_view key, std::string_view value, int64_t lease = 0) = 0;
  // [key, range_end); range_end empty: the key alone.
  virtual Result<EtcdRange> Range(std::string_view key, std::string_view range_end = {}) = 0;
  Result<EtcdRange> RangePrefix(std::string_view prefix) { return Range(prefix, EtcdPrefixEnd(prefix)); }
  // How many keys were deleted.
  virtual Result<int64_t> DeleteRange(std::string_view key, std::string_view range_end = {}) = 0;
  virtual Result<EtcdLease> LeaseGrant(int64_t ttl_s) = 0;
  // The lease's TTL after the refresh; kNotFound when the lease has expired or was revoked.
  virtual Result<int64_t> LeaseKeepAlive(int64_t lease) = 0;
  // Deletes the lease and every key attached to it; kNotFound when it is already gone.
  virtual Status LeaseRevoke(int64_t lease) = 0;

  struct WatchRequest {
    std::string key, range_end;
    int64_t start_revision = 0;  // 0: from now
    bool prev_kv = false;
    // The stream's deadline: the call ends kDeadlineExceeded when it is reached (0: none).
    int64_t timeout_ms = 30000;
  };
  // Streams the watch's messages to `on_response` (on the client's io thread: it must not
  // block; return false to end the stream) until the stream ends: the returned status says
  // why (kDeadlineExceeded at timeout_ms, kCancelled when `stop` was requested or
  // on_response returned false, kUnavailable when the connection broke, an etcd error as its
  // code). It returns as soon as `stop` is requested, and on_response never runs after it has
  // returned.
  virtual Status Watch(const WatchRequest& req, std::function<bool(const EtcdWatchResponse&)> on_response,
                       std::stop_token stop = {}) = 0;
};

// ---- The engine's side ----

struct EtcdRegistrationOptions {
  EtcdOptions etcd;
  std::string prefix = "/ladle/engines/";
  std::string name;     // the key is <prefix><name>
  std::string address;  // host:port the entrypoints dial
  std::string role = "both";
  int dp = 1;
  int64_t ttl_s = 10;  // the lease; kept alive every ttl_s / 3
  // Retries after a failed grant, put or keep-alive: from min to max, doubling.
  int64_t backoff_min_ms = 200, backoff_max_ms = 5000;
};

// Keeps <prefix><name> in etcd while the engine serves: grants a lease, puts the key with it,
// and keeps the lease alive on its own thread. A lease that is lost (expired while etcd or the
// network was away) is granted anew and the key put again; failures are logged and retried
// with backoff, never fatal.
class EtcdRegistration {
 public:
  // Tries the first registration before it returns (a failure is logged and retried on the
  // thread); fails only on options that can never work.
  static Result<std::unique_ptr<EtcdRegistration>> Start(EtcdRegistrationOptions o);
  virtual ~EtcdRegistration() = default;  // Stop(true)
  // Stops the thread (within about one call timeout) and, when `revoke`, revokes the lease so
  // the key goes at once (a graceful leave). Without it the key lives until the lease expires,
  // as when the engine crashes. Idempotent.
  virtual void Stop(bool revoke = true) = 0;
  virtual bool registered() const = 0;  // the key is in etcd on a live lease, as last known
  virtual int64_t lease() const = 0;    // the current lease id (0: none)
  virtual std::string key() const = 0;
  // Waits (at most timeout_ms) until registered.
  virtual bool WaitRegistered(int64_t timeout_ms) const = 0;
};

// The value an engine registers: {"address", "role", "dp", "name"}.
struct EtcdEngineRecord {
  std::string address, role, name;
  int dp = 1;
};
std::string EtcdEngineRecordJson(const EtcdEngineRecord& r);
// A record from its JSON; a value that is not JSON but a plain "host:port" is read as the address.
Result<EtcdEngineRecord> ParseEtcdEngineRecord(std::string_view value);

// ---- The entrypoint's side ----

struct EtcdWatcherOptions {
  EtcdOptions etcd;
  std::string prefix = "/ladle/engines/";
  // The watch stream's deadline: when it ends the prefix is read whole again (repairing any
  // missed event) and a new watch starts.
  int64_t resync_ms = 30000;
  int64_t backoff_min_ms = 200, backoff_max_ms = 5000;  // after a failed range or watch
};

// Keeps a RoutedEngine's engines in step with the engines registered under a prefix: reads
// the prefix (adding every engine), then watches from the next revision. A put adds its
// engine (RoutedEngine::AddEngine), a delete (lease expiry or revoke) removes it
// (RoutedEngine::RemoveEngine). On a watch error or the stream's end it reads the prefix again
// and re-watches after a short backoff.
class EtcdWatcher {
 public:
  // Reads the prefix once before it returns (a failure is logged and retried on the thread).
  // `engine` must outlive the watcher.
  static Result<std::unique_ptr<EtcdWatcher>> Start(EtcdWatcherOptions o, RoutedEngine* engine);
  // The same over any member set (e.g. the entrypoints' SWA directory peers under their own
  // prefix): `add` for every address that registers, `remove` for one that leaves. Both are
  // called on the watcher's thread and must outlive it.
  struct Members {
    std::function<void(const std::string&)> add, remove;
  };
  static Result<std::unique_ptr<EtcdWatcher>> Start(EtcdWatcherOptions o, Members members);
  virtual ~EtcdWatcher() = default;  // Stop()
  virtual void Stop() = 0;           // returns within about one call timeout
  // The addresses registered now, as the watcher last saw them.
  virtual std::vector<std::string> addresses() const = 0;
  // Full reads of the prefix so far (the first one included).
  virtual uint64_t resyncs() const = 0;
};

}  // namespace ladle::cluster
