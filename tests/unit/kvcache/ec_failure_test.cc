// ec:10+2 failure domains: any 2 domains deleted / truncated / bit-flipped still read back
// exactly; a third lost domain gives clean misses; hung domains are hedged around; a FIFO in
// place of a chunk is a bad chunk, not a hang; fsck rewrites what was lost, and so does the
// background repair that a read of a damaged chunk queues. The blocks are put as one chain, so
// they fill a whole stripe (10 blocks) and a narrow tail stripe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fault_target.h"
#include "object_format.h"
#include "test_util.h"

namespace kvtest {
namespace {

constexpr unsigned kK = 10, kM = 2;

// `n` blocks of mixed lengths (a stripe pads them to its longest) as one chain.
std::vector<BlockKey> PutBlocks(KvStore& s, size_t n) {
  std::vector<BlockKey> keys;
  std::vector<std::vector<uint8_t>> vals;
  for (size_t i = 0; i < n; ++i) {
    BlockKey key = testing_values::KeyFor(5000 + i);
    keys.push_back(key);
    size_t len = (i * 7919 + 8) % (130 * 1024) + 8;
    if (i == 0) len = 8;
    vals.push_back(testing_values::ValueFor(key, len));
  }
  std::vector<std::span<const uint8_t>> spans(vals.begin(), vals.end());
  for (const Status& st : s.PutSync(keys, spans, TrafficClass::kChatbot)) EXPECT_TRUE(st.ok()) << st.ToString();
  return keys;
}

std::vector<std::string> ChunkFiles(const TempDir& t, unsigned d) { return ChunkFilesUnder(t.Sub("d" + std::to_string(d))); }

// Every key reads back exactly what was written.
void ExpectExact(KvStore& s, const std::vector<BlockKey>& keys, const std::string& what) {
  std::vector<std::vector<uint8_t>> outs(keys.size(), std::vector<uint8_t>(140 * 1024));
  std::vector<MutableBuffer> bufs;
  for (auto& o : outs) bufs.push_back({o.data(), o.size()});
  auto rs = s.GetSync(keys, bufs);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(rs[i].ok()) << what << " key " << i << ": " << rs[i].status().ToString();
    EXPECT_TRUE(testing_values::IsValueOf(keys[i], outs[i].data(), *rs[i])) << what << " key " << i;
  }
}

enum class Damage { kDelete, kTruncate, kFlip };

void DamageDomain(const TempDir& t, unsigned d, Damage how) {
  std::vector<std::string> files = ChunkFiles(t, d);
  ASSERT_FALSE(files.empty()) << "domain " << d << " holds no chunk";
  for (const std::string& p : files) {
    switch (how) {
      case Damage::kDelete:
        std::filesystem::remove(p);
        break;
      case Damage::kTruncate:
        std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
        break;
      case Damage::kFlip: {
        std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(static_cast<std::streamoff>(std::filesystem::file_size(p) - 5));
        char c;
        f.get(c);
        f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(p) - 5));
        f.put(static_cast<char>(c ^ 0x10));
        break;
      }
    }
  }
}

