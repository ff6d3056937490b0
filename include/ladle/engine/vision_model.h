// The reference model's vision tower (issue 18): what turns a preprocessed image into the
// embeddings that replace its placeholder tokens (SeqStep::embeds).
//
//   patches (vision_patch² × 3 pixels each) → linear patch embedding + 2-D sinusoidal position
//   → vision_layers pre-norm transformer layers (full attention over the image's patches,
//     SwiGLU MLP) → every vision_merge × vision_merge patch group concatenated
//   → projector (linear, SiLU, linear) to the model width → RMS-normalised, like a token row.
//
// Weights are the tensors named "vision.*": seeded from the model seed when there is no weights
// folder, otherwise read from its *.safetensors (the text model's files may hold them, or a
// vision.safetensors beside them). Encode is deterministic, single-threaded and const, so an
// encoder worker is a thread calling it and any worker gives the same bits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/model.h"

namespace ladle::engine {

class VisionModel {
 public:
  // kFailedPrecondition when the config has no vision (VisionEnabled false).
  static Result<std::unique_ptr<VisionModel>> Create(const ModelConfig& config, const std::string& weights_dir);
  virtual ~VisionModel() = default;

  virtual const ModelConfig& config() const = 0;
  // `pixels`: 3 × (grid_h · patch) × (grid_w · patch) floats, CHW, normalised. grid_h and
  // grid_w are multiples of vision_merge. `out` becomes (grid_h/merge · grid_w/merge) × hidden
  // floats, one row per patch group in row-major group order. kInvalidArgument for a bad grid.
  virtual Status Encode(const float* pixels, int grid_h, int grid_w, std::vector<float>* out) const = 0;
  // Writes the tower's tensors to `path` (a .safetensors file).
  virtual Status Save(const std::string& path) const = 0;
};

}  // namespace ladle::engine
