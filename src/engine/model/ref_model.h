// The reference model: Model implemented on the CPU with OpenBLAS. Internal header (tests
// and tools reach the weights through it); the engine only sees ladle/engine/model.h.
//
// One forward step of a sequence (positions [s, P) of its tokens):
//   encoder:  embed → per layer { x += SWA(norm x); x += MoE(norm x) }, ring per layer
//   global KV: K = RoPE(norm(x)·Wk), V = norm(x)·Wv, once per token, into the block table
//   decoder:  per layer { y += SWA(norm y); y += Attn(norm y → global KV [0, p]);
//             y += MoE(norm y) }; prefill starts the decoder at max(s', P − window) from
//             the encoder-output ring (Decoder SWA Bounded Replay), exact/decode at s
//   logits:   lm_head · norm(y) for the last logits_count tokens
#pragma once

#include <memory>

#include "kv_storage.h"
#include "ladle/engine/model.h"
#include "weights.h"

namespace ladle::engine::model {

class ExpertParallel;

class RefModel final : public Model {
 public:
  RefModel(const ModelConfig& c, std::unique_ptr<ModelWeights> w);
  ~RefModel() override;

  const ModelConfig& config() const override { return config_; }
  std::unique_ptr<KvStorage> NewKvStorage(int num_blocks, int num_slots) const override;
  Status Forward(std::span<const SeqStep> batch, KvStorage& kv, std::vector<float>* logits) override;
  bool honours_ready_gate() const override { return true; }
  // The encoder reads only its rings; the global KV is first read by decoder layer 0.
  int global_kv_first_layer() const override { return config_.encoder_layers; }
  Status ConfigureExpertParallel(const ExpertParallelConfig& ep) override;
  bool GetExpertParallelStats(ExpertParallelStats* out) const override;

  const ModelWeights& weights() const { return *weights_; }
  // The EP ranks (nullptr when EP is off; tests).
  ExpertParallel* expert_parallel() const { return ep_.get(); }

 private:
  struct Scratch;
  Status CheckStep(const SeqStep& s, const ModelKvStorage& kv) const;
  // All layers of one sequence; writes the final-normed hidden rows (stride row_stride_)
  // of its logits tokens to `out`.
  void RunSequence(const SeqStep& s, ModelKvStorage& kv, float* out) const;
  // `capture`: snapshot this layer's window when the loop reaches its anchor (encoder layers).
  void SwaAttention(const AttnWeights& w, int ring_layer, float* x, int n, int64_t pos0, int64_t lo,
                    ModelKvStorage& kv, int slot, Scratch& s, SwaCapture* capture = nullptr) const;
  void GlobalAttention(const GlobalAttnWeights& w, float* x, int n, int64_t pos0, const SeqStep& step,
                       ModelKvStorage& kv, Scratch& s) const;
  // `layer`: the MoE layer's index in forward order (encoder layers, then decoder layers).
  void Moe(const MoeWeights& w, int layer, float* x, int n, Scratch& s) const;
  void Ffn(const FfnWeights& w, const float* in, int n, float* out, Scratch& s) const;
  // `hidden`: `rows` final-normed rows, stride row_stride_.
  void LmHead(const float* hidden, size_t rows, float* logits) const;

  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  int kv_dim_;       // heads · head_dim
  int row_stride_;   // hidden rounded up to 16 floats: every row starts 64-byte aligned
  std::unique_ptr<ExpertParallel> ep_;
};

}  // namespace ladle::engine::model
