// Reed-Solomon K+M over GF(2^8) with ISA-L: a Cauchy matrix (ISA-L's Vandermonde matrix is not
// always invertible), encode tables built once, decode tables cached per source pattern.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace ladle::kvcache {

class EcCodec {
 public:
  EcCodec(unsigned k, unsigned m);
  unsigned k() const { return k_; }
  unsigned m() const { return m_; }

  // data[0..k) in, parity[0..m) out; each `len` bytes.
  void Encode(size_t len, uint8_t* const* data, uint8_t* const* parity) const;
  // Rebuilds every data chunk not among the sources. `sources` is a bitmask of exactly k chunk
  // indices; src[i] is the i-th source in index order; data_out[j] (j < k) receives data chunk j
  // where j is not a source (entries for source chunks are ignored). False if the pattern's
  // matrix cannot be inverted (never for a Cauchy matrix; checked anyway).
  bool Decode(size_t len, uint32_t sources, uint8_t* const* src, uint8_t* const* data_out);

 private:
  struct Plan {
    std::vector<unsigned> missing;   // data indices rebuilt
    std::vector<uint8_t> tables;     // ec_init_tables output for those rows
  };
  std::shared_ptr<const Plan> PlanFor(uint32_t sources);

  unsigned k_, m_;
  std::vector<uint8_t> matrix_;       // (k+m) x k, rows 0..k identity
  std::vector<uint8_t> enc_tables_;   // for the m parity rows
  std::mutex mu_;
  std::map<uint32_t, std::shared_ptr<const Plan>> plans_;
};

}  // namespace ladle::kvcache
