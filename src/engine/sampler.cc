#include "ladle/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace ladle::engine {

namespace {

// exp(x) for x <= 0, in float, branch-free so the loop below vectorises (std::exp does not):
// Cody-Waite range reduction x = k ln2 + r, |r| <= ln2/2, and a degree-6 polynomial for e^r
// (relative error below 2e-7, i.e. about 1 ulp); arguments below -87 give 0.
inline float ExpNonPositive(float x) {
  x = std::max(x, -87.0f);
  // Round to nearest by the 1.5 * 2^23 trick (std::nearbyint would be a call, not an instruction).
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float q = 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  const float e = (q * r * r + r) + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

// w[i] = exp((l[i] - mx) * inv_t) (0 for -inf logits); returns the sum. The weight loop and
// the 8-lane partial sums are written so the compiler vectorises them (no in-order float
// reduction); blocks are added in double so 129K terms lose no precision that matters.
constexpr size_t kBlock = 1024;

double ExpWeights(const float* l, size_t n, float mx, float inv_t, float* w,
                  std::vector<double>* block_sums = nullptr) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    // Arithmetic instead of a select keeps the loop free of control flow (so it vectorises).
    w[i] = ExpNonPositive((l[i] - mx) * inv_t) * static_cast<float>(l[i] != kNegInf);
  }
  double total = 0;
  if (block_sums) block_sums->clear();
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = b;
    for (; i + 8 <= e; i += 8)
      for (size_t j = 0; j < 8; ++j) acc[j] += w[i + j];
    for (; i < e; ++i) acc[0] += w[i];
    double part = 0;
    for (float a : acc) part += a;
    if (block_sums) block_sums->push_back(part);
    total += part;
  }
  return total;
}

// max over l[0..n), -inf for an empty or fully masked row; 8 lanes so it vectorises.
float RowMax(const float* l, size_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float m[8] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t j = 0; j < 8; ++j) m[j] = l[i + j] > m[j] ? l[i + j] : m[j];
  float mx = kNegInf;
  for (; i < n; ++i) mx = l[i] > mx ? l[i] : mx;
  for (float v : m) mx = v > mx ? v : mx;
  return mx;
}

}  // namespace

