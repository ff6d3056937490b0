// The DSpark drafter (docs/engine.md, "Speculative decoding"; the recipe's "DSpark speculative
// decoding"): drafts γ tokens after a sequence's last sampled token in one parallel pass,
// conditioned on the target's hidden state, plus a confidence per draft token.
//
//   x      = [h ; E[last]]                       h: the target's final-normed hidden state of the
//                                                position that produced `last`; E: the drafter's
//                                                embedding (zero for a token outside its vocab)
//   g_k    = W_k·x + b_k        k = 1..γ          the parallel backbone (DFlash-style: all γ at once)
//   z_k[v] = head[v]·g_k + U[prev_k]·V[v]         the draft-vocabulary head plus the low-rank
//                                                Markov bias of the previous token (prev_1 = last,
//                                                prev_k = draft k−1: the light serial correction)
//   d_k    = argmax z_k                           mapped back to target ids through d2t
//   c_k    = σ((w_k·f_k + q_k·g_k + a_k) / T_k)   the confidence head on the draft's own features
//                                                f_k (top probability, margin, entropy) and the
//                                                backbone's hidden state g_k, T_k calibrated by
//                                                sequential temperature scaling
//
// The draft vocabulary is a subset of the target's (the fitting set's most frequent tokens),
// as EAGLE-3 and DFlash drafters use: the drafter's head is |Vd| × H, not the target's 129K × H.
// Weights are safetensors (drafter.safetensors + drafter.json) in one folder; `ladle dspark fit`
// distils them from the target (dspark_fit.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/token.h"

namespace ladle::engine {

struct DrafterConfig {
  int hidden = 256;          // the target's hidden size (h's length)
  int target_vocab = 129280;
  int draft_vocab = 2048;    // |Vd|
  int draft_tokens = 5;      // γ: the most tokens one pass drafts
  int rank = 32;             // r of the Markov head
  std::string target;        // the target's fingerprint (ModelFingerprint) it was fitted on
};

// One sequence's input to a drafting pass.
struct DraftInput {
  std::span<const float> hidden;  // config().hidden floats
  TokenId last = 0;
};
struct DraftOutput {
  std::vector<TokenId> tokens;      // γ target ids
  std::vector<float> confidences;   // γ values in (0, 1)
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Reads drafter.json and drafter.safetensors from `dir`.
  static Result<std::unique_ptr<Drafter>> Load(const std::string& dir);

  virtual const DrafterConfig& config() const = 0;
  // Drafts config().draft_tokens tokens for each input (batched: each weight is applied to every
  // sequence while it is in cache). Deterministic: same inputs, same outputs, in any batch.
  void Draft(std::span<const DraftInput> in, std::vector<DraftOutput>* out) const {
    DraftPrefix(in, config().draft_tokens, out);
  }
  // Only the first `positions` drafts and confidences (at most draft_tokens), bit for bit the
  // first ones of a full pass: a verify policy that can use at most k drafts pays for k.
  virtual void DraftPrefix(std::span<const DraftInput> in, int positions, std::vector<DraftOutput>* out) const = 0;
};

}  // namespace ladle::engine
