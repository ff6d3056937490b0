// Discovery through etcd, the client: etcd v3's JSON gateway over net::HttpClient, a deadline
// on every call. The registration and the watcher built on it: etcd_discovery.cc.
#include "ladle/cluster/etcd.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "ladle/core/base64.h"
#include "ladle/core/numbers.h"
#include "ladle/json/json.h"
#include "ladle/net/http_client.h"

namespace ladle::cluster {

namespace {

using json::Value;

// gRPC status codes (as the gateway reports them in "code") to ours.
StatusCode FromGrpcCode(int64_t code, int http_status) {
  switch (code) {
    case 1: return StatusCode::kCancelled;
    case 3: return StatusCode::kInvalidArgument;
    case 4: return StatusCode::kDeadlineExceeded;
    case 5: return StatusCode::kNotFound;
    case 6: return StatusCode::kAlreadyExists;
    case 7: return StatusCode::kPermissionDenied;
    case 8: return StatusCode::kResourceExhausted;
    case 9: return StatusCode::kFailedPrecondition;
    case 11: return StatusCode::kOutOfRange;
    case 12: return StatusCode::kUnsupported;
    case 14: return StatusCode::kUnavailable;
    case 15: return StatusCode::kDataLoss;
    case 16: return StatusCode::kUnauthenticated;
    case 2:
    case 10:
    case 13: return StatusCode::kInternal;
    default: break;
  }
  if (http_status == 404) return StatusCode::kNotFound;
  if (http_status == 429) return StatusCode::kResourceExhausted;
  if (http_status == 401) return StatusCode::kUnauthenticated;
  if (http_status == 403) return StatusCode::kPermissionDenied;
  if (http_status >= 500) return StatusCode::kUnavailable;
  return StatusCode::kInternal;
}

// An int64 field: a string (the gateway's form), a number, or absent (0).
Result<int64_t> I64(const Value& obj, std::string_view field) {
  const Value* v = obj.Find(field);
  if (v == nullptr || v->is_null()) return int64_t{0};
  if (v->is_string()) {
    if (auto n = ParseI64(v->as_string())) return *n;
    return ParseError(fmt::format("etcd: field {} is not an integer", field));
  }
  if (v->is_number()) return v->as_int64();
  return ParseError(fmt::format("etcd: field {} is a {}, not an integer", field, v->TypeName()));
}

bool Bool(const Value& obj, std::string_view field) {
  const Value* v = obj.Find(field);
  return v != nullptr && v->is_bool() && v->as_bool();
}

// A bytes field: base64 in a string, or absent (empty).
Result<std::string> Bytes(const Value& obj, std::string_view field) {
  const Value* v = obj.Find(field);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string()) return ParseError(fmt::format("etcd: field {} is a {}, not base64", field, v->TypeName()));
  auto d = Base64Decode(v->as_string());
  if (!d) return ParseError(fmt::format("etcd: field {} is not base64", field));
  return std::move(*d);
}

std::string StringField(const Value& obj, std::string_view field) {
  const Value* v = obj.Find(field);
  return v != nullptr && v->is_string() ? v->as_string() : std::string();
}

Result<int64_t> HeaderRevision(const Value& obj) {
  const Value* h = obj.Find("header");
  if (h == nullptr || !h->is_object()) return int64_t{0};
  return I64(*h, "revision");
}

Result<EtcdKv> ParseKv(const Value& v) {
  if (!v.is_object()) return ParseError("etcd: a key-value is not an object");
  EtcdKv kv;
  LADLE_ASSIGN_OR_RETURN(kv.key, Bytes(v, "key"));
  LADLE_ASSIGN_OR_RETURN(kv.value, Bytes(v, "value"));
  LADLE_ASSIGN_OR_RETURN(kv.create_revision, I64(v, "create_revision"));
  LADLE_ASSIGN_OR_RETURN(kv.mod_revision, I64(v, "mod_revision"));
  LADLE_ASSIGN_OR_RETURN(kv.version, I64(v, "version"));
  LADLE_ASSIGN_OR_RETURN(kv.lease, I64(v, "lease"));
  return kv;
}

// {"error": ..., "message": ..., "code": N} (a unary call's error body, or a stream message's
// "error" member) as a Status.
Status ErrorFrom(const Value& err, int http_status) {
  std::string msg = StringField(err, "message");
  if (msg.empty()) msg = StringField(err, "error");
  auto code = I64(err, "code");
  const int64_t c = code.ok() ? *code : 0;
  return Status(FromGrpcCode(c, http_status), fmt::format("etcd: {}", msg.empty() ? "error without a message" : msg));
}

Status HttpError(const net::HttpResponse& r) {
  if (auto v = json::Parse(r.body); v.ok() && v->is_object()) {
    const Value* e = v->Find("error");
    if (e != nullptr && e->is_object()) return ErrorFrom(*e, r.status);
    return ErrorFrom(*v, r.status);
  }
  std::string body = r.body.substr(0, 200);
  std::replace_if(body.begin(), body.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return Status(FromGrpcCode(0, r.status), fmt::format("etcd: HTTP {}: {}", r.status, body));
}

Value Str(std::string s) { return Value::String(std::move(s)); }
Value B64(std::string_view s) { return Value::String(Base64Encode(s)); }
Value Int(int64_t v) { return Value::String(std::to_string(v)); }

// One watch message ({"result": WatchResponse} or {"error": ...}).
Result<EtcdWatchResponse> ParseWatchMessage(std::string_view line) {
  LADLE_ASSIGN_OR_RETURN(Value v, json::Parse(line));
  if (!v.is_object()) return ParseError("etcd: a watch message is not an object");
  if (const Value* e = v.Find("error"); e != nullptr && e->is_object()) return ErrorFrom(*e, 200);
  const Value* res = v.Find("result");
  if (res == nullptr || !res->is_object()) return ParseError("etcd: a watch message without a result");
  EtcdWatchResponse w;
  LADLE_ASSIGN_OR_RETURN(w.revision, HeaderRevision(*res));
  w.created = Bool(*res, "created");
  w.canceled = Bool(*res, "canceled");
  LADLE_ASSIGN_OR_RETURN(w.compact_revision, I64(*res, "compact_revision"));
  w.cancel_reason = StringField(*res, "cancel_reason");
  if (const Value* evs = res->Find("events"); evs != nullptr && evs->is_array()) {
    for (const Value& e : evs->as_array()) {
      if (!e.is_object()) return ParseError("etcd: a watch event is not an object");
      EtcdEvent ev;
      // The enum as its name (the gateway's form) or its number; PUT (0) is left out.
      const Value* t = e.Find("type");
      if (t != nullptr && ((t->is_string() && t->as_string() == "DELETE") || (t->is_number() && t->as_string() == "1"))) {
        ev.type = EtcdEvent::Type::kDelete;
      }
      if (const Value* kv = e.Find("kv"); kv != nullptr) {
        LADLE_ASSIGN_OR_RETURN(ev.kv, ParseKv(*kv));
      }
      w.events.push_back(std::move(ev));
    }
  }
  return w;
}

class EtcdClientImpl final : public EtcdClient {
 public:
  EtcdClientImpl(EtcdOptions o, std::vector<net::Endpoint> eps, std::unique_ptr<net::HttpClient> http)
      : o_(std::move(o)), eps_(std::move(eps)), http_(std::move(http)) {}

  Result<int64_t> Put(std::string_view key, std::string_view value, int64_t lease) override {
    Value b = Value::MakeObject();
    b.Set("key", B64(key));
    b.Set("value", B64(value));
    if (lease != 0) b.Set("lease", Int(lease));
    LADLE_ASSIGN_OR_RETURN(Value r, Call("/v3/kv/put", b));
    return HeaderRevision(r);
  }

  Result<EtcdRange> Range(std::string_view key, std::string_view range_end) override {
    Value b = Value::MakeObject();
    b.Set("key", B64(key));
    if (!range_end.empty()) b.Set("range_end", B64(range_end));
    LADLE_ASSIGN_OR_RETURN(Value r, Call("/v3/kv/range", b));
    EtcdRange out;
    LADLE_ASSIGN_OR_RETURN(out.revision, HeaderRevision(r));
    if (const Value* kvs = r.Find("kvs"); kvs != nullptr && kvs->is_array()) {
      for (const Value& kv : kvs->as_array()) {
        LADLE_ASSIGN_OR_RETURN(EtcdKv x, ParseKv(kv));
        out.kvs.push_back(std::move(x));
      }
    }
    return out;
  }

  Result<int64_t> DeleteRange(std::string_view key, std::string_view range_end) override {
    Value b = Value::MakeObject();
    b.Set("key", B64(key));
    if (!range_end.empty()) b.Set("range_end", B64(range_end));
    LADLE_ASSIGN_OR_RETURN(Value r, Call("/v3/kv/deleterange", b));
    return I64(r, "deleted");
  }

  Result<EtcdLease> LeaseGrant(int64_t ttl_s) override {
    if (ttl_s < 1) return InvalidArgument("etcd: a lease TTL must be at least 1 s");
    Value b = Value::MakeObject();
    b.Set("TTL", Int(ttl_s));
    b.Set("ID", Int(0));
    LADLE_ASSIGN_OR_RETURN(Value r, Call("/v3/lease/grant", b));
    if (std::string e = StringField(r, "error"); !e.empty()) return Status(StatusCode::kUnavailable, "etcd: " + e);
    EtcdLease l;
    LADLE_ASSIGN_OR_RETURN(l.id, I64(r, "ID"));
    LADLE_ASSIGN_OR_RETURN(l.ttl_s, I64(r, "TTL"));
    if (l.id == 0) return Status(StatusCode::kInternal, "etcd: lease grant answered no lease id");
    return l;
  }

  Result<int64_t> LeaseKeepAlive(int64_t lease) override {
    Value b = Value::MakeObject();
    b.Set("ID", Int(lease));
    // A stream in gRPC, one request and one answer ({"result": ...}) over the gateway.
    LADLE_ASSIGN_OR_RETURN(Value r, Call("/v3/lease/keepalive", b));
    const Value* res = r.Find("result");
    if (res == nullptr || !res->is_object()) return ParseError("etcd: keep-alive answered no result");
    LADLE_ASSIGN_OR_RETURN(int64_t ttl, I64(*res, "TTL"));
    if (ttl <= 0) return NotFound(fmt::format("etcd: lease {:x} has expired or was revoked", lease));
    return ttl;
  }

  Status LeaseRevoke(int64_t lease) override {
    Value b = Value::MakeObject();
    b.Set("ID", Int(lease));
    auto r = Call("/v3/lease/revoke", b);
    return r.status();
  }

  Status Watch(const WatchRequest& req, std::function<bool(const EtcdWatchResponse&)> on_response,
               std::stop_token stop) override;

 private:
  // One POST to the current endpoint; on no answer at all, the next endpoint (each with the
  // full deadline). The first message of a streamed answer (keep-alive) is the answer.
  Result<Value> Call(std::string_view path, const Value& body) {
    net::HttpRequest hr;
    hr.method = "POST";
    hr.target = std::string(path);
    hr.headers = {{"Content-Type", "application/json"}};
    hr.body = json::Dump(body);
    net::CallOptions co;
    co.timeout = std::chrono::milliseconds(o_.timeout_ms);
    co.connect_timeout = std::chrono::milliseconds(std::min(o_.connect_timeout_ms, o_.timeout_ms));
    co.max_body_bytes = 256u << 20;
    Status last;
    const size_t start = cur_.load();
    for (size_t i = 0; i < eps_.size(); ++i) {
      const size_t k = (start + i) % eps_.size();
      auto r = http_->Fetch(eps_[k], hr, co);
      if (!r.ok()) {
        last = r.status().WithContext(fmt::format("etcd {}{}", eps_[k].ToString(), path));
        if (r.status().code() == StatusCode::kUnavailable || r.status().code() == StatusCode::kDeadlineExceeded) {
          cur_.store((k + 1) % eps_.size());
          continue;
        }
        return last;
      }
      if (r->status != 200) return HttpError(*r);
      std::string_view text = r->body;
      if (const size_t nl = text.find('\n'); nl != std::string_view::npos && nl + 1 < text.size()) text = text.substr(0, nl);
      LADLE_ASSIGN_OR_RETURN(Value v, json::Parse(text));
      if (!v.is_object()) return ParseError(fmt::format("etcd {}: the answer is not an object", path));
      if (const Value* e = v.Find("error"); e != nullptr && e->is_object()) return ErrorFrom(*e, r->status);
      return v;
    }
    return last;
  }

  EtcdOptions o_;
  std::vector<net::Endpoint> eps_;
  std::atomic<size_t> cur_{0};
  std::unique_ptr<net::HttpClient> http_;
};

Status EtcdClientImpl::Watch(const WatchRequest& req, std::function<bool(const EtcdWatchResponse&)> on_response,
                             std::stop_token stop) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false, stopped = false, abandoned = false;
    Status status;  // set by the body callback when it ends the stream itself
    bool status_set = false;
    std::string buf;
    std::function<bool(const EtcdWatchResponse&)> fn;
  };
  auto st = std::make_shared<State>();
  st->fn = std::move(on_response);
  Value cr = Value::MakeObject();
  cr.Set("key", B64(req.key));
  if (!req.range_end.empty()) cr.Set("range_end", B64(req.range_end));
  if (req.start_revision > 0) cr.Set("start_revision", Int(req.start_revision));
  if (req.prev_kv) cr.Set("prev_kv", Value::Bool(true));
  Value b = Value::MakeObject();
  b.Set("create_request", std::move(cr));
  net::HttpRequest hr;
  hr.method = "POST";
  hr.target = "/v3/watch";
  hr.headers = {{"Content-Type", "application/json"}};
  hr.body = json::Dump(b);
  net::CallOptions co;
  co.timeout = std::chrono::milliseconds(std::max<int64_t>(0, req.timeout_ms));
  co.connect_timeout = std::chrono::milliseconds(o_.connect_timeout_ms);
  co.max_body_bytes = 16u << 20;  // an error's body
  co.retry_stale = true;
  co.on_body = [st](const net::HttpResponse&, std::string_view bytes) {
    std::lock_guard lock(st->mu);
    if (st->abandoned || st->done) return false;
    st->buf.append(bytes);
    size_t nl;
    while ((nl = st->buf.find('\n')) != std::string::npos) {
      const std::string line = st->buf.substr(0, nl);
      st->buf.erase(0, nl + 1);
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      auto m = ParseWatchMessage(line);
      auto end = [&](Status s) {
        st->status = std::move(s);
        st->status_set = true;
        return false;
      };
      if (!m.ok()) return end(m.status());
      if (!st->fn(*m)) return end(Status(StatusCode::kCancelled, "etcd: watch ended by its caller"));
      if (m->canceled) {
        if (m->compact_revision > 0) {
          return end(OutOfRange(fmt::format("etcd: watch start revision compacted (compact revision {})", m->compact_revision)));
        }
        return end(Status(StatusCode::kFailedPrecondition, "etcd: watch canceled: " + m->cancel_reason));
      }
    }
    if (st->buf.size() > (64u << 20)) {
      st->status = ParseError("etcd: a watch message over 64 MiB");
      st->status_set = true;
      return false;
    }
    return true;
  };
  const size_t k = cur_.load() % eps_.size();
  const net::Endpoint ep = eps_[k];
  http_->FetchAsync(ep, std::move(hr), std::move(co), [st](Result<net::HttpResponse> r) {
    std::lock_guard lock(st->mu);
    if (!st->status_set) {
      if (!r.ok()) {
        st->status = r.status();
      } else if (r->status != 200) {
        st->status = HttpError(*r);
      } else {
        st->status = Status(StatusCode::kUnavailable, "etcd: the watch stream ended");
      }
      st->status_set = true;
    }
    st->done = true;
    st->cv.notify_all();
  });
  std::stop_callback on_stop(stop, [st] {
    std::lock_guard lock(st->mu);
    st->stopped = true;
    st->cv.notify_all();
  });
  std::unique_lock lock(st->mu);
  st->cv.wait(lock, [&] { return st->done || st->stopped; });
  st->abandoned = true;  // no callback of the caller's runs after this
  if (!st->done) return Status(StatusCode::kCancelled, "etcd: watch stopped");
  if (st->status.code() == StatusCode::kUnavailable) cur_.store((k + 1) % eps_.size());
  return st->status;
}

