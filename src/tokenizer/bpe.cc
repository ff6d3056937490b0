#include "bpe.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "ladle/core/thread_pool.h"

namespace ladle::tokenizer {

// ---- BytesMap ----------------------------------------------------------------------------

void BytesMap::Reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
  arena_.clear();
}

bool BytesMap::Insert(std::string_view key, TokenId id) {
  if (slots_.empty() || (size_ + 1) * 2 > slots_.size()) Grow();
  const uint64_t h = XXH3_64bits(key.data(), key.size());
  const uint32_t tag = static_cast<uint32_t>(h >> 32) | 1u;
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.tag == 0) {
      s = Slot{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id, tag};
      arena_.append(key);
      ++size_;
      return true;
    }
    if (s.tag == tag && s.len == key.size() && arena_.compare(s.off, s.len, key) == 0) return false;
  }
}

void BytesMap::Grow() {
  std::vector<Slot> old = std::move(slots_);
  std::string old_arena = std::move(arena_);
  Reserve(std::max<size_t>(size_ * 2, 1024));
  for (const Slot& s : old) {
    if (s.tag) Insert(std::string_view(old_arena).substr(s.off, s.len), s.id);
  }
}

std::optional<TokenId> BytesMap::Find(std::string_view key) const {
  return Find(key, XXH3_64bits(key.data(), key.size()));
}

std::optional<TokenId> BytesMap::Find(std::string_view key, uint64_t h) const {
  if (slots_.empty()) return std::nullopt;
  const uint32_t tag = static_cast<uint32_t>(h >> 32) | 1u;
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.tag == 0) return std::nullopt;
    if (s.tag == tag && s.len == key.size() &&
        std::memcmp(arena_.data() + s.off, key.data(), key.size()) == 0) {
      return s.id;
    }
  }
}

// ---- BpeModel ----------------------------------------------------------------------------

namespace {
inline uint64_t PairKey(TokenId a, TokenId b) { return (uint64_t(a) << 32) | b; }
std::atomic<uint32_t> g_next_instance{1};
inline size_t PairHash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20); }
}  // namespace

inline BpeModel::PairSlot BpeModel::LookupPair(TokenId a, TokenId b) const {
  const uint64_t k = PairKey(a, b);
  for (size_t i = PairHash(k) & pair_mask_;; i = (i + 1) & pair_mask_) {
    const PairSlot& s = pairs_[i];
    if (s.key == k) return s;
    if (s.key == UINT64_MAX) return PairSlot{};
  }
}

Result<BpeModel> BpeModel::Build(const std::vector<std::pair<std::string, TokenId>>& vocab,
                                 const std::vector<std::pair<TokenId, TokenId>>& merges) {
  BpeModel m;
  m.instance_ = g_next_instance.fetch_add(1);
  m.vocab_.Reserve(vocab.size());
  TokenId max_id = 0;
  for (const auto& [bytes, id] : vocab) {
    if (!m.vocab_.Insert(bytes, id)) {
      return InvalidArgument(fmt::format("model.vocab has two entries with the same bytes (id {})", id));
    }
    max_id = std::max(max_id, id);
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    auto id = m.vocab_.Find(std::string_view(&c, 1));
    if (!id) return Unsupported(fmt::format("model.vocab lacks the byte 0x{:02x}: not byte-level BPE", b));
    m.byte_ids_[b] = *id;
  }
  // Merged ids come from the vocabulary: the bytes of left + right.
  std::vector<std::string_view> bytes_of(max_id + 1);
  for (const auto& [bytes, id] : vocab) bytes_of[id] = bytes;
  size_t cap = 16;
  while (cap < merges.size() * 2 + 2) cap <<= 1;
  m.pairs_.assign(cap, PairSlot{});
  m.pair_mask_ = cap - 1;
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    auto [a, b] = merges[rank];
    joined.assign(bytes_of[a]).append(bytes_of[b]);
    auto merged = m.vocab_.Find(joined);
    if (!merged) {
      return InvalidArgument(fmt::format("model.merges[{}] produces a string not in model.vocab", rank));
    }
    const uint64_t k = PairKey(a, b);
    for (size_t i = PairHash(k) & m.pair_mask_;; i = (i + 1) & m.pair_mask_) {
      PairSlot& s = m.pairs_[i];
      if (s.key == UINT64_MAX) {
        s = PairSlot{k, static_cast<uint32_t>(rank), *merged};
        break;
      }
      if (s.key == k) break;  // a repeated merge keeps its first (lowest) rank, as HF does
    }
  }
  // Whole-word shortcut: a pre-token that is itself a vocabulary entry may be emitted as that
  // id only if the merge loop would produce it. Checked for every entry, once, in parallel.
  m.whole_ok_.assign(max_id + 1, 0);
  std::vector<std::pair<std::string_view, TokenId>> entries;
  entries.reserve(vocab.size());
  for (const auto& [bytes, id] : vocab) entries.emplace_back(bytes, id);
  const size_t kChunk = 4096;
  const size_t chunks = (entries.size() + kChunk - 1) / kChunk;
  std::vector<size_t> bad(chunks, 0);
  SharedPool().ParallelFor(chunks, [&](size_t c) {
    std::vector<TokenId> ids;
    for (size_t i = c * kChunk; i < std::min(entries.size(), (c + 1) * kChunk); ++i) {
      ids.clear();
      const auto [bytes, id] = entries[i];
      m.MergeWord(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &ids);
      if (ids.size() == 1 && ids[0] == id) {
        m.whole_ok_[id] = 1;
      } else {
        ++bad[c];
      }
    }
  });
  for (size_t b : bad) m.unreachable_ += b;
  return m;
}

