// `ladle cluster --prefill N --decode M [--dp R]`: a whole cluster on this machine with one
// command. It starts the machine's `ladle kv-fetcher` (owner of the shared block store), the
// engines as child processes (`ladle engine`, restarted on the same port if they die, so a
// killed engine rejoins), and serves the entrypoint itself; stopping it stops them all.
//
// --ready-file PATH gets {"port": P, "engines": [{"role", "name", "pid", "port"}, ...]} once
// everything answers (tests kill engines by these pids).
//
// --etcd URL: the engines register in etcd (under --etcd-prefix) and the entrypoint finds them
// there instead of being given their ports.
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "commands.h"
#include "entrypoint.h"
#include "ladle/core/logging.h"
#include "ladle/core/numbers.h"
#include "ladle/engine/model.h"

namespace ladle::app {

namespace {

struct ClusterOpts {
  EntrypointOpts ep;
  int prefill = 1, decode = 1, both = 0, dp = 1;
  std::string ready_file;
};

// One engine child, restarted (after a second) whenever it exits while the cluster runs.
class EngineChild {
 public:
  EngineChild(std::string name, std::vector<std::string> argv, std::string port_file)
      : name_(std::move(name)), argv_(std::move(argv)), port_file_(std::move(port_file)) {}
  ~EngineChild() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Supervise(); });
  }
  // The port, once its first start wrote it (0 until then).
  int port() {
    std::lock_guard lock(mu_);
    if (port_ == 0) {
      std::ifstream in(port_file_);
      std::string line;
      if (std::getline(in, line)) {
        if (auto p = ParseI64(line)) port_ = static_cast<int>(*p);
      }
    }
    return port_;
  }
  pid_t pid() {
    std::lock_guard lock(mu_);
    return pid_;
  }
  const std::string& name() const { return name_; }
  void Stop() {
    pid_t p;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      p = pid_;
    }
    if (p > 0) ::kill(p, SIGTERM);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Supervise() {
    while (true) {
      std::vector<std::string> argv = argv_;
      {
        std::lock_guard lock(mu_);
        if (stopping_) return;
        // A restart listens on the port of the first start, so entrypoints find it again.
        if (port_ > 0) argv.push_back(fmt::format("--listen=127.0.0.1:{}", port_));
      }
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      const pid_t child = ::fork();
      if (child == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        ::execv(cargv[0], cargv.data());
        ::_exit(127);
      }
      {
        std::lock_guard lock(mu_);
        pid_ = child;
      }
      LADLE_LOG_INFO("cluster.engine_started name={} pid={}", name_, child);
      // Bounded stop: SIGTERM first (Stop), SIGKILL if it lingers past 15 s.
      int status = 0;
      int64_t waited_ms = 0;
      while (::waitpid(child, &status, WNOHANG) == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        bool stopping;
        {
          std::lock_guard lock(mu_);
          stopping = stopping_;
        }
        if (stopping && (waited_ms += 20) > 15000) ::kill(child, SIGKILL);
      }
      std::lock_guard lock(mu_);
      pid_ = -1;
      if (stopping_) return;
      LADLE_LOG_WARN("cluster.engine_exited name={} status={} restarting_in_ms=1000", name_, status);
      mu_.unlock();
      std::this_thread::sleep_for(std::chrono::seconds(1));
      mu_.lock();
    }
  }

  std::string name_;
  std::vector<std::string> argv_;
  std::string port_file_;
  std::mutex mu_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

std::vector<std::string> EngineFlags(const ServeOpts& o) {
  std::vector<std::string> a;
  auto add = [&](const char* flag, const std::string& v) {
    if (!v.empty()) a.push_back(fmt::format("--{}={}", flag, v));
  };
  add("model", o.model);
  add("model-config", o.model_config);
  add("model-version", o.model_version);
  add("tokenizer", o.tokenizer);
  add("max-model-len", std::to_string(o.max_model_len));
  add("kv-blocks", std::to_string(o.kv_blocks));
  add("max-running", std::to_string(o.max_running));
  add("max-queue", std::to_string(o.max_queue));
  add("eos-logit-bias", fmt::format("{}", o.eos_logit_bias));
  add("chunk-policy", o.chunk_policy);
  add("cost-model", o.cost_model);
  add("swa-pool-mb", std::to_string(o.swa_pool_mb));
  add("swa-ttl-s", std::to_string(o.swa_ttl_s));
  add("kv-fetch-deadline-ms", std::to_string(o.kv_fetch_deadline_ms));
  add("grammar-threads", std::to_string(o.grammar_threads));
  add("grammar-compile-ms", std::to_string(o.grammar_compile_ms));
  add("drain-deadline-ms", std::to_string(o.drain_deadline_ms));
  add("log-format", o.log_format);
  if (o.no_async) a.push_back("--no-async");
  if (o.exact_replay) a.push_back("--exact-replay");
  return a;
}

