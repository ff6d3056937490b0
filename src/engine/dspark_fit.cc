// Distilling the DSpark drafter from the reference model (dspark_fit.h gives the recipe).
#include "ladle/engine/dspark_fit.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "ladle/core/thread_pool.h"
#include "confidence_fit.h"
#include "model/kernels.h"
#include "model/ref_model.h"

namespace ladle::engine {
namespace {

using model::Floats;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One generated sequence: tokens[t] is the target's greedy token from hidden row t.
struct Sequence {
  std::vector<float> hidden;  // T × H
  std::vector<TokenId> tokens;
};

// A drafting position: sequence s, step t (hidden row t, last = tokens[t]); the truth for
// draft k (1-based) is tokens[t + k].
struct Position {
  int seq;
  int t;
};

Status CheckOptions(const FitOptions& o, const ModelConfig& mc) {
  if (o.draft_tokens < 1 || o.draft_tokens > 64) return InvalidArgument("dspark fit: draft_tokens must be in [1, 64]");
  if (o.draft_vocab < 0) return InvalidArgument("dspark fit: draft_vocab must be positive (or 0: automatic)");
  if (o.draft_vocab == 0 && (!(o.draft_vocab_coverage > 0.0 && o.draft_vocab_coverage <= 1.0) || o.draft_vocab_max < 1)) {
    return InvalidArgument("dspark fit: the automatic draft vocabulary needs a coverage in (0, 1] and a positive maximum");
  }
  if (o.eval_positions < 0) return InvalidArgument("dspark fit: eval_positions must be non-negative");
  if (o.rank < 1 || o.rank > 4096) return InvalidArgument("dspark fit: rank must be in [1, 4096]");
  if (o.gen_tokens < o.draft_tokens + 2) return InvalidArgument("dspark fit: gen_tokens must exceed draft_tokens + 1");
  if (!(o.heldout_fraction > 0.0 && o.heldout_fraction < 1.0)) {
    return InvalidArgument("dspark fit: heldout_fraction must be in (0, 1)");
  }
  if (o.batch < 1) return InvalidArgument("dspark fit: batch must be positive");
  if (!(o.ridge >= 0.0)) return InvalidArgument("dspark fit: ridge must be non-negative");
  if (o.markov_epochs < 0 || o.markov_batch < 1 || !(o.markov_lr > 0.0f)) {
    return InvalidArgument("dspark fit: bad Markov training settings");
  }
  const size_t n = o.prompt_ids.empty() ? static_cast<size_t>(std::max(0, o.prompts)) : o.prompt_ids.size();
  if (n < 3) return InvalidArgument("dspark fit: needs at least 3 prompts (training and two held-out halves)");
  if (o.prompt_ids.empty()) {
    if (o.prompt_min < 1 || o.prompt_max < o.prompt_min) return InvalidArgument("dspark fit: bad prompt lengths");
  }
  for (const auto& p : o.prompt_ids) {
    if (p.empty()) return InvalidArgument("dspark fit: an empty prompt");
    for (TokenId t : p) {
      if (t >= static_cast<TokenId>(mc.vocab_size))
        return InvalidArgument("dspark fit: prompt id outside the vocabulary");
    }
  }
  return Status::Ok();
}

std::vector<std::vector<TokenId>> MakePrompts(const FitOptions& o, const ModelConfig& mc) {
  if (!o.prompt_ids.empty()) return o.prompt_ids;
  // Ordinary ids only: DeepSeek's 0..2 are BOS/EOS/pad and its ids from 128000 up are added
  // special tokens; a vocabulary that small has no special range at the top.
  const uint32_t lo = 3, hi = static_cast<uint32_t>(mc.vocab_size > 128000 ? 128000 : mc.vocab_size);
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<TokenId>> out(static_cast<size_t>(o.prompts));
  for (auto& p : out) {
    const int len = o.prompt_min + static_cast<int>(rng() % static_cast<uint64_t>(o.prompt_max - o.prompt_min + 1));
    p.resize(static_cast<size_t>(len));
    for (auto& t : p) t = static_cast<TokenId>(lo + rng() % std::max<uint64_t>(1, hi - lo));
  }
  return out;
}

TokenId Argmax(const float* row, int n) {
  int best = 0;
  for (int v = 1; v < n; ++v) {
    if (row[v] > row[best]) best = v;
  }
  return static_cast<TokenId>(best);
}

// Greedy continuations, `batch` sequences per Forward, each with its own SWA slot and blocks.
Status Generate(Model& m, const FitOptions& o, const std::vector<std::vector<TokenId>>& prompts,
                const FitProgress& progress, std::vector<Sequence>* seqs) {
  const ModelConfig& mc = m.config();
  const int H = mc.hidden, V = mc.vocab_size, T = o.gen_tokens;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int per_seq = static_cast<int>((longest + T + mc.block_size - 1) / mc.block_size);
  const int batch = std::min<int>(o.batch, static_cast<int>(prompts.size()));
  auto kv = m.NewKvStorage(batch * per_seq, batch);
  if (!kv) return ResourceExhausted("dspark fit: cannot allocate the KV storage");
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i) {
    for (int b = 0; b < per_seq; ++b) tables[static_cast<size_t>(i)].push_back(i * per_seq + b);
  }
  seqs->assign(prompts.size(), Sequence{});
  const double total = static_cast<double>(prompts.size()) * T;
  double done = 0;
  std::vector<float> logits;
  std::vector<TokenId> next(static_cast<size_t>(batch));
  for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(batch)) {
    const int n = static_cast<int>(std::min<size_t>(static_cast<size_t>(batch), prompts.size() - first));
    for (int i = 0; i < n; ++i) {
      Sequence& s = (*seqs)[first + static_cast<size_t>(i)];
      s.hidden.resize(static_cast<size_t>(T) * H);
      s.tokens.resize(static_cast<size_t>(T));
    }
    for (int step = 0; step < T; ++step) {
      std::vector<SeqStep> steps(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        const auto& prompt = prompts[first + static_cast<size_t>(i)];
        Sequence& s = (*seqs)[first + static_cast<size_t>(i)];
        SeqStep& st = steps[static_cast<size_t>(i)];
        if (step == 0) {
          st.tokens = prompt;
          st.start_pos = 0;
          st.prefill = true;
        } else {
          st.tokens = std::span<const TokenId>(&s.tokens[static_cast<size_t>(step - 1)], 1);
          st.start_pos = static_cast<int64_t>(prompt.size()) + step - 1;
        }
        st.block_table = tables[static_cast<size_t>(i)];
        st.swa_slot = i;
        st.want_logits = true;
        st.hidden_out = s.hidden.data() + static_cast<size_t>(step) * H;
      }
      LADLE_RETURN_IF_ERROR(m.Forward(steps, *kv, &logits).WithContext("dspark fit: generating"));
      SharedPool().ParallelFor(static_cast<size_t>(n),
                               [&](size_t i) { next[i] = Argmax(logits.data() + i * static_cast<size_t>(V), V); });
      for (int i = 0; i < n; ++i) (*seqs)[first + static_cast<size_t>(i)].tokens[static_cast<size_t>(step)] = next[i];
      done += n;
      if (progress && (step % 10 == 9 || step == T - 1)) progress("generate", done / total);
    }
  }
  return Status::Ok();
}

