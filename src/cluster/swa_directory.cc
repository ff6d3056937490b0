#include "swa_directory.h"

#include <fmt/format.h>

#include <chrono>
#include <map>

#include "ladle/core/logging.h"
#include "rpc_convert.h"

namespace ladle::cluster {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<kvcache::BlockKey> KeysOf(const rpc::SwaLookupRequest& req) {
  std::vector<kvcache::BlockKey> keys(static_cast<size_t>(std::min(req.key_hi_size(), req.key_lo_size())));
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i].hi = req.key_hi(static_cast<int>(i));
    keys[i].lo = req.key_lo(static_cast<int>(i));
  }
  return keys;
}

}  // namespace

class SwaDirectory::Service final : public rpc::LadleDirectory::CallbackService {
 public:
  explicit Service(SwaDirectory* dir) : dir_(dir) {}
  grpc::ServerUnaryReactor* SwaLookup(grpc::CallbackServerContext* ctx, const rpc::SwaLookupRequest* req,
                                      rpc::SwaLookupResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (req->key_hi_size() != req->key_lo_size()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "key_hi and key_lo differ in length"));
      return reactor;
    }
    for (std::string& h : dir_->LookupLocal(KeysOf(*req))) resp->add_holder(std::move(h));
    resp->set_member(dir_->self());
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  SwaDirectory* dir_;
};

SwaDirectory::SwaDirectory(SwaDirectoryOptions o) : o_(o) {
  LADLE_CHECK(o_.lookup_timeout_ms > 0 && o_.probe_ms > 0 && o_.dead_after_ms > 0 && o_.max_entries > 0);
  LADLE_CHECK(ring_.Add(self_).ok());
}

SwaDirectory::~SwaDirectory() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (prober_.joinable()) prober_.join();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
}

Status SwaDirectory::Serve(const std::string& listen, const std::string& advertise) {
  if (server_) return Status(StatusCode::kFailedPrecondition, "the SWA directory is already served");
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  b.RegisterService(service_.get());
  server_ = b.BuildAndStart();
  if (!server_ || port == 0) return Status(StatusCode::kUnavailable, "SWA directory: cannot listen on " + listen);
  port_ = port;
  std::string id = advertise;
  if (id.empty()) {
    const size_t colon = listen.rfind(':');
    id = fmt::format("{}:{}", listen.substr(0, colon == std::string::npos ? listen.size() : colon), port);
  }
  {
    std::lock_guard lock(mu_);
    // Keys recorded before the id was known move with it (one entrypoint alone owns all).
    LADLE_CHECK(ring_.Remove(self_).ok());
    self_ = std::move(id);
    LADLE_CHECK(ring_.Add(self_).ok());
    RebuildRingLocked();
  }
  prober_ = std::thread([this] { ProbeLoop(); });
  LADLE_LOG_INFO("swa_directory.listening member={} port={}", self_, port_);
  return Status::Ok();
}

void SwaDirectory::AddPeer(const std::string& member) {
  std::lock_guard lock(mu_);
  if (member.empty() || member == self_) return;
  for (const auto& p : peers_) {
    if (p->member == member) return;
  }
  auto p = std::make_unique<Peer>();
  p->member = member;
  p->channel = FailFastChannel(member);
  peers_.push_back(std::move(p));
  cv_.notify_all();  // probe it now
}

void SwaDirectory::RemovePeer(const std::string& member) {
  std::lock_guard lock(mu_);
  std::erase_if(peers_, [&](const std::unique_ptr<Peer>& p) { return p->member == member; });
  RebuildRingLocked();
}

