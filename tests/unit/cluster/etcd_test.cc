// Discovery through etcd against a real single-node etcd (/usr/bin/etcd, Debian's etcd-server;
// LADLE_ETCD names another binary), started once for the suite on free loopback ports in a
// temporary data directory and stopped by its pid at the end. Without the binary the tests
// that need it are skipped, except under CI=true, where that is a failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <thread>

#include "cluster/cluster_test_util.h"
#include "engine/engine_test_util.h"
#include "ladle/cluster/etcd.h"
#include "ladle/cluster/routed_engine.h"

namespace ladle::cluster {
namespace {

using namespace test_util;  // NOLINT: the shared helpers (cluster_test_util.h)
using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Polls `pred` every 10 ms until it holds or `timeout_ms` passes.
bool WaitFor(const std::function<bool()>& pred, int64_t timeout_ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

std::string EtcdBinary() {
  if (const char* v = std::getenv("LADLE_ETCD"); v != nullptr && *v != '\0') return v;
  return "/usr/bin/etcd";
}

// Two distinct free loopback ports (held open together, so they differ).
bool FreePorts(int* a, int* b) {
  int fds[2] = {-1, -1}, ports[2] = {0, 0};
  bool ok = true;
  for (int i = 0; i < 2 && ok; ++i) {
    fds[i] = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    socklen_t len = sizeof(sa);
    ok = fds[i] >= 0 && ::bind(fds[i], reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
         ::getsockname(fds[i], reinterpret_cast<sockaddr*>(&sa), &len) == 0;
    if (ok) ports[i] = ntohs(sa.sin_port);
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  *a = ports[0];
  *b = ports[1];
  return ok;
}

// A single-node etcd on 127.0.0.1 only, its data and log in a private directory.
class EtcdProcess {
 public:
  ~EtcdProcess() { Stop(); }

  // Empty on success; else why it did not start (with the end of its log).
  std::string Start() {
    char tmpl[] = "/tmp/ladle-etcd-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return "no temporary directory";
    dir_ = tmpl;
    int client = 0, peer = 0;
    if (!FreePorts(&client, &peer)) return "no free loopback ports";
    url_ = "http://127.0.0.1:" + std::to_string(client);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    // Short raft timers: a single member elects itself at once, and the lessor's minimum TTL
    // (1.5 election timeouts) stays under 1 s, so a 1 s lease is honoured as 1 s.
    std::vector<std::string> args = {EtcdBinary(),
                                     "--name=ladle-test",
                                     "--data-dir=" + dir_ + "/data",
                                     "--listen-client-urls=" + url_,
                                     "--advertise-client-urls=" + url_,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=ladle-test=" + peer_url,
                                     "--initial-cluster-state=new",
                                     "--heartbeat-interval=10",
                                     "--election-timeout=100",
                                     "--logger=zap",
                                     "--log-outputs=stderr",
                                     "--log-level=warn"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = dir_ + "/etcd.log";
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return "cannot open " + log;
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // gone with the test process, however it ends
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(log_fd);
    if (pid < 0) return "fork failed";
    pid_ = pid;
    // Up when a read answers (10 s at most).
    EtcdOptions o;
    o.endpoints = url_;
    o.timeout_ms = 500;
    auto c = EtcdClient::Create(o);
    if (!c.ok()) return c.status().ToString();
    const auto until = Clock::now() + std::chrono::seconds(10);
    Status last;
    while (Clock::now() < until) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "etcd exited at start (status " + std::to_string(status) + "): " + LogTail();
      }
      auto r = (*c)->Range("/ladle-test-ping");
      if (r.ok()) return "";
      last = r.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "etcd did not answer within 10 s (" + last.ToString() + "): " + LogTail();
  }

  // SIGTERM by pid, SIGKILL after 5 s; then the data directory goes.
  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      const auto until = Clock::now() + std::chrono::seconds(5);
      while (::waitpid(pid_, &status, WNOHANG) == 0) {
        if (Clock::now() > until) {
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      pid_ = -1;
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  const std::string& url() const { return url_; }

 private:
  std::string LogTail() const {
    std::ifstream in(dir_ + "/etcd.log");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
  }

  std::string dir_, url_;
  pid_t pid_ = -1;
};

class Etcd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(EtcdBinary())) return;
    etcd_ = new EtcdProcess();
    start_error_ = new std::string(etcd_->Start());
    if (!start_error_->empty()) {
      delete etcd_;  // stops what started
      etcd_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete etcd_;  // stops it by pid
    etcd_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }
  void SetUp() override {
    if (etcd_ == nullptr) {
      if (start_error_ != nullptr) FAIL() << "etcd did not start: " << *start_error_;
      const char* ci = std::getenv("CI");
      if (ci != nullptr && std::string(ci) == "true") FAIL() << EtcdBinary() << " is missing in CI";
      GTEST_SKIP() << EtcdBinary() << " is missing (Debian: apt-get install etcd-server)";
    }
    // Keys of each test under their own prefix.
    prefix_ = std::string("/ladle-test/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }
  EtcdOptions Opts() const {
    EtcdOptions o;
    o.endpoints = etcd_->url();
    o.timeout_ms = 2000;
    return o;
  }
  std::unique_ptr<EtcdClient> Client() const {
    auto c = EtcdClient::Create(Opts());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  static EtcdProcess* etcd_;
  static std::string* start_error_;
  std::string prefix_;
};

EtcdProcess* Etcd::etcd_ = nullptr;
std::string* Etcd::start_error_ = nullptr;

// ---- Without etcd ----

TEST(EtcdNoServer, RecordsAndPrefixEnd) {
  EXPECT_EQ(EtcdPrefixEnd("/ladle/engines/"), "/ladle/engines0");
  EXPECT_EQ(EtcdPrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(EtcdPrefixEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
  const std::string j = EtcdEngineRecordJson({"10.0.0.7:9002", "decode", "decode-0", 2});
  auto r = ParseEtcdEngineRecord(j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->address, "10.0.0.7:9002");
  EXPECT_EQ(r->role, "decode");
  EXPECT_EQ(r->name, "decode-0");
  EXPECT_EQ(r->dp, 2);
  // int64 as a string (the gateway's habit) and a bare address (etcdctl put by hand).
  auto s = ParseEtcdEngineRecord(R"({"address":"h:1","dp":"4"})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dp, 4);
  auto bare = ParseEtcdEngineRecord("10.0.0.8:9003\n");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->address, "10.0.0.8:9003");
  EXPECT_FALSE(ParseEtcdEngineRecord(R"({"role":"both"})").ok());
  EXPECT_FALSE(ParseEtcdEngineRecord("not an address").ok());
}

TEST(EtcdNoServer, BadEndpointsAndUnreachable) {
  EtcdOptions o;
  o.endpoints = "https://127.0.0.1:2379";
  EXPECT_EQ(EtcdClient::Create(o).status().code(), StatusCode::kUnsupported);
  o.endpoints = " , ";
  EXPECT_FALSE(EtcdClient::Create(o).ok());
  // Nothing listens on port 1: a clean error within the deadline, no exception.
  o.endpoints = "http://127.0.0.1:1";
  o.timeout_ms = 1000;
  auto c = EtcdClient::Create(o);
  ASSERT_TRUE(c.ok());
  const auto t0 = Clock::now();
  auto r = (*c)->Range("/x");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_LT(MsSince(t0), 1500);
  // A registration against it starts (retrying on its thread) and stops within a bound.
  EtcdRegistrationOptions ro;
  ro.etcd = o;
  ro.name = "x";
  ro.address = "127.0.0.1:9";
  auto reg = EtcdRegistration::Start(ro);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_FALSE((*reg)->registered());
  const auto t1 = Clock::now();
  (*reg)->Stop();
  EXPECT_LT(MsSince(t1), 2500);
  ro.address = "no-port";
  EXPECT_FALSE(EtcdRegistration::Start(ro).ok());
}

// ---- Against etcd ----

// Lease grant, put with a lease, range by prefix, keep-alive, revoke (its keys go), and a
// lease left to expire (its key goes after the TTL).
TEST_F(Etcd, ClientBasics) {
  auto c = Client();
  ASSERT_TRUE(c);
  auto lease = c->LeaseGrant(5);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_GT(lease->id, 0);
  EXPECT_EQ(lease->ttl_s, 5);
  auto put = c->Put(prefix_ + "a", "value-a", lease->id);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_GT(*put, 0);
  const std::string binary("b\0\xff\n", 4);  // any bytes survive base64
  ASSERT_TRUE(c->Put(prefix_ + "b", binary).ok());
  ASSERT_TRUE(c->Put(prefix_.substr(0, prefix_.size() - 1) + "-outside", "x").ok());
  auto r = c->RangePrefix(prefix_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->revision, *put);
  ASSERT_EQ(r->kvs.size(), 2u);
  EXPECT_EQ(r->kvs[0].key, prefix_ + "a");
  EXPECT_EQ(r->kvs[0].value, "value-a");
  EXPECT_EQ(r->kvs[0].lease, lease->id);
  EXPECT_GT(r->kvs[0].mod_revision, 0);
  EXPECT_EQ(r->kvs[1].value, binary);
  EXPECT_EQ(r->kvs[1].lease, 0);
  auto ttl = c->LeaseKeepAlive(lease->id);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_GT(*ttl, 0);
  // Revoke: the lease's key goes at once; the lease is gone for keep-alive and revoke.
  ASSERT_TRUE(c->LeaseRevoke(lease->id).ok());
  r = c->RangePrefix(prefix_);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->kvs.size(), 1u);
  EXPECT_EQ(r->kvs[0].key, prefix_ + "b");
  EXPECT_EQ(c->LeaseKeepAlive(lease->id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->LeaseRevoke(lease->id).code(), StatusCode::kNotFound);
  EXPECT_EQ(c->Put(prefix_ + "c", "x", lease->id).status().code(), StatusCode::kNotFound);
  // Expiry: a 1 s lease with no keep-alive takes its key with it.
  auto short_lease = c->LeaseGrant(1);
  ASSERT_TRUE(short_lease.ok());
  ASSERT_TRUE(c->Put(prefix_ + "c", "x", short_lease->id).ok());
  const auto t0 = Clock::now();
  auto present = [&] {
    auto x = c->Range(prefix_ + "c");
    return x.ok() && !x->kvs.empty();
  };
  EXPECT_TRUE(present());
  EXPECT_TRUE(WaitFor([&] { return !present(); }, 5000)) << "the key outlived its lease";
  EXPECT_GE(MsSince(t0), 700) << "the key went before its TTL";
  // Delete by prefix.
  auto del = c->DeleteRange(prefix_, EtcdPrefixEnd(prefix_));
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(*del, 1);
  r = c->RangePrefix(prefix_);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->kvs.empty());
}

// A watch from a revision streams puts and deletes in order, and ends as soon as it is stopped.
TEST_F(Etcd, WatchStreamsEventsAndStops) {
  auto c = Client();
  ASSERT_TRUE(c);
  auto r = c->RangePrefix(prefix_);
  ASSERT_TRUE(r.ok());
  std::mutex mu;
  std::vector<EtcdEvent> events;
  bool created = false;
  std::stop_source stop;
  Status end;
  std::thread t([&] {
    EtcdClient::WatchRequest w;
    w.key = prefix_;
    w.range_end = EtcdPrefixEnd(prefix_);
    w.start_revision = r->revision + 1;
    w.timeout_ms = 10000;
    end = c->Watch(
        w,
        [&](const EtcdWatchResponse& m) {
          std::lock_guard lock(mu);
          created = created || m.created;
          for (const auto& e : m.events) events.push_back(e);
          return true;
        },
        stop.get_token());
  });
  ASSERT_TRUE(c->Put(prefix_ + "k", "v1").ok());
  ASSERT_TRUE(c->Put(prefix_ + "k", "v2").ok());
  ASSERT_TRUE(c->DeleteRange(prefix_ + "k").ok());
  ASSERT_TRUE(c->Put(prefix_.substr(0, prefix_.size() - 1) + "-outside", "x").ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        std::lock_guard lock(mu);
        return events.size() >= 3;
      },
      5000));
  const auto t0 = Clock::now();
  stop.request_stop();
  t.join();
  EXPECT_LT(MsSince(t0), 500) << "a stopped watch returns at once";
  EXPECT_EQ(end.code(), StatusCode::kCancelled) << end.ToString();
  std::lock_guard lock(mu);
  EXPECT_TRUE(created);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, EtcdEvent::Type::kPut);
  EXPECT_EQ(events[0].kv.value, "v1");
  EXPECT_EQ(events[1].kv.value, "v2");
  EXPECT_EQ(events[2].type, EtcdEvent::Type::kDelete);
  EXPECT_EQ(events[2].kv.key, prefix_ + "k");
}

// A lease lost behind the registration's back (revoked here; expired while etcd was away, in
// life) is granted anew and the key put again at the next keep-alive (TTL/3).
TEST_F(Etcd, RegistrationRegrantsALostLease) {
  auto c = Client();
  ASSERT_TRUE(c);
  EtcdRegistrationOptions o;
  o.etcd = Opts();
  o.prefix = prefix_;
  o.name = "e0";
  o.address = "127.0.0.1:7001";
  o.role = "decode";
  o.dp = 2;
  o.ttl_s = 1;
  auto reg = EtcdRegistration::Start(o);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  ASSERT_TRUE((*reg)->WaitRegistered(3000));
  const int64_t first = (*reg)->lease();
  ASSERT_NE(first, 0);
  // Kept alive past two TTLs.
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  auto r = c->Range(prefix_ + "e0");
  ASSERT_TRUE(r.ok() && r->kvs.size() == 1) << "keep-alives hold the key past its TTL";
  EXPECT_EQ(r->kvs[0].lease, first);
  ASSERT_TRUE(c->LeaseRevoke(first).ok());
  const auto t0 = Clock::now();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto x = c->Range(prefix_ + "e0");
        return x.ok() && x->kvs.size() == 1 && x->kvs[0].lease != first;
      },
      3000))
      << "the key is put again with a new lease";
  EXPECT_LT(MsSince(t0), 2000);
  EXPECT_NE((*reg)->lease(), first);
  auto rec = ParseEtcdEngineRecord(c->Range(prefix_ + "e0")->kvs[0].value);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->address, "127.0.0.1:7001");
  EXPECT_EQ(rec->dp, 2);
  // A graceful stop revokes: the key goes at once.
  (*reg)->Stop();
  r = c->Range(prefix_ + "e0");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->kvs.empty());
}

// A copy: the stats are often a temporary.
std::optional<ClusterStats::Engine> Find(const ClusterStats& s, const std::string& address) {
  for (const auto& e : s.engines) {
    if (e.address == address) return e;
  }
  return std::nullopt;
}

// Two engines register; an entrypoint that knows no engine finds both through the watcher and
// serves exactly as a local engine. One leaves gracefully while it runs a request (revoke: retired
// at once, the request moves on); the other "crashes" (stops keeping its lease alive: retired
// after the TTL, though its server still answers); registering again brings it back.
TEST_F(Etcd, DiscoveryEndToEnd) {
  LADLE_REQUIRE_ENGINE_TOKENIZER();
  Node a(Role::kBoth, "both-a"), b(Role::kBoth, "both-b");
  auto reg_opts = [&](const Node& n, const std::string& name) {
    EtcdRegistrationOptions o;
    o.etcd = Opts();
    o.prefix = prefix_;
    o.name = name;
    o.address = n.addr;
    o.role = "both";
    o.ttl_s = 1;
    return o;
  };
  auto reg_a = EtcdRegistration::Start(reg_opts(a, "both-a"));
  auto reg_b = EtcdRegistration::Start(reg_opts(b, "both-b"));
  ASSERT_TRUE(reg_a.ok() && reg_b.ok());
  ASSERT_TRUE((*reg_a)->WaitRegistered(3000));
  ASSERT_TRUE((*reg_b)->WaitRegistered(3000));
  EXPECT_EQ((*reg_a)->key(), prefix_ + "both-a");
  {
    auto c = Client();
    auto r = c->Range((*reg_a)->key());
    ASSERT_TRUE(r.ok() && r->kvs.size() == 1);
    auto rec = ParseEtcdEngineRecord(r->kvs[0].value);
    ASSERT_TRUE(rec.ok());
    EXPECT_EQ(rec->address, a.addr);
    EXPECT_EQ(rec->name, "both-a");
    EXPECT_EQ(rec->role, "both");
    EXPECT_EQ(rec->dp, 1);
    EXPECT_EQ(r->kvs[0].lease, (*reg_a)->lease());
  }

  RoutedEngineOptions ro;  // no static engines
  ro.poll_ms = 50;
  ro.dead_after_ms = 500;
  auto routed_r = RoutedEngine::Create(ro, 0);
  ASSERT_TRUE(routed_r.ok());
  auto routed = std::move(routed_r).value();
  EtcdWatcherOptions wo;
  wo.etcd = Opts();
  wo.prefix = prefix_;
  wo.resync_ms = 1000;  // the periodic full read runs during the test too
  auto watcher = EtcdWatcher::Start(wo, routed.get());
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  EXPECT_EQ((*watcher)->addresses().size(), 2u) << "the first read finds both before Start returns";
  WaitAlive(*routed, 2);

  // Served exactly as a local engine.
  auto local = MakeEngine(Ec());
  const auto prompt = PatternPrompt(130, 11);
  Sink want;
  ASSERT_TRUE(local->Submit({prompt, Greedy(16), nullptr}, want.Fn()).ok());
  ASSERT_TRUE(want.Wait());
  {
    Sink got;
    ASSERT_TRUE(routed->Submit({prompt, Greedy(16), nullptr}, got.Fn()).ok());
    ASSERT_TRUE(got.Wait());
    EXPECT_EQ(got.error, "");
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.logprobs, want.logprobs);
  }