std::vector<Position> Positions(const std::vector<Sequence>& seqs, int from, int to, int gamma) {
  std::vector<Position> out;
  for (int s = from; s < to; ++s) {
    const int T = static_cast<int>(seqs[static_cast<size_t>(s)].tokens.size());
    for (int t = 0; t + gamma < T; ++t) out.push_back({s, t});
  }
  return out;
}

// Drafts every input, in parallel chunks; the drafter is batch-invariant, so chunking does
// not change a bit. `features`/`hidden`: as DraftWithFeatures, when given.
void DraftAll(const Drafter& d, const std::vector<DraftInput>& in, std::vector<DraftOutput>* out,
              std::vector<float>* features, std::vector<float>* hidden = nullptr) {
  constexpr size_t kChunk = 128;
  const size_t chunks = (in.size() + kChunk - 1) / kChunk;
  std::vector<std::vector<DraftOutput>> outs(chunks);
  std::vector<std::vector<float>> feats(chunks), hids(chunks);
  SharedPool().ParallelFor(chunks, [&](size_t c) {
    const size_t lo = c * kChunk, n = std::min(kChunk, in.size() - lo);
    (void)DraftWithFeatures(d, std::span<const DraftInput>(in.data() + lo, n), &outs[c],
                            features ? &feats[c] : nullptr, hidden ? &hids[c] : nullptr);
  });
  out->clear();
  if (features) features->clear();
  if (hidden) hidden->clear();
  for (size_t c = 0; c < chunks; ++c) {
    out->insert(out->end(), outs[c].begin(), outs[c].end());
    if (features) features->insert(features->end(), feats[c].begin(), feats[c].end());
    if (hidden) hidden->insert(hidden->end(), hids[c].begin(), hids[c].end());
  }
}

