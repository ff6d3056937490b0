// The raw ISA-L reference for the EC figures: ec_encode_data on the same buffers the store is
// given, with a Cauchy matrix (as the store uses) and decode tables built once per loss
// pattern (as the store caches them). This is the ceiling the store's coding path is held to.
#include <isa-l/erasure_code.h>

#include <cstring>
#include <vector>

#include "codec_ref.h"

namespace ladle::bench {

namespace {

constexpr size_t kAlign = 64;
size_t ChunkLen(size_t block, int k) { return ((block + k - 1) / k + kAlign - 1) / kAlign * kAlign; }

}  // namespace

CodecFigures MeasureRawIsal(const std::vector<std::vector<uint8_t>>& blocks, int k, int m, double min_seconds) {
  CodecFigures f;
  if (blocks.empty()) return f;
  const size_t block = blocks[0].size();
  const size_t len = ChunkLen(block, k);
  const int n = k + m;
  std::vector<uint8_t> a(static_cast<size_t>(n) * k);
  gf_gen_cauchy1_matrix(a.data(), n, k);
  std::vector<uint8_t> enc_tbl(32ull * k * m);
  ec_init_tables(k, m, &a[static_cast<size_t>(k) * k], enc_tbl.data());

  // Chunks laid out as the store would: each block zero-padded to k*len, split into k chunks.
  const size_t nb = blocks.size();
  std::vector<std::vector<uint8_t>> data(nb, std::vector<uint8_t>(len * k, 0));
  std::vector<std::vector<uint8_t>> parity(nb, std::vector<uint8_t>(len * m, 0));
  for (size_t b = 0; b < nb; ++b) std::memcpy(data[b].data(), blocks[b].data(), block);
  std::vector<uint8_t*> dptr(k), pptr(m);
  auto point = [&](size_t b) {
    for (int i = 0; i < k; ++i) dptr[i] = data[b].data() + i * len;
    for (int i = 0; i < m; ++i) pptr[i] = parity[b].data() + i * len;
  };

  // Encode: repeat whole passes over the buffers until min_seconds.
  size_t passes = 0;
  auto t0 = Clock::now();
  do {
    for (size_t b = 0; b < nb; ++b) {
      point(b);
      ec_encode_data(static_cast<int>(len), k, m, enc_tbl.data(), dptr.data(), pptr.data());
    }
    ++passes;
  } while (Seconds(Clock::now() - t0) < min_seconds);
  f.encode_MBps = static_cast<double>(passes * nb * block) / Seconds(Clock::now() - t0) / 1e6;

  // Decode with the first m data chunks lost (the costliest pattern: every lost chunk is data).
  const int lost = m;
  std::vector<int> surv;
  for (int r = lost; r < n && static_cast<int>(surv.size()) < k; ++r) surv.push_back(r);
  std::vector<uint8_t> b(static_cast<size_t>(k) * k), inv(static_cast<size_t>(k) * k);
  for (int i = 0; i < k; ++i) std::memcpy(&b[static_cast<size_t>(i) * k], &a[static_cast<size_t>(surv[i]) * k], k);
  if (gf_invert_matrix(b.data(), inv.data(), k) != 0) return f;  // cannot happen for Cauchy
  std::vector<uint8_t> dec_rows(static_cast<size_t>(lost) * k);
  for (int e = 0; e < lost; ++e) std::memcpy(&dec_rows[static_cast<size_t>(e) * k], &inv[static_cast<size_t>(e) * k], k);
  std::vector<uint8_t> dec_tbl(32ull * k * lost);
  ec_init_tables(k, lost, dec_rows.data(), dec_tbl.data());
  std::vector<uint8_t> out(len * lost);
  std::vector<uint8_t*> sptr(k), optr(lost);
  for (int e = 0; e < lost; ++e) optr[e] = out.data() + e * len;
  passes = 0;
  bool exact = true;
  t0 = Clock::now();
  do {
    for (size_t bl = 0; bl < nb; ++bl) {
      for (int i = 0; i < k; ++i) {
        const int r = surv[i];
        sptr[i] = r < k ? data[bl].data() + r * len : parity[bl].data() + (r - k) * len;
      }
      ec_encode_data(static_cast<int>(len), k, lost, dec_tbl.data(), sptr.data(), optr.data());
      if (passes == 0) exact = exact && std::memcmp(out.data(), data[bl].data(), len * lost) == 0;
    }
    ++passes;
  } while (Seconds(Clock::now() - t0) < min_seconds);
  f.decode_MBps = static_cast<double>(passes * nb * block) / Seconds(Clock::now() - t0) / 1e6;
  f.decode_exact = exact;
  f.chunk_len = len;
  return f;
}

}  // namespace ladle::bench
