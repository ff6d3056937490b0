// The persistent Block KVCache store (the recipe's "KVCache Storage", "Block KVCache" and "3FS"
// sections): 128-token blocks keyed by a hash chain, kept on a file system that every prefill
// machine can reach, optionally Reed-Solomon coded over K+M failure domains.
//
//   auto store = KvStore::Open("ec:10+2:/mnt/d0,...,/mnt/d11", {});          // once per process
//   std::vector<BlockKey> keys = ChainKeys(prompt_ids, extras);             // full blocks only
//   size_t hit = store.value()->MatchSync(keys);                            // metadata only
//   store.value()->Put(keys, values, TrafficClass::kChatbot, done);          // async, batched
//   store.value()->Get(keys, buffers, done);                                 // per-key result
//
// A block is ONE object holding every component the model persists for it (main KV and indexer
// K for every persisted layer): components are written, read and evicted together, so a hit
// never restores one and not another. Values are opaque bytes to the store.
//
// Every stored object carries a header with the full key, the length, the traffic class, the
// write time and a CRC32C; a read whose header or checksum does not match is a miss, never data.
// Lost, corrupt and expired blocks are all reported as misses (kNotFound): the caller recomputes.
//
// Thread-safety: a KvStore is shared by handle; every method may be called from any thread.
// Completions run on the store's I/O threads and must not block; an exception thrown by one is
// caught and logged, never lost with the thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::kvcache {

// Tokens per block (the recipe's block size).
inline constexpr size_t kBlockTokens = 128;

// A block's key: a 128-bit chain digest. 128 bits because at the recipe's scale (about 100 PiB
// at about 112 KiB a block, i.e. about 10^12 blocks) a 64-bit key collides: the birthday bound
// 2^32 ≈ 4·10^9 keys is passed a thousand times over, and a collision serves another prompt's KV.
struct BlockKey {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  // 32 lowercase hex digits, hi first.
  std::string Hex() const;
  static Result<BlockKey> FromHex(std::string_view hex);
};

// For unordered containers of keys (the keys are digests: any mix of the halves spreads well).
struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ULL)); }
};

// Extra key material, tagged so that two kinds of extra can never be confused: an untagged
// tenant "a" and an untagged salt "a" would let two tenants collide.
enum class ExtraTag : uint32_t {
  kModel = 1,      // model and KV-layout fingerprint
  kCacheSalt = 2,  // per-request cache salt
  kTenant = 3,     // tenant / API key scope
  kImage = 4,      // content hash of an image whose placeholders the block covers
};
struct ExtraKey {
  ExtraTag tag;
  std::string value;
};

// XXH3-128 with a fixed seed (never per process: that would silently break sharing and
// hand-off between processes) over the parent key (all zero for the first block), the block's
// kBlockTokens token ids as little-endian uint32, and the tagged extras in order.
BlockKey ChainKey(const BlockKey* parent, std::span<const uint32_t> block_tokens,
                  std::span<const ExtraKey> extras);
// The keys of every full block of `tokens` (a trailing partial block has no key).
std::vector<BlockKey> ChainKeys(std::span<const uint32_t> tokens, std::span<const ExtraKey> extras);

// The traffic class sets a block's TTL (recipe: agent 3 days, chatbot 7 days).
enum class TrafficClass : uint8_t { kAgent = 0, kChatbot = 1 };

struct StoreOptions {
  // io_uring submission queue depth per target.
  unsigned io_depth = 32;
  // Writer threads per target. A key's writes and removes keep their order on one of them.
  unsigned write_threads = 4;
  // Open value files with O_DIRECT (needs aligned I/O; falls back to buffered where unsupported).
  bool o_direct = false;
  // fdatasync each object (and its directory) before the rename: durable across power loss, not
  // only across a process crash. Off by default: a lost block is a miss, not an error.
  bool fsync = false;
  std::chrono::seconds ttl_agent{3 * 24 * 3600};
  std::chrono::seconds ttl_chatbot{7 * 24 * 3600};
  // GC keeps each target's use under high_watermark × capacity, evicting down to low_watermark.
  double high_watermark = 0.90;
  double low_watermark = 0.85;
  // Per-target capacity in bytes; 0 = the file system's size.
  uint64_t capacity_bytes = 0;
  // Run the GC worker inside this process (else `ladle kv gc` runs it on the storage node).
  bool gc_in_process = true;
  std::chrono::milliseconds gc_interval{1000};
  // ec: reads go to K+1 domains; past this the last domain is asked too.
  std::chrono::milliseconds hedge_after{20};
  // A domain that fails or takes longer than this is marked down and skipped for down_for.
  std::chrono::milliseconds domain_timeout{500};
  std::chrono::milliseconds down_for{10000};
  // Tests only: the wall clock in ms since the epoch (TTLs, last-read times). Default: system clock.
  std::function<int64_t()> now_ms;
};