std::vector<DraftInput> Inputs(const std::vector<Sequence>& seqs, const std::vector<Position>& pos, int H) {
  std::vector<DraftInput> in;
  in.reserve(pos.size());
  for (const Position& p : pos) {
    const Sequence& s = seqs[static_cast<size_t>(p.seq)];
    in.push_back({std::span<const float>(s.hidden.data() + static_cast<size_t>(p.t) * H, static_cast<size_t>(H)),
                  s.tokens[static_cast<size_t>(p.t)]});
  }
  return in;
}

// Leading correct drafts per position.
std::vector<int> Accepted(const std::vector<Sequence>& seqs, const std::vector<Position>& pos,
                          const std::vector<DraftOutput>& out) {
  std::vector<int> acc(pos.size(), 0);
  for (size_t i = 0; i < pos.size(); ++i) {
    const Sequence& s = seqs[static_cast<size_t>(pos[i].seq)];
    int a = 0;
    while (a < static_cast<int>(out[i].tokens.size()) &&
           out[i].tokens[static_cast<size_t>(a)] == s.tokens[static_cast<size_t>(pos[i].t + a + 1)]) {
      ++a;
    }
    acc[i] = a;
  }
  return acc;
}

FitVariantStats Evaluate(const DrafterWeights& w, const std::vector<Sequence>& seqs, const std::vector<Position>& pos,
                         Status* status) {
  FitVariantStats st;
  auto d = MakeDrafter(w);
  if (!d.ok()) {
    *status = d.status();
    return st;
  }
  std::vector<DraftOutput> out;
  DraftAll(**d, Inputs(seqs, pos, w.config.hidden), &out, nullptr);
  const int G = w.config.draft_tokens;
  std::vector<int> acc = Accepted(seqs, pos, out);
  st.prefix_accept.assign(static_cast<size_t>(G), 0.0);
  double sum = 0;
  for (int a : acc) {
    sum += 1 + a;
    for (int k = 0; k < a; ++k) st.prefix_accept[static_cast<size_t>(k)] += 1;
  }
  const double n = std::max<size_t>(1, pos.size());
  st.acceptance_length = sum / n;
  for (double& x : st.prefix_accept) x /= n;
  return st;
}

double Sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }
double ClampP(double p) { return std::clamp(p, 1e-6, 1.0 - 1e-6); }

// The rows of the target's embedding and LM head for the draft vocabulary.
Status CopyTargetRows(const Model& target, DrafterWeights* w) {
  const auto* ref = dynamic_cast<const model::RefModel*>(&target);
  if (ref == nullptr) return Unsupported("dspark fit: needs the reference model (its embedding and LM head)");
  const model::ModelWeights& tw = ref->weights();
  const size_t H = static_cast<size_t>(w->config.hidden);
  w->embed.resize(w->d2t.size() * H);
  w->head.resize(w->d2t.size() * H);
  for (size_t i = 0; i < w->d2t.size(); ++i) {
    std::memcpy(w->embed.data() + i * H, tw.embed + static_cast<size_t>(w->d2t[i]) * H, sizeof(float) * H);
    std::memcpy(w->head.data() + i * H, tw.lm_head + static_cast<size_t>(w->d2t[i]) * H, sizeof(float) * H);
  }
  return Status::Ok();
}

