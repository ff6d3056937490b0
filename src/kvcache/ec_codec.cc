#include "ec_codec.h"

#include <isa-l/erasure_code.h>

#include <bit>

#include "ladle/core/logging.h"

namespace ladle::kvcache {

EcCodec::EcCodec(unsigned k, unsigned m) : k_(k), m_(m), matrix_((k + m) * k) {
  LADLE_CHECK(k >= 1 && k + m <= 32);
  gf_gen_cauchy1_matrix(matrix_.data(), static_cast<int>(k + m), static_cast<int>(k));
  if (m > 0) {
    enc_tables_.resize(32 * k * m);
    ec_init_tables(static_cast<int>(k), static_cast<int>(m), matrix_.data() + k * k, enc_tables_.data());
  }
}

void EcCodec::Encode(size_t len, uint8_t* const* data, uint8_t* const* parity) const {
  if (m_ == 0 || len == 0) return;
  ec_encode_data(static_cast<int>(len), static_cast<int>(k_), static_cast<int>(m_),
                 const_cast<uint8_t*>(enc_tables_.data()), const_cast<uint8_t**>(data),
                 const_cast<uint8_t**>(parity));
}

std::shared_ptr<const EcCodec::Plan> EcCodec::PlanFor(uint32_t sources) {
  std::lock_guard lock(mu_);
  auto it = plans_.find(sources);
  if (it != plans_.end()) return it->second;
  // B = the encode matrix's rows for the sources; D = B^-1 maps sources back to data.
  std::vector<uint8_t> b(k_ * k_), d(k_ * k_);
  unsigned r = 0;
  for (unsigned i = 0; i < k_ + m_; ++i) {
    if (sources & (1u << i)) {
      std::copy_n(matrix_.data() + i * k_, k_, b.data() + r * k_);
      ++r;
    }
  }
  LADLE_CHECK(r == k_);
  if (gf_invert_matrix(b.data(), d.data(), static_cast<int>(k_)) != 0) return nullptr;
  auto plan = std::make_shared<Plan>();
  std::vector<uint8_t> rows;
  for (unsigned j = 0; j < k_; ++j) {
    if (sources & (1u << j)) continue;
    plan->missing.push_back(j);
    rows.insert(rows.end(), d.begin() + j * k_, d.begin() + (j + 1) * k_);
  }
  if (!plan->missing.empty()) {
    plan->tables.resize(32 * k_ * plan->missing.size());
    ec_init_tables(static_cast<int>(k_), static_cast<int>(plan->missing.size()), rows.data(), plan->tables.data());
  }
  plans_.emplace(sources, plan);
  return plan;
}

bool EcCodec::Decode(size_t len, uint32_t sources, uint8_t* const* src, uint8_t* const* data_out) {
  LADLE_CHECK(std::popcount(sources) == static_cast<int>(k_));
  auto plan = PlanFor(sources);
  if (!plan) return false;
  if (plan->missing.empty() || len == 0) return true;
  std::vector<uint8_t*> outs;
  for (unsigned j : plan->missing) outs.push_back(data_out[j]);
  ec_encode_data(static_cast<int>(len), static_cast<int>(k_), static_cast<int>(outs.size()),
                 const_cast<uint8_t*>(plan->tables.data()), const_cast<uint8_t**>(src), outs.data());
  return true;
}

}  // namespace ladle::kvcache
