#include "safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>

#include "ladle/json/json.h"

namespace ladle::engine::model {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

Result<DType> ParseDType(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  return Unsupported("dtype " + s + " (supported: F32, BF16, F16)");
}

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

size_t DTypeSize(DType d) { return d == DType::kF32 ? 4 : 2; }

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return IoError("cannot stat " + path);
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    return ParseError(path + ": too short for a safetensors header");
  }
  void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) return IoError("cannot mmap " + path + ": " + std::strerror(errno));
  f->map_ = m;
  const auto* base = static_cast<const uint8_t*>(m);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian
  if (header_len > kMaxHeaderBytes || header_len > f->size_ - 8) {
    return ParseError(path + ": header length " + std::to_string(header_len) + " exceeds the file");
  }
  std::string_view text(reinterpret_cast<const char*>(base + 8), header_len);
  json::ParseOptions opts;
  opts.max_bytes = kMaxHeaderBytes;
  auto parsed = json::Parse(text, opts);
  if (!parsed.ok()) return parsed.status().WithContext(path + ": header");
  if (!parsed->is_object()) return ParseError(path + ": header is not a JSON object");
  const uint8_t* data = base + 8 + header_len;
  size_t data_size = f->size_ - 8 - header_len;

  for (const auto& [key, v] : parsed->as_object()) {
    const std::string& name = key;  // clang 14 cannot capture a structured binding in a lambda
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& why) { return ParseError(path + ": tensor '" + name + "': " + why); };
    const json::Value* dt = v.Find("dtype");
    const json::Value* shape = v.Find("shape");
    const json::Value* offs = v.Find("data_offsets");
    if (dt == nullptr || !dt->is_string() || shape == nullptr || !shape->is_array() || offs == nullptr ||
        !offs->is_array() || offs->as_array().size() != 2) {
      return bad("needs dtype, shape and data_offsets [begin, end]");
    }
    auto dtype = ParseDType(dt->as_string());
    if (!dtype.ok()) return dtype.status().WithContext(path + ": tensor '" + name + "'");
    TensorView t;
    t.dtype = *dtype;
    for (const json::Value& d : shape->as_array()) {
      auto dim = d.as_int64();
      if (!d.is_number() || !dim.ok() || *dim < 0) return bad("shape must hold non-negative integers");
      t.shape.push_back(*dim);
    }
    auto b = offs->as_array()[0].as_int64();
    auto e = offs->as_array()[1].as_int64();
    if (!b.ok() || !e.ok() || *b < 0 || *e < *b || static_cast<uint64_t>(*e) > data_size) {
      return bad("data_offsets outside the file's data");
    }
    t.data = data + *b;
    t.bytes = static_cast<size_t>(*e - *b);
    if (static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype) != t.bytes) {
      return bad("byte range does not match shape and dtype");
    }
    f->tensors_[name] = std::move(t);
  }
  return f;
}

float F16ToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal
  } else if (exp == 31) {
    v = man == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t FloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

uint16_t FloatToF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < 6.103515625e-05f) {              // subnormal range: units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  // 11 significant bits; nearbyint rounds half to even in the default mode.
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(m * 2048.0f));
  if (mant == 2048) {
    mant = 1024;
    ++e;
  }
  uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  return sign | static_cast<uint16_t>((exp << 10) | (mant & 0x3ff));
}

void ToFloat(const TensorView& t, float* out) {
  size_t n = static_cast<size_t>(t.numel());
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out, t.data, n * 4);
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
      }
      break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = F16ToFloat(h);
      }
      break;
  }
}

Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors, DType dtype) {
  json::Value header = json::Value::MakeObject();
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    int64_t numel = 1;
    json::Value shape = json::Value::MakeArray();
    for (int64_t d : t.shape) {
      numel *= d;
      shape.as_array().push_back(json::Value::Int(d));
    }
    if (static_cast<size_t>(numel) != t.data.size()) {
      return InvalidArgument("tensor '" + t.name + "': data size does not match its shape");
    }
    uint64_t bytes = static_cast<uint64_t>(numel) * DTypeSize(dtype);
    json::Value entry = json::Value::MakeObject();
    entry.Set("dtype", json::Value::String(DTypeName(dtype)));
    entry.Set("shape", std::move(shape));
    entry.Set("data_offsets", json::Value::MakeArray({json::Value::Int(static_cast<int64_t>(offset)),
                                                      json::Value::Int(static_cast<int64_t>(offset + bytes))}));
    header.Set(t.name, std::move(entry));
    offset += bytes;
  }
  std::string text = json::Dump(header);
  while (text.size() % 8 != 0) text.push_back(' ');  // data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return IoError("cannot create " + path);
  uint64_t len = text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<uint16_t> narrow;
  for (const TensorToWrite& t : tensors) {
    if (dtype == DType::kF32) {
      out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * 4));
      continue;
    }
    narrow.resize(t.data.size());
    for (size_t i = 0; i < t.data.size(); ++i) {
      narrow[i] = dtype == DType::kBF16 ? FloatToBf16(t.data[i]) : FloatToF16(t.data[i]);
    }
    out.write(reinterpret_cast<const char*>(narrow.data()), static_cast<std::streamsize>(narrow.size() * 2));
  }
  out.flush();
  if (!out) return IoError("write failed: " + path);
  return Status::Ok();
}

}  // namespace ladle::engine::model
