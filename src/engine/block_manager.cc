#include "ladle/engine/block_manager.h"

#include "ladle/core/logging.h"

namespace ladle::engine {

namespace {
constexpr BlockHash kUnnamed{};
bool Named(const BlockHash& h) { return !(h == kUnnamed); }
}  // namespace

BlockHash HashBlock(const BlockHash* parent, std::span<const TokenId> tokens, std::span<const kvcache::ExtraKey> extras) {
  // The parent makes the key name the whole prefix, not just this block, so equal blocks after
  // different prefixes differ.
  BlockHash h = kvcache::ChainKey(parent, tokens, extras);
  return Named(h) ? h : BlockHash{1, 0};  // all-zero means "not cached" in the pool
}

// Invariants (checked with LADLE_CHECK where they can break):
//   * every block is in exactly one of: free_ (refcount 0, unnamed), evictable_ (refcount 0,
//     named), or in use (refcount > 0); so free_ + evictable_ + used_ == num_blocks;
//   * in_lru_[b] <=> b is in evictable_; a named block and its hash map to each other;
//   * a slot is either in free_slots_ or handed out, never both (slot_used_).
BlockManager::BlockManager(int num_blocks, int num_slots, int block_size)
    : block_size_(block_size),
      refcount_(num_blocks, 0),
      hash_of_(num_blocks, kUnnamed),
      lru_pos_(num_blocks),
      in_lru_(num_blocks, false),
      slot_used_(num_slots, false) {
  LADLE_CHECK(num_blocks >= 0 && num_slots >= 0 && block_size > 0);
  // Hand out low ids first (pop_back): easier to read in traces.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
  for (int32_t s = num_slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

void BlockManager::Unname(int32_t block) {
  if (Named(hash_of_[block])) {
    by_hash_.erase(hash_of_[block]);
    hash_of_[block] = kUnnamed;
  }
}

int32_t BlockManager::Allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
    LADLE_CHECK(refcount_[b] == 0 && !Named(hash_of_[b]) && !in_lru_[b]);
  } else if (!evictable_.empty()) {
    b = evictable_.front();
    evictable_.pop_front();
    LADLE_CHECK(refcount_[b] == 0 && in_lru_[b] && Named(hash_of_[b]));
    in_lru_[b] = false;
    if (on_evict) on_evict(hash_of_[b]);
    Unname(b);
  } else {
    return -1;
  }
  refcount_[b] = 1;
  ++used_;
  LADLE_CHECK(static_cast<size_t>(used_) + free_.size() + evictable_.size() == refcount_.size());
  return b;
}

void BlockManager::Ref(int32_t block) {
  LADLE_CHECK(block >= 0 && static_cast<size_t>(block) < refcount_.size());
  if (refcount_[block] == 0) {
    // Revived from the evictable list by a prefix hit. A free (unnamed) block has no content
    // anyone could have found, so a reference to it is a bug in the caller.
    LADLE_CHECK(in_lru_[block]);
    evictable_.erase(lru_pos_[block]);
    in_lru_[block] = false;
    ++used_;
  }
  ++refcount_[block];
}

void BlockManager::Release(int32_t block) {
  LADLE_CHECK(block >= 0 && static_cast<size_t>(block) < refcount_.size());
  LADLE_CHECK(refcount_[block] > 0);
  if (--refcount_[block] > 0) return;
  --used_;
  LADLE_CHECK(used_ >= 0 && !in_lru_[block]);
  if (Named(hash_of_[block])) {
    lru_pos_[block] = evictable_.insert(evictable_.end(), block);
    in_lru_[block] = true;
  } else {
    free_.push_back(block);
  }
}

void BlockManager::ReleaseAll(std::vector<int32_t>* blocks) {
  // Release in reverse so a sequence's tail blocks are evicted before its head: a later
  // prompt can still hit the shorter prefix.
  for (auto it = blocks->rbegin(); it != blocks->rend(); ++it) Release(*it);
  blocks->clear();
}

std::vector<int32_t> BlockManager::Match(std::span<const BlockHash> hashes) {
  std::vector<int32_t> out;
  for (const BlockHash& h : hashes) {
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    Ref(it->second);
    out.push_back(it->second);
  }
  return out;
}

bool BlockManager::Register(int32_t block, const BlockHash& hash) {
  // Only a block someone holds can be named: naming a free block would make garbage findable.
  LADLE_CHECK(block >= 0 && static_cast<size_t>(block) < refcount_.size() && refcount_[block] > 0 && Named(hash));
  if (Named(hash_of_[block]) || by_hash_.count(hash)) return false;
  hash_of_[block] = hash;
  by_hash_.emplace(hash, block);
  return true;
}

int32_t BlockManager::AllocateSlot() {
  if (free_slots_.empty()) return -1;
  int32_t s = free_slots_.back();
  free_slots_.pop_back();
  LADLE_CHECK(!slot_used_[s]);
  slot_used_[s] = true;
  return s;
}

void BlockManager::FreeSlot(int32_t slot) {
  LADLE_CHECK(slot >= 0 && static_cast<size_t>(slot) < slot_used_.size() && slot_used_[slot]);  // no double free
  slot_used_[slot] = false;
  free_slots_.push_back(slot);
}

}  // namespace ladle::engine
