// Safetensors files: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw data. Reading maps the file (mmap)
// and hands out pointers into it; writing is for tests and tools that export weights.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::engine::model {

enum class DType : uint8_t { kF32, kBF16, kF16 };

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t bytes = 0;
  int64_t numel() const;
};

// A mapped safetensors file. Tensors point into the mapping, which lives as long as this.
class SafetensorsFile {
 public:
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Maps and validates `path`: header bounds, dtypes, shapes against byte ranges.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// Converts a tensor to float32 (F32 copied; BF16 and F16 widened exactly).
void ToFloat(const TensorView& t, float* out);
// Narrowing for export: round-to-nearest-even.
uint16_t FloatToBf16(float f);
uint16_t FloatToF16(float f);
float F16ToFloat(uint16_t h);

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> data;
};
// Writes the tensors (converted to `dtype`) to `path`.
Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                        DType dtype = DType::kF32);

}  // namespace ladle::engine::model
