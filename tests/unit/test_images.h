// Small images for tests, made with libpng's simplified writer (tests that need other formats
// encode them with their own library in the test).
#pragma once

#include <png.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ladle/core/base64.h"

namespace ladle::testing {

// A w × h RGB PNG whose pixel bytes are shade + 7·i (mod 256), i counting bytes row by row.
inline std::string PngBytes(int w, int h, uint8_t shade) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(shade + i * 7);
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, rgb.data(), 0, nullptr)) return {};
  std::string bytes(size, '\0');
  if (!png_image_write_to_memory(&img, bytes.data(), &size, 0, rgb.data(), 0, nullptr)) return {};
  bytes.resize(size);
  return bytes;
}

inline std::string PngDataUrl(int w, int h, uint8_t shade = 128) {
  return "data:image/png;base64," + Base64Encode(PngBytes(w, h, shade));
}

}  // namespace ladle::testing
