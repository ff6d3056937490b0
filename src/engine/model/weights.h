// The reference model's parameters: the list of named tensors a config implies, the
// built-in seeded initialisation, and loading/saving them as safetensors. Names follow the
// Hugging Face convention (nn.Linear weights are [out, in]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels.h"
#include "ladle/core/result.h"
#include "ladle/engine/model.h"
#include "safetensors.h"

namespace ladle::engine::model {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  enum class Init : uint8_t { kOnes, kNormalish } init = Init::kNormalish;
  float scale = 0.0f;  // standard deviation of the seeded initialisation
  int64_t numel() const;
};

// Every tensor of `c`, in a fixed order.
std::vector<TensorSpec> ListTensors(const ModelConfig& c);
int64_t ParamCount(const ModelConfig& c);

// Named tensors of a spec list, seeded or loaded: the reference model's weights and the vision
// tower's (vision_model.h) are both one of these.
struct TensorSet {
  std::vector<TensorSpec> specs;
  std::vector<const float*> tensors;                    // parallel to specs
  std::vector<Floats> owned;                            // converted or seeded data
  std::vector<std::unique_ptr<SafetensorsFile>> files;  // zero-copy F32 points into these

  // Deterministic from `seed`: each tensor from its own stream (seed, name), so the values do
  // not depend on tensor order.
  static TensorSet Seeded(std::vector<TensorSpec> specs, uint64_t seed);
  // Every *.safetensors file in `dir` (sharded checkpoints allowed; tensors not in `specs` are
  // ignored). Missing, duplicated and mis-shaped tensors are errors naming the tensor.
  static Result<TensorSet> Load(std::vector<TensorSpec> specs, const std::string& dir);
  const float* Get(const std::string& name) const;
  Status Save(const std::string& path, DType dtype) const;
};

struct AttnWeights {
  const float *norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
};
struct GlobalAttnWeights {
  const float *norm = nullptr, *wq = nullptr, *wo = nullptr;
};
struct FfnWeights {
  const float *gate = nullptr, *up = nullptr, *down = nullptr;
};
struct MoeWeights {
  const float *norm = nullptr, *router = nullptr;
  std::vector<FfnWeights> experts;
  FfnWeights shared;
};
struct LayerWeights {
  AttnWeights swa;
  GlobalAttnWeights global;  // decoder layers only
  MoeWeights moe;
};

class ModelWeights {
 public:
  // Deterministic from config.seed: each tensor from its own stream (seed, name), so the
  // values do not depend on tensor order.
  static std::unique_ptr<ModelWeights> Seeded(const ModelConfig& c);
  // Every *.safetensors file in `dir` (sharded checkpoints allowed). Missing, duplicated and
  // mis-shaped tensors are errors naming the tensor.
  static Result<std::unique_ptr<ModelWeights>> Load(const ModelConfig& c, const std::string& dir);

  // Writes config.json and model.safetensors into `dir` (which must exist).
  Status Save(const std::string& dir, DType dtype = DType::kF32) const;

  const ModelConfig& config() const { return config_; }
  const float* Get(const std::string& name) const;

  const float* embed = nullptr;
  std::vector<LayerWeights> encoder, decoder;
  const float *gkv_norm = nullptr, *gkv_k = nullptr, *gkv_v = nullptr;
  const float *final_norm = nullptr, *lm_head = nullptr;

 private:
  explicit ModelWeights(const ModelConfig& c) : config_(c) {}
  void Bind();  // fills the pointers above from tensors_

  ModelConfig config_;
  TensorSet set_;
};

// Writes `c` as config.json.
Status WriteConfig(const ModelConfig& c, const std::string& path);
// Checks that sizes are positive and consistent (top_k <= experts, window <= ring, ...).
Status ValidateConfig(const ModelConfig& c);
// Reads config.json over `base` (missing keys keep base's values).
Result<ModelConfig> ReadConfig(const std::string& path, const ModelConfig& base);

}  // namespace ladle::engine::model
