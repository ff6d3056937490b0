// Torn writes: a child process putting blocks is SIGKILLed at random moments, 30 times. After
// that every block reads back whole and correct or as a miss, every file under a chunk's name
// decodes valid, and fsck finds nothing unrecoverable and clears the dead writers' temp files.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "object_format.h"
#include "test_util.h"

extern char** environ;

namespace kvtest {
namespace {

TEST(KvTornWrites, KillNineAtRandomPoints) {
  TempDir t;
  std::string dir = t.Sub("fs");
  std::mt19937 rng(12345);
  const int kIterations = 30;
  for (int it = 0; it < kIterations; ++it) {
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::string seed = std::to_string(it % 5);
    char* argv[] = {const_cast<char*>(LADLE_KVCACHE_TORN_WRITER), dir.data(), seed.data(), nullptr};
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
    ASSERT_GT(::select(out[0] + 1, &fds, nullptr, nullptr, &tv), 0) << "writer child never got ready";
    ASSERT_GT(::read(out[0], buf, sizeof buf), 0);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited by itself";
    ::close(out[0]);
  }
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
  auto store = KvStore::Open("fs:" + dir, {});
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

}  // namespace
}  // namespace kvtest
