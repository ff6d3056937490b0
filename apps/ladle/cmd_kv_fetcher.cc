// `ladle kv-fetcher`: the process that owns the KV block store and moves blocks between it and a
// POSIX shared-memory pool for the engine (include/ladle/kvcache/fetcher.h). The store admits a
// single opener, so the engine process talks to this one over a Unix socket instead.
//   ladle kv-fetcher --store fs:/data/kv --socket /run/ladle/kvf.sock --block-bytes 114688
//                    [--shm-mb 1024] [--put-slots 64] [--parent-pid P]
// Runs until SIGTERM/SIGINT (graceful: puts in flight finish, the socket and the shm segment are
// unlinked) or until the process --parent-pid names is gone, so that a kill -9 of the engine
// never leaves an orphan fetcher holding the store. Exit: 0 after a clean stop, 1 on an error.
// `--store` may also come from $LADLE_KV_STORE.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "commands.h"
#include "serve_common.h"
#include "ladle/core/logging.h"
#include "ladle/kvcache/fetcher.h"

namespace ladle::app {

namespace {

struct FetcherOpts {
  std::string store;
  std::string socket;
  size_t block_bytes = 0;
  std::string model_config, model;  // the block size from the engines' model instead
  size_t shm_mb = 256;
  uint32_t put_slots = 16;
  int64_t parent_pid = 0;
  int64_t domain_timeout_ms = 500;
  bool no_gc = false;
};

// Watches the engine. When it is our direct parent the kernel tells us (PR_SET_PDEATHSIG) and a
// change of getppid() confirms it; when something sits in between (a shell), only the pid is
// polled. kill(pid, 0) failing with EPERM still means alive (another user's process).
class ParentWatch {
 public:
  explicit ParentWatch(pid_t pid) : pid_(pid), direct_(pid > 0 && ::getppid() == pid) {
    // SIGTERM: blocked in this process and taken by the main loop like any other stop request.
    if (direct_) ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  }
  bool Alive() const {
    if (pid_ <= 0) return true;
    if (direct_ && ::getppid() != pid_) return false;  // re-parented: the parent exited
    return ::kill(pid_, 0) == 0 || errno == EPERM;
  }

 private:
  pid_t pid_;
  bool direct_;
};

int RunKvFetcher(const FetcherOpts& o) {
  // SIGINT/SIGTERM are blocked before the store and the server start their threads (they
  // inherit the mask), so only this thread takes them, in sigtimedwait: no handler ever runs
  // inside the event loop or a store worker.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ParentWatch parent(static_cast<pid_t>(o.parent_pid));
  // Checked after PR_SET_PDEATHSIG: a parent that died before it would never signal.
  if (!parent.Alive()) {
    fmt::print(stderr, "ladle kv-fetcher: parent {} is already gone\n", o.parent_pid);
    return 1;
  }

  kvcache::FetcherOptions fo;
  fo.store_uri = o.store;
  if (fo.store_uri.empty()) {
    if (const char* env = std::getenv("LADLE_KV_STORE")) fo.store_uri = env;
  }
  if (fo.store_uri.empty()) {
    fmt::print(stderr, "ladle kv-fetcher: --store URI is required (fs:DIR or ec:K+M:DIR0,...), or set LADLE_KV_STORE\n");
    return 1;
  }
  // The fetcher owns the store for its node, so it runs the GC too (unless a storage node's
  // `ladle kv gc --loop` does).
  fo.store_options.gc_in_process = !o.no_gc;
  fo.store_options.domain_timeout = std::chrono::milliseconds(o.domain_timeout_ms);
  fo.socket_path = o.socket;
  fo.block_bytes = o.block_bytes;
  if (fo.block_bytes == 0) {
    if (o.model_config.empty() && o.model.empty()) {
      fmt::print(stderr, "ladle kv-fetcher: give --block-bytes, or the engines' --model-config or --model\n");
      return 2;
    }
    auto bb = KvBlockBytes(o.model_config, o.model);
    if (!bb.ok()) {
      fmt::print(stderr, "ladle kv-fetcher: {}\n", bb.status().ToString());
      return 1;
    }
    fo.block_bytes = *bb;
  }
  fo.shm_bytes = o.shm_mb << 20;
  fo.put_slots = o.put_slots;
  auto srv = kvcache::FetcherServer::Start(std::move(fo));
  if (!srv.ok()) {
    fmt::print(stderr, "ladle kv-fetcher: {}\n", srv.status().ToString());
    return 1;
  }
  int rc = 0;
  for (;;) {
    timespec ts{0, 250 * 1000 * 1000};  // how often the parent and the loop's health are looked at
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      LADLE_LOG_INFO("kvfetch.signal sig={} (stopping)", sig == SIGINT ? "SIGINT" : "SIGTERM");
      break;
    }
    if (!parent.Alive()) {
      LADLE_LOG_WARN("kvfetch.parent_gone pid={} (stopping)", o.parent_pid);
      break;
    }
    if (!(*srv)->healthy()) {
      LADLE_LOG_ERROR("kvfetch.unhealthy (the event loop died; exiting so a supervisor restarts it)");
      rc = 1;
      break;
    }
  }
  (*srv)->Stop();
  return rc;
}

void RegisterKvFetcher(CLI::App& app, RunFn* run) {
  auto o = std::make_shared<FetcherOpts>();
  auto* cmd = app.add_subcommand("kv-fetcher", "own the KV store and serve blocks to the engine through shared memory");
  cmd->add_option("--store", o->store, "fs:DIR or ec:K+M:DIR0,...,DIR{K+M-1} (default $LADLE_KV_STORE)");
  cmd->add_option("--socket", o->socket, "the Unix socket to listen on")->required();
  auto* bb = cmd->add_option("--block-bytes", o->block_bytes, "slot size: the largest block value in bytes")
                 ->check(CLI::Range(size_t{1}, size_t{UINT32_MAX}));
  // The engines' model instead: what `ladle cluster` does for its own fetcher, so a fetcher
  // started by hand for engines on this machine needs no size worked out by hand.
  auto* mcfg = cmd->add_option("--model-config", o->model_config, "the engines' config.json: the slot size is its KV block's");
  auto* mdir = cmd->add_option("--model", o->model, "the engines' weights folder: the slot size is its KV block's");
  bb->excludes(mcfg)->excludes(mdir);
  cmd->add_option("--shm-mb", o->shm_mb, "the cache pool in MiB (slots = this / block size, at least 1)")
      ->capture_default_str();
  cmd->add_option("--put-slots", o->put_slots, "staging slots for writes, on top of the pool")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4096u));
  cmd->add_option("--parent-pid", o->parent_pid, "exit when this process is gone (the engine)");
  cmd->add_option("--domain-timeout-ms", o->domain_timeout_ms, "mark a store domain down past this")
      ->capture_default_str();
  cmd->add_flag("--no-gc", o->no_gc, "do not run the store's GC in this process");
  cmd->callback([run, o] { *run = [o] { return RunKvFetcher(*o); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterKvFetcher);

}  // namespace ladle::app
