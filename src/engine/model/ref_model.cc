#include "ref_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "expert_parallel.h"
#include "kernels.h"
#include "ladle/core/thread_pool.h"

namespace ladle::engine {
namespace model {
namespace {

constexpr int kLmHeadChunk = 512;  // vocab rows per LM-head tile: 512 KiB at hidden 256, L2-resident

float* Grow(Floats& b, size_t n) {
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Where the ring of a step starting at `pos0` may be read from: the positions this slot
// already holds for the same sequence, or nothing before pos0 (a bounded replay from pos0).
int64_t ContinueFrom(const RingRange& r, int64_t pos0, int ring) {
  if (pos0 > r.hi) return pos0;  // a gap: the ring is not this sequence's recent past
  return std::min(pos0, std::max(r.lo, r.hi - ring));
}

// Softmax attention of one head's query over keys [from, to]; key(j) gives K and V rows.
template <typename KeyFn>
void Attend(const float* q, int hd, int64_t from, int64_t to, float scale, KeyFn key, float* scores, float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = from; j <= to; ++j) {
    float sc = Dot(q, key(j).first, hd) * scale;
    scores[j - from] = sc;
    m = std::max(m, sc);
  }
  float sum = 0.0f;
  std::fill(out, out + hd, 0.0f);
  for (int64_t j = from; j <= to; ++j) {
    float e = std::exp(scores[j - from] - m);
    sum += e;
    const float* v = key(j).second;
    for (int d = 0; d < hd; ++d) out[d] += e * v[d];
  }
  float inv = 1.0f / sum;
  for (int d = 0; d < hd; ++d) out[d] *= inv;
}

}  // namespace

// Per-sequence buffers: each sequence owns its scratch, so sequences run in parallel
// without sharing anything that could couple their results.
struct RefModel::Scratch {
  Floats h, q, k, v, att, o, scores, router, shared, gathered, expert_out, g, u, d, y;
};

RefModel::RefModel(const ModelConfig& c, std::unique_ptr<ModelWeights> w)
    : config_(c), weights_(std::move(w)), kv_dim_(c.heads * c.head_dim), row_stride_((c.hidden + 15) / 16 * 16) {}

std::unique_ptr<KvStorage> RefModel::NewKvStorage(int num_blocks, int num_slots) const {
  auto kv = std::make_unique<ModelKvStorage>(config_, std::max(num_blocks, 0), std::max(num_slots, 0));
  if (!kv->ok()) return nullptr;
  return kv;
}

void RefModel::SwaAttention(const AttnWeights& w, int ring_layer, float* x, int n, int64_t pos0, int64_t lo,
                            ModelKvStorage& kv, int slot, Scratch& s, SwaCapture* capture) const {
  const int H = config_.hidden, A = kv_dim_, hd = config_.head_dim, R = config_.swa_ring;
  float* h = Grow(s.h, static_cast<size_t>(n) * H);
  float* q = Grow(s.q, static_cast<size_t>(n) * A);
  float* k = Grow(s.k, static_cast<size_t>(n) * A);
  float* v = Grow(s.v, static_cast<size_t>(n) * A);
  float* att = Grow(s.att, static_cast<size_t>(n) * A);
  float* o = Grow(s.o, static_cast<size_t>(n) * H);
  float* scores = Grow(s.scores, static_cast<size_t>(config_.window));
  RmsNorm(x, n, H, w.norm, config_.rms_eps, h);
  Linear(h, n, H, w.wq, A, q);
  Linear(h, n, H, w.wk, A, k);
  Linear(h, n, H, w.wv, A, v);
  float* ring_k = kv.RingK(slot, ring_layer);
  float* ring_v = kv.RingV(slot, ring_layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // The anchor's window is whole in the ring right after position anchor − 1 is written (or
  // at the start, for a step that starts at the anchor): later writes of a long chunk would
  // overwrite it.
  if (capture != nullptr && capture->anchor == pos0) kv.CaptureSwaLayer(slot, ring_layer, capture->anchor, capture->bytes.data());
  for (int i = 0; i < n; ++i) {
    const int64_t p = pos0 + i;
    float* qi = q + static_cast<size_t>(i) * A;
    float* ki = k + static_cast<size_t>(i) * A;
    Rope(qi, config_.heads, hd, p, config_.rope_theta);
    Rope(ki, config_.heads, hd, p, config_.rope_theta);
    // Written before the query reads it; it overwrites p − R, which no later query needs
    // (window ≤ R), so queries and writes interleave for chunks of any length.
    const size_t at = static_cast<size_t>(p % R) * A;
    std::memcpy(ring_k + at, ki, sizeof(float) * A);
    std::memcpy(ring_v + at, v + static_cast<size_t>(i) * A, sizeof(float) * A);
    if (capture != nullptr && p + 1 == capture->anchor) kv.CaptureSwaLayer(slot, ring_layer, capture->anchor, capture->bytes.data());
    const int64_t from = std::max(lo, p - config_.window + 1);
    for (int hh = 0; hh < config_.heads; ++hh) {
      const size_t off = static_cast<size_t>(hh) * hd;
      auto key = [&](int64_t j) {
        size_t r = static_cast<size_t>(j % R) * A + off;
        return std::pair<const float*, const float*>(ring_k + r, ring_v + r);
      };
      Attend(qi + off, hd, from, p, scale, key, scores, att + static_cast<size_t>(i) * A + off);
    }
  }
  Linear(att, n, A, w.wo, H, o);
  for (size_t i = 0; i < static_cast<size_t>(n) * H; ++i) x[i] += o[i];
}

void RefModel::GlobalAttention(const GlobalAttnWeights& w, float* x, int n, int64_t pos0, const SeqStep& step,
                               ModelKvStorage& kv, Scratch& s) const {
  const int H = config_.hidden, A = kv_dim_, hd = config_.head_dim, B = config_.block_size;
  float* h = Grow(s.h, static_cast<size_t>(n) * H);
  float* q = Grow(s.q, static_cast<size_t>(n) * A);
  float* att = Grow(s.att, static_cast<size_t>(n) * A);
  float* o = Grow(s.o, static_cast<size_t>(n) * H);
  RmsNorm(x, n, H, w.norm, config_.rms_eps, h);
  Linear(h, n, H, w.wq, A, q);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int i = 0; i < n; ++i) Rope(q + static_cast<size_t>(i) * A, config_.heads, hd, pos0 + i, config_.rope_theta);
  // Queries in tiles, keys block by block: each key block is read once per tile instead of once
  // per query (a long context's K and V no longer stream from memory for every query). Each
  // query's arithmetic is Attend's, in the same order (scores and running max over keys 0..p,
  // then exp-weighted V in key order), so the result does not depend on the tile or on n.
  constexpr int kTile = 32;
  const int64_t ctx = pos0 + n;
  float* scores = Grow(s.scores, static_cast<size_t>(kTile) * static_cast<size_t>(ctx));
  float mx[kTile], sum[kTile];
  for (int hh = 0; hh < config_.heads; ++hh) {
    const size_t off = static_cast<size_t>(hh) * hd;
    for (int t0 = 0; t0 < n; t0 += kTile) {
      const int t1 = std::min(n, t0 + kTile);
      const int64_t keys = pos0 + t1;  // the tile's last query sees keys [0, keys)
      for (int i = t0; i < t1; ++i) mx[i - t0] = -std::numeric_limits<float>::infinity();
      for (int64_t j0 = 0; j0 < keys; j0 += B) {
        const int block = step.block_table[static_cast<size_t>(j0 / B)];
        const float* kb = kv.GlobalK(block) + off;
        for (int i = t0; i < t1; ++i) {
          const int64_t end = std::min<int64_t>(j0 + B, pos0 + i + 1);
          const float* qi = q + static_cast<size_t>(i) * A + off;
          float* si = scores + static_cast<size_t>(i - t0) * static_cast<size_t>(ctx);
          float m = mx[i - t0];
          for (int64_t j = j0; j < end; ++j) {
            const float sc = Dot(qi, kb + static_cast<size_t>(j - j0) * A, hd) * scale;
            si[j] = sc;
            m = std::max(m, sc);
          }
          mx[i - t0] = m;
        }
      }
      for (int i = t0; i < t1; ++i) {
        sum[i - t0] = 0.0f;
        std::fill(att + static_cast<size_t>(i) * A + off, att + static_cast<size_t>(i) * A + off + hd, 0.0f);
      }
      for (int64_t j0 = 0; j0 < keys; j0 += B) {
        const int block = step.block_table[static_cast<size_t>(j0 / B)];
        const float* vb = kv.GlobalV(block) + off;
        for (int i = t0; i < t1; ++i) {
          const int64_t end = std::min<int64_t>(j0 + B, pos0 + i + 1);
          const float* si = scores + static_cast<size_t>(i - t0) * static_cast<size_t>(ctx);
          float* out = att + static_cast<size_t>(i) * A + off;
          const float m = mx[i - t0];
          float acc = sum[i - t0];
          for (int64_t j = j0; j < end; ++j) {
            const float e = std::exp(si[j] - m);
            acc += e;
            const float* v = vb + static_cast<size_t>(j - j0) * A;
            for (int d = 0; d < hd; ++d) out[d] += e * v[d];
          }
          sum[i - t0] = acc;
        }
      }
      for (int i = t0; i < t1; ++i) {
        float* out = att + static_cast<size_t>(i) * A + off;
        const float inv = 1.0f / sum[i - t0];
        for (int d = 0; d < hd; ++d) out[d] *= inv;
      }
    }
  }
  Linear(att, n, A, w.wo, H, o);
  for (size_t i = 0; i < static_cast<size_t>(n) * H; ++i) x[i] += o[i];
}

void RefModel::Ffn(const FfnWeights& w, const float* in, int n, float* out, Scratch& s) const {
  SwiGluFfn(w.gate, w.up, w.down, config_.hidden, config_.expert_hidden, in, n, out, s.g, s.u);
}

void RefModel::Moe(const MoeWeights& w, int layer, float* x, int n, Scratch& s) const {
  const int H = config_.hidden, E = config_.experts, K = config_.experts_top_k;
  float* h = Grow(s.h, static_cast<size_t>(n) * H);
  float* router = Grow(s.router, static_cast<size_t>(n) * E);
  float* shared = Grow(s.shared, static_cast<size_t>(n) * H);
  float* expert_out = Grow(s.expert_out, static_cast<size_t>(n) * K * H);
  RmsNorm(x, n, H, w.norm, config_.rms_eps, h);
  Linear(h, n, H, w.router, E, router);
  // The EP router bias (off unless configured) chooses experts; gates use the raw logits.
  const std::span<const float> bias = ep_ ? ep_->RouterBias(layer) : std::span<const float>();
  std::vector<float> biased;
  // Top-k per token (ties to the lower expert id), softmax over the chosen logits.
  std::vector<int> chosen(static_cast<size_t>(n) * K);
  std::vector<float> gate(static_cast<size_t>(n) * K);
  std::vector<std::vector<int>> rows_of(static_cast<size_t>(E));  // (token·K + rank), token order
  std::vector<int> order(static_cast<size_t>(E));
  for (int t = 0; t < n; ++t) {
    const float* r = router + static_cast<size_t>(t) * E;
    const float* pick = r;
    if (!bias.empty()) {
      biased.resize(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) biased[static_cast<size_t>(e)] = r[e] + bias[static_cast<size_t>(e)];
      pick = biased.data();
    }
    for (int e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return pick[a] > pick[b] || (pick[a] == pick[b] && a < b); });
    float m = r[order[0]], sum = 0.0f;
    for (int j = 0; j < K; ++j) {
      float e = std::exp(r[order[static_cast<size_t>(j)]] - m);
      gate[static_cast<size_t>(t) * K + j] = e;
      sum += e;
    }
    for (int j = 0; j < K; ++j) {
      int e = order[static_cast<size_t>(j)];
      gate[static_cast<size_t>(t) * K + j] /= sum;
      chosen[static_cast<size_t>(t) * K + j] = e;
      rows_of[static_cast<size_t>(e)].push_back(t * K + j);
    }
  }
  Ffn(w.shared, h, n, shared, s);
  if (ep_) {  // dispatched to the EP ranks, combined back below
    ep_->RunExperts(layer, h, K, rows_of, expert_out);
  } else {
    for (int e = 0; e < E; ++e) {
      const std::vector<int>& rows = rows_of[static_cast<size_t>(e)];
      if (rows.empty()) continue;  // its weights are never read: the sparse part of MoE
      const int m = static_cast<int>(rows.size());
      float* in = Grow(s.gathered, static_cast<size_t>(m) * H);
      float* out = Grow(s.d, static_cast<size_t>(m) * H);
      for (int i = 0; i < m; ++i) {
        std::memcpy(in + static_cast<size_t>(i) * H, h + static_cast<size_t>(rows[static_cast<size_t>(i)] / K) * H,
                    sizeof(float) * H);
      }
      Ffn(w.experts[static_cast<size_t>(e)], in, m, out, s);
      for (int i = 0; i < m; ++i) {
        std::memcpy(expert_out + static_cast<size_t>(rows[static_cast<size_t>(i)]) * H, out + static_cast<size_t>(i) * H,
                    sizeof(float) * H);
      }
    }
  }
  // Combined per token in rank order, whatever order the experts ran in.
  for (int t = 0; t < n; ++t) {
    float* xt = x + static_cast<size_t>(t) * H;
    const float* sh = shared + static_cast<size_t>(t) * H;
    for (int d = 0; d < H; ++d) {
      float acc = sh[d];
      for (int j = 0; j < K; ++j) {
        acc += gate[static_cast<size_t>(t) * K + j] * expert_out[(static_cast<size_t>(t) * K + j) * H + d];
      }
      xt[d] += acc;
    }
  }
}

Status RefModel::CheckStep(const SeqStep& s, const ModelKvStorage& kv) const {
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  if (n == 0) return InvalidArgument("forward: a step has no tokens");
  if (s.start_pos < 0) return InvalidArgument("forward: negative start_pos");
  for (TokenId t : s.tokens) {
    if (t >= static_cast<TokenId>(config_.vocab_size)) {
      return InvalidArgument("forward: token id " + std::to_string(t) + " outside the vocabulary");
    }
  }
  if (s.swa_slot < 0 || s.swa_slot >= kv.num_slots()) {
    return InvalidArgument("forward: swa_slot " + std::to_string(s.swa_slot) + " out of range");
  }
  const int64_t end = s.start_pos + n;
  const int64_t blocks = (end + config_.block_size - 1) / config_.block_size;
  if (static_cast<int64_t>(s.block_table.size()) < blocks) {
    return InvalidArgument("forward: block table has " + std::to_string(s.block_table.size()) + " blocks, " +
                           std::to_string(end) + " positions need " + std::to_string(blocks));
  }
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t id = s.block_table[static_cast<size_t>(b)];
    if (id < 0 || id >= kv.num_blocks()) return InvalidArgument("forward: block id " + std::to_string(id) + " out of range");
  }
  if (s.kv_written < 0 || s.kv_written > end) return InvalidArgument("forward: kv_written outside [0, end]");
  int32_t last = -1;
  for (const EmbedRow& e : s.embeds) {
    if (e.index <= last || e.index >= n || e.row == nullptr) {
      return InvalidArgument("forward: embedding rows must be in increasing order within the step's tokens");
    }
    last = e.index;
  }
  if (s.want_logits) {
    int64_t most = (s.prefill && !s.exact) ? std::min<int64_t>(n, config_.window) : n;
    if (s.logits_count < 1 || s.logits_count > most) {
      return InvalidArgument("forward: logits_count " + std::to_string(s.logits_count) + " outside [1, " +
                             std::to_string(most) + "]");
    }
  }
  return Status::Ok();
}

