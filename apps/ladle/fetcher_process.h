// The `ladle kv-fetcher` child of `ladle serve`: started with the store URI and a socket in a
// private directory, watched by a supervisor thread that restarts it (with backoff) whenever it
// exits, and stopped (SIGTERM, then SIGKILL past a deadline) with the server. The supervisor
// thread also does every fork, because PR_SET_PDEATHSIG follows the forking thread: the child
// dies with this process, never with a thread that came and went.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/kvcache/fetcher.h"

namespace ladle::app {

class FetcherProcess {
 public:
  struct Options {
    std::string exe;          // this binary
    std::string store_uri;
    std::string socket_path;  // in a directory only this process uses
    size_t block_bytes = 0;
    int64_t shm_mb = 256;
    std::chrono::milliseconds connect_timeout{10000};
  };
  // Starts the child and waits until it accepts a connection.
  static Result<std::unique_ptr<FetcherProcess>> Start(Options o);
  ~FetcherProcess();  // Stop()
  void Stop();

  // A client of the current child (a restarted one after a crash), within the connect timeout.
  Result<std::unique_ptr<kvcache::FetcherClient>> Connect();
  pid_t pid() const;
  uint64_t restarts() const;

 private:
  explicit FetcherProcess(Options o) : o_(std::move(o)) {}
  void Supervise();
  pid_t Spawn();

  Options o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  pid_t pid_ = -1;
  uint64_t starts_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ladle::app