struct TargetStat {
  std::string path;
  uint64_t used_bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t objects = 0;
  bool down = false;
};
struct StoreStat {
  std::vector<TargetStat> targets;
  uint64_t hits = 0;         // Get keys served
  uint64_t misses = 0;       // Get keys absent, expired, lost or corrupt
  uint64_t puts = 0;         // blocks written
  uint64_t evictions = 0;    // blocks removed by GC (LRU or TTL)
  uint64_t repairs = 0;      // chunks rewritten by background repair or fsck
  uint64_t corrupt = 0;      // chunks or objects that failed their header or CRC check
  bool healthy = true;       // false when an I/O worker died and could not be restarted
};

// A caller-owned destination for one block's value.
struct MutableBuffer {
  void* data = nullptr;
  size_t capacity = 0;
};

class KvStore {
 public:
  // `fs:DIR` (one POSIX directory, any mounted FS) or `ec:K+M:DIR0,...,DIR{K+M-1}` (Reed-Solomon
  // over K+M fs targets, one per failure domain).
  static Result<std::unique_ptr<KvStore>> Open(std::string_view uri, StoreOptions options = {});
  virtual ~KvStore() = default;

  // The number of leading keys of a chain that are present and unexpired: metadata only, no
  // value bytes read (the recipe's CHECK role, on the routing path).
  using MatchDone = std::function<void(Result<size_t>)>;
  virtual void Match(std::span<const BlockKey> keys, MatchDone done) = 0;

  // Reads each key into its buffer. Per key: the value's length, or kNotFound (a miss: absent,
  // expired, lost or corrupt), or kOutOfRange (the buffer is too small; nothing is read).
  using GetDone = std::function<void(std::vector<Result<size_t>>)>;
  virtual void Get(std::span<const BlockKey> keys, std::span<const MutableBuffer> buffers, GetDone done) = 0;

  // Writes each key's value atomically (a crash leaves nothing or the whole block). Per key: OK
  // or the error (kResourceExhausted on ENOSPC, kIoError, ...). The values are copied before
  // Put returns. The keys of one call are taken as a chain in order (keys[i-1] is keys[i]'s
  // parent): GC evicts children before parents, so put unrelated blocks in separate calls.
  // `parent_of_first` links keys[0] to a block put earlier (a sequence's new blocks continue
  // the chain its older blocks began); without it keys[0] keeps the link it had, if any.
  using PutDone = std::function<void(std::vector<Status>)>;
  virtual void Put(std::span<const BlockKey> keys, std::span<const std::span<const uint8_t>> values,
                   TrafficClass cls, PutDone done, std::optional<BlockKey> parent_of_first = std::nullopt) = 0;

  using DeleteDone = std::function<void(std::vector<Status>)>;
  virtual void Delete(std::span<const BlockKey> keys, DeleteDone done) = 0;

  virtual StoreStat Stat() = 0;

  // One GC pass on every target now (TTL, then LRU to the low watermark); returns blocks evicted.
  virtual Result<uint64_t> RunGcOnce() = 0;
  // Verifies every chunk of every object and repairs what it can.
  struct FsckReport {
    uint64_t objects = 0, ok = 0, repaired = 0, unrecoverable = 0;
  };
  virtual Result<FsckReport> Fsck() = 0;

  // Blocking forms of the above, for the CLI, tests and simple callers.
  Result<size_t> MatchSync(std::span<const BlockKey> keys);
  std::vector<Result<size_t>> GetSync(std::span<const BlockKey> keys, std::span<const MutableBuffer> buffers);
  std::vector<Status> PutSync(std::span<const BlockKey> keys, std::span<const std::span<const uint8_t>> values,
                              TrafficClass cls);
  std::vector<Status> DeleteSync(std::span<const BlockKey> keys);
};

}  // namespace ladle::kvcache
