// Image bytes → the vision encoder's input (issue 18). Decoding uses Debian's libraries
// (libpng, libjpeg-turbo, libwebp, giflib's first frame); never a hand-written decoder.
//
//   ProbeImage  — format and dimensions from the header alone: nothing the size of the image is
//                 allocated, so a decompression bomb (a small file declaring huge dimensions) is
//                 refused by DecodeImage before any pixel buffer exists.
//   DecodeImage — RGB8 pixels (alpha composited on white, palettes and greyscale expanded).
//   Preprocess  — resized to the encoder's patch grid (each side a multiple of patch × merge,
//                 the longer side at most max_side) and normalised per channel, CHW floats.
//
// Every failure is kInvalidArgument (or kResourceExhausted for a limit) with a message a
// client can act on; callers prefix the request part ("messages[2].content[1]: ...").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::vision {

enum class ImageFormat : uint8_t { kPng, kJpeg, kWebp, kGif };
std::string_view FormatName(ImageFormat f);       // "png", "jpeg", "webp", "gif"
std::string_view FormatMediaType(ImageFormat f);  // "image/png", ...

// Per-image limits, explicit and configurable (`ladle serve --image-max-*`).
struct ImageLimits {
  int64_t max_bytes = 20 << 20;        // encoded size
  int64_t max_pixels = 32 << 20;       // width × height as the header declares it
  int max_side = 16384;                // either dimension, as declared
};

struct ImageInfo {
  ImageFormat format = ImageFormat::kPng;
  int width = 0, height = 0;
};

// Sniffs the format from the magic bytes and reads the dimensions from the header.
// kInvalidArgument for an unknown format or a truncated/corrupt header.
Result<ImageInfo> ProbeImage(std::string_view bytes);

struct DecodedImage {
  ImageFormat format = ImageFormat::kPng;
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width × height × 3, row-major
};

// Probes, checks `limits` (kResourceExhausted naming the limit and the value), then decodes.
// Corrupt or truncated data is kInvalidArgument; no decoder error escapes as an exception or a
// longjmp past this call. Animated GIF/WebP give their first frame on the canvas (a GIF's logical
// screen, grown to cover that frame), pixels it leaves uncovered white; colour profiles and gamma
// are ignored. Data missing only its trailer (PNG's IEND, GIF's ';') still decodes; a JPEG cut
// anywhere before its EOI marker does not.
Result<DecodedImage> DecodeImage(std::string_view bytes, const ImageLimits& limits);

// The vision encoder's input geometry and normalisation (from the model config's vision_*).
struct PreprocessConfig {
  int patch = 16;        // pixels per patch side
  int merge = 2;         // patches per side merged into one placeholder token (a patch group)
  int max_side = 1024;   // the longer side after resizing, at most (a multiple of patch × merge)
  std::array<float, 3> mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> std = {0.5f, 0.5f, 0.5f};
};

struct ImageTensor {
  int grid_h = 0, grid_w = 0;   // in patches; both multiples of merge
  int merge = 2;
  std::vector<float> pixels;    // 3 × (grid_h·patch) × (grid_w·patch), CHW, normalised
  // Content hash of the decoded image (dimensions + RGB bytes, XXH3-128): the same picture in
  // any request gives the same key, so prefix caching can tell images apart (block chain keys).
  uint64_t hash_hi = 0, hash_lo = 0;
  int patches() const { return grid_h * grid_w; }
  int groups() const { return (grid_h / merge) * (grid_w / merge); }  // placeholder tokens
};

// Resizes (area averaging when shrinking, bilinear when growing) so each side is a multiple of
// patch × merge and the longer side is at most max_side, keeping the aspect ratio as closely as
// the grid allows (each side at least patch × merge), then normalises.
Result<ImageTensor> Preprocess(const DecodedImage& image, const PreprocessConfig& config);

// The grid Preprocess would produce for a width × height image, without touching pixels (for
// limits on total patches before decoding). An invalid config, or a side below 1, gives 0 × 0.
void GridFor(int width, int height, const PreprocessConfig& config, int* grid_h, int* grid_w);

}  // namespace ladle::vision
