// libFuzzer target for the kvcache chunk decoder (src/kvcache/object_format.h). Properties:
//  - random and mutated bytes never crash the decoder;
//  - bytes that do decode are exactly what EncodeChunk writes for the decoded fields (so only a
//    genuine encoding is ever valid: a mutation that kept the CRC right but changed a field
//    would show up here);
//  - flipping any one byte of a valid chunk makes it invalid.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "object_format.h"

using namespace ladle::kvcache;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  (void)DecodeChunkHeader(in);
  auto dec = DecodeChunk(in);
  if (!dec.ok()) return 0;
  std::vector<uint8_t> again = EncodeChunk(dec->header, dec->payload);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) {
    std::fprintf(stderr, "decoded chunk does not re-encode to its bytes\n");
    std::abort();
  }
  std::vector<uint8_t> bad(data, data + size);
  size_t at = (static_cast<size_t>(data[size / 2]) * 131 + size) % size;
  bad[at] ^= static_cast<uint8_t>(1u << (data[0] % 8));
  if (DecodeChunk(bad).ok()) {
    std::fprintf(stderr, "a one-bit change at %zu still decodes\n", at);
    std::abort();
  }
  return 0;
}

// The seeds in fuzz/corpus/kvcache_object_fuzz/ are valid chunks written by this main, built
// with -DLADLE_KVCACHE_FUZZ_WRITE_SEEDS and without libFuzzer (see docs/kvcache.md).
#ifdef LADLE_KVCACHE_FUZZ_WRITE_SEEDS
int main(int argc, char** argv) {
  const char* dir = argc > 1 ? argv[1] : ".";
  struct Seed {
    uint64_t len;
    unsigned k, m, idx, width;
  } seeds[] = {{0, 1, 0, 0, 1}, {5, 1, 0, 0, 1}, {100, 10, 2, 3, 10}, {37, 10, 2, 11, 3}, {4097, 4, 1, 4, 2}};
  int n = 0;
  for (const Seed& s : seeds) {
    ChunkHeader h;
    BlockKey first{0x1111ULL * static_cast<uint64_t>(n + 1), 0x2222};
    for (unsigned j = 0; j < s.width; ++j) {
      h.members.push_back({j == 0 ? first : BlockKey{j, 99}, s.len > j ? s.len - j : 0});
      h.value_len += h.members.back().len;
    }
    h.write_ms = 1700000000000 + n;
    h.write_id = 42 + n;
    h.key = StripeKey(first, h.write_id);
    h.has_parent = n % 2 == 1;
    if (h.has_parent) h.parent = {7, 8};
    h.chunk_len = static_cast<uint32_t>(ChunkLenOf(h.members, s.idx, s.k));
    h.depth = n;
    h.chunk_idx = static_cast<uint8_t>(s.idx);
    h.k = static_cast<uint8_t>(s.k);
    h.m = static_cast<uint8_t>(s.m);
    std::vector<uint8_t> payload(h.chunk_len);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + n);
    auto bytes = EncodeChunk(h, payload);
    std::string path = std::string(dir) + "/seed" + std::to_string(n++) + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 1;
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  return 0;
}
#endif
