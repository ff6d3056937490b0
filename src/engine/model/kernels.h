// CPU kernels of the reference model. Every routine computes each output element in one
// fixed order that depends only on its own inputs and the shapes, never on the batch, so
// a sequence's logits are bit-identical alone or batched (the determinism contract of
// Model::Forward). OpenBLAS runs single-threaded; parallelism is across sequences.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "ladle/core/status.h"

namespace ladle::engine::model {

// 64-byte aligned allocation, so a BLAS kernel never takes an alignment-dependent path
// for one sequence and another path for the same data elsewhere.
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}  // NOLINT
  T* allocate(size_t n) {
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (p == nullptr) throw std::bad_alloc();  // allocation failure is fatal, as with new
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const { return true; }
};
using Floats = std::vector<float, AlignedAllocator<float>>;

// Loads OpenBLAS (once per process) and pins it to one thread: multi-threaded BLAS splits
// reductions by thread count, which would make results depend on machine load.
// OpenBLAS picks its kernels when it loads, from the CPU model; 0.3.21 does not know recent
// Xeons and falls back to SSE3 ("Prescott"), about 3x slower here. So the library is loaded
// with dlopen, after setting OPENBLAS_CORETYPE from the CPU's features (SkylakeX with
// AVX-512, Haswell with AVX2+FMA) unless the environment already names a core.
Status InitBlas();
// The OpenBLAS kernel family in use ("Haswell", "SkylakeX", ...).
std::string BlasCoreName();

// BLAS entry points; valid after InitBlas() succeeded.
void Sgemv(int rows, int cols, const float* a, const float* x, float* y);  // y = A·x, A row-major

// y[n×out] = x[n×in] · W[out×in]ᵀ (W row-major, as safetensors stores nn.Linear). Up to
// kLinearRowwiseMax rows, each row is its own GEMV: row-for-row identical to n = 1.
inline constexpr int kLinearRowwiseMax = 8;
void Linear(const float* x, int n, int in, const float* w, int out, float* y);

// out[n×dim] = x / rms(x) * weight, row by row.
void RmsNorm(const float* x, int n, int dim, const float* weight, float eps, float* out);

// Rotates `heads` heads of `head_dim` (rotate-half pairs i, i + head_dim/2) at `pos`.
void Rope(float* v, int heads, int head_dim, int64_t pos, float theta);

// Fixed-order dot product.
float Dot(const float* a, const float* b, int n);

// In place: SiLU(gate) * up, element-wise.
void SwiGlu(float* gate, const float* up, size_t n);

// One SwiGLU FFN (an expert, or the shared expert): out[n×H] = down · (SiLU(x·gateᵀ) ∘ x·upᵀ),
// gate and up [F×H], down [H×F]; g and u are grown to n×F scratch. The sequence's own thread
// and an EP rank call this same routine, so an expert's rows come out the same wherever it ran.
void SwiGluFfn(const float* gate, const float* up, const float* down, int hidden, int ffn, const float* x, int n,
               float* out, Floats& g, Floats& u);

}  // namespace ladle::engine::model
