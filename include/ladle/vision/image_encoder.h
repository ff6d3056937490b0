// Vision encoder workers (issue 18, the recipe's "Vision Encoder Load Balancer"): what turns a
// preprocessed image into its placeholder embeddings.
//
//   ImageEncoder       — the handle the server and the cluster use: Encode is asynchronous and
//                        never blocks the caller; `done` runs exactly once.
//   LocalImageEncoder  — G worker threads in this process (the stand-in for one encoder per GPU
//                        of a machine), each running the model's VisionModel::Encode. An image
//                        goes to the worker with the fewest image patches in flight
//                        (lb::VisionWorkerLedger; round-robin for comparison).
//   A remote machine (`ladle vision-encoder`) serves the same handle over RPC, and the
//   machine-level random pick sits in front of several of them (cluster module).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/vision/image.h"

namespace ladle::engine {
class VisionModel;
}

namespace ladle::vision {

struct EncodedImage {
  std::shared_ptr<const std::vector<float>> embeds;  // groups × hidden
  int groups = 0;
  int worker = -1;        // which worker ran it (on its machine)
  double queue_ms = 0;    // waiting for the worker
  double encode_ms = 0;   // the worker's encode
};

struct EncoderStats {
  uint64_t images = 0, patches = 0, failed = 0;
  std::vector<int64_t> patches_in_flight;  // per worker, now
  std::vector<uint64_t> images_per_worker;
  double encode_ms_total = 0;
};

class ImageEncoder {
 public:
  virtual ~ImageEncoder() = default;
  using Done = std::function<void(Result<EncodedImage>)>;
  // Queues `image`; `done` runs once, on a worker (or transport) thread, and must not block.
  virtual void Encode(std::shared_ptr<const ImageTensor> image, Done done) = 0;
  virtual int workers() const = 0;
  virtual EncoderStats GetStats() const = 0;
};

struct LocalEncoderOptions {
  int workers = 1;
  std::string policy = "fewest-patches";  // or "round-robin", "fewest-images"
  size_t max_queued_images = 1024;        // beyond it Encode fails kResourceExhausted
};

// Starts the worker threads; the destructor fails queued images (kCancelled) and joins them.
Result<std::unique_ptr<ImageEncoder>> MakeLocalEncoder(std::shared_ptr<const engine::VisionModel> model,
                                                       const LocalEncoderOptions& options);

// The preprocessing geometry a model's vision tower expects (its vision_* config).
PreprocessConfig PreprocessFor(const engine::VisionModel& model);

}  // namespace ladle::vision
