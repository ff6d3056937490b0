// Distilling a DSpark drafter (drafter.h) from a target model: `ladle dspark fit`.
//
//   1. greedy continuations of the target over a prompt set, batched over sequences; per
//      generated position the final-normed hidden state (SeqStep::hidden_out) and the token it
//      produced;
//   2. the draft vocabulary: the most frequent generated tokens; head and embedding rows copied
//      from the target's lm_head and embed for those ids;
//   3. the backbone per draft position k by ridge least squares, [h_t; E[y_t]] → h_{t+k} (the
//      hidden state that produces the token k steps ahead), on the training sequences;
//   4. the low-rank Markov head by Adam on softmax cross-entropy over the draft vocabulary with
//      the backbone logits fixed (teacher-forced: prev_k is the true previous token);
//   5. the confidence head per k by logistic regression on held-out sequences (label: draft k
//      is right given drafts 1..k−1 were), then T_1..T_γ one after another, each minimising the
//      NLL of the cumulative product π_k against "the first k drafts were all accepted";
//   6. on held-out sequences: mean acceptance length (greedy, 1 + leading correct drafts) of the
//      full drafter, the backbone alone (Markov zeroed) and the Markov head alone (backbone
//      zeroed), and calibration (mean predicted π_k against the observed prefix acceptance).
// Needs the reference model (its embedding and LM head are copied); deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/drafter.h"
#include "ladle/engine/model.h"

namespace ladle::engine {

// The confidence features of one draft (softmax over the draft vocabulary): top probability,
// margin (top − second), entropy (nats).
inline constexpr int kDraftFeatures = 3;

// A drafter's parameters in memory (drafter.h gives the shapes' meaning; row-major).
struct DrafterWeights {
  DrafterConfig config;
  std::vector<TokenId> d2t;             // [Vd] draft id → target id, distinct, < target_vocab
  std::vector<float> embed;             // [Vd, H]
  std::vector<float> backbone_weight;   // [γ, H, 2H]
  std::vector<float> backbone_bias;     // [γ, H]
  std::vector<float> head;              // [Vd, H]
  std::vector<float> markov_u;          // [Vd, r]
  std::vector<float> markov_v;          // [Vd, r]
  std::vector<float> conf_weight;       // [γ, kDraftFeatures]
  std::vector<float> conf_hidden;       // [γ, H]: q_k on the backbone state; empty: zeros
  std::vector<float> conf_bias;         // [γ]
  std::vector<float> conf_temperature;  // [γ], > 0
};

// Checks sizes against the config (and d2t's ids), then builds a drafter that owns a copy.
Result<std::unique_ptr<Drafter>> MakeDrafter(const DrafterWeights& w);
// Writes dir/drafter.json and dir/drafter.safetensors (F32; d2t as exact F32-encoded ids).
// Creates `dir` if needed.
Status SaveDrafter(const DrafterWeights& w, const std::string& dir);
// Drafter::Draft, plus each draft's confidence features: γ × kDraftFeatures floats per input,
// appended input by input to *features, and (when `hidden` is given) the backbone states g_k,
// γ × H floats per input. kInvalidArgument for a drafter not made here or by Drafter::Load.
Status DraftWithFeatures(const Drafter& d, std::span<const DraftInput> in, std::vector<DraftOutput>* out,
                         std::vector<float>* features, std::vector<float>* hidden = nullptr);

struct FitOptions {
  // Sequences (train + held-out). A target whose output is spread over a large vocabulary (the
  // built-in seeded one) needs many: the draft vocabulary covers only tokens seen in training.
  int prompts = 256;
  int gen_tokens = 200;  // greedy tokens generated per sequence
  int prompt_min = 16;   // synthetic prompt lengths, uniform in [min, max]
  int prompt_max = 48;
  // Caller's prompts (token ids); when non-empty they replace the synthetic ones.
  std::vector<std::vector<TokenId>> prompt_ids;
  int draft_tokens = 5;    // γ
  // |Vd|: the most frequent generated ids, at most this many (fewer when fewer distinct tokens
  // were generated). 0: automatic, the fewest that cover draft_vocab_coverage of the training
  // tokens (by default all of them: on the built-in 129K model, 90 % coverage costs 0.06 of
  // acceptance length), at most draft_vocab_max (EAGLE-3's 32K). A trained LLM's Zipfian output
  // needs a few thousand ids; a flat one needs every id it produced.
  int draft_vocab = 0;
  double draft_vocab_coverage = 1.0;
  int draft_vocab_max = 32768;
  int rank = 32;           // r of the Markov head
  uint64_t seed = 1;
  double heldout_fraction = 0.25;  // of the sequences: confidence fit, calibration, evaluation
  int batch = 32;                  // sequences per target Forward
  double ridge = 1e-3;             // ridge λ relative to each feature's own Σx² (scale-free)
  int markov_epochs = 2;
  float markov_lr = 1e-2f;  // Adam step
  int markov_batch = 256;
  // Held-out positions the three variants are compared on (an even stride over all of them);
  // 0: all. The head is |Vd| × hidden per draft, so a large vocabulary makes evaluation the
  // slow part.
  int eval_positions = 6144;
};

// How one position's confidence head was fitted (2-fold validation on the calibration half):
// lambda 0 when the draft features alone predicted best, else the ridge (× rows) on the
// backbone state it uses; the validation NLL per row of features-only and of the choice.
struct ConfidenceChoice {
  double lambda = 0;
  double loss_features = 0, loss_chosen = 0;
};

// Acceptance of one drafter variant on the held-out sequences.
struct FitVariantStats {
  double acceptance_length = 1.0;     // mean of 1 + leading correct drafts (at most γ)
  std::vector<double> prefix_accept;  // per k: fraction whose first k drafts are all right
};

struct FitReport {
  DrafterWeights weights;
  int train_sequences = 0, heldout_sequences = 0;
  int64_t train_positions = 0, heldout_positions = 0;  // drafting positions (full γ future known)
  int64_t evaluated_positions = 0;  // held-out positions the variants were compared on
  double vocab_coverage = 0;  // fraction of the training sequences' tokens inside the draft vocabulary
  // Fraction of held-out positions whose next token is inside the draft vocabulary: an upper
  // bound on the first draft's acceptance (a target with flat output over a large vocabulary,
  // as the built-in seeded one, leaves little to draft).
  double heldout_vocab_coverage = 0;
  FitVariantStats both, backbone_only, markov_only;
  // Calibration on the second half of the held-out sequences (the first half fits the
  // confidence head): per k, the mean predicted π_k and the observed prefix acceptance.
  std::vector<double> predicted_pi, observed_pi;
  std::vector<ConfidenceChoice> confidence;  // per k
  int64_t calibration_positions = 0;
  double seconds_generate = 0, seconds_fit = 0, seconds_total = 0;
};

// phase ("generate", "backbone", "markov", "confidence", "evaluate") and its progress in [0, 1].
using FitProgress = std::function<void(std::string_view phase, double fraction)>;

Result<FitReport> FitDrafter(Model& target, const FitOptions& options, const FitProgress& progress = {});

}  // namespace ladle::engine
