#include "fetcher_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ladle/core/logging.h"

namespace ladle::app {

using Clock = std::chrono::steady_clock;

Result<std::unique_ptr<FetcherProcess>> FetcherProcess::Start(Options o) {
  auto p = std::unique_ptr<FetcherProcess>(new FetcherProcess(std::move(o)));
  p->thread_ = std::thread([raw = p.get()] { raw->Supervise(); });
  // The first child: up when it accepts a connection.
  auto c = p->Connect();
  if (!c.ok()) {
    p->Stop();
    return c.status().WithContext("kv fetcher did not start");
  }
  return p;
}

FetcherProcess::~FetcherProcess() { Stop(); }

pid_t FetcherProcess::Spawn() {
  std::vector<std::string> args = {o_.exe,
                                   "kv-fetcher",
                                   "--store",
                                   o_.store_uri,
                                   "--socket",
                                   o_.socket_path,
                                   "--block-bytes",
                                   std::to_string(o_.block_bytes),
                                   "--shm-mb",
                                   std::to_string(o_.shm_mb),
                                   "--parent-pid",
                                   std::to_string(::getpid())};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(o_.exe.c_str(), argv.data());
    _exit(127);
  }
  if (pid < 0) LADLE_LOG_ERROR("kvfetch.spawn_failed error='{}'", std::strerror(errno));
  return pid;
}

void FetcherProcess::Supervise() {
  auto backoff = std::chrono::milliseconds(100);
  for (;;) {
    pid_t pid;
    {
      std::lock_guard lk(mu_);
      if (stopping_) return;
      pid = Spawn();
      pid_ = pid;
      ++starts_;
    }
    cv_.notify_all();
    if (pid < 0) {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, backoff, [&] { return stopping_; });
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
      continue;
    }
    LADLE_LOG_INFO("kvfetch.started pid={} socket={}", pid, o_.socket_path);
    const auto t0 = Clock::now();
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::unique_lock lk(mu_);
    pid_ = -1;
    if (stopping_) return;
    LADLE_LOG_WARN("kvfetch.exited pid={} status={} restarting_in_ms={}", pid,
                   WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                       : "exit " + std::to_string(WEXITSTATUS(status)),
                   backoff.count());
    // A child that lived a while gets a quick restart; one that dies at once backs off.
    if (Clock::now() - t0 > std::chrono::seconds(10)) backoff = std::chrono::milliseconds(100);
    cv_.wait_for(lk, backoff, [&] { return stopping_; });
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
  }
}

Result<std::unique_ptr<kvcache::FetcherClient>> FetcherProcess::Connect() {
  return kvcache::FetcherClient::Connect(o_.socket_path, o_.connect_timeout);
}

void FetcherProcess::Stop() {
  pid_t pid;
  {
    std::lock_guard lk(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    pid = pid_;
  }
  cv_.notify_all();
  if (pid > 0) {
    ::kill(pid, SIGTERM);
    // The supervisor's waitpid reaps it; past the deadline it is killed.
    const auto deadline = Clock::now() + std::chrono::seconds(15);
    for (;;) {
      {
        std::lock_guard lk(mu_);
        if (pid_ < 0) break;
      }
      if (Clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (thread_.joinable()) thread_.join();
}

pid_t FetcherProcess::pid() const {
  std::lock_guard lk(mu_);
  return pid_;
}

uint64_t FetcherProcess::restarts() const {
  std::lock_guard lk(mu_);
  return starts_ > 0 ? starts_ - 1 : 0;
}

}  // namespace ladle::app
