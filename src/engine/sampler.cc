#include "ladle/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ladle::engine {

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
    for (size_t i = 0; i < n; ++i)
      if (!((mask[i >> 6] >> (i & 63)) & 1)) logits[i] = kNegInf;
  }
  // OpenAI-style penalties over the tokens generated so far.
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [tok, cnt] : state->counts) {
      if (tok < n && logits[tok] != kNegInf)
        logits[tok] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(cnt);
    }
  }

  // Log-softmax at temperature 1 (for logprobs, and the greedy/top-k ranking).
  float mx = kNegInf;
  size_t argmax = 0;
  for (size_t i = 0; i < n; ++i)
    if (logits[i] > mx) mx = logits[i], argmax = i;
  Sampled out;
  if (mx == kNegInf) {
    // Everything masked: the mask provider allowed nothing. There is no right answer; return
    // id 0 with logprob -inf so the caller can see it (the engine finishes with an error).
    out.token = 0;
    out.logprob = kNegInf;
    return out;
  }
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    if (logits[i] != kNegInf) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float log_z = mx + static_cast<float>(std::log(sum));

  TokenId chosen = static_cast<TokenId>(argmax);
  if (p.temperature > 0.0f) {
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
  out.logprob = logits[chosen] - log_z;
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
