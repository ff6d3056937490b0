// The store's own coding path (src/kvcache/ec_codec.h, internal to ladle_kvcache) timed on the
// same buffers, chunk length and loss pattern as the raw ISA-L reference in codec_ref.cc.
#include <cstring>
#include <vector>

#include "codec_ref.h"
#include "ec_codec.h"

namespace ladle::bench {

CodecFigures MeasureStoreCodec(const std::vector<std::vector<uint8_t>>& blocks, int k, int m, size_t len,
                               double min_seconds) {
  CodecFigures f;
  if (blocks.empty()) return f;
  const size_t block = blocks[0].size(), nb = blocks.size();
  kvcache::EcCodec codec(static_cast<unsigned>(k), static_cast<unsigned>(m));
  std::vector<std::vector<uint8_t>> data(nb, std::vector<uint8_t>(len * k, 0));
  std::vector<std::vector<uint8_t>> parity(nb, std::vector<uint8_t>(len * m, 0));
  for (size_t b = 0; b < nb; ++b) std::memcpy(data[b].data(), blocks[b].data(), block);
  std::vector<uint8_t*> dptr(k), pptr(m);
  size_t passes = 0;
  auto t0 = Clock::now();
  do {
    for (size_t b = 0; b < nb; ++b) {
      for (int i = 0; i < k; ++i) dptr[i] = data[b].data() + i * len;
      for (int i = 0; i < m; ++i) pptr[i] = parity[b].data() + i * len;
      codec.Encode(len, dptr.data(), pptr.data());
    }
    ++passes;
  } while (Seconds(Clock::now() - t0) < min_seconds);
  f.encode_MBps = static_cast<double>(passes * nb * block) / Seconds(Clock::now() - t0) / 1e6;

  // The first m data chunks lost; sources are the next k chunks in index order.
  uint32_t sources = 0;
  std::vector<int> surv;
  for (int r = m; r < k + m && static_cast<int>(surv.size()) < k; ++r) {
    sources |= 1u << r;
    surv.push_back(r);
  }
  std::vector<uint8_t> out(len * k);
  std::vector<uint8_t*> sptr(k), optr(k);
  for (int j = 0; j < k; ++j) optr[j] = out.data() + j * len;
  bool exact = true;
  passes = 0;
  t0 = Clock::now();
  do {
    for (size_t b = 0; b < nb; ++b) {
      for (int i = 0; i < k; ++i) {
        const int r = surv[i];
        sptr[i] = r < k ? data[b].data() + r * len : parity[b].data() + (r - k) * len;
      }
      exact = codec.Decode(len, sources, sptr.data(), optr.data()) && exact;
      if (passes == 0) exact = exact && std::memcmp(out.data(), data[b].data(), len * m) == 0;
    }
    ++passes;
  } while (Seconds(Clock::now() - t0) < min_seconds);
  f.decode_MBps = static_cast<double>(passes * nb * block) / Seconds(Clock::now() - t0) / 1e6;
  f.decode_exact = exact;
  f.chunk_len = len;
  return f;
}

}  // namespace ladle::bench
