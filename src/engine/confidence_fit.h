// The DSpark confidence head's fit (dspark_fit.cc): binary logistic regression by damped Newton
// steps, and the choice, per draft position, between the draft features alone and the features
// with the backbone state. Internal to the engine library.
#pragma once

#include <span>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/dspark_fit.h"

namespace ladle::engine {

// Cholesky solve of A·X = B in place (A n×n symmetric positive definite, B n×m, row-major,
// double); kInternal when A is not positive definite. The drafter's ridge fits use it too.
Status CholeskySolve(std::vector<double>& a, int n, std::vector<double>& b, int m);

struct LogisticProblem {
  int d = 0;                      // columns per row; the caller adds a constant column for the intercept
  std::span<const double> x;      // n × d, row-major (standardised by the caller)
  std::span<const int> y;         // n labels, 0 or 1
  std::span<const double> l2;     // d penalties on θ (0 for the intercept)
  // One row: half a pseudo-positive and half a pseudo-negative sit here, so θ stays finite
  // when every label is the same (a draft position no held-out sequence ever got right).
  std::span<const double> prior;
};

// θ minimising the penalised negative log-likelihood, from θ = 0 with θ[intercept] = init;
// `intercept` is the constant column. Each Newton step moves no coordinate by more than 2
// logits, so a flat stretch of the loss cannot throw θ away. Deterministic.
std::vector<double> FitLogistic(const LogisticProblem& p, int intercept, double init);

// Mean negative log-likelihood of the rows (no penalty, no prior).
double LogisticLoss(std::span<const double> theta, const LogisticProblem& p);

// One confidence head's rows (draft k of positions whose drafts 1..k−1 were all right): its
// features f (kDraftFeatures floats each), the backbone state g (H floats), the label (draft k
// right) and the row's sequence (the validation folds).
struct ConfRows {
  std::vector<const float*> f, g;
  std::vector<int> y, seq;
};

// The confidence head of one k by logistic regression on standardised columns: the draft
// features alone, or with the backbone state g_k under a ridge of λ·rows. Which, and λ, is
// chosen by 2-fold validation (folds by sequence parity) among features-only and
// λ ∈ {10, 1, 0.1, 0.01} by held-out NLL, then refit on every row. Writes w (kDraftFeatures),
// q (H; zeros when features-only) and the bias, raw-column weights as the drafter applies them.
void FitConfidenceHead(const ConfRows& r, int H, float* w, float* q, float* b, ConfidenceChoice* choice);

}  // namespace ladle::engine
