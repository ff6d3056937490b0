// Raw ISA-L Reed-Solomon encode/decode throughput on given blocks (codec_ref.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "bench_util.h"

namespace ladle::bench {

struct CodecFigures {
  double encode_MBps = 0;  // block bytes coded per second
  double decode_MBps = 0;  // block bytes recovered per second with m data chunks lost
  bool decode_exact = false;
  size_t chunk_len = 0;
};

// Each block is split into k chunks of ceil(size/k) rounded up to 64 bytes; m parity chunks.
CodecFigures MeasureRawIsal(const std::vector<std::vector<uint8_t>>& blocks, int k, int m, double min_seconds);

// The same through the store's EcCodec (codec_lib.cc; built when src/kvcache/ec_codec.h exists,
// LADLE_BENCH_HAVE_EC_CODEC), with raw's chunk length.
CodecFigures MeasureStoreCodec(const std::vector<std::vector<uint8_t>>& blocks, int k, int m, size_t len,
                               double min_seconds);

}  // namespace ladle::bench