// Ridge regression per draft position: x = [h_t; E[y_t]; 1] → h_{t+k}. One Gram matrix
// serves every k (same inputs, different targets).
Status FitBackbone(const std::vector<Sequence>& seqs, const std::vector<Position>& pos, const std::vector<int32_t>& t2d,
                   const FitOptions& o, const FitProgress& progress, DrafterWeights* w) {
  const int H = w->config.hidden, G = w->config.draft_tokens, D = 2 * H + 1;
  const int N = static_cast<int>(pos.size());
  // Xᵀ (D × N) so that Linear (y = x·Wᵀ) gives XᵀX and XᵀY directly.
  Floats xt(static_cast<size_t>(D) * N);
  for (int i = 0; i < N; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(pos[static_cast<size_t>(i)].seq)];
    const int t = pos[static_cast<size_t>(i)].t;
    const float* h = s.hidden.data() + static_cast<size_t>(t) * H;
    const int d = t2d[s.tokens[static_cast<size_t>(t)]];
    for (int j = 0; j < H; ++j) {
      xt[static_cast<size_t>(j) * N + i] = h[j];
      xt[static_cast<size_t>(H + j) * N + i] = d >= 0 ? w->embed[static_cast<size_t>(d) * H + j] : 0.0f;
    }
    xt[static_cast<size_t>(2 * H) * N + i] = 1.0f;
  }
  Floats gram(static_cast<size_t>(D) * D);
  model::Linear(xt.data(), D, N, xt.data(), D, gram.data());
  if (progress) progress("backbone", 0.2);
  w->backbone_weight.assign(static_cast<size_t>(G) * H * 2 * H, 0.0f);
  w->backbone_bias.assign(static_cast<size_t>(G) * H, 0.0f);
  Floats yt(static_cast<size_t>(H) * N), xty(static_cast<size_t>(D) * H);
  for (int k = 1; k <= G; ++k) {
    for (int i = 0; i < N; ++i) {
      const Sequence& s = seqs[static_cast<size_t>(pos[static_cast<size_t>(i)].seq)];
      const float* h = s.hidden.data() + static_cast<size_t>(pos[static_cast<size_t>(i)].t + k) * H;
      for (int j = 0; j < H; ++j) yt[static_cast<size_t>(j) * N + i] = h[j];
    }
    model::Linear(xt.data(), D, N, yt.data(), H, xty.data());
    // Ridge scaled per feature by its own Σx² (the hidden state and the embedding differ in
    // scale); the bias is not penalised. A tiny absolute term keeps all-zero columns (an
    // embedding outside the draft vocabulary) solvable.
    std::vector<double> a(static_cast<size_t>(D) * D), b(static_cast<size_t>(D) * H);
    for (size_t i = 0; i < a.size(); ++i) a[i] = gram[i];
    for (size_t i = 0; i < b.size(); ++i) b[i] = xty[i];
    for (int j = 0; j < D; ++j) {
      const double diag = a[static_cast<size_t>(j) * D + j];
      a[static_cast<size_t>(j) * D + j] += (j < 2 * H ? o.ridge * diag : 0.0) + 1e-6 * N;
    }
    LADLE_RETURN_IF_ERROR(CholeskySolve(a, D, b, H));
    float* wk = w->backbone_weight.data() + static_cast<size_t>(k - 1) * H * 2 * H;
    for (int out = 0; out < H; ++out) {
      for (int in = 0; in < 2 * H; ++in)
        wk[static_cast<size_t>(out) * 2 * H + in] = static_cast<float>(b[static_cast<size_t>(in) * H + out]);
      w->backbone_bias[static_cast<size_t>(k - 1) * H + out] =
          static_cast<float>(b[static_cast<size_t>(2 * H) * H + out]);
    }
    if (progress) progress("backbone", 0.2 + 0.8 * k / G);
  }
  return Status::Ok();
}

