// The writer child of the torn-write tests: opens a store and puts blocks whose values are a pure
// function of (key, length) until it is killed. The parent SIGKILLs it at random moments.
//   kvcache_torn_writer DIR SEED            fs:DIR, one block a Put
//   kvcache_torn_writer ec:K+M:DIRS SEED    that store, chains of 1..K+2 blocks a Put (stripes of
//                                           every width, and Puts of two stripes)
// An ec store's domains may be fault targets named torn-0, torn-1, ... (`fault:torn-D:DIR`): the
// writes of domain D then land (5 D mod 12) ms after the Put queued them, so a kill at any moment
// of a Put finds some of its chunks renamed and the others not (data and parity interleaved).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fault_target.h"
#include "test_values.h"
#include "ladle/kvcache/kv_store.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kvcache_torn_writer DIR|ec:K+M:DIRS SEED\n");
    return 2;
  }
  using namespace ladle::kvcache;
  std::string where = argv[1];
  const bool ec = where.rfind("ec:", 0) == 0;
  if (ec) {
    for (int d = 0; d < 32; ++d) FaultControl::Named("torn-" + std::to_string(d))->delay_ms = 5 * d % 12;
  }
  auto store = KvStore::Open(ec ? where : "fs:" + where, {});
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  // fs: ready once open. ec: ready once the first Put is done (a cold first Put takes as long as
  // the parent's kill window), and each seed starts at another chain length.
  if (!ec) {
    std::printf("ready\n");
    std::fflush(stdout);
  }
  for (uint64_t i = ec ? 7 * seed : 0;; ++i) {
    if (ec && i == 7 * seed + 1) {
      std::printf("ready\n");
      std::fflush(stdout);
    }
    if (!ec) {
      BlockKey key = testing_values::KeyFor(seed * 1000003 + i % 64);  // rewrites too, not only new files
      std::vector<uint8_t> v = testing_values::ValueFor(key, testing_values::LengthFor(key, i));
      std::span<const uint8_t> value(v);
      store.value()->PutSync(std::span<const BlockKey>(&key, 1), std::span<const std::span<const uint8_t>>(&value, 1),
                             TrafficClass::kChatbot);
      continue;
    }
    // A run of n consecutive keys of the 64 (no wrap-around, so parent links only point back).
    size_t n = 1 + i % 12;
    size_t first = testing_values::Mix(seed ^ (i << 8)) % (64 - n + 1);
    std::vector<BlockKey> keys;
    std::vector<std::vector<uint8_t>> vals;
    for (size_t j = 0; j < n; ++j) {
      keys.push_back(testing_values::KeyFor(seed * 1000003 + first + j));
      vals.push_back(testing_values::ValueFor(keys.back(), testing_values::LengthFor(keys.back(), i)));
    }
    std::vector<std::span<const uint8_t>> spans(vals.begin(), vals.end());
    store.value()->PutSync(keys, spans, TrafficClass::kChatbot);
  }
}