void SwaDirectory::RebuildRingLocked() {
  // The ring is this entrypoint plus the peers that answer: every live entrypoint computes the
  // same owners from the same live set.
  std::vector<std::string> want = {self_};
  for (const auto& p : peers_) {
    if (p->in_ring) want.push_back(p->member);
  }
  std::sort(want.begin(), want.end());
  if (want == ring_.members()) return;
  lb::HashRing ring(ring_.vnodes());
  for (const auto& m : want) LADLE_CHECK(ring.Add(m).ok());
  ring_ = std::move(ring);
  // Keys this entrypoint no longer owns are another's now: drop them (their owner learns new
  // records from the engines; until then a lookup is a miss, then a replay).
  std::erase_if(shard_, [&](const auto& kv) { return !OwnsLocked(kv.first); });
  LADLE_LOG_INFO("swa_directory.members self={} members={}", self_, fmt::join(ring_.members(), ","));
}

bool SwaDirectory::OwnsLocked(const kvcache::BlockKey& key) const {
  auto owner = ring_.Owner({key.hi, key.lo});
  return owner && *owner == self_;
}

void SwaDirectory::ProbeLoop() {
  for (;;) {
    std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>> targets;
    {
      std::unique_lock lock(mu_);
      if (stop_) return;
      for (const auto& p : peers_) targets.emplace_back(p->member, p->channel);
    }
    // Probes in parallel, each with its deadline (so each callback comes, and this thread
    // waits for all of them); results applied under the lock by member (a peer removed
    // meanwhile is skipped). Each probe has its own stub on a channel it holds.
    struct Probe {
      std::unique_ptr<rpc::LadleDirectory::Stub> stub;
      grpc::ClientContext ctx;
      rpc::SwaLookupRequest req;
      rpc::SwaLookupResponse resp;
      bool done = false, ok = false;
    };
    std::vector<std::unique_ptr<Probe>> probes;
    std::mutex pmu;
    std::condition_variable pcv;
    for (auto& target : targets) {
      auto pr = std::make_unique<Probe>();
      pr->stub = rpc::LadleDirectory::NewStub(target.second);
      pr->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(std::min<int64_t>(o_.probe_ms, 500)));
      Probe* raw = pr.get();
      raw->stub->async()->SwaLookup(&raw->ctx, &raw->req, &raw->resp, [raw, &pmu, &pcv](grpc::Status s) {
        std::lock_guard l(pmu);
        raw->ok = s.ok();
        raw->done = true;
        pcv.notify_all();
      });
      probes.push_back(std::move(pr));
    }
    {
      std::unique_lock l(pmu);
      pcv.wait(l, [&] {
        for (const auto& p : probes) {
          if (!p->done) return false;
        }
        return true;
      });
    }
    std::unique_lock lock(mu_);
    const int64_t now = NowMs();
    for (size_t i = 0; i < targets.size(); ++i) {
      for (auto& p : peers_) {
        if (p->member != targets[i].first) continue;
        if (probes[i]->ok) p->last_ok_ms = now;
        const bool live = probes[i]->ok || (p->in_ring && now - p->last_ok_ms <= o_.dead_after_ms);
        if (live != p->in_ring) {
          LADLE_LOG_INFO("swa_directory.peer_{} member={}", live ? "alive" : "dead", p->member);
          p->in_ring = live;
        }
      }
    }
    RebuildRingLocked();
    cv_.wait_for(lock, std::chrono::milliseconds(o_.probe_ms), [&] { return stop_; });
    if (stop_) return;
  }
}

void SwaDirectory::Record(const kvcache::BlockKey& key, const std::string& holder, int64_t expire_ms) {
  std::lock_guard lock(mu_);
  if (!OwnsLocked(key)) return;
  shard_[key] = {holder, expire_ms};
  if (shard_.size() > o_.max_entries) {
    const int64_t now = NowMs();
    std::erase_if(shard_, [&](const auto& kv) { return kv.second.expire_ms <= now; });
    // Still full of live entries: drop arbitrary ones (a dropped entry is a miss, not an error).
    for (auto it = shard_.begin(); it != shard_.end() && shard_.size() > o_.max_entries;) it = shard_.erase(it);
  }
  LADLE_CHECK(shard_.size() <= o_.max_entries);
}