// The low-rank Markov head, U[prev]·V[v], by Adam on softmax cross-entropy over the draft
// vocabulary with the backbone logits fixed; teacher-forced (prev_k is the true token before
// the k-th), which is the case that matters: once a draft is wrong the rest are not accepted.
Status FitMarkov(const std::vector<Sequence>& seqs, const std::vector<Position>& pos, const std::vector<int32_t>& t2d,
                 const FitOptions& o, const FitProgress& progress, DrafterWeights* w) {
  const int H = w->config.hidden, G = w->config.draft_tokens, Vd = w->config.draft_vocab, R = w->config.rank;
  const int N = static_cast<int>(pos.size());
  // The backbone outputs g_k of every training position (N·G rows of H).
  Floats x(static_cast<size_t>(N) * 2 * H), g(static_cast<size_t>(N) * G * H), gk(static_cast<size_t>(N) * H);
  for (int i = 0; i < N; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(pos[static_cast<size_t>(i)].seq)];
    const int t = pos[static_cast<size_t>(i)].t;
    std::memcpy(x.data() + static_cast<size_t>(i) * 2 * H, s.hidden.data() + static_cast<size_t>(t) * H,
                sizeof(float) * H);
    const int d = t2d[s.tokens[static_cast<size_t>(t)]];
    float* e = x.data() + static_cast<size_t>(i) * 2 * H + H;
    if (d >= 0)
      std::memcpy(e, w->embed.data() + static_cast<size_t>(d) * H, sizeof(float) * H);
    else
      std::fill(e, e + H, 0.0f);
  }
  for (int k = 0; k < G; ++k) {
    model::Linear(x.data(), N, 2 * H, w->backbone_weight.data() + static_cast<size_t>(k) * H * 2 * H, H, gk.data());
    for (int i = 0; i < N; ++i) {
      float* dst = g.data() + (static_cast<size_t>(i) * G + k) * H;
      for (int j = 0; j < H; ++j)
        dst[j] = gk[static_cast<size_t>(i) * H + j] + w->backbone_bias[static_cast<size_t>(k) * H + j];
    }
  }
  struct Sample {
    int32_t row, prev, label;
  };
  std::vector<Sample> samples;
  for (int i = 0; i < N; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(pos[static_cast<size_t>(i)].seq)];
    const int t = pos[static_cast<size_t>(i)].t;
    for (int k = 1; k <= G; ++k) {
      const int prev = t2d[s.tokens[static_cast<size_t>(t + k - 1)]], label = t2d[s.tokens[static_cast<size_t>(t + k)]];
      // No bias exists for a previous token outside the vocabulary, nor a class for a label.
      if (prev >= 0 && label >= 0) samples.push_back({i * G + k - 1, prev, label});
    }
  }
  std::mt19937_64 rng(o.seed ^ 0x6d61726b6f76ull);
  Floats U(static_cast<size_t>(Vd) * R, 0.0f), V(static_cast<size_t>(Vd) * R);
  // U starts at zero (the bias starts at zero) and V random, so U's first gradient is not zero.
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(R)));
  for (float& v : V) v = normal(rng);
  Floats mu(U.size(), 0.0f), vu(U.size(), 0.0f), mv(V.size(), 0.0f), vv(V.size(), 0.0f);
  const int B = o.markov_batch;
  Floats gb(static_cast<size_t>(B) * H), z(static_cast<size_t>(B) * Vd), mb(static_cast<size_t>(B) * Vd),
      ub(static_cast<size_t>(B) * R), ubt(static_cast<size_t>(R) * B), gzt(static_cast<size_t>(Vd) * B),
      vt(static_cast<size_t>(R) * Vd), dv(static_cast<size_t>(Vd) * R), dub(static_cast<size_t>(B) * R), du(U.size());
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  int64_t step = 0;
  const int64_t total_steps =
      static_cast<int64_t>(o.markov_epochs) * ((static_cast<int64_t>(samples.size()) + B - 1) / B);
  for (int epoch = 0; epoch < o.markov_epochs; ++epoch) {
    std::shuffle(samples.begin(), samples.end(), rng);
    for (size_t first = 0; first < samples.size(); first += static_cast<size_t>(B)) {
      const int n = static_cast<int>(std::min<size_t>(static_cast<size_t>(B), samples.size() - first));
      for (int i = 0; i < n; ++i) {
        const Sample& s = samples[first + static_cast<size_t>(i)];
        std::memcpy(gb.data() + static_cast<size_t>(i) * H, g.data() + static_cast<size_t>(s.row) * H,
                    sizeof(float) * H);
        std::memcpy(ub.data() + static_cast<size_t>(i) * R, U.data() + static_cast<size_t>(s.prev) * R,
                    sizeof(float) * R);
      }
      model::Linear(gb.data(), n, H, w->head.data(), Vd, z.data());
      model::Linear(ub.data(), n, R, V.data(), Vd, mb.data());
      // z ← softmax(z + m) − onehot(label), scaled by 1/n: the gradient of the mean loss.
      SharedPool().ParallelFor(static_cast<size_t>(n), [&](size_t i) {
        float* zi = z.data() + i * Vd;
        const float* mi = mb.data() + i * Vd;
        float mx = -INFINITY;
        for (int v = 0; v < Vd; ++v) mx = std::max(mx, zi[v] += mi[v]);
        double sum = 0;
        for (int v = 0; v < Vd; ++v) sum += (zi[v] = std::exp(zi[v] - mx));  // float exp: training only
        const float scale = static_cast<float>(1.0 / (sum * n));
        for (int v = 0; v < Vd; ++v) zi[v] *= scale;
        zi[samples[first + i].label] -= 1.0f / n;
      });
      // dV = Gzᵀ·Ub, dUb = Gz·V (as Linear's y = x·Wᵀ: transposed copies).
      for (int i = 0; i < n; ++i) {
        for (int v = 0; v < Vd; ++v) gzt[static_cast<size_t>(v) * n + i] = z[static_cast<size_t>(i) * Vd + v];
        for (int r = 0; r < R; ++r) ubt[static_cast<size_t>(r) * n + i] = ub[static_cast<size_t>(i) * R + r];
      }
      for (int v = 0; v < Vd; ++v) {
        for (int r = 0; r < R; ++r) vt[static_cast<size_t>(r) * Vd + v] = V[static_cast<size_t>(v) * R + r];
      }
      model::Linear(gzt.data(), Vd, n, ubt.data(), R, dv.data());
      model::Linear(z.data(), n, Vd, vt.data(), R, dub.data());
      std::fill(du.begin(), du.end(), 0.0f);
      for (int i = 0; i < n; ++i) {
        float* dst = du.data() + static_cast<size_t>(samples[first + static_cast<size_t>(i)].prev) * R;
        for (int r = 0; r < R; ++r) dst[r] += dub[static_cast<size_t>(i) * R + r];
      }
      ++step;
      const float c1 = 1.0f / (1.0f - std::pow(b1, static_cast<float>(step)));
      const float c2 = 1.0f / (1.0f - std::pow(b2, static_cast<float>(step)));
      auto adam = [&](Floats& p, Floats& m, Floats& v2, const Floats& grad) {
        for (size_t j = 0; j < p.size(); ++j) {
          m[j] = b1 * m[j] + (1 - b1) * grad[j];
          v2[j] = b2 * v2[j] + (1 - b2) * grad[j] * grad[j];
          p[j] -= o.markov_lr * (m[j] * c1) / (std::sqrt(v2[j] * c2) + eps);
        }
      };
      adam(U, mu, vu, du);
      adam(V, mv, vv, dv);
      if (progress && step % 20 == 0) progress("markov", static_cast<double>(step) / std::max<int64_t>(1, total_steps));
    }
  }
  w->markov_u.assign(U.begin(), U.end());
  w->markov_v.assign(V.begin(), V.end());
  if (progress) progress("markov", 1.0);
  return Status::Ok();
}