// Every domain holds exactly `per_domain[d]` chunk files and each one decodes.
bool AllChunksValid(const TempDir& t, const std::vector<size_t>& per_domain) {
  for (unsigned d = 0; d < kK + kM; ++d) {
    std::vector<std::string> files = ChunkFiles(t, d);
    if (files.size() != per_domain[d]) return false;
    for (const std::string& p : files) {
      std::ifstream f(p, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (!DecodeChunk(bytes).ok()) return false;
    }
  }
  return true;
}

// 12 blocks in one chain: a stripe of 10 (every domain) and one of 2 (domains 0, 1, 10, 11).
std::vector<size_t> TwelveBlockLayout() { return {2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2}; }

TEST(KvEcFailure, AnyTwoDomainsDamagedReadExactThenFsckRepairs) {
  TempDir t;
  StoreOptions o;
  o.gc_in_process = false;
  auto store = KvStore::Open(EcUri(t, kK, kM), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto keys = PutBlocks(s, 12);
  ASSERT_TRUE(AllChunksValid(t, TwelveBlockLayout()));
  struct Round {
    unsigned a, b;
    Damage da, db;
  } rounds[] = {{0, 5, Damage::kDelete, Damage::kDelete},   {2, 11, Damage::kTruncate, Damage::kTruncate},
                {10, 11, Damage::kFlip, Damage::kFlip},     {8, 9, Damage::kDelete, Damage::kFlip},
                {0, 1, Damage::kFlip, Damage::kTruncate},   {4, 10, Damage::kTruncate, Damage::kDelete}};
  for (const Round& r : rounds) {
    std::string what = "domains " + std::to_string(r.a) + "," + std::to_string(r.b);
    DamageDomain(t, r.a, r.da);
    DamageDomain(t, r.b, r.db);
    ExpectExact(s, keys, what);
    auto rep = s.Fsck();
    ASSERT_TRUE(rep.ok());
    EXPECT_EQ(rep->objects, 2u) << what;  // stripes
    EXPECT_EQ(rep->unrecoverable, 0u) << what;
    EXPECT_TRUE(AllChunksValid(t, TwelveBlockLayout())) << what;
  }
  EXPECT_GT(s.Stat().repairs, 0u);
  EXPECT_GT(s.Stat().corrupt, 0u);
}

TEST(KvEcFailure, ThreeDomainsLostAreCleanMisses) {
  TempDir t;
  StoreOptions o;
  o.gc_in_process = false;
  auto store = KvStore::Open(EcUri(t, kK, kM), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto keys = PutBlocks(s, 10);
  DamageDomain(t, 1, Damage::kDelete);
  DamageDomain(t, 6, Damage::kFlip);
  DamageDomain(t, 11, Damage::kTruncate);
  std::vector<std::vector<uint8_t>> outs(keys.size(), std::vector<uint8_t>(140 * 1024));
  std::vector<MutableBuffer> bufs;
  for (auto& o2 : outs) bufs.push_back({o2.data(), o2.size()});
  auto rs = s.GetSync(keys, bufs);
  // Blocks 1 and 6 cannot be rebuilt (3 of the stripe's 12 chunks are gone): clean misses. A
  // block whose own chunk survives is one read of that chunk and comes back exact.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 1 || i == 6) {
      EXPECT_EQ(rs[i].status().code(), StatusCode::kNotFound) << i << ": " << rs[i].status().ToString();
    } else if (rs[i].ok()) {
      EXPECT_TRUE(testing_values::IsValueOf(keys[i], outs[i].data(), *rs[i])) << i;
    } else {
      EXPECT_EQ(rs[i].status().code(), StatusCode::kNotFound) << i;
    }
  }
  // The misses schedule a repair, which finds the stripe unrecoverable and drops it whole (its
  // parity can no longer be made): Match follows, and every later read is a clean miss.
  EXPECT_TRUE(WaitFor([&] { return *s.MatchSync(keys) == 0; }));
  EXPECT_EQ(*s.MatchSync(keys), 0u);
  for (auto& r : s.GetSync(keys, bufs)) EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
}

TEST(KvEcFailure, HungDomainsAreHedgedAround) {
  TempDir t;
  StoreOptions o;
  o.hedge_after = std::chrono::milliseconds(20);
  o.domain_timeout = std::chrono::milliseconds(3000);
  o.gc_in_process = false;
  std::string tag = "hang-" + std::to_string(::getpid());
  auto uri = EcUri(t, kK, kM, [&](unsigned d, const std::string& dir) {
    return (d == 3 || d == 7) ? "fault:" + tag + std::to_string(d) + ":" + dir : dir;
  });
  auto store = KvStore::Open(uri, o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto keys = PutBlocks(s, 8);
  auto c3 = FaultControl::Named(tag + "3"), c7 = FaultControl::Named(tag + "7");
  c3->dead = true;
  c7->dead = true;
  auto start = std::chrono::steady_clock::now();
  ExpectExact(s, keys, "two domains hung");
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  // Well inside domain_timeout: the 12th domain was asked after hedge_after, not after a timeout.
  EXPECT_LT(ms, 1500) << "reads waited on the hung domains";
  EXPECT_GT(c3->reads.load(), 0u);
  c3->Reset();
  c7->Reset();
}

TEST(KvEcFailure, FifoInPlaceOfAChunkIsABadChunk) {
  TempDir t;
  StoreOptions o;
  o.gc_in_process = false;
  auto store = KvStore::Open(EcUri(t, kK, kM), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto keys = PutBlocks(s, 10);
  for (const std::string& p : ChunkFiles(t, 4)) {
    std::filesystem::remove(p);
    ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0);
  }
  auto start = std::chrono::steady_clock::now();
  ExpectExact(s, keys, "fifo in domain 4");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400));
}

