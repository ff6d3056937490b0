// A storage target: one directory, one failure domain. The fs target owns a small I/O thread
// with an io_uring for reads and writer threads for atomic writes (temp file + rename); the
// fault target (fault_target.h) wraps one for tests. Chunks are stored as DIR/ab/<32 hex>.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "index.h"
#include "ladle/core/result.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::kvcache {

using ReadDone = std::function<void(Result<std::vector<uint8_t>>)>;
using StatusDone = std::function<void(Status)>;

struct ChunkWrite {
  BlockKey key;
  std::shared_ptr<const std::vector<uint8_t>> bytes;  // the encoded chunk (object_format.h)
  IndexMeta meta;                                      // file_bytes is set by the target
};

struct TargetOptions {
  unsigned io_depth = 32;
  unsigned write_threads = 4;
  bool o_direct = false;
  bool fsync = false;
  uint64_t capacity_bytes = 0;  // 0 = the file system's size
  int64_t ttl_agent_ms = 0;     // for index rebuild from the files
  int64_t ttl_chatbot_ms = 0;
  // Tests only (set by OpenTarget for `fault:` specs, fault_target.h): the fs reader thread calls
  // it for each read it has just queued to its ring; a throw is a reader failure.
  std::function<void()> reader_fault;
};

class Target {
 public:
  virtual ~Target() = default;
  virtual const std::string& path() const = 0;
  // Reads the whole chunk file. kNotFound when absent; the callback runs on the I/O thread.
  virtual void ReadAsync(const BlockKey& key, ReadDone done) = 0;
  virtual Result<std::vector<uint8_t>> ReadSync(const BlockKey& key) = 0;
  // Atomic write of one chunk file, then its index entry.
  virtual void WriteAsync(ChunkWrite w, StatusDone done) = 0;
  virtual Status WriteSync(const ChunkWrite& w) = 0;
  // Unlinks the file and its index entry; absent is OK.
  virtual void RemoveAsync(const BlockKey& key, StatusDone done) = 0;
  virtual Status RemoveSync(const BlockKey& key) = 0;
  // Records an existing chunk file in the index (fsck adoption), keeping the counters right.
  virtual Status Adopt(const BlockKey& key, const IndexMeta& meta) = 0;
  virtual Index& index() = 0;
  virtual uint64_t used_bytes() const = 0;
  virtual uint64_t objects() const = 0;
  virtual uint64_t capacity_bytes() const = 0;
  // False once an I/O worker failed past its restarts.
  virtual bool healthy() const = 0;
  // Every chunk file's key (fsck, index rebuild); removes temp files of dead writers.
  virtual void Scan(const std::function<void(const BlockKey&)>& fn) = 0;
};

// `spec` is a directory, or `fault:NAME:DIR` for a fault-injection wrapper (fault_target.h).
Result<std::unique_ptr<Target>> OpenTarget(const std::string& spec, const TargetOptions& options);
Result<std::unique_ptr<Target>> OpenFsTarget(const std::string& dir, const TargetOptions& options);

// errno -> Status: ENOSPC/EDQUOT are kResourceExhausted, ENOENT kNotFound, the rest kIoError.
Status ErrnoStatus(int err, const std::string& what);

}  // namespace ladle::kvcache