// The confidence head per k on the held-out calibration half (FitConfidenceHead), then
// T_1..T_γ in order: T_k minimises the NLL of π_k = π_{k−1}·c_k against "the first k drafts
// were all right", with the earlier temperatures fixed, so the cumulative products the verify
// policy multiplies are what is calibrated, not just each conditional on its own.
Status FitConfidence(const std::vector<Sequence>& seqs, const std::vector<Position>& pos, const FitProgress& progress,
                     DrafterWeights* w, std::vector<ConfidenceChoice>* choices) {
  const int G = w->config.draft_tokens, H = w->config.hidden;
  w->conf_weight.assign(static_cast<size_t>(G) * kDraftFeatures, 0.0f);
  w->conf_hidden.assign(static_cast<size_t>(G) * H, 0.0f);
  w->conf_bias.assign(static_cast<size_t>(G), 0.0f);
  w->conf_temperature.assign(static_cast<size_t>(G), 1.0f);
  choices->assign(static_cast<size_t>(G), ConfidenceChoice{});
  LADLE_ASSIGN_OR_RETURN(auto d, MakeDrafter(*w));
  std::vector<DraftOutput> out;
  std::vector<float> feats, hidden;
  DraftAll(*d, Inputs(seqs, pos, H), &out, &feats, &hidden);
  std::vector<int> acc = Accepted(seqs, pos, out);
  if (progress) progress("confidence", 0.3);
  auto feat = [&](size_t i, int k) { return feats.data() + (i * G + k) * kDraftFeatures; };
  auto hid = [&](size_t i, int k) { return hidden.data() + (i * G + k) * static_cast<size_t>(H); };
  for (int k = 0; k < G; ++k) {
    ConfRows rows;
    for (size_t i = 0; i < pos.size(); ++i) {
      if (acc[i] < k) continue;  // an earlier draft was wrong: this one is never verified
      rows.f.push_back(feat(i, k));
      rows.g.push_back(hid(i, k));
      rows.y.push_back(acc[i] > k ? 1 : 0);
      rows.seq.push_back(pos[i].seq);
    }
    float* wk = w->conf_weight.data() + static_cast<size_t>(k) * kDraftFeatures;
    float* qk = w->conf_hidden.data() + static_cast<size_t>(k) * H;
    if (rows.y.empty() && k > 0) {
      // No held-out position got this far: the previous position's head is the best guess.
      std::copy(wk - kDraftFeatures, wk, wk);
      std::copy(qk - H, qk, qk);
      w->conf_bias[static_cast<size_t>(k)] = w->conf_bias[static_cast<size_t>(k - 1)];
      (*choices)[static_cast<size_t>(k)] = (*choices)[static_cast<size_t>(k - 1)];
    } else {
      FitConfidenceHead(rows, H, wk, qk, &w->conf_bias[static_cast<size_t>(k)], &(*choices)[static_cast<size_t>(k)]);
    }
    if (progress) progress("confidence", 0.3 + 0.5 * (k + 1) / G);
  }
  std::vector<double> pi(pos.size(), 1.0), logit(pos.size());
  for (int k = 0; k < G; ++k) {
    for (size_t i = 0; i < pos.size(); ++i) {
      // As the drafter computes it: features, then the backbone state, in index order.
      const float* f = feat(i, k);
      const float* g = hid(i, k);
      double a = w->conf_bias[static_cast<size_t>(k)];
      for (int j = 0; j < kDraftFeatures; ++j)
        a += static_cast<double>(w->conf_weight[static_cast<size_t>(k) * kDraftFeatures + j]) * f[j];
      for (int j = 0; j < H; ++j) a += static_cast<double>(w->conf_hidden[static_cast<size_t>(k) * H + j]) * g[j];
      logit[i] = a;
    }
    auto nll = [&](double log_t) {
      const double t = std::exp(log_t);
      double s = 0;
      for (size_t i = 0; i < pos.size(); ++i) {
        const double p = ClampP(pi[i] * ClampP(Sigmoid(logit[i] / t)));
        s -= acc[i] > k ? std::log(p) : std::log1p(-p);
      }
      return s;
    };
    // Golden-section search over log T in [log 0.25, log 4] (NLL is unimodal in T here in
    // practice; the bracket keeps a degenerate fit, e.g. no accepted draft at all, from
    // running away).
    double lo = std::log(0.25), hi = std::log(4.0);
    const double phi = (std::sqrt(5.0) - 1) / 2;
    double a = hi - phi * (hi - lo), b = lo + phi * (hi - lo), fa = nll(a), fb = nll(b);
    for (int it = 0; it < 60; ++it) {
      if (fa <= fb) {
        hi = b, b = a, fb = fa, a = hi - phi * (hi - lo), fa = nll(a);
      } else {
        lo = a, a = b, fa = fb, b = lo + phi * (hi - lo), fb = nll(b);
      }
    }
    // T = 1 unless another T gains over 1 nat of held-out log-likelihood (about a likelihood-
    // ratio test): a nearly flat loss (every logit the same, no position left with π above the
    // clamp) says nothing about T, and the search would stop anywhere.
    const double best = (lo + hi) / 2;
    const double t = nll(0.0) - nll(best) < 1.0 ? 1.0 : std::exp(best);
    w->conf_temperature[static_cast<size_t>(k)] = static_cast<float>(t);
    for (size_t i = 0; i < pos.size(); ++i) pi[i] = ClampP(pi[i] * ClampP(Sigmoid(logit[i] / t)));
    if (progress) progress("confidence", 0.8 + 0.2 * (k + 1) / G);
  }
  return Status::Ok();
}

}  // namespace

