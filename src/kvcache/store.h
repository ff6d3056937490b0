// The store behind KvStore::Open: N = K + M targets (fs is K = 1, M = 0 over one target), an
// in-memory catalog for Match and leases, the targets' RocksDB indexes for last-read times and
// GC order, a timer for hedges and domain timeouts, and one maintenance thread (GC, repair).
//
// Blocks live in stripes (object_format.h): up to K consecutive blocks of one Put, block j on
// domain j, parity on domains K..K+M-1. The catalog holds stripes (keyed by their first block's
// key, which names their files) and a block index from each block key to the stripe that holds
// its newest write. GC, TTL, repair and fsck work on whole stripes.
//
// Invariants (LADLE_CHECKed where cheap):
//  - a stripe entry exists only for a stripe whose Put completed with enough chunks to decode
//    (every data chunk, or fewer with parity standing in: popcount(mask | virtual) >= K);
//  - every block index entry names a stripe in the catalog that lists the block, and `live`
//    counts exactly the block index entries naming a stripe; a stripe with live == 0 holds only
//    superseded writes and is queued as garbage;
//  - a lease count is > 0 while a Get or Put of the block is in flight; GC never evicts a stripe
//    with a leased member;
//  - last_read(parent stripe) >= last_read(child stripe) for every recorded link (reads and puts
//    raise the ancestors), and the LRU order breaks ties deeper first, so GC evicts children first.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <optional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ec_codec.h"
#include "ladle/kvcache/kv_store.h"
#include "target.h"
#include "timer.h"

namespace ladle::kvcache {

using KeyHash = BlockKeyHash;

class Store final : public KvStore {
 public:
  static Result<std::unique_ptr<Store>> Open(const std::vector<std::string>& specs, unsigned k, unsigned m,
                                             StoreOptions options);
  ~Store() override;

  void Match(std::span<const BlockKey> keys, MatchDone done) override;
  void Get(std::span<const BlockKey> keys, std::span<const MutableBuffer> buffers, GetDone done) override;
  void Put(std::span<const BlockKey> keys, std::span<const std::span<const uint8_t>> values, TrafficClass cls,
           PutDone done, std::optional<BlockKey> parent_of_first = std::nullopt) override;
  void Delete(std::span<const BlockKey> keys, DeleteDone done) override;
  StoreStat Stat() override;
  Result<uint64_t> RunGcOnce() override;
  Result<FsckReport> Fsck() override;

  // One stripe.
  struct Entry {
    uint64_t value_len = 0;  // the members together
    int64_t write_ms = 0;
    // Tells two writes of one stripe key apart, so chunks of different writes are never mixed,
    // and orders them: (ms << 14 | a per-process counter) << 8 | a per-process salt. A newer
    // write from one process is always larger; across processes, a later millisecond is.
    uint64_t write_id = 0;
    int64_t expire_ms = 0;
    int64_t last_read_ms = 0;
    int64_t flushed_read_ms = 0;  // what the indexes hold; GC skips entries read since
    BlockKey parent;  // of members[0]
    bool has_parent = false;
    uint32_t depth = 0;  // of members[0]
    TrafficClass cls = TrafficClass::kChatbot;
    uint32_t mask = 0;  // domains holding a chunk of this write
    uint64_t seq = 0;   // change_seq_ at the entry's last write or read
    std::vector<StripeMember> members;
    uint32_t live = 0;  // block index entries naming this stripe

    // Adds domain `d`'s chunk, described by its index record, to this entry (the catalog is
    // rebuilt from the indexes at Open and grows when fsck adopts a chunk). A chunk of another
    // write replaces what the entry holds when it is newer and is ignored (false) when older.
    bool MergeChunk(const IndexMeta& m, unsigned d);
  };

 private:
  Store(unsigned k, unsigned m, StoreOptions options);
  struct GetKey;
  struct GetBatch;

  // Where block `key` lives now, or null. Caller holds mu_.
  struct BlockRef {
    BlockKey stripe;
    uint32_t j = 0;
    uint64_t write_id = 0;
  };
  const Entry* FindBlockLocked(const BlockKey& key, uint32_t* j, BlockKey* stripe = nullptr) const;
  // Data chunks width..K-1 of a narrow stripe: all zero, never stored, always "present".
  uint32_t VirtualMask(const Entry& e) const;
  // The domains a stripe writes: its data chunks and the parity chunks.
  uint32_t RealMask(const Entry& e) const;
  // Enough chunks among `have` (plus the virtual ones) to decode.
  bool Decodable(const Entry& e, uint32_t have) const;
  uint64_t NextWriteIdLocked(int64_t write_ms);
  // Rebuilds every data slot (zero-padded to the stripe's slot length) from the valid chunks.
  bool RebuildSlots(const Entry& e, uint32_t valid, const std::vector<std::vector<uint8_t>>& chunks,
                    std::vector<std::vector<uint8_t>>* slots);
  // Every chunk of a stripe from its values (data slots zero-padded), by domain.
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> EncodeStripe(
      const BlockKey& stripe, const Entry& e, const std::vector<std::span<const uint8_t>>& values);