size_t BpeModel::MemoryBytes() const {
  return vocab_.MemoryBytes() + pairs_.capacity() * sizeof(PairSlot) + whole_ok_.capacity();
}

namespace {

// Per-thread, direct-mapped cache of recent words → ids. Text is Zipfian: a few thousand
// words cover most of it, and this small table stays in L2 where the 4 MB vocabulary table
// and the merge loop do not.
struct WordCache {
  static constexpr size_t kEntries = 4096;
  static constexpr size_t kMaxKey = 40;
  static constexpr size_t kMaxIds = 8;
  struct Entry {
    uint64_t hash;
    uint32_t instance;
    uint8_t len;
    uint8_t nids;
    char key[kMaxKey];
    TokenId ids[kMaxIds];
  };
  Entry entries[kEntries] = {};
};


}  // namespace

void BpeModel::EncodeWord(const unsigned char* p, size_t n, std::vector<TokenId>* out) const {
  if (n == 1) {
    out->push_back(byte_ids_[*p]);
    return;
  }
  const std::string_view key(reinterpret_cast<const char*>(p), n);
  const uint64_t h = XXH3_64bits(p, n);
  thread_local WordCache cache;
  WordCache::Entry* e = nullptr;
  if (n <= WordCache::kMaxKey) {
    e = &cache.entries[(h ^ (h >> 29)) & (WordCache::kEntries - 1)];
    if (e->hash == h && e->instance == instance_ && e->len == n && std::memcmp(e->key, p, n) == 0) {
      out->insert(out->end(), e->ids, e->ids + e->nids);
      return;
    }
  }
  const size_t before = out->size();
  auto id = vocab_.Find(key, h);
  if (id && whole_ok_[*id]) {
    out->push_back(*id);
  } else {
    MergeWord(p, n, out);
  }
  const size_t produced = out->size() - before;
  if (e && produced <= WordCache::kMaxIds) {
    e->hash = h;
    e->instance = instance_;
    e->len = static_cast<uint8_t>(n);
    e->nids = static_cast<uint8_t>(produced);
    std::memcpy(e->key, p, n);
    std::memcpy(e->ids, out->data() + before, produced * sizeof(TokenId));
  }
}

void BpeModel::MergeWord(const unsigned char* p, size_t n, std::vector<TokenId>* out,
                         bool force_heap) const {
  if (n <= 16 && !force_heap) {
    MergeSmall(p, n, out);
  } else {
    MergeHeap(p, n, out);
  }
}

// Quadratic in the worst case but with no allocation: right for the short words that miss
// the whole-word shortcut.
void BpeModel::MergeSmall(const unsigned char* p, size_t n, std::vector<TokenId>* out) const {
  TokenId ids[48];
  uint32_t rank[48];
  TokenId merged[48];
  for (size_t i = 0; i < n; ++i) ids[i] = byte_ids_[p[i]];
  auto fill = [&](size_t i) {
    PairSlot s = LookupPair(ids[i], ids[i + 1]);
    rank[i] = s.rank;
    merged[i] = s.merged;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  size_t len = n;
  while (len > 1) {
    size_t best = 0;
    uint32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < len; ++i) {
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    ids[best] = merged[best];
    // Remove symbol best+1 and the pair entry at best+1 (the pair at best is recomputed).
    for (size_t i = best + 1; i + 1 < len; ++i) ids[i] = ids[i + 1];
    for (size_t i = best + 1; i + 2 < len; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --len;
    if (best + 1 < len) fill(best);
    if (best > 0) fill(best - 1);
  }
  out->insert(out->end(), ids, ids + len);
}

// Linked symbols plus a min-heap of candidate merges ordered by (rank, position); stale
// entries are skipped when popped. This is the same order as the quadratic loop. Buffers are
// per thread so long words (CJK runs, long identifiers) allocate nothing.
void BpeModel::MergeHeap(const unsigned char* p, size_t n, std::vector<TokenId>* out) const {
  struct Sym {
    TokenId id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Cand {
    uint32_t rank;
    uint32_t pos;
    TokenId merged;
  };
  // Min-heap order: smaller rank first, then the leftmost position.
  auto later = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  thread_local std::vector<Sym> sym;
  thread_local std::vector<Cand> heap;
  sym.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    sym[i] = Sym{byte_ids_[p[i]], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, true};
  }
  auto push = [&](int32_t i) {
    if (i < 0 || sym[i].next < 0) return;
    PairSlot s = LookupPair(sym[i].id, sym[sym[i].next].id);
    if (s.rank == kNoRank) return;
    heap.push_back(Cand{s.rank, static_cast<uint32_t>(i), s.merged});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 0; i + 1 < n; ++i) {
    PairSlot s = LookupPair(sym[i].id, sym[i + 1].id);
    if (s.rank != kNoRank) heap.push_back(Cand{s.rank, static_cast<uint32_t>(i), s.merged});
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    Sym& left = sym[c.pos];
    if (!left.alive || left.next < 0) continue;
    Sym& right = sym[left.next];
    PairSlot s = LookupPair(left.id, right.id);
    if (s.rank != c.rank || s.merged != c.merged) continue;  // stale
    left.id = c.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = static_cast<int32_t>(c.pos);
    push(left.prev);
    push(static_cast<int32_t>(c.pos));
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace ladle::tokenizer