Result<std::vector<net::Endpoint>> ParseEndpoints(std::string_view list) {
  std::vector<net::Endpoint> eps;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view s = list.substr(pos, comma - pos);
    pos = comma + 1;
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '/')) s.remove_suffix(1);
    if (s.empty()) continue;
    if (s.rfind("https://", 0) == 0) return Unsupported(fmt::format("etcd endpoint {}: https is not supported", s));
    if (s.rfind("http://", 0) == 0) s.remove_prefix(7);
    auto ep = net::Endpoint::Parse(s);
    if (!ep.ok()) return ep.status().WithContext("etcd endpoint");
    eps.push_back(std::move(ep).value());
  }
  if (eps.empty()) return InvalidArgument("no etcd endpoint given");
  return eps;
}

}  // namespace

std::string EtcdPrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xFF) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key (etcd's "\0" range end)
}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions o) {
  LADLE_ASSIGN_OR_RETURN(auto eps, ParseEndpoints(o.endpoints));
  if (o.timeout_ms <= 0) return InvalidArgument("etcd: the call timeout must be positive");
  net::HttpClientOptions ho;
  ho.io_threads = 1;
  ho.max_connections_per_endpoint = 8;
  ho.user_agent = "ladle-etcd";
  LADLE_ASSIGN_OR_RETURN(auto http, net::HttpClient::Create(ho));
  return std::unique_ptr<EtcdClient>(std::make_unique<EtcdClientImpl>(std::move(o), std::move(eps), std::move(http)));
}