  int64_t NowMs() const;
  int64_t SteadyMs() const;
  bool IsDown(unsigned d) const;
  void MarkDown(unsigned d, const std::string& why);
  void NoteAnswer(unsigned d) { last_answer_[d] = SteadyMs(); }
  // Of the `late` domains, those silent for domain_timeout (hung); the rest are only busy.
  uint32_t Hung(uint32_t late) const;
  uint32_t UpMask() const;
  bool Present(const Entry& e, int64_t now) const;
  IndexMeta MetaOf(const Entry& e) const;
  // Raises last_read of `key` and its recorded ancestors to `now`. Caller holds mu_.
  void TouchLocked(const BlockKey& key, int64_t now);
  void ReleaseLease(const BlockKey& key);
  void ReleaseLeaseLocked(const BlockKey& key);

  // store_read.cc
  void StartRead(std::shared_ptr<GetKey> g);
  void Ask(const std::shared_ptr<GetKey>& g, std::vector<unsigned> domains);
  void OnChunk(const std::shared_ptr<GetKey>& g, unsigned d, Result<std::vector<uint8_t>> r);
  void OnHedge(const std::shared_ptr<GetKey>& g);
  void OnTimeout(const std::shared_ptr<GetKey>& g);
  void FinishRead(const std::shared_ptr<GetKey>& g, Result<size_t> r, bool repair);

  // store_maint.cc
  void MaintenanceMain();
  void ScheduleRepair(const BlockKey& stripe);
  void CollectGarbage();
  enum class RepairResult { kOk, kRepaired, kUnrecoverable, kGone, kSkipped };
  RepairResult RepairKey(const BlockKey& key, uint64_t* chunks_rewritten);
  uint64_t GcPass();
  void FlushTouches();
  // Evicts a stripe unless a member is leased or has children elsewhere or, when `seen_read_ms`
  // is given, it was read after that time (the order GC walks may be older than the catalog).
  // The number of live blocks it removed, or nullopt when it kept the stripe.
  std::optional<uint32_t> EvictIfIdle(const BlockKey& stripe, std::optional<int64_t> seen_read_ms,
                                      uint64_t seen_seq = UINT64_MAX);
  double MaxUsedRatio() const;
  void RemoveEverywhere(const BlockKey& key);

  // Every change to a catalog entry goes through these, so children_, blocks_ and live stay exact.
  void SetEntryLocked(const BlockKey& stripe, const Entry& e);
  void EraseEntryLocked(std::unordered_map<BlockKey, Entry, KeyHash>::iterator it);
  void LinkLocked(const Entry& e, int delta);
  void UnrefLocked(const BlockKey& stripe, const Entry& e);
  void RefLocked(const BlockKey& block, const BlockKey& stripe, uint32_t j, Entry& e);

  const unsigned k_, m_, n_;
  StoreOptions opt_;
  std::vector<std::unique_ptr<Target>> targets_;
  std::unique_ptr<EcCodec> codec_;
  std::unique_ptr<std::atomic<int64_t>[]> down_until_;  // steady ms
  // Steady ms of each domain's last answer: a late operation on a domain that keeps answering
  // others is queued, not hung, and gets more time instead of marking the domain down.
  std::unique_ptr<std::atomic<int64_t>[]> last_answer_;
  uint64_t write_salt_ = 0;  // 8 random bits

  std::mutex mu_;  // catalog_, blocks_, children_, leases_, dirty_, garbage_, last_write_
  std::unordered_map<BlockKey, Entry, KeyHash> catalog_;  // stripe key -> stripe
  std::unordered_map<BlockKey, BlockRef, KeyHash> blocks_;  // block key -> its newest stripe
  std::vector<BlockKey> garbage_;  // stripes whose every block was written again elsewhere
  uint64_t last_write_ = 0;  // the last write id's counter part
  // Block key -> how many stripes name it as their first member's parent (whether or not the
  // parent is stored). GC never evicts a stripe whose live member has children: the order it
  // walks can miss a child written behind its cursor, and an evicted parent strands the child.
  std::unordered_map<BlockKey, uint32_t, KeyHash> children_;
  std::unordered_map<BlockKey, uint32_t, KeyHash> leases_;  // block key -> in-flight Gets and Puts
  std::vector<BlockKey> dirty_;
  uint64_t change_seq_ = 0;  // bumped by every catalog write or touch (GC skips what changed)

  std::atomic<uint64_t> hits_{0}, misses_{0}, puts_{0}, evictions_{0}, repairs_{0}, corrupt_{0};
  std::atomic<bool> maint_healthy_{true};

  std::mutex gc_mu_;  // one GC pass / repair / fsck at a time
  std::mutex maint_mu_;
  std::condition_variable maint_cv_;
  std::deque<BlockKey> repair_queue_;
  std::unordered_set<BlockKey, KeyHash> repair_pending_;
  bool stop_ = false;
  std::thread maint_;
  std::unique_ptr<TimerThread> timer_;
};

}  // namespace ladle::kvcache