double SamplerState::NextUniform() {
  // splitmix64: tiny, fast, and the same sequence everywhere (std distributions are not).
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

Sampled SampleToken(std::span<float> logits, const SamplingParams& p, SamplerState* state,
                    const uint64_t* mask, size_t valid_vocab) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), valid_vocab);
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
  if (mask) {
    // Word at a time: grammar masks are mostly runs of all-allowed or all-banned words.
    for (size_t w = 0; w * 64 < n; ++w) {
      const uint64_t bits = mask[w];
      const size_t end = std::min(n, w * 64 + 64);
      if (bits == ~uint64_t{0} && end == w * 64 + 64) continue;
      for (size_t i = w * 64; i < end; ++i)
        if (!((bits >> (i & 63)) & 1)) logits[i] = kNegInf;
    }
  }
  // OpenAI-style penalties over the tokens generated so far.
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [tok, cnt] : state->counts) {
      if (tok < n && logits[tok] != kNegInf)
        logits[tok] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(cnt);
    }
  }

  // Log-softmax at temperature 1 (for logprobs, and the greedy/top-k ranking).
  const float mx = RowMax(logits.data(), n);
  size_t argmax = 0;  // the first id holding the maximum (ties broken by id)
  while (argmax + 1 < n && logits[argmax] != mx) ++argmax;
  Sampled out;
  if (mx == kNegInf) {
    // Everything masked: the mask provider allowed nothing. There is no right answer; return
    // id 0 with logprob -inf so the caller can see it (the engine finishes with an error).
    out.token = 0;
    out.logprob = kNegInf;
    return out;
  }
  // Logprobs need log Z at temperature 1; computed only when asked for (or reused from the
  // plain-temperature pass below when that ran at temperature 1).
  const bool want_logprob = p.top_logprobs >= 0;
  double log_z_sum = -1.0;  // sum of exp(l - mx), when known

  TokenId chosen = static_cast<TokenId>(argmax);
  const bool plain = p.temperature > 0.0f && p.top_k <= 0 && p.top_p >= 1.0f && p.min_p <= 0.0f;
  if (plain) {
    // The common case (temperature only): one vectorised pass of weights over the whole row,
    // no candidate list, no sort. Masked ids have logit -inf and weight exactly 0.
    thread_local std::vector<float> w;
    w.resize(n);
    thread_local std::vector<double> blocks;
    const double mass = ExpWeights(logits.data(), n, mx, 1.0f / p.temperature, w.data(), &blocks);
    if (p.temperature == 1.0f) log_z_sum = mass;
    double r = state->NextUniform() * mass;
    size_t pick = argmax;  // rounding can leave r >= 0 after the last weight: keep the mode
    // Skip whole blocks by their sums, then scan inside the block the draw falls in.
    size_t b = 0;
    while (b + 1 < blocks.size() && r >= blocks[b]) r -= blocks[b++];
    for (size_t i = b * kBlock, e = std::min(n, i + kBlock); i < e; ++i) {
      r -= w[i];
      if (r < 0) {
        pick = i;
        break;
      }
    }
    chosen = static_cast<TokenId>(pick);
  } else if (p.temperature > 0.0f) {
    // Candidates: every unmasked id; ties are broken by id so the order is deterministic.
    std::vector<uint32_t> idx;
    idx.reserve(n);
    for (size_t i = 0; i < n; ++i)
      if (logits[i] != kNegInf) idx.push_back(static_cast<uint32_t>(i));
    auto by_logit = [&](uint32_t x, uint32_t y) { return logits[x] > logits[y] || (logits[x] == logits[y] && x < y); };
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < idx.size()) {
      std::nth_element(idx.begin(), idx.begin() + p.top_k, idx.end(), by_logit);
      idx.resize(static_cast<size_t>(p.top_k));
    }
    // Only top_p needs the candidates in order; sorting 129K ids every step is the costliest
    // part of sampling, so plain temperature / top_k / min_p skip it.
    const bool sorted = p.top_p < 1.0f;
    if (sorted) std::sort(idx.begin(), idx.end(), by_logit);
    const double inv_t = 1.0 / p.temperature;
    // min_p: drop tokens below min_p × the top probability (the top logit is mx).
    if (p.min_p > 0.0f) {
      const float floor_logit = mx + static_cast<float>(std::log(static_cast<double>(p.min_p)) * p.temperature);
      std::erase_if(idx, [&](uint32_t i) { return logits[i] < floor_logit && logits[i] != mx; });
    }
    std::vector<double> prob(idx.size());
    double z = 0;
    for (size_t i = 0; i < idx.size(); ++i) z += prob[i] = std::exp((logits[idx[i]] - mx) * inv_t);
    size_t keep = idx.size();
    // top_p: the smallest prefix whose mass reaches top_p (always at least one token).
    if (sorted) {
      double acc = 0;
      size_t k = 0;
      while (k < keep) {
        acc += prob[k++] / z;
        if (acc >= p.top_p) break;
      }
      keep = k;
    }
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) mass += prob[i];
    double r = state->NextUniform() * mass;
    size_t pick = keep - 1;
    for (size_t i = 0; i < keep; ++i) {
      r -= prob[i];
      if (r < 0) {
        pick = i;
        break;
      }
    }
    chosen = idx[pick];
  }
  out.token = chosen;
  float log_z = 0.0f;
  if (want_logprob) {
    if (log_z_sum < 0) {
      thread_local std::vector<float> w1;
      w1.resize(n);
      log_z_sum = ExpWeights(logits.data(), n, mx, 1.0f, w1.data());
    }
    log_z = mx + static_cast<float>(std::log(log_z_sum));
    out.logprob = logits[chosen] - log_z;
  }
  if (p.top_logprobs > 0) {
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    const size_t k = std::min<size_t>(static_cast<size_t>(p.top_logprobs), n);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](uint32_t x, uint32_t y) {
      return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
    });
    for (size_t i = 0; i < k; ++i) {
      if (logits[idx[i]] == kNegInf) break;
      out.top_logprobs.emplace_back(idx[i], logits[idx[i]] - log_z);
    }
  }
  ++state->counts[chosen];
  return out;
}

}  // namespace ladle::engine