TEST(KvEcFailure, FailingDomainIsMarkedDownAndSkipped) {
  TempDir t;
  StoreOptions o;
  o.gc_in_process = false;
  std::string name = "eio-" + std::to_string(::getpid());
  auto uri = EcUri(t, kK, kM, [&](unsigned d, const std::string& dir) { return d == 2 ? "fault:" + name + ":" + dir : dir; });
  auto store = KvStore::Open(uri, o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto keys = PutBlocks(s, 4);
  auto c = FaultControl::Named(name);
  c->eio = true;
  ExpectExact(s, keys, "EIO on domain 2");
  EXPECT_TRUE(s.Stat().targets[2].down);
  uint64_t reads = c->reads;
  ExpectExact(s, keys, "domain 2 down");
  EXPECT_EQ(c->reads.load(), reads) << "a down domain is skipped";
  c->Reset();
}

std::vector<uint8_t> FileBytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// docs/kvcache.md: "A read that saw a missing/bad chunk queues a background repair of the stripe
// (re-read, decode, re-encode, rewrite the missing chunks)". One stripe of 10 blocks; the chunk of
// block 3 bit-flipped, then the chunk of block 7 deleted: each block reads back exact (rebuilt),
// and with no fsck the chunk file becomes valid again, byte for byte what the Put wrote, and
// Stat().repairs counts the one rewritten chunk.
TEST(KvEcFailure, ReadOfADamagedChunkRepairsItInTheBackground) {
  TempDir t;
  StoreOptions o;
  o.gc_in_process = false;
  auto store = KvStore::Open(EcUri(t, kK, kM), o);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  auto keys = PutBlocks(s, 10);
  const std::vector<size_t> one_each(kK + kM, 1);
  ASSERT_TRUE(AllChunksValid(t, one_each));
  struct Case {
    unsigned d;
    Damage how;
  } cases[] = {{3, Damage::kFlip}, {7, Damage::kDelete}};
  for (const Case& c : cases) {
    std::string what = "domain " + std::to_string(c.d) + (c.how == Damage::kFlip ? " flipped" : " deleted");
    std::vector<std::string> files = ChunkFiles(t, c.d);
    ASSERT_EQ(files.size(), 1u) << what;
    const std::string path = files[0];
    const std::vector<uint8_t> original = FileBytes(path);
    StoreStat before = s.Stat();
    DamageDomain(t, c.d, c.how);
    ASSERT_NE(FileBytes(path), original) << what;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_NE(FileBytes(path), original) << what << ": repaired before any read saw the damage";
    // Block d's own chunk is the damaged one: the read rebuilds it from the rest of the stripe.
    std::vector<uint8_t> out;
    auto r = GetOne(s, keys[c.d], &out, 140 * 1024);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().ToString();
    EXPECT_TRUE(testing_values::IsValueOf(keys[c.d], out.data(), out.size())) << what;
    // No fsck: the maintenance thread rewrites the chunk (temp file + rename) and counts it.
    auto start = std::chrono::steady_clock::now();
    bool valid = WaitFor([&] { return std::filesystem::exists(path) && DecodeChunk(FileBytes(path)).ok(); },
                         std::chrono::milliseconds(2000));
    EXPECT_TRUE(valid) << what << ": the damaged chunk was not rewritten within 2 s";
    EXPECT_TRUE(WaitFor([&] { return s.Stat().repairs > before.repairs; }, std::chrono::milliseconds(2000))) << what;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(FileBytes(path), original) << what << ": the rewritten chunk differs from the one the Put wrote";
    StoreStat after = s.Stat();
    EXPECT_EQ(after.repairs - before.repairs, 1u) << what;
    if (c.how == Damage::kFlip) {
      EXPECT_GT(after.corrupt, before.corrupt) << what;
    }
    EXPECT_EQ(after.misses, before.misses) << what;
    EXPECT_FALSE(after.targets[c.d].down) << what << ": a bad chunk is not a failing domain";
    std::printf("%s: repaired %lld ms after the read returned\n", what.c_str(), static_cast<long long>(ms));
  }
  EXPECT_TRUE(AllChunksValid(t, one_each));
  ExpectExact(s, keys, "after the background repairs");
  EXPECT_EQ(*s.MatchSync(keys), keys.size());
}

}  // namespace
}  // namespace kvtest
