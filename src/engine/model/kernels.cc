#include "kernels.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ladle::engine::model {

namespace {

// Types from cblas.h's declarations; the symbols themselves come from dlsym.
struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_sgemv) sgemv = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  decltype(&openblas_get_corename) corename = nullptr;
  Status status;
};

Blas LoadBlas() {
  Blas b;
  __builtin_cpu_init();
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq")) {
      setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      setenv("OPENBLAS_CORETYPE", "Haswell", 0);
    }
  }
  // Parallelism is across sequences; BLAS threads would only idle or oversubscribe.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) h = dlopen(LADLE_OPENBLAS_LIBDIR "/libopenblas.so", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    b.status = Status(StatusCode::kUnavailable, std::string("cannot load OpenBLAS (install libopenblas-dev): ") + (why ? why : "?"));
    return b;
  }
  b.sgemm = reinterpret_cast<decltype(b.sgemm)>(dlsym(h, "cblas_sgemm"));
  b.sgemv = reinterpret_cast<decltype(b.sgemv)>(dlsym(h, "cblas_sgemv"));
  b.set_num_threads = reinterpret_cast<decltype(b.set_num_threads)>(dlsym(h, "openblas_set_num_threads"));
  b.corename = reinterpret_cast<decltype(b.corename)>(dlsym(h, "openblas_get_corename"));
  if (b.sgemm == nullptr || b.sgemv == nullptr || b.set_num_threads == nullptr) {
    b.status = Status(StatusCode::kUnavailable, "the loaded BLAS is not OpenBLAS (cblas_sgemm/openblas_set_num_threads missing)");
    return b;
  }
  b.set_num_threads(1);
  return b;
}

const Blas& GetBlas() {
  static const Blas blas = LoadBlas();  // thread-safe, once
  return blas;
}

}  // namespace

Status InitBlas() { return GetBlas().status; }

std::string BlasCoreName() {
  const Blas& b = GetBlas();
  return b.corename != nullptr ? std::string(b.corename()) : "unknown";
}

void Sgemv(int rows, int cols, const float* a, const float* x, float* y) {
  GetBlas().sgemv(CblasRowMajor, CblasNoTrans, rows, cols, 1.0f, a, cols, x, 1, 0.0f, y, 1);
}

void Linear(const float* x, int n, int in, const float* w, int out, float* y) {
  const Blas& b = GetBlas();
  if (n <= kLinearRowwiseMax) {
    // Few rows: one GEMV per row reads W (small, cache-resident) without packing it, and
    // gives each row the bits a one-row call gives it. So a speculative verify span (up to
    // γ + 1 = 6 rows per sequence, and per expert) computes exactly what the same tokens
    // decoded one by one compute: greedy output is token-identical with speculation on.
    for (int r = 0; r < n; ++r) {
      b.sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x + static_cast<size_t>(r) * in, 1, 0.0f,
              y + static_cast<size_t>(r) * out, 1);
    }
    return;
  }
  b.sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}

void RmsNorm(const float* x, int n, int dim, const float* weight, float eps, float* out) {
  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<size_t>(r) * dim;
    float* o = out + static_cast<size_t>(r) * dim;
    double ss = 0.0;  // double: the sum of squares of a wide residual loses bits in float
    for (int i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float inv = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
    for (int i = 0; i < dim; ++i) o[i] = xr[i] * inv * weight[i];
  }
}

void Rope(float* v, int heads, int head_dim, int64_t pos, float theta) {
  int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    // Angles in double: positions reach 10^5+, where float angles lose the low bits.
    double inv_freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    double angle = static_cast<double>(pos) * inv_freq;
    float c = static_cast<float>(std::cos(angle));
    float s = static_cast<float>(std::sin(angle));
    for (int h = 0; h < heads; ++h) {
      float* p = v + static_cast<size_t>(h) * head_dim;
      float a = p[i], b = p[i + half];
      p[i] = a * c - b * s;
      p[i + half] = b * c + a * s;
    }
  }
}

float Dot(const float* a, const float* b, int n) {
  // Eight independent partial sums: the compiler vectorises this without reassociating,
  // so the order (and the result) is fixed.
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  }
  for (; i < n; ++i) s[i & 7] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void SwiGlu(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void SwiGluFfn(const float* gate, const float* up, const float* down, int hidden, int ffn, const float* x, int n,
               float* out, Floats& g, Floats& u) {
  const size_t need = static_cast<size_t>(n) * ffn;
  if (g.size() < need) g.resize(need);
  if (u.size() < need) u.resize(need);
  Linear(x, n, hidden, gate, ffn, g.data());
  Linear(x, n, hidden, up, ffn, u.data());
  SwiGlu(g.data(), u.data(), need);
  Linear(g.data(), n, ffn, down, hidden, out);
}

}  // namespace ladle::engine::model
