// The EC layout question of the store's design, measured: code inside each 112 KiB block (12
// chunk files of ~11 KiB a block, the store's first layout) or stripe across 10 consecutive
// blocks of a chain (12 files of 112 KiB per 10 blocks: a data chunk is a whole block, two parity
// chunks; the layout the store uses since this measurement, see src/kvcache/object_format.h).
// Both run on the same 12 fs targets (the store's own Target: io_uring reads, writer threads,
// temp file + rename, RocksDB index), with the same chunk headers and CRC32C, so what differs is
// only the I/O pattern each layout implies:
//   in-block write  12 writes of 11,612 B per block
//   striped write   12 writes of 114,780 B per 10 blocks (the store's tail rule: a chain's last
//                   g < 10 blocks are a narrower stripe, g data chunks and 2 parity)
//   in-block read   11 reads (K+1, hedged), the first 10 valid decode
//   striped read    1 read of 114,780 B; with the block's domain down, 11 reads of 114,780 B and
//                   a decode (10x the bytes)
#include "layout.h"

#include <atomic>
#include <bit>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>

#include "bench_util.h"
#include "ec_codec.h"
#include "object_format.h"
#include "target.h"

namespace ladle::bench {
namespace {

namespace fs = std::filesystem;
using kvcache::BlockKey;
using kvcache::ChunkHeader;

constexpr unsigned kK = 10, kM = 2, kN = kK + kM;

struct Targets {
  std::vector<std::unique_ptr<kvcache::Target>> t;
};

Result<Targets> OpenTargets(const std::string& dir) {
  Targets out;
  kvcache::TargetOptions to;
  to.io_depth = 32;
  for (unsigned d = 0; d < kN; ++d) {
    LADLE_ASSIGN_OR_RETURN(auto t, kvcache::OpenFsTarget(dir + "/d" + std::to_string(d), to));
    out.t.push_back(std::move(t));
  }
  return out;
}

std::shared_ptr<const std::vector<uint8_t>> Chunk(const BlockKey& key, unsigned idx, std::span<const uint8_t> payload,
                                                  uint64_t value_len, unsigned k, unsigned m) {
  // Both layouts as k members of the chunk's length (the header and I/O sizes are what count
  // here; the store itself writes the striped form, see object_format.h).
  (void)value_len;
  ChunkHeader h;
  for (unsigned j = 0; j < k; ++j) {
    h.members.push_back({BlockKey{key.lo + j, key.hi}, payload.size()});
    h.value_len += payload.size();
  }
  h.write_ms = 1;
  h.write_id = key.lo;
  h.key = kvcache::StripeKey(h.members[0].key, h.write_id);
  h.chunk_len = static_cast<uint32_t>(payload.size());
  h.chunk_idx = static_cast<uint8_t>(idx);
  h.k = static_cast<uint8_t>(k);
  h.m = static_cast<uint8_t>(m);
  return std::make_shared<std::vector<uint8_t>>(kvcache::EncodeChunk(h, payload));
}

// Counts answers of one request; calls done(ok) once when `want` answers arrived or failed.
struct Gather {
  std::mutex mu;
  unsigned answered = 0, ok = 0;
};

// What a read hands back is touched here, so the compiler cannot drop the copy out.
std::atomic<uint64_t> g_sink{0};
void Sink(const std::vector<uint8_t>& v) { g_sink.fetch_add(v.empty() ? 0 : v[v.size() / 2], std::memory_order_relaxed); }

BlockKey KeyOf(uint64_t salt, size_t i) { return BlockKey{0x9e3779b97f4a7c15ULL * (i + 1) ^ salt, salt + i}; }

RunResult InBlockWrite(Targets& ts, const std::vector<std::vector<uint8_t>>& blocks, size_t n, unsigned depth,
                       kvcache::EcCodec& codec) {
  const size_t block = blocks[0].size();
  const uint32_t cl = static_cast<uint32_t>((block + kK - 1) / kK);
  return ClosedLoop(n, depth, block, [&](size_t i, std::function<void(bool)> done) {
    std::vector<uint8_t> plain(static_cast<size_t>(cl) * kN, 0);
    std::memcpy(plain.data(), blocks[i % blocks.size()].data(), block);
    std::vector<uint8_t*> p(kN);
    for (unsigned d = 0; d < kN; ++d) p[d] = plain.data() + d * cl;
    codec.Encode(cl, p.data(), p.data() + kK);
    auto g = std::make_shared<Gather>();
    auto cb = std::make_shared<std::function<void(bool)>>(std::move(done));
    BlockKey key = KeyOf(1, i);
    for (unsigned d = 0; d < kN; ++d) {
      kvcache::ChunkWrite w{key, Chunk(key, d, std::span<const uint8_t>(p[d], cl), block, kK, kM), {}};
      ts.t[d]->WriteAsync(std::move(w), [g, cb](Status s) {
        std::lock_guard lock(g->mu);
        g->ok += s.ok();
        if (++g->answered == kN) (*cb)(g->ok == kN);
      });
    }
  });
}

RunResult StripedWrite(Targets& ts, const std::vector<std::vector<uint8_t>>& blocks, size_t stripes, unsigned depth,
                       kvcache::EcCodec& codec) {
  const size_t block = blocks[0].size();
  return ClosedLoop(stripes, depth, block * kK, [&](size_t s, std::function<void(bool)> done) {
    std::vector<uint8_t> parity(block * kM);
    std::vector<uint8_t*> dp(kK), pp(kM);
    for (unsigned d = 0; d < kK; ++d) dp[d] = const_cast<uint8_t*>(blocks[(s * kK + d) % blocks.size()].data());
    for (unsigned j = 0; j < kM; ++j) pp[j] = parity.data() + j * block;
    codec.Encode(block, dp.data(), pp.data());
    auto g = std::make_shared<Gather>();
    auto cb = std::make_shared<std::function<void(bool)>>(std::move(done));
    BlockKey key = KeyOf(2, s);
    for (unsigned d = 0; d < kN; ++d) {
      std::span<const uint8_t> payload(d < kK ? dp[d] : pp[d - kK], block);
      // Headers as for a whole one-chunk object: the CRC and header cost is what matters here.
      kvcache::ChunkWrite w{key, Chunk(key, 0, payload, block, 1, 0), {}};
      ts.t[d]->WriteAsync(std::move(w), [g, cb](Status st) {
        std::lock_guard lock(g->mu);
        g->ok += st.ok();
        if (++g->answered == kN) (*cb)(g->ok == kN);
      });
    }
  });
}

// Reads `domains` (a list) of `key`, decodes from the first K valid chunks of `cl` bytes (the
// chunks of one in-block object, or of one stripe).
void ReadAndDecode(Targets& ts, const BlockKey& key, const std::vector<unsigned>& domains, uint32_t cl,
                 kvcache::EcCodec& codec, std::function<void(bool)> done) {
  struct St {
    std::mutex mu;
    std::vector<std::vector<uint8_t>> chunk = std::vector<std::vector<uint8_t>>(kN);
    uint32_t valid = 0;
    unsigned answered = 0, want = 0;
    bool finished = false;
  };
  auto st = std::make_shared<St>();
  st->want = static_cast<unsigned>(domains.size());
  auto cb = std::make_shared<std::function<void(bool)>>(std::move(done));
  for (unsigned d : domains) {
    ts.t[d]->ReadAsync(key, [st, cb, d, cl, &codec](Result<std::vector<uint8_t>> r) {
      std::unique_lock lock(st->mu);
      ++st->answered;
      if (st->finished) return;
      if (r.ok()) {
        auto dec = kvcache::DecodeChunk(*r);
        if (dec.ok() && dec->payload.size() == cl) {
          st->chunk[d].assign(dec->payload.begin(), dec->payload.end());
          st->valid |= 1u << d;
        }
      }
      if (std::popcount(st->valid) == static_cast<int>(kK)) {
        st->finished = true;
        std::vector<uint8_t> out(static_cast<size_t>(cl) * kK);
        if ((st->valid & ((1u << kK) - 1)) == (1u << kK) - 1) {
          for (unsigned j = 0; j < kK; ++j) std::memcpy(out.data() + j * cl, st->chunk[j].data(), cl);
        } else {
          std::vector<uint8_t*> src, dst(kK);
          for (unsigned j = 0; j < kN; ++j) {
            if (st->valid & (1u << j)) src.push_back(st->chunk[j].data());
          }
          for (unsigned j = 0; j < kK; ++j) dst[j] = out.data() + j * cl;
          if (!codec.Decode(cl, st->valid, src.data(), dst.data())) {
            lock.unlock();
            (*cb)(false);
            return;
          }
        }
        Sink(out);
        lock.unlock();
        (*cb)(true);
      } else if (st->answered == st->want) {
        st->finished = true;
        lock.unlock();
        (*cb)(false);
      }
    });
  }
}

void StripedRead(Targets& ts, size_t b, size_t block, unsigned down, kvcache::EcCodec& codec,
                 std::function<void(bool)> done) {
  const size_t s = b / kK;
  const unsigned d = static_cast<unsigned>(b % kK);
  BlockKey key = KeyOf(2, s);
  if (d != down) {
    ts.t[d]->ReadAsync(key, [done = std::move(done), block](Result<std::vector<uint8_t>> r) {
      bool ok = r.ok();
      if (ok) {
        auto dec = kvcache::DecodeChunk(*r);
        ok = dec.ok() && dec->payload.size() == block;
        if (ok) {
          Sink(std::vector<uint8_t>(dec->payload.begin(), dec->payload.end()));  // the copy out, as in-block does
        }
      }
      done(ok);
    });
    return;
  }
  // The block's domain is down: every other chunk of the stripe, decode from the first 10.
  std::vector<unsigned> others;
  for (unsigned x = 0; x < kN; ++x) {
    if (x != down) others.push_back(x);
  }
  ReadAndDecode(ts, key, others, static_cast<uint32_t>(block), codec, std::move(done));
}

}  // namespace

Result<LayoutFigures> MeasureLayouts(const std::string& dir, size_t n, unsigned depth) {
  n = std::max<size_t>(kK, n / kK * kK);  // whole stripes
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  LADLE_ASSIGN_OR_RETURN(Targets ts, OpenTargets(dir));
  std::mt19937_64 rng(7);
  const size_t block = 112 * 1024;
  std::vector<std::vector<uint8_t>> blocks(16, std::vector<uint8_t>(block));
  for (auto& b : blocks) for (auto& x : b) x = static_cast<uint8_t>(rng());
  kvcache::EcCodec codec(kK, kM);
  const uint32_t cl = static_cast<uint32_t>((block + kK - 1) / kK);
  const unsigned stripe_depth = std::max(1u, depth / kK);
  LayoutFigures f;
  f.blocks = n;
  f.depth = depth;
  f.stripe_depth = stripe_depth;
  f.inblock_write = InBlockWrite(ts, blocks, n, depth, codec);
  f.striped_write = StripedWrite(ts, blocks, n / kK, stripe_depth, codec);
  std::vector<unsigned> first11, all_but_0;
  for (unsigned d = 0; d <= kK; ++d) first11.push_back(d);
  for (unsigned d = 1; d < kN; ++d) all_but_0.push_back(d);
  auto inblock = [&](const std::vector<unsigned>& doms, unsigned qd) {
    return ClosedLoop(n, qd, block, [&](size_t i, std::function<void(bool)> done) {
      ReadAndDecode(ts, KeyOf(1, i), doms, cl, codec, std::move(done));
    });
  };
  auto striped = [&](unsigned down, unsigned qd) {
    return ClosedLoop(n, qd, block, [&](size_t i, std::function<void(bool)> done) {
      StripedRead(ts, i, block, down, codec, std::move(done));
    });
  };
  constexpr unsigned kNone = ~0u;
  f.inblock_read = inblock(first11, depth);
  f.striped_read = striped(kNone, depth);
  f.inblock_read_down = inblock(all_but_0, depth);
  f.striped_read_down = striped(0, depth);
  f.inblock_read_qd1 = inblock(first11, 1);
  f.striped_read_qd1 = striped(kNone, 1);
  f.inblock_read_down_qd1 = inblock(all_but_0, 1);
  f.striped_read_down_qd1 = striped(0, 1);
  ts.t.clear();
  fs::remove_all(dir, ec);
  return f;
}

}  // namespace ladle::bench
