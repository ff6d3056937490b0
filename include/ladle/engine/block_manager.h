// The KV block pool (issue: `ladle serve`, "KV memory"; recipe: "KVCache Storage", "Hit
// policy"). Owns WHICH global-KV blocks (128 tokens each) and SWA ring slots a sequence
// uses; the model owns their contents. Blocks are reference-counted so that prefix hits
// and n > 1 samples share them. A full block is named by a hash chain over its contents
// (parent hash, its tokens, extra keys), so a later prompt with the same prefix finds it. The
// name is the persistent store's 128-bit chain key (kvcache::ChainKey), so a pool hit and a
// store hit name the same block, across processes and restarts.
//
// Single-threaded: only the engine's scheduler thread calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "ladle/engine/engine.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::engine {

// A block's name in the pool is its key in the persistent store (the same 128-bit chain key).
// The store is not reached from here: the engine matches, fetches and installs store blocks
// asynchronously (engine_fetch.cc), so the pool never blocks on storage I/O.
using BlockHash = kvcache::BlockKey;

// kvcache::ChainKey(parent, tokens, extras): XXH3-128 with a fixed seed over the parent key, the
// block's tokens and the tagged extras (model fingerprint, cache salt, tenant). `parent` is null
// for the first block. Never all-zero (that means "not cached" in the pool).
BlockHash HashBlock(const BlockHash* parent, std::span<const TokenId> tokens, std::span<const kvcache::ExtraKey> extras);

class BlockManager {
 public:
  BlockManager(int num_blocks, int num_slots, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(refcount_.size()); }
  // Blocks with a reference (in some running sequence's table).
  int used_blocks() const { return used_; }
  // Blocks an Allocate() could return now: free ones plus cached ones nobody references.
  int available_blocks() const { return num_blocks() - used_; }
  int free_slots() const { return static_cast<int>(free_slots_.size()); }

  // A block with refcount 1, or -1 when every block is referenced. Prefers never-cached
  // blocks; otherwise evicts the least recently released cached block.
  int32_t Allocate();
  void Ref(int32_t block);
  // Drops one reference; at zero a cached block stays findable until evicted.
  void Release(int32_t block);
  void ReleaseAll(std::vector<int32_t>* blocks);
  int refcount(int32_t block) const { return refcount_[block]; }

  // Longest run of cached blocks whose chain hashes are `hashes[0..]`, each returned with a
  // reference taken.
  std::vector<int32_t> Match(std::span<const BlockHash> hashes);
  // Names a full, computed block so later prompts can share it. A hash already cached keeps
  // its first block (the duplicate stays private).
  // Returns whether the block was named (false for a duplicate).
  bool Register(int32_t block, const BlockHash& hash);
  bool IsCached(const BlockHash& hash) const { return by_hash_.count(hash) != 0; }

  // Optional: told the key of each named block Allocate evicts (before it loses its name).
  std::function<void(const BlockHash&)> on_evict;

  int32_t AllocateSlot();  // -1 when none
  void FreeSlot(int32_t slot);

 private:
  void Unname(int32_t block);

  int block_size_;
  std::vector<int> refcount_;
  std::vector<BlockHash> hash_of_;     // all-zero = not cached
  std::vector<int32_t> free_;          // never cached, refcount 0
  std::list<int32_t> evictable_;       // cached, refcount 0, least recent first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<bool> in_lru_;
  std::unordered_map<BlockHash, int32_t, kvcache::BlockKeyHash> by_hash_;
  std::vector<int32_t> free_slots_;
  std::vector<bool> slot_used_;  // handed out by AllocateSlot and not yet freed
  int used_ = 0;
};

}  // namespace ladle::engine
