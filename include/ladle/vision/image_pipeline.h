// The server's image stage (issue 18): a request's images, from URL to placeholder embeddings,
// off the connection's thread and off the engine.
//
//   Prepare(refs) — for each image, on the pipeline's I/O threads: the bytes (a data: URL, or
//                   an http URL fetched behind the SSRF guard), the header probe and the limits
//                   (bytes, pixels, total patches over the request, before any pixel buffer),
//                   the decode and the resize to the patch grid; then every image goes to the
//                   encoder at once (its workers run them in parallel) and `done` runs when the
//                   last embedding is back, or at the first failure.
//
// A failure names the request part it came from ("messages[2].content[1]: ...") and is
// kInvalidArgument for anything about the image itself (a 400 in the API's shape: corrupt,
// too large, refused URL, unreachable or slow host), or the encoder's own code when the
// encoder failed (queue full, shutting down). A request without images never comes here.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/vision/image.h"
#include "ladle/vision/image_encoder.h"
#include "ladle/vision/image_fetch.h"

namespace ladle::vision {

struct ImagePipelineOptions {
  ImageLimits image;                 // per image: encoded bytes, declared pixels and side
  FetchLimits fetch;                 // remote URLs: bytes, time, redirects, private addresses
  int max_images = 16;               // per request
  int64_t max_total_patches = 65536; // per request, over all its images after resizing
  int io_threads = 4;                // fetch + decode + resize, shared by all requests
  // Embeddings of recent files (keyed by their bytes' XXH3-128), so an image sent again skips
  // decode, resize and encode. 0: off.
  size_t embedding_cache_bytes = 256u << 20;
};

struct ImageRef {
  std::string url;    // data: or http(s) URL, as the client sent it
  std::string where;  // the request part, for errors: "messages[2].content[1]"
};

struct PreparedImage {
  int width = 0, height = 0;   // decoded
  int grid_h = 0, grid_w = 0;  // patches after resizing
  int groups = 0;              // placeholder tokens
  uint64_t hash_hi = 0, hash_lo = 0;
  std::shared_ptr<const std::vector<float>> embeds;  // groups × hidden
  double fetch_ms = 0, decode_ms = 0, encode_ms = 0;
};

struct PipelineStats {
  uint64_t requests = 0, images = 0, failed = 0, fetched = 0;
  uint64_t in_flight = 0;
  uint64_t cache_hits = 0, cache_misses = 0, cache_bytes = 0, cache_entries = 0;  // embedding cache
};

class ImagePipeline {
 public:
  static Result<std::unique_ptr<ImagePipeline>> Create(const ImagePipelineOptions& options,
                                                       const PreprocessConfig& preprocess,
                                                       std::shared_ptr<ImageEncoder> encoder);
  virtual ~ImagePipeline() = default;

  using Done = std::function<void(Result<std::vector<PreparedImage>>)>;
  // `done` runs exactly once, on a pipeline or encoder thread; it must not block. An empty
  // `refs` completes at once with no images.
  virtual void Prepare(std::vector<ImageRef> refs, Done done) = 0;
  // The same up to the header probe and the limits, for counting tokens: sizes, grids and
  // placeholder counts, no pixels decoded and no embeddings (PreparedImage::embeds null).
  virtual void Measure(std::vector<ImageRef> refs, Done done) = 0;
  virtual const ImagePipelineOptions& options() const = 0;
  virtual PipelineStats GetStats() const = 0;
  virtual ImageEncoder& encoder() = 0;
};

}  // namespace ladle::vision
