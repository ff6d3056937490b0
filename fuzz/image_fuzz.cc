// libFuzzer target for the image decoders and preprocessing (include/ladle/vision/image.h).
// Properties:
//  - no input crashes, hangs, leaks or longjmps past DecodeImage (libpng, libjpeg-turbo,
//    libwebp, giflib behind it), and nothing is allocated past the limits;
//  - an image that decodes was probed to the same format and size, and has width × height × 3
//    bytes of pixels;
//  - Preprocess gives the grid GridFor predicts, 3 × (grid_h·patch) × (grid_w·patch) floats,
//    each within the normalised range of 0..255 (resampling only ever averages pixels).
// Seeds: fuzz/corpus/image/ (written by vision_test's WriteFuzzSeeds).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "ladle/vision/image.h"

using namespace ladle::vision;

namespace {

void Fail(const char* why) {
  std::fprintf(stderr, "%s\n", why);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto info = ProbeImage(bytes);
  ImageLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_pixels = 1 << 22;
  limits.max_side = 4096;
  auto img = DecodeImage(bytes, limits);
  if (!img.ok()) {
    if (img.status().code() != ladle::StatusCode::kInvalidArgument &&
        img.status().code() != ladle::StatusCode::kResourceExhausted) {
      Fail("DecodeImage failed with a code other than InvalidArgument/ResourceExhausted");
    }
    return 0;
  }
  if (!info.ok()) Fail("an image decodes but does not probe");
  if (info->format != img->format || info->width != img->width || info->height != img->height) {
    Fail("the decoded image differs from the probe");
  }
  if (img->width < 1 || img->height < 1 || img->width > limits.max_side || img->height > limits.max_side ||
      int64_t{img->width} * img->height > limits.max_pixels) {
    Fail("a decoded image is outside the limits");
  }
  if (img->rgb.size() != size_t(img->width) * size_t(img->height) * 3) Fail("wrong pixel buffer size");

  PreprocessConfig config;
  config.patch = 4;
  config.merge = 2;
  config.max_side = 64;
  auto t = Preprocess(*img, config);
  if (!t.ok()) Fail("Preprocess refused a decoded image");
  int gh = 0, gw = 0;
  GridFor(img->width, img->height, config, &gh, &gw);
  if (gh != t->grid_h || gw != t->grid_w) Fail("GridFor disagrees with Preprocess");
  if (gh < config.merge || gw < config.merge || gh % config.merge || gw % config.merge ||
      gh * config.patch > config.max_side || gw * config.patch > config.max_side) {
    Fail("a grid outside the config");
  }
  if (t->pixels.size() != size_t(3) * gh * config.patch * gw * config.patch) Fail("wrong tensor size");
  // mean = std = 0.5: 0..255 maps to -1..1.
  for (float v : t->pixels) {
    if (!(v >= -1.0001f && v <= 1.0001f)) Fail("a normalised value outside [-1, 1]");
  }
  return 0;
}