  // Graceful leave of the engine running a long request: retired promptly, the request moves.
  Sink running;
  auto id = routed->Submit({PatternPrompt(50, 12), Greedy(60000), nullptr}, running.Fn());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(WaitFor([&] { return running.Count() >= 4; }, 5000));
  const auto st = routed->GetClusterStats();
  const bool a_holds = Find(st, a.addr).has_value() && Find(st, a.addr)->in_flight > 0;
  Node& leaving = a_holds ? a : b;
  Node& staying = a_holds ? b : a;
  auto& reg_leaving = a_holds ? *reg_a : *reg_b;
  auto& reg_staying = a_holds ? *reg_b : *reg_a;
  const std::string staying_name = a_holds ? "both-b" : "both-a";
  const auto t_leave = Clock::now();
  reg_leaving->Stop(/*revoke=*/true);
  ASSERT_TRUE(WaitFor(
      [&] {
        const auto e = Find(routed->GetClusterStats(), leaving.addr);
        return e.has_value() && e->retired && !e->alive;
      },
      3000))
      << "a revoked engine is retired";
  const int64_t leave_ms = MsSince(t_leave);
  EXPECT_LT(leave_ms, 1000) << "a graceful leave is seen without waiting for a TTL";
  const size_t at_leave = running.Count();
  ASSERT_TRUE(WaitFor([&] { return running.Count() >= at_leave + 4; }, 5000)) << "the request goes on elsewhere";
  {
    const auto s = routed->GetClusterStats();
    EXPECT_GE(s.reroutes, 1u);
    EXPECT_GT(Find(s, staying.addr)->in_flight, 0);
    EXPECT_EQ(Find(s, leaving.addr)->in_flight, 0);
  }
  routed->Cancel(*id);
  ASSERT_TRUE(running.Wait(10));
  EXPECT_EQ(running.error, "");
  EXPECT_EQ(running.finish[0], engine::FinishKind::kCancelled);
  // The retired engine still answers gRPC, but is not polled back to life.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(Find(routed->GetClusterStats(), leaving.addr)->alive);