std::string EtcdEngineRecordJson(const EtcdEngineRecord& r) {
  Value v = Value::MakeObject();
  v.Set("address", Str(r.address));
  v.Set("role", Str(r.role));
  v.Set("dp", Value::Int(r.dp));
  v.Set("name", Str(r.name));
  return json::Dump(v);
}

Result<EtcdEngineRecord> ParseEtcdEngineRecord(std::string_view value) {
  EtcdEngineRecord r;
  auto v = json::Parse(value);
  if (!v.ok() || !v->is_object()) {
    // A bare host:port, as `etcdctl put <prefix>x 10.0.0.7:9002` writes it.
    std::string_view s = value;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    if (s.rfind("grpc://", 0) == 0) s.remove_prefix(7);
    if (auto ep = net::Endpoint::Parse(s); ep.ok() && !s.empty()) {
      r.address = std::string(s);
      return r;
    }
    return InvalidArgument("an engine record is neither JSON nor host:port");
  }
  r.address = StringField(*v, "address");
  r.role = StringField(*v, "role");
  r.name = StringField(*v, "name");
  LADLE_ASSIGN_OR_RETURN(int64_t dp, I64(*v, "dp"));
  r.dp = static_cast<int>(std::clamp<int64_t>(dp, 0, 1 << 20));
  if (r.address.empty()) return InvalidArgument("an engine record without an address");
  return r;
}

}  // namespace ladle::cluster
