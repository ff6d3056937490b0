// Token sampling for one sequence from one row of logits: mask, penalties, logprobs, then
// greedy or temperature / top_k / top_p / min_p with a per-sequence deterministic RNG.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ladle/engine/engine.h"

namespace ladle::engine {

// Per-sequence state the sampler carries from token to token.
struct SamplerState {
  uint64_t rng = 0;  // splitmix64 state: same seed, same draws, on every platform
  std::unordered_map<TokenId, int> counts;  // generated tokens so far (penalties)

  explicit SamplerState(uint64_t seed = 0) : rng(seed) {}
  double NextUniform();  // [0, 1)
};

struct Sampled {
  TokenId token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<TokenId, float>> top_logprobs;
};

// `logits` is modified in place. `mask` (may be null) is a bitset, 1 = allowed; ids at or
// above `valid_vocab` are never sampled (padding columns past the tokenizer's vocabulary).
// Logprobs are log-softmax of the masked, penalised logits at temperature 1 (what the model
// preferred, before sampling settings reshape the distribution).
Sampled SampleToken(std::span<float> logits, const SamplingParams& p, SamplerState* state,
                    const uint64_t* mask, size_t valid_vocab);

}  // namespace ladle::engine