void RefModel::RunSequence(const SeqStep& step, ModelKvStorage& kv, float* out) const {
  const ModelWeights& W = *weights_;
  const int H = config_.hidden, A = kv_dim_, R = config_.swa_ring, B = config_.block_size;
  const int n = static_cast<int>(step.tokens.size());
  const int64_t pos0 = step.start_pos, end = pos0 + n;
  const int slot = step.swa_slot;
  SlotState& st = kv.state(slot);
  Scratch s;

  // ---- Encoder over the new tokens.
  Floats x(static_cast<size_t>(n) * H);
  for (int i = 0; i < n; ++i) {
    std::memcpy(x.data() + static_cast<size_t>(i) * H, W.embed + static_cast<size_t>(step.tokens[static_cast<size_t>(i)]) * H,
                sizeof(float) * H);
  }
  for (const EmbedRow& e : step.embeds) {
    std::memcpy(x.data() + static_cast<size_t>(e.index) * H, e.row, sizeof(float) * H);
  }
  // The slot's ring range may be set by a swap-in copy still in flight (an SWA entry restored
  // for this step, layer 0): wait for it before reading the range, or a restored window would
  // read as a gap and the encoder would attend only to this step's tokens.
  if (step.ready) step.ready->WaitLayer(0);
  const int64_t enc_lo = ContinueFrom(st.encoder, pos0, R);
  // An SWA snapshot needs the anchor's whole window computed by this sequence.
  SwaCapture* cap = step.swa_capture;
  if (cap != nullptr) {
    cap->ok = cap->anchor >= config_.window && cap->anchor >= pos0 && cap->anchor <= end &&
              enc_lo <= cap->anchor - config_.window && config_.encoder_layers > 0;
    if (cap->ok) cap->bytes.resize(kv.swa_bytes());
    if (!cap->ok) cap = nullptr;
  }
  for (int l = 0; l < config_.encoder_layers; ++l) {
    if (step.ready) step.ready->WaitLayer(l);
    const LayerWeights& lw = W.encoder[static_cast<size_t>(l)];
    SwaAttention(lw.swa, l, x.data(), n, pos0, enc_lo, kv, slot, s, cap);
    Moe(lw.moe, l, x.data(), n, s);
  }
  float* hidden_ring = kv.HiddenRing(slot);
  if (cap != nullptr) kv.CaptureSwaHidden(cap->anchor, x.data(), pos0, slot, cap->bytes.data());
  for (int i = 0; i < n; ++i) {
    std::memcpy(hidden_ring + static_cast<size_t>((pos0 + i) % R) * H, x.data() + static_cast<size_t>(i) * H,
                sizeof(float) * H);
  }
  st.encoder = {enc_lo, end};

  // ---- Global KV, once per token; positions below kv_written are kept as they are.
  const int64_t write_from = std::max(pos0, step.kv_written);
  if (write_from < end) {
    const int m = static_cast<int>(end - write_from);
    const float* src = x.data() + static_cast<size_t>(write_from - pos0) * H;
    float* g = Grow(s.h, static_cast<size_t>(m) * H);
    float* k = Grow(s.k, static_cast<size_t>(m) * A);
    float* v = Grow(s.v, static_cast<size_t>(m) * A);
    RmsNorm(src, m, H, W.gkv_norm, config_.rms_eps, g);
    Linear(g, m, H, W.gkv_k, A, k);
    Linear(g, m, H, W.gkv_v, A, v);
    for (int i = 0; i < m; ++i) {
      const int64_t p = write_from + i;
      float* ki = k + static_cast<size_t>(i) * A;
      Rope(ki, config_.heads, config_.head_dim, p, config_.rope_theta);
      const int block = step.block_table[static_cast<size_t>(p / B)];
      const size_t at = static_cast<size_t>(p % B) * A;
      std::memcpy(kv.GlobalK(block) + at, ki, sizeof(float) * A);
      std::memcpy(kv.GlobalV(block) + at, v + static_cast<size_t>(i) * A, sizeof(float) * A);
    }
  }

  // ---- Decoder.
  int64_t d0, dec_lo;
  Floats y;
  if (step.prefill && !step.exact) {
    // Decoder SWA Bounded Replay: only the prompt's last window, attention clamped to it.
    d0 = std::max(enc_lo, end - config_.window);
    dec_lo = d0;
    y.resize(static_cast<size_t>(end - d0) * H);
    for (int64_t p = d0; p < end; ++p) {
      std::memcpy(y.data() + static_cast<size_t>(p - d0) * H, hidden_ring + static_cast<size_t>(p % R) * H,
                  sizeof(float) * H);
    }
  } else {
    d0 = pos0;
    dec_lo = ContinueFrom(st.decoder, pos0, R);
    y = std::move(x);
  }
  const int m = static_cast<int>(end - d0);
  for (int l = 0; l < config_.decoder_layers; ++l) {
    if (step.ready) step.ready->WaitLayer(config_.encoder_layers + l);
    const LayerWeights& lw = W.decoder[static_cast<size_t>(l)];
    SwaAttention(lw.swa, config_.encoder_layers + l, y.data(), m, d0, dec_lo, kv, slot, s);
    GlobalAttention(lw.global, y.data(), m, d0, step, kv, s);
    Moe(lw.moe, config_.encoder_layers + l, y.data(), m, s);
  }
  st.decoder = {dec_lo, end};

  if (!step.want_logits) return;
  for (int r = 0; r < step.logits_count; ++r) {
    const float* row = y.data() + static_cast<size_t>(m - step.logits_count + r) * H;
    float* normed = out + static_cast<size_t>(r) * row_stride_;
    RmsNorm(row, 1, H, W.final_norm, config_.rms_eps, normed);
    if (step.hidden_out != nullptr) std::memcpy(step.hidden_out + static_cast<size_t>(r) * H, normed, sizeof(float) * H);
  }
}