  // Crash: the other stops keeping its lease alive; gone after its TTL (1 s), not before.
  const auto t_crash = Clock::now();
  reg_staying->Stop(/*revoke=*/false);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(Find(routed->GetClusterStats(), staying.addr)->retired) << "retired before its lease expired";
  ASSERT_TRUE(WaitFor([&] { return Find(routed->GetClusterStats(), staying.addr)->retired; }, 5000))
      << "an engine whose lease expired is retired";
  const int64_t expiry_ms = MsSince(t_crash);
  EXPECT_GE(expiry_ms, 400) << "retired before its lease could have expired";
  {
    Sink s;
    auto none = routed->Submit({prompt, Greedy(4), nullptr}, s.Fn());
    EXPECT_EQ(none.status().code(), StatusCode::kUnavailable) << "no engine left";
  }
  EXPECT_TRUE((*watcher)->addresses().empty());

  // Registering again (a restarted engine on the same address) brings it back.
  auto again = EtcdRegistration::Start(reg_opts(staying, staying_name));
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        const auto e = Find(routed->GetClusterStats(), staying.addr);
        return e.has_value() && e->alive && !e->retired;
      },
      5000))
      << "a re-registered engine rejoins";
  {
    Sink got;
    ASSERT_TRUE(routed->Submit({prompt, Greedy(16), nullptr}, got.Fn()).ok());
    ASSERT_TRUE(got.Wait());
    EXPECT_EQ(got.error, "");
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.logprobs, want.logprobs);
  }
  EXPECT_GE((*watcher)->resyncs(), 2u) << "the watch was renewed with a full read at least once";
  std::cout << "graceful leave seen in " << leave_ms << " ms; lease expiry (TTL 1 s) seen in " << expiry_ms << " ms\n";
  (*watcher)->Stop();
  (*again)->Stop();
  local->Shutdown();
  routed->Shutdown();
}

}  // namespace
}  // namespace ladle::cluster
