// The per-target index: one RocksDB at DIR/.index, one record per stripe whose chunk is here. It is a cache of the chunk files (fsck
// rebuilds it from them) that keeps what the files cannot cheaply say: last-read times, and two
// orderings so that one GC pass costs what it evicts, never a full scan:
//   "m" key                           -> IndexMeta
//   "l" BE(last_read_ms) BE(~depth) key -> ""   oldest read first, deeper first on ties
//   "x" BE(expire_ms) key             -> ""     soonest expiry first
// Every change to a key rewrites its three entries in one WriteBatch (atomic across a crash).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/kvcache/kv_store.h"
#include "object_format.h"

namespace rocksdb {
class DB;
}

namespace ladle::kvcache {

struct IndexMeta {
  uint64_t value_len = 0;
  uint64_t file_bytes = 0;
  int64_t write_ms = 0;
  uint64_t write_id = 0;
  int64_t expire_ms = 0;
  int64_t last_read_ms = 0;
  BlockKey parent;
  bool has_parent = false;
  uint32_t depth = 0;
  TrafficClass cls = TrafficClass::kChatbot;
  std::vector<StripeMember> members;  // the stripe's blocks, in chain order
};

class Index {
 public:
  // `created` is set when the index did not exist (the caller rebuilds it from the files).
  static Result<std::unique_ptr<Index>> Open(const std::string& dir, bool* created);
  ~Index();

  Status Upsert(const BlockKey& key, const IndexMeta& meta, std::optional<IndexMeta>* old);
  Status Erase(const BlockKey& key, std::optional<IndexMeta>* old);
  // Raises last-read times (never lowers them); unknown keys are skipped.
  Status Touch(const std::vector<std::pair<BlockKey, int64_t>>& reads);
  std::optional<IndexMeta> Get(const BlockKey& key);
  void ForEach(const std::function<void(const BlockKey&, const IndexMeta&)>& fn);
  // Up to n (key, last_read_ms) in LRU order after `*cursor` (an "l" entry; empty = from the
  // start); advances it.
  std::vector<std::pair<BlockKey, int64_t>> Lru(std::string* cursor, size_t n);
  // Up to n keys whose expiry is <= now, soonest first.
  std::vector<BlockKey> Expired(int64_t now_ms, size_t n);

 private:
  explicit Index(rocksdb::DB* db) : db_(db) {}
  std::mutex mu_;  // serialises read-modify-write of a key's three entries
  rocksdb::DB* db_;
};

}  // namespace ladle::kvcache