void RefModel::LmHead(const float* hidden, size_t rows, float* logits) const {
  const int V = config_.vocab_size, H = config_.hidden;
  const int chunks = (V + kLmHeadChunk - 1) / kLmHeadChunk;
  // Vocabulary tiles, each applied to every row while it sits in cache, so the 129,280-row
  // table streams from memory once per step rather than once per sequence. A row's logits
  // come from the same GEMV calls on the same tiles whatever the batch: batch-invariant by
  // construction. (A GEMM over groups of rows was measured slower here: at these sizes
  // packing the tile costs more than the GEMM saves.)
  SharedPool().ParallelFor(static_cast<size_t>(chunks), [&](size_t c) {
    const int first = static_cast<int>(c) * kLmHeadChunk;
    const int count = std::min(kLmHeadChunk, V - first);
    Floats tmp(static_cast<size_t>(count));  // aligned, whatever the caller's buffer is
    for (size_t r = 0; r < rows; ++r) {
      Sgemv(count, H, weights_->lm_head + static_cast<size_t>(first) * H, hidden + r * row_stride_, tmp.data());
      std::memcpy(logits + r * static_cast<size_t>(V) + first, tmp.data(), sizeof(float) * count);
    }
  });
}

Status RefModel::Forward(std::span<const SeqStep> batch, KvStorage& kv_base, std::vector<float>* logits) {
  auto* kv = dynamic_cast<ModelKvStorage*>(&kv_base);
  if (kv == nullptr) return InvalidArgument("forward: KV storage was not made by this model's NewKvStorage");
  const ModelConfig& kc = kv->config();
  if (kc.hidden != config_.hidden || kc.heads != config_.heads || kc.head_dim != config_.head_dim ||
      kc.encoder_layers != config_.encoder_layers || kc.decoder_layers != config_.decoder_layers ||
      kc.block_size != config_.block_size || kc.swa_ring != config_.swa_ring) {
    return InvalidArgument("forward: KV storage was made for a different model shape");
  }
  // Validate everything first: a bad step fails the call before any KV is touched.
  std::unordered_set<int> slots;
  std::unordered_map<int32_t, size_t> writer;  // block → the step that writes it
  std::vector<size_t> row_at(batch.size());
  size_t rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqStep& s = batch[i];
    LADLE_RETURN_IF_ERROR(CheckStep(s, *kv).WithContext("step " + std::to_string(i)));
    if (!slots.insert(s.swa_slot).second) {
      return InvalidArgument("forward: two steps share swa_slot " + std::to_string(s.swa_slot));
    }
    const int64_t end = s.start_pos + static_cast<int64_t>(s.tokens.size());
    const int64_t from = std::max(s.start_pos, s.kv_written);
    for (int64_t b = from / config_.block_size; from < end && b <= (end - 1) / config_.block_size; ++b) {
      auto [it, fresh] = writer.emplace(s.block_table[static_cast<size_t>(b)], i);
      if (!fresh && it->second != i) {
        return InvalidArgument("forward: two steps write block " + std::to_string(it->first) + " (copy it first)");
      }
    }
    row_at[i] = rows;
    if (s.want_logits) rows += static_cast<size_t>(s.logits_count);
  }
  // Reading a block another step writes in the same batch would race.
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqStep& s = batch[i];
    const int64_t end = s.start_pos + static_cast<int64_t>(s.tokens.size());
    for (int64_t b = 0; b <= (end - 1) / config_.block_size; ++b) {
      auto it = writer.find(s.block_table[static_cast<size_t>(b)]);
      if (it != writer.end() && it->second != i) {
        return InvalidArgument("forward: step " + std::to_string(i) + " reads block " + std::to_string(it->first) +
                               " that step " + std::to_string(it->second) + " writes");
      }
    }
  }

  Floats hidden(rows * static_cast<size_t>(row_stride_));
  if (ep_) ep_->BeginStep();
  SharedPool().ParallelFor(batch.size(), [&](size_t i) {
    RunSequence(batch[i], *kv, hidden.data() + row_at[i] * static_cast<size_t>(row_stride_));
  });
  if (ep_) LADLE_RETURN_IF_ERROR(ep_->EndStep());
  logits->assign(rows * static_cast<size_t>(config_.vocab_size), 0.0f);
  if (rows == 0) return Status::Ok();
  LmHead(hidden.data(), rows, logits->data());
  return Status::Ok();
}

