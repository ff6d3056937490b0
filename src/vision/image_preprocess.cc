// Decoded RGB8 → the vision encoder's CHW float input (image.h): the patch grid, separable
// resampling (area averaging to shrink, bilinear to grow, chosen per axis) and normalisation,
// plus the content hash prefix caching keys images by.
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <new>

#include "ladle/vision/image.h"

namespace ladle::vision {
namespace {

Status CheckConfig(const PreprocessConfig& c) {
  if (c.patch < 1 || c.merge < 1) {
    return InvalidArgument(fmt::format("vision patch ({}) and merge ({}) must be at least 1", c.patch, c.merge));
  }
  const int64_t unit = int64_t{c.patch} * c.merge;
  if (c.max_side < unit) {
    return InvalidArgument(
        fmt::format("vision max_side ({}) is smaller than patch x merge ({})", c.max_side, unit));
  }
  for (int ch = 0; ch < 3; ++ch) {
    if (!std::isfinite(c.mean[ch]) || !std::isfinite(c.std[ch]) || c.std[ch] == 0.0f) {
      return InvalidArgument(fmt::format("vision normalisation channel {}: mean {} and std {} must be finite, std "
                                         "non-zero",
                                         ch, c.mean[ch], c.std[ch]));
    }
  }
  return Status::Ok();
}

// round(n / d) for n ≥ 0, d > 0, halves up; 128-bit so width × max_side cannot overflow.
int64_t RoundDiv(__int128 n, __int128 d) { return static_cast<int64_t>((2 * n + d) / (2 * d)); }

// Per-output-index source taps of one axis: out[i] = Σ weight[k] · in[first[i] + k - offset[i]]
// for k in [offset[i], offset[i + 1]).
struct Taps {
  std::vector<int> first;
  std::vector<int> offset;
  std::vector<float> weight;
};

// Shrinking: output pixel i covers the source interval [i·src/dst, (i+1)·src/dst) and averages
// the source pixels by how much of each it covers (exact in units of 1/dst). Growing (and equal
// sizes, where this is the identity): bilinear between the two nearest source centres.
Taps MakeTaps(int src, int dst) {
  Taps t;
  t.first.resize(dst);
  t.offset.resize(size_t(dst) + 1);
  if (dst < src) {
    t.weight.reserve(size_t(dst) * (src / dst + 2));
    for (int i = 0; i < dst; ++i) {
      const int64_t lo = int64_t{i} * src, hi = int64_t{i + 1} * src;
      const int64_t j0 = lo / dst, j1 = (hi - 1) / dst;
      t.first[i] = static_cast<int>(j0);
      t.offset[i] = static_cast<int>(t.weight.size());
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t cover = std::min(hi, (j + 1) * dst) - std::max(lo, j * dst);
        t.weight.push_back(static_cast<float>(static_cast<double>(cover) / src));
      }
    }
  } else {
    t.weight.reserve(size_t(dst) * 2);
    for (int i = 0; i < dst; ++i) {
      double x = (i + 0.5) * src / dst - 0.5;
      x = std::clamp(x, 0.0, static_cast<double>(src - 1));
      int x0 = static_cast<int>(std::floor(x));
      double f = x - x0;
      if (x0 >= src - 1) {
        x0 = src - 1;
        f = 0;
      }
      t.first[i] = x0;
      t.offset[i] = static_cast<int>(t.weight.size());
      t.weight.push_back(static_cast<float>(1.0 - f));
      if (f > 0) t.weight.push_back(static_cast<float>(f));
    }
  }
  t.offset[dst] = static_cast<int>(t.weight.size());
  return t;
}

void Hash(const DecodedImage& image, ImageTensor* out) {
  uint8_t dims[8];
  for (int k = 0; k < 4; ++k) {
    dims[k] = static_cast<uint8_t>(static_cast<uint32_t>(image.width) >> (8 * k));
    dims[4 + k] = static_cast<uint8_t>(static_cast<uint32_t>(image.height) >> (8 * k));
  }
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  XXH3_128bits_update(&state, dims, sizeof dims);
  XXH3_128bits_update(&state, image.rgb.data(), image.rgb.size());
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  out->hash_hi = h.high64;
  out->hash_lo = h.low64;
}

}  // namespace