int RunCluster(ClusterOpts co) {
  ServeOpts& o = co.ep.serve;
  char tmpl[] = "/tmp/ladle-cluster-XXXXXX";
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (::mkdtemp(tmpl) == nullptr || n <= 0) {
    LADLE_LOG_ERROR("cluster.failed error='no private directory or own path'");
    return 1;
  }
  exe[n] = '\0';
  const std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  const std::string store = o.kv_store.empty() ? "fs:" + dir + "/kv" : o.kv_store;
  if (o.kv_store.empty()) std::filesystem::create_directories(dir + "/kv");
  // The block size of the fetcher's slots, from the model the engines will build.
  auto bb = KvBlockBytes(o.model_config, o.model);
  if (!bb.ok()) {
    LADLE_LOG_ERROR("cluster.failed error='{}'", LogSafe(bb.status().ToString()));
    return 1;
  }
  const size_t block_bytes = *bb;
  FetcherProcess::Options fo;
  fo.exe = exe;
  fo.store_uri = store;
  fo.socket_path = dir + "/kvf.sock";
  fo.block_bytes = block_bytes;
  fo.shm_mb = o.kv_fetcher_shm_mb;
  auto fetcher = FetcherProcess::Start(fo);
  if (!fetcher.ok()) {
    LADLE_LOG_ERROR("cluster.failed error='{}'", LogSafe(fetcher.status().ToString()));
    return 1;
  }
  std::vector<std::unique_ptr<EngineChild>> children;
  auto spawn = [&](const char* role, int count) {
    for (int i = 0; i < count; ++i) {
      const std::string name = fmt::format("{}-{}", role, i);
      const std::string port_file = dir + "/" + name + ".port";
      std::vector<std::string> argv = {exe, "engine", fmt::format("--role={}", role), fmt::format("--dp={}", co.dp),
                                       fmt::format("--name={}", name), fmt::format("--port-file={}", port_file),
                                       fmt::format("--kv-fetcher=socket:{}", fo.socket_path)};
      if (!co.ep.etcd.empty()) {
        argv.push_back(fmt::format("--etcd={}", co.ep.etcd));
        argv.push_back(fmt::format("--etcd-prefix={}", co.ep.etcd_prefix));
      }
      for (auto& f : EngineFlags(o)) argv.push_back(f);
      children.push_back(std::make_unique<EngineChild>(name, std::move(argv), port_file));
      children.back()->Start();
    }
  };
  spawn("prefill", co.prefill);
  spawn("decode", co.decode);
  spawn("both", co.both);
  // Every engine writes its port once serving (profiling the cost model first takes a while).
  for (int waited = 0; waited < 300'000; waited += 50) {
    bool all = true;
    for (auto& c : children) all = all && c->port() > 0;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& c : children) {
    if (c->port() == 0) {
      LADLE_LOG_ERROR("cluster.failed error='engine {} did not start'", c->name());
      return 1;
    }
    // With etcd the entrypoint discovers them (they registered before writing their port).
    if (co.ep.etcd.empty()) co.ep.engines.push_back(fmt::format("127.0.0.1:{}", c->port()));
  }
  co.ep.kv_check = "socket:" + fo.socket_path;
  int rc = RunEntrypoint(co.ep, [&](server::Server* srv) {
    if (co.ready_file.empty()) return;
    // kv_socket: more entrypoints on this machine attach with --kv-check socket:<it>.
    std::string j = fmt::format("{{\"port\": {}, \"kv_fetcher_pid\": {}, \"kv_socket\": \"{}\", \"engines\": [", srv->port(),
                                (*fetcher)->pid(), fo.socket_path);
    for (size_t i = 0; i < children.size(); ++i) {
      auto& c = children[i];
      j += fmt::format("{}{{\"name\": \"{}\", \"pid\": {}, \"port\": {}}}", i ? ", " : "", c->name(), c->pid(), c->port());
    }
    j += "]}\n";
    const std::string tmp = co.ready_file + ".tmp";
    std::ofstream(tmp) << j;
    std::rename(tmp.c_str(), co.ready_file.c_str());
  });
  for (auto& c : children) c->Stop();
  children.clear();
  (*fetcher)->Stop();
  return rc;
}

void RegisterCluster(CLI::App& app, RunFn* run) {
  auto co = std::make_shared<ClusterOpts>();
  auto* cmd = app.add_subcommand("cluster", "Run an entrypoint with prefill and decode engines on this machine");
  AddCommonFlags(cmd, &co->ep.serve);
  AddServerFlags(cmd, &co->ep.serve);
  AddEngineFlags(cmd, &co->ep.serve);
  AddVisionFlags(cmd, &co->ep.vision);
  cmd->add_option("--prefill", co->prefill, "prefill engines")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--decode", co->decode, "decode engines")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--both", co->both, "engines that prefill and decode")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--dp", co->dp, "DP ranks per engine")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--policy", co->ep.policy, "routing: balanced, round-robin or least-requests")
      ->capture_default_str()->check(CLI::IsMember({"balanced", "round-robin", "least-requests"}));
  cmd->add_option("--dead-after-ms", co->ep.dead_after_ms, "an engine silent this long is dead")->capture_default_str();
  cmd->add_option("--prefill-quota-ms", co->ep.prefill_quota_ms,
                  "Prefill Load Balancer: compute-quota (ms) a prefill rank may hold before it pulls no more")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--ready-file", co->ready_file, "write the port and the engines' pids here once serving");
  cmd->add_option("--etcd", co->ep.etcd, "engines register in this etcd (http://host:port) and the entrypoint watches it");
  cmd->add_option("--etcd-prefix", co->ep.etcd_prefix, "key prefix of this cluster's engines in etcd")->capture_default_str();
  cmd->add_option("--directory-listen", co->ep.directory_listen,
                  "serve the entrypoint's SWA directory shard here, shared with --directory-peer entrypoints");
  cmd->add_option("--directory-peer", co->ep.directory_peers, "another entrypoint's directory address; repeatable")
      ->delimiter(',');
  cmd->callback([run, co, cmd] {
    *run = [co, cmd] {
      if (!FinishFlags(cmd, co->ep.serve, "cluster")) return 2;
      if (co->decode + co->both == 0) {
        LADLE_LOG_ERROR("cluster.failed error='needs at least one decode (or both) engine'");
        return 2;
      }
      return RunCluster(*co);
    };
  });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterCluster);

}  // namespace ladle::app
