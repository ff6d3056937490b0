// What the vision encoder's server and client share: float32 little-endian byte strings and
// status codes in both directions.
#pragma once

#include <grpcpp/grpcpp.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ladle/core/status.h"

namespace ladle::cluster::vision_wire {

// `n` floats as float32 little-endian into `out` (resized). A memcpy on little-endian hosts;
// a byte swap per value elsewhere, so the wire format never depends on the host.
inline void PutFloats(const float* v, size_t n, std::string* out) {
  out->resize(n * 4);
  if constexpr (std::endian::native == std::endian::little) {
    if (n) std::memcpy(out->data(), v, n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t b = std::bit_cast<uint32_t>(v[i]);
      for (int k = 0; k < 4; ++k) (*out)[i * 4 + static_cast<size_t>(k)] = static_cast<char>((b >> (8 * k)) & 0xff);
    }
  }
}

// The floats of `bytes` (its size a multiple of 4, checked by the caller).
inline void GetFloats(const std::string& bytes, std::vector<float>* out) {
  const size_t n = bytes.size() / 4;
  out->resize(n);
  if constexpr (std::endian::native == std::endian::little) {
    if (n) std::memcpy(out->data(), bytes.data(), n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t b = 0;
      for (int k = 0; k < 4; ++k) b |= uint32_t{static_cast<uint8_t>(bytes[i * 4 + static_cast<size_t>(k)])} << (8 * k);
      (*out)[i] = std::bit_cast<float>(b);
    }
  }
}

inline grpc::Status ToGrpc(const Status& s) {
  grpc::StatusCode c = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kParseError: c = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kFailedPrecondition: c = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kResourceExhausted:
    case StatusCode::kPayloadTooLarge:
    case StatusCode::kOverloaded: c = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kUnavailable: c = grpc::StatusCode::UNAVAILABLE; break;
    // The local encoder cancels only when it is being destroyed, i.e. the machine is stopping:
    // the client should try another machine, which UNAVAILABLE tells it.
    case StatusCode::kCancelled: c = grpc::StatusCode::UNAVAILABLE; break;
    case StatusCode::kDeadlineExceeded: c = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case StatusCode::kUnsupported: c = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kNotFound: c = grpc::StatusCode::NOT_FOUND; break;
    default: break;
  }
  return grpc::Status(c, s.message());
}

inline StatusCode FromGrpc(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return StatusCode::kOk;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE: return StatusCode::kInvalidArgument;
    case grpc::StatusCode::FAILED_PRECONDITION: return StatusCode::kFailedPrecondition;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return StatusCode::kResourceExhausted;
    case grpc::StatusCode::UNAVAILABLE: return StatusCode::kUnavailable;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return StatusCode::kDeadlineExceeded;
    case grpc::StatusCode::CANCELLED: return StatusCode::kCancelled;
    case grpc::StatusCode::UNIMPLEMENTED: return StatusCode::kUnsupported;
    case grpc::StatusCode::NOT_FOUND: return StatusCode::kNotFound;
    default: return StatusCode::kInternal;
  }
}

}  // namespace ladle::cluster::vision_wire