void GridFor(int width, int height, const PreprocessConfig& config, int* grid_h, int* grid_w) {
  *grid_h = *grid_w = 0;
  if (width < 1 || height < 1 || !CheckConfig(config).ok()) return;
  const int64_t unit = int64_t{config.patch} * config.merge;
  const int64_t cap = config.max_side / unit * unit;  // the longest side allowed, in whole units
  const int64_t longer = std::max(width, height);
  // Scale by cap / longer when the image is too big, else keep its size; then each side goes to
  // the nearest whole number of units (at least one). The longer side lands exactly on cap when
  // scaled, and the shorter side cannot round past it.
  const int64_t num = longer > cap ? cap : 1, den = longer > cap ? longer : 1;
  const int64_t units_w = std::max<int64_t>(1, RoundDiv(__int128{width} * num, __int128{den} * unit));
  const int64_t units_h = std::max<int64_t>(1, RoundDiv(__int128{height} * num, __int128{den} * unit));
  *grid_w = static_cast<int>(units_w * config.merge);
  *grid_h = static_cast<int>(units_h * config.merge);
}

Result<ImageTensor> Preprocess(const DecodedImage& image, const PreprocessConfig& config) {
  LADLE_RETURN_IF_ERROR(CheckConfig(config));
  if (image.width < 1 || image.height < 1 ||
      image.rgb.size() != size_t(image.width) * size_t(image.height) * 3) {
    return InvalidArgument(fmt::format("the decoded image is {}x{} with {} bytes of pixels", image.width,
                                       image.height, image.rgb.size()));
  }
  ImageTensor out;
  out.merge = config.merge;
  GridFor(image.width, image.height, config, &out.grid_h, &out.grid_w);
  const int sw = image.width, sh = image.height;
  const int tw = out.grid_w * config.patch, th = out.grid_h * config.patch;
  try {
    const Taps tx = MakeTaps(sw, tw), ty = MakeTaps(sh, th);
    // Horizontal pass: every source row to the target width (interleaved RGB floats).
    std::vector<float> rows(size_t(sh) * tw * 3);
    for (int y = 0; y < sh; ++y) {
      const uint8_t* src = image.rgb.data() + size_t(y) * sw * 3;
      float* dst = rows.data() + size_t(y) * tw * 3;
      for (int x = 0; x < tw; ++x) {
        float r = 0, g = 0, b = 0;
        const uint8_t* p = src + size_t(tx.first[x]) * 3;
        for (int k = tx.offset[x]; k < tx.offset[x + 1]; ++k, p += 3) {
          const float w = tx.weight[k];
          r += w * p[0];
          g += w * p[1];
          b += w * p[2];
        }
        dst[3 * x] = r;
        dst[3 * x + 1] = g;
        dst[3 * x + 2] = b;
      }
    }
    // Vertical pass, then normalisation into CHW: (v / 255 - mean) / std.
    float scale[3], bias[3];
    for (int ch = 0; ch < 3; ++ch) {
      scale[ch] = 1.0f / (255.0f * config.std[ch]);
      bias[ch] = -config.mean[ch] / config.std[ch];
    }
    const size_t plane = size_t(th) * tw;
    out.pixels.assign(plane * 3, 0.0f);
    std::vector<float> acc(size_t(tw) * 3);
    for (int y = 0; y < th; ++y) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int k = ty.offset[y]; k < ty.offset[y + 1]; ++k) {
        const float w = ty.weight[k];
        const float* src = rows.data() + size_t(ty.first[y] + (k - ty.offset[y])) * tw * 3;
        for (size_t i = 0; i < acc.size(); ++i) acc[i] += w * src[i];
      }
      for (int ch = 0; ch < 3; ++ch) {
        float* dst = out.pixels.data() + ch * plane + size_t(y) * tw;
        for (int x = 0; x < tw; ++x) dst[x] = acc[3 * x + ch] * scale[ch] + bias[ch];
      }
    }
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(fmt::format("out of memory resizing a {}x{} image to {}x{}", sw, sh, tw, th));
  } catch (const std::length_error&) {
    return ResourceExhausted(fmt::format("out of memory resizing a {}x{} image to {}x{}", sw, sh, tw, th));
  }
  Hash(image, &out);
  return out;
}

}  // namespace ladle::vision