Result<FitReport> FitDrafter(Model& target, const FitOptions& o, const FitProgress& progress) {
  const Clock::time_point t0 = Clock::now();
  const ModelConfig& mc = target.config();
  LADLE_RETURN_IF_ERROR(CheckOptions(o, mc));
  if (dynamic_cast<const model::RefModel*>(&target) == nullptr) {
    return Unsupported("dspark fit: needs the reference model (its embedding and LM head)");
  }
  LADLE_RETURN_IF_ERROR(model::InitBlas());
  FitReport rep;
  const int H = mc.hidden, G = o.draft_tokens;

  std::vector<Sequence> seqs;
  LADLE_RETURN_IF_ERROR(Generate(target, o, MakePrompts(o, mc), progress, &seqs));
  rep.seconds_generate = Since(t0);
  const Clock::time_point t1 = Clock::now();

  // The last sequences are held out: their first half fits the confidence head, the second
  // half only measures calibration.
  const int n = static_cast<int>(seqs.size());
  const int held = std::clamp(static_cast<int>(std::lround(n * o.heldout_fraction)), 2, n - 1);
  const int train = n - held, calib_end = train + held / 2;
  rep.train_sequences = train;
  rep.heldout_sequences = held;

  // The draft vocabulary: the training sequences' most frequent tokens (ties: lower id).
  std::vector<int64_t> count(static_cast<size_t>(mc.vocab_size), 0);
  int64_t total_tokens = 0;
  for (int s = 0; s < train; ++s) {
    for (TokenId t : seqs[static_cast<size_t>(s)].tokens) ++count[t], ++total_tokens;
  }
  std::vector<TokenId> ids;
  for (int v = 0; v < mc.vocab_size; ++v) {
    if (count[static_cast<size_t>(v)] > 0) ids.push_back(static_cast<TokenId>(v));
  }
  std::stable_sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return count[a] > count[b]; });
  size_t keep = ids.size();
  if (o.draft_vocab > 0) {
    keep = std::min(keep, static_cast<size_t>(o.draft_vocab));
  } else {
    // Automatic: the fewest ids that reach the coverage, within the maximum.
    int64_t sum = 0;
    size_t k = 0;
    while (k < ids.size() && static_cast<double>(sum) < o.draft_vocab_coverage * static_cast<double>(total_tokens)) {
      sum += count[ids[k]];
      ++k;
    }
    keep = std::min(k, static_cast<size_t>(o.draft_vocab_max));
  }
  ids.resize(keep);
  int64_t covered = 0;
  for (TokenId t : ids) covered += count[t];
  rep.vocab_coverage = total_tokens > 0 ? static_cast<double>(covered) / total_tokens : 0.0;

  DrafterWeights& w = rep.weights;
  w.config.hidden = H;
  w.config.target_vocab = mc.vocab_size;
  w.config.draft_vocab = static_cast<int>(ids.size());
  w.config.draft_tokens = G;
  w.config.rank = o.rank;
  w.config.target = ModelFingerprint(mc);
  w.d2t = ids;
  std::vector<int32_t> t2d(static_cast<size_t>(mc.vocab_size), -1);
  for (size_t i = 0; i < ids.size(); ++i) t2d[ids[i]] = static_cast<int32_t>(i);
  LADLE_RETURN_IF_ERROR(CopyTargetRows(target, &w));

  const std::vector<Position> train_pos = Positions(seqs, 0, train, G);
  const std::vector<Position> calib_pos = Positions(seqs, train, calib_end, G);
  const std::vector<Position> eval_pos = Positions(seqs, calib_end, n, G);
  std::vector<Position> held_pos = calib_pos;
  held_pos.insert(held_pos.end(), eval_pos.begin(), eval_pos.end());
  rep.train_positions = static_cast<int64_t>(train_pos.size());
  rep.heldout_positions = static_cast<int64_t>(held_pos.size());
  rep.calibration_positions = static_cast<int64_t>(eval_pos.size());
  int64_t in_vocab = 0;
  for (const Position& p : held_pos)
    in_vocab += t2d[seqs[static_cast<size_t>(p.seq)].tokens[static_cast<size_t>(p.t + 1)]] >= 0;
  rep.heldout_vocab_coverage = held_pos.empty() ? 0.0 : static_cast<double>(in_vocab) / held_pos.size();

  LADLE_RETURN_IF_ERROR(FitBackbone(seqs, train_pos, t2d, o, progress, &w));
  LADLE_RETURN_IF_ERROR(FitMarkov(seqs, train_pos, t2d, o, progress, &w));
  LADLE_RETURN_IF_ERROR(FitConfidence(seqs, calib_pos, progress, &w, &rep.confidence));
  rep.seconds_fit = Since(t1);

  // Acceptance on held-out positions (none of them fitted the backbone or Markov head): all of
  // them, or an even stride of eval_positions, the same for the three variants.
  std::vector<Position> eval_sample = held_pos;
  if (o.eval_positions > 0 && held_pos.size() > static_cast<size_t>(o.eval_positions)) {
    eval_sample.clear();
    for (int i = 0; i < o.eval_positions; ++i)
      eval_sample.push_back(held_pos[static_cast<size_t>(i) * held_pos.size() / static_cast<size_t>(o.eval_positions)]);
  }
  rep.evaluated_positions = static_cast<int64_t>(eval_sample.size());
  Status st = Status::Ok();
  rep.both = Evaluate(w, seqs, eval_sample, &st);
  DrafterWeights variant = w;
  std::fill(variant.markov_u.begin(), variant.markov_u.end(), 0.0f);
  rep.backbone_only = Evaluate(variant, seqs, eval_sample, &st);
  if (progress) progress("evaluate", 0.25);
  variant = w;
  std::fill(variant.backbone_weight.begin(), variant.backbone_weight.end(), 0.0f);
  std::fill(variant.backbone_bias.begin(), variant.backbone_bias.end(), 0.0f);
  rep.markov_only = Evaluate(variant, seqs, eval_sample, &st);
  if (progress) progress("evaluate", 0.5);
  LADLE_RETURN_IF_ERROR(st);
  if (progress) progress("evaluate", 0.75);
  // Calibration on the half the confidence head never saw.
  LADLE_ASSIGN_OR_RETURN(auto d, MakeDrafter(w));
  std::vector<DraftOutput> out;
  DraftAll(*d, Inputs(seqs, eval_pos, H), &out, nullptr);
  std::vector<int> acc = Accepted(seqs, eval_pos, out);
  rep.predicted_pi.assign(static_cast<size_t>(G), 0.0);
  rep.observed_pi.assign(static_cast<size_t>(G), 0.0);
  for (size_t i = 0; i < eval_pos.size(); ++i) {
    double pi = 1.0;
    for (int k = 0; k < G; ++k) {
      pi *= out[i].confidences[static_cast<size_t>(k)];
      rep.predicted_pi[static_cast<size_t>(k)] += pi;
      if (acc[i] > k) rep.observed_pi[static_cast<size_t>(k)] += 1;
    }
  }
  for (int k = 0; k < G; ++k) {
    rep.predicted_pi[static_cast<size_t>(k)] /= std::max<size_t>(1, eval_pos.size());
    rep.observed_pi[static_cast<size_t>(k)] /= std::max<size_t>(1, eval_pos.size());
  }
  if (progress) progress("evaluate", 1.0);
  rep.seconds_total = Since(t0);
  return rep;
}

}  // namespace ladle::engine
