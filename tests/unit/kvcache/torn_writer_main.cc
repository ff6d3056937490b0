// The writer child of the torn-write test: opens fs:DIR and puts blocks whose values are a pure
// function of (key, length) until it is killed. The parent SIGKILLs it at random moments.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "test_values.h"
#include "ladle/kvcache/kv_store.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kvcache_torn_writer DIR SEED\n");
    return 2;
  }
  using namespace ladle::kvcache;
  auto store = KvStore::Open(std::string("fs:") + argv[1], {});
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  std::printf("ready\n");
  std::fflush(stdout);
  for (uint64_t i = 0;; ++i) {
    BlockKey key = testing_values::KeyFor(seed * 1000003 + i % 64);  // rewrites too, not only new files
    std::vector<uint8_t> v = testing_values::ValueFor(key, testing_values::LengthFor(key, i));
    std::span<const uint8_t> value(v);
    store.value()->PutSync(std::span<const BlockKey>(&key, 1), std::span<const std::span<const uint8_t>>(&value, 1),
                           TrafficClass::kChatbot);
  }
}