RefModel::~RefModel() = default;

Status RefModel::ConfigureExpertParallel(const ExpertParallelConfig& ep) {
  if (ep.ranks == 0) {
    ep_.reset();
    return Status::Ok();
  }
  std::vector<const MoeWeights*> layers;
  for (const LayerWeights& lw : weights_->encoder) layers.push_back(&lw.moe);
  for (const LayerWeights& lw : weights_->decoder) layers.push_back(&lw.moe);
  LADLE_ASSIGN_OR_RETURN(ep_, ExpertParallel::Create(config_, std::move(layers), ep));
  return Status::Ok();
}

bool RefModel::GetExpertParallelStats(ExpertParallelStats* out) const {
  if (!ep_) return false;
  ep_->GetStats(out);
  return true;
}

}  // namespace model

Result<std::unique_ptr<Model>> Model::Create(const ModelConfig& config, const std::string& weights_dir) {
  LADLE_RETURN_IF_ERROR(model::InitBlas());
  if (weights_dir.empty()) {
    LADLE_RETURN_IF_ERROR(model::ValidateConfig(config));
    return std::unique_ptr<Model>(new model::RefModel(config, model::ModelWeights::Seeded(config)));
  }
  LADLE_ASSIGN_OR_RETURN(ModelConfig c, model::ReadConfig(weights_dir + "/config.json", config));
  LADLE_ASSIGN_OR_RETURN(auto weights, model::ModelWeights::Load(c, weights_dir));
  return std::unique_ptr<Model>(new model::RefModel(c, std::move(weights)));
}

}  // namespace ladle::engine
