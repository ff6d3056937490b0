// `ladle serve`'s image flags and the image stage they build (docs/vision.md): the vision
// tower of the served model, its encoder workers (in this process, or remote
// `ladle vision-encoder` machines), and the limits of the image front-end.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/model.h"
#include "ladle/vision/image_pipeline.h"

namespace ladle::app {

struct VisionOpts {
  int vision_workers = 1;                     // in-process encoder workers
  std::string vision_policy = "fewest-patches";
  std::vector<std::string> vision_encoders;   // remote `ladle vision-encoder` host:port
  int64_t vision_encoder_timeout_ms = 30000;  // one image on one remote machine
  int64_t vision_encoder_cooldown_ms = 2000;  // a failed remote machine is picked again after this
  bool allow_private_image_urls = false;
  int64_t image_max_bytes = 20 << 20;
  int64_t image_max_pixels = 32 << 20;
  int max_images = 16;
  int64_t max_image_patches = 65536;
  int64_t image_fetch_timeout_ms = 10000;
  int image_max_redirects = 3;
  int image_threads = 2;
  int64_t image_cache_mb = 256;
  std::string image_ca_file;  // extra CA certificates (PEM) for https image URLs; system CAs always  // embedding cache (by file bytes); 0: off
};

void AddVisionFlags(CLI::App* cmd, VisionOpts* o);


// The image stage for a model: null (images then get a 400) when the model has no vision
// tower. `model_dir` empty: the built-in seeded tower. With --vision-encoder, images go to
// those remote machines (cluster::RemoteImageEncoder) instead of in-process workers; the
// preprocessing geometry still comes from the local model, and a machine that answers with
// another model's fingerprint fails the start.
Result<std::shared_ptr<vision::ImagePipeline>> BuildImagePipeline(const VisionOpts& o, const engine::ModelConfig& model,
                                                                  const std::string& model_dir);

}  // namespace ladle::app