std::vector<std::string> SwaDirectory::LookupLocal(const std::vector<kvcache::BlockKey>& keys) {
  std::lock_guard lock(mu_);
  const int64_t now = NowMs();
  std::vector<std::string> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = shard_.find(keys[i]);
    if (it != shard_.end() && it->second.expire_ms > now) out[i] = it->second.holder;
  }
  return out;
}

std::vector<std::string> SwaDirectory::Lookup(const std::vector<kvcache::BlockKey>& keys) {
  std::vector<std::string> out(keys.size());
  // Keys by owner; this entrypoint's own answered from memory.
  struct Ask {
    std::shared_ptr<grpc::Channel> channel;  // keeps the connection while the call runs
    std::vector<size_t> at;
    grpc::ClientContext ctx;
    rpc::SwaLookupRequest req;
    rpc::SwaLookupResponse resp;
    grpc::Status status;
    bool done = false;
  };
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    size_t pending = 0;
  };
  auto shared = std::make_shared<Shared>();
  std::vector<std::shared_ptr<Ask>> asks;
  {
    std::lock_guard lock(mu_);
    const int64_t now = NowMs();
    std::map<std::string_view, std::shared_ptr<Ask>> by_owner;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto owner = ring_.Owner({keys[i].hi, keys[i].lo});
      if (!owner || *owner == self_) {
        auto it = shard_.find(keys[i]);
        if (it != shard_.end() && it->second.expire_ms > now) out[i] = it->second.holder;
        continue;
      }
      auto& a = by_owner[*owner];
      if (!a) {
        a = std::make_shared<Ask>();
        for (const auto& p : peers_) {
          if (p->member == *owner) a->channel = p->channel;
        }
      }
      a->at.push_back(i);
      a->req.add_key_hi(keys[i].hi);
      a->req.add_key_lo(keys[i].lo);
    }
    for (auto& [owner, a] : by_owner) {
      if (a->channel) asks.push_back(std::move(a));  // ring members are peers; a removed one is a miss
    }
    remote_lookups_ += asks.size();
  }
  if (asks.empty()) return out;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(o_.lookup_timeout_ms);
  shared->pending = asks.size();
  for (auto& a : asks) {
    a->ctx.set_deadline(deadline);
    auto stub = rpc::LadleDirectory::NewStub(a->channel);
    // The callback owns what the call touches (a late answer after the wait below gave up
    // writes into these, not into freed memory).
    stub->async()->SwaLookup(&a->ctx, &a->req, &a->resp, [a, shared](grpc::Status s) {
      std::lock_guard l(shared->mu);
      a->status = std::move(s);
      a->done = true;
      if (--shared->pending == 0) shared->cv.notify_all();
    });
  }
  {
    // The calls' own deadline ends them; the wait's bound is only a backstop.
    std::unique_lock l(shared->mu);
    shared->cv.wait_for(l, std::chrono::milliseconds(o_.lookup_timeout_ms + 200), [&] { return shared->pending == 0; });
  }
  uint64_t failures = 0, found = 0;
  {
    std::lock_guard l(shared->mu);
    for (auto& a : asks) {
      if (!a->done || !a->status.ok() || a->resp.holder_size() != static_cast<int>(a->at.size())) {
        ++failures;  // misses: the engine replays
        continue;
      }
      for (size_t j = 0; j < a->at.size(); ++j) {
        out[a->at[j]] = a->resp.holder(static_cast<int>(j));
        if (!out[a->at[j]].empty()) ++found;
      }
    }
  }
  std::lock_guard lock(mu_);
  remote_failures_ += failures;
  remote_found_ += found;
  return out;
}

SwaDirectoryStats SwaDirectory::GetStats() const {
  std::lock_guard lock(mu_);
  SwaDirectoryStats s;
  s.members = ring_.members();
  s.entries = shard_.size();
  s.remote_lookups = remote_lookups_;
  s.remote_failures = remote_failures_;
  s.remote_keys_found = remote_found_;
  return s;
}

}  // namespace ladle::cluster
