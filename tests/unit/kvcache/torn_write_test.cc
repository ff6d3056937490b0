// Torn writes: a child process putting blocks is SIGKILLed at random moments, 30 times on fs,
// 12 on ec:10+2. After that every block reads back whole and correct or as a miss, every file
// under a chunk's name decodes valid, and fsck clears the dead writers' temp files: on fs it
// finds nothing unrecoverable, on ec only stripes whose Put was killed short of chunks.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "object_format.h"
#include "test_util.h"

extern char** environ;

namespace kvtest {
namespace {

// Runs the writer child on `where` (a directory: fs, or an ec: URI) `iterations` times, each
// SIGKILLed at a random moment after it opened the store.
void KillWritersAtRandomPoints(const std::string& where, int iterations, std::mt19937& rng) {
  for (int it = 0; it < iterations; ++it) {
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::string arg = where;
    std::string seed = std::to_string(it % 5);
    char* argv[] = {const_cast<char*>(LADLE_KVCACHE_TORN_WRITER), arg.data(), seed.data(), nullptr};
    pid_t pid;
    ASSERT_EQ(posix_spawn(&pid, LADLE_KVCACHE_TORN_WRITER, &fa, nullptr, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    // Wait (with a deadline) for the child to have opened the store, then let it write a while.
    char buf[16];
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(out[0], &fds);
    timeval tv{20, 0};
    bool ready = ::select(out[0] + 1, &fds, nullptr, nullptr, &tv) > 0 && ::read(out[0], buf, sizeof buf) > 0;
    if (ready) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ::close(out[0]);
    ASSERT_TRUE(ready) << "writer child never got ready";
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited by itself";
  }
}

TEST(KvTornWrites, KillNineAtRandomPoints) {
  TempDir t;
  std::string dir = t.Sub("fs");
  std::mt19937 rng(12345);
  const int kIterations = 30;
  KillWritersAtRandomPoints(dir, kIterations, rng);
  if (HasFatalFailure()) return;
  // Every file under a chunk's name is a whole, valid chunk of the value its block's key implies.
  size_t files = 0, temps = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().string().find("/.index") != std::string::npos) continue;
    std::string name = e.path().filename().string();
    if (name.rfind(".tmp.", 0) == 0) {
      ++temps;
      continue;
    }
    auto key = BlockKey::FromHex(name);
    ASSERT_TRUE(key.ok()) << name;
    std::ifstream f(e.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto dec = DecodeChunk(bytes);
    ASSERT_TRUE(dec.ok()) << name << ": " << dec.status().ToString();
    EXPECT_EQ(dec->header.key, *key) << name;  // a file is named by its stripe
    ASSERT_EQ(dec->header.members.size(), 1u) << name;  // fs: one block per stripe
    const BlockKey& block = dec->header.members[0].key;
    EXPECT_TRUE(testing_values::IsValueOf(block, dec->payload.data(), dec->payload.size())) << name;
    ++files;
  }
  EXPECT_GT(files, 0u);
  // No garbage collection before the fsck below counts the stripes: superseded writes are garbage,
  // and a GC pass gc_interval (1 s) after the open, under load, removed some (objects < files).
  StoreOptions o;
  o.gc_interval = std::chrono::hours(1);
  auto store = KvStore::Open("fs:" + dir, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  size_t hits = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    for (uint64_t i = 0; i < 64; ++i) {
      BlockKey key = testing_values::KeyFor(seed * 1000003 + i);
      std::vector<uint8_t> got;
      auto r = GetOne(**store, key, &got, 256 * 1024);
      if (r.ok()) {
        ++hits;
        EXPECT_TRUE(testing_values::IsValueOf(key, got.data(), got.size()));
      } else {
        EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
      }
    }
  }
  EXPECT_GT(hits, 0u);
  auto rep = (*store)->Fsck();
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->unrecoverable, 0u);
  EXPECT_GE(rep->objects, files);  // files the index missed (killed before its update) are adopted
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    EXPECT_NE(e.path().filename().string().rfind(".tmp.", 0), 0u) << "temp file left: " << e.path();
  }
  std::printf("torn writes: %zu files, %zu temp files of killed writers, %zu hits\n", files, temps, hits);
}

// What the chunk files of every domain say, read before any store opens them.
struct EcDisk {
  struct Stripe {
    uint64_t write_id = 0;
    std::vector<BlockKey> blocks;
    uint32_t present = 0;  // domains holding a valid chunk of it
    bool Decodable() const { return std::popcount(present) >= static_cast<int>(blocks.size()); }  // see below
  };
  std::map<std::string, Stripe> stripes;  // by file name (the stripe key)
  size_t files = 0, temps = 0;
};

// The domains a stripe writes: its data chunks and the parity chunks.
uint32_t RealMask(const EcDisk::Stripe& st, unsigned k, unsigned m) {
  return ((1u << st.blocks.size()) - 1) | (((1u << m) - 1) << k);
}

// Every file under a chunk's name, in every domain, is a whole valid chunk of the stripe it is
// named for, on its own domain; a data chunk holds exactly its block's value. (A stripe of width
// w has data chunks 0..w-1 and the M parity chunks; the K-w others are zeros, so it decodes from
// any w valid chunks: `Decodable`.)
EcDisk ScanEcDomains(const TempDir& t, unsigned k, unsigned m) {
  EcDisk disk;
  for (unsigned d = 0; d < k + m; ++d) {
    for (const std::string& p : ChunkFilesUnder(t.Sub("d" + std::to_string(d)))) {
      std::string name = std::filesystem::path(p).filename().string();
      if (name.rfind(".tmp.", 0) == 0) {
        ++disk.temps;
        continue;
      }
      auto key = BlockKey::FromHex(name);
      EXPECT_TRUE(key.ok()) << p;
      if (!key.ok()) continue;
      std::ifstream f(p, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      auto dec = DecodeChunk(bytes);
      EXPECT_TRUE(dec.ok()) << p << ": " << dec.status().ToString();
      if (!dec.ok()) continue;
      const ChunkHeader& h = dec->header;
      EXPECT_EQ(h.key, *key) << p;
      EXPECT_EQ(h.chunk_idx, d) << p;
      EXPECT_EQ(h.k, k) << p;
      EXPECT_EQ(h.m, m) << p;
      if (d < h.members.size()) {
        EXPECT_TRUE(testing_values::IsValueOf(h.members[d].key, dec->payload.data(), dec->payload.size())) << p;
      }
      EcDisk::Stripe& st = disk.stripes[name];
      st.write_id = h.write_id;
      st.blocks.clear();
      for (const StripeMember& mb : h.members) st.blocks.push_back(mb.key);
      st.present |= 1u << d;
      ++disk.files;
    }
  }
  return disk;
}

// The same on ec:10+2, with Puts of 1..12-block chains (stripes of every width, Puts of two
// stripes): a Put is 3 to 14 chunk files on 12 domains, whose writes the child staggers over
// 0-11 ms (torn_writer_main.cc), so a kill lands between them. Each child's Open also queues the
// repair of the stripes the previous kill left short (rewritten, or dropped when they cannot be
// rebuilt), and a kill may land in that too. Then no file is torn, every block reads back exact or
// is a clean miss, fsck leaves every stripe whole and a second fsck clean, and only stripes too
// short of chunks to rebuild are gone.
TEST(KvTornWrites, EcKillNineAtRandomPoints) {
  constexpr unsigned kK = 10, kM = 2;
  TempDir t;
  const std::string uri = EcUri(t, kK, kM);  // what the parent opens: the same directories
  const std::string child_uri = EcUri(t, kK, kM, [](unsigned d, const std::string& dir) {
    return "fault:torn-" + std::to_string(d) + ":" + dir;
  });
  std::mt19937 rng(4242);
  const int kIterations = 12;
  auto start = std::chrono::steady_clock::now();
  KillWritersAtRandomPoints(child_uri, kIterations, rng);
  if (HasFatalFailure()) return;
  auto kill_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();

  EcDisk disk = ScanEcDomains(t, kK, kM);
  ASSERT_GT(disk.files, 0u);
  size_t short_stripes = 0, partial_stripes = 0;
  for (auto& [name, st] : disk.stripes) {
    short_stripes += !st.Decodable();
    partial_stripes += st.present != RealMask(st, kK, kM);
  }
  // Per block: its newest write on disk (the largest write id among the stripes listing it).
  std::map<std::pair<uint64_t, uint64_t>, const EcDisk::Stripe*> newest;
  for (auto& [name, st] : disk.stripes) {
    for (const BlockKey& b : st.blocks) {
      auto& n = newest[{b.hi, b.lo}];
      if (!n || n->write_id < st.write_id) n = &st;
    }
  }

  StoreOptions o;
  o.gc_in_process = false;
  o.gc_interval = std::chrono::hours(1);  // no garbage collection under the scans below
  auto store = KvStore::Open(uri, o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  KvStore& s = **store;
  auto read_all = [&](std::set<std::pair<uint64_t, uint64_t>>* hits, const std::string& what) {
    for (uint64_t seed = 0; seed < 5; ++seed) {
      for (uint64_t i = 0; i < 64; ++i) {
        BlockKey key = testing_values::KeyFor(seed * 1000003 + i);
        std::vector<uint8_t> got;
        auto r = GetOne(s, key, &got, 256 * 1024);
        if (r.ok()) {
          hits->insert({key.hi, key.lo});
          EXPECT_TRUE(testing_values::IsValueOf(key, got.data(), got.size())) << what << " seed " << seed << " i " << i;
        } else {
          EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << what << ": " << r.status().ToString();
        }
      }
    }
  };
  std::set<std::pair<uint64_t, uint64_t>> hits_before, hits_after;
  read_all(&hits_before, "before fsck");
  EXPECT_GT(hits_before.size(), 0u);

  auto rep = s.Fsck();
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto again = s.Fsck();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->unrecoverable, 0u);
  EXPECT_EQ(again->repaired, 0u) << "a second fsck still had chunks to rewrite";
  EXPECT_EQ(again->ok, again->objects);

  read_all(&hits_after, "after fsck");
  EXPECT_GT(hits_after.size(), 0u);
  // A block that read back before fsck still does, unless its newest write on disk is short of
  // chunks (fsck adopts it, then drops it whole). Counted, not asserted: blocks that had a
  // complete write on disk and read as misses after fsck. A newer write the store knows of but
  // cannot rebuild takes the block from the older complete one (a torn Put's chunks, or an index
  // row left by a removal that a kill cut short), and dropping it does not give it back.
  for (const auto& k : hits_before) {
    auto it = newest.find(k);
    EXPECT_TRUE(hits_after.count(k) || (it != newest.end() && !it->second->Decodable()))
        << "a block that read back before fsck, with its newest write complete on disk, is gone after it";
  }
  size_t with_complete_copy = 0, lost = 0;
  for (auto& [k, st] : newest) {
    bool complete = false;
    for (auto& [name, other] : disk.stripes) {
      if (!other.Decodable()) continue;
      for (const BlockKey& b : other.blocks) complete |= (std::pair(b.hi, b.lo) == k);
    }
    with_complete_copy += complete;
    lost += complete && !hits_after.count(k);
  }
  // After fsck: no temp file, and every stripe on disk is whole (all its real chunks valid).
  EcDisk after = ScanEcDomains(t, kK, kM);
  EXPECT_EQ(after.temps, 0u) << "temp files of killed writers left after fsck";
  for (auto& [name, st] : after.stripes) {
    EXPECT_EQ(st.present, RealMask(st, kK, kM)) << name << ": a stripe left short of chunks after fsck";
  }
  // Nothing that could be rebuilt was dropped (no GC ran: only an unrecoverable stripe goes).
  for (auto& [name, st] : disk.stripes) {
    if (st.Decodable()) {
      EXPECT_TRUE(after.stripes.count(name)) << name << ": dropped with enough chunks on disk";
    }
  }
  auto total_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "ec torn writes: %zu chunk files, %zu stripes (%zu missing chunks, %zu of them too short to decode), %zu temp "
      "files; fsck: %llu stripes, %llu "
      "repaired, %llu unrecoverable; hits %zu before / %zu after fsck; %zu blocks with a complete write on disk, %zu "
      "of them misses after fsck; kills %lld ms, total %lld ms\n",
      disk.files, disk.stripes.size(), partial_stripes, short_stripes, disk.temps, static_cast<unsigned long long>(rep->objects),
      static_cast<unsigned long long>(rep->repaired), static_cast<unsigned long long>(rep->unrecoverable),
      hits_before.size(), hits_after.size(), with_complete_copy, lost, static_cast<long long>(kill_ms),
      static_cast<long long>(total_ms));
}

}  // namespace
}  // namespace kvtest
