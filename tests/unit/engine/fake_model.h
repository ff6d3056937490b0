// A tiny deterministic Model for engine tests. Its "KV" is the token ids themselves: the
// global blocks hold the token at each position and each ring slot holds (position, token)
// pairs. Logits are a hash of the full history READ BACK THROUGH THE BLOCK TABLE, so a wrong
// block table, a block shared when it should not be, or a missing write changes the output
// or fails the step. Rings are cross-checked against the blocks, so a stale or wrongly
// copied ring fails the step too. Optional busy-wait time per step and per token lets the
// cost model and the async pipeline be measured.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "ladle/engine/model.h"

namespace ladle::engine::testing {

inline uint64_t FakeMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct FakeOptions {
  int vocab = 1000;
  int64_t eos_at_len = 0;      // history length from which EOS (id 1) wins; 0 = never
  double ns_per_step = 0;      // simulated fixed cost
  double ns_per_token = 0;     // simulated cost per new token
  double ns_per_token_ctx = 0; // simulated q·c cost
};

// The running hash of a history: FakeHashStep(hash of h, t) is the hash of h + [t].
inline constexpr uint64_t kFakeHashSeed = 0xcbf29ce484222325ull;
inline uint64_t FakeHashStep(uint64_t x, TokenId t) { return FakeMix(x ^ t); }

// Logits row of a history of `len` tokens whose hash is `x`.
inline void FakeLogitsOfHash(uint64_t x, int64_t len, const FakeOptions& o, float* out) {
  for (int v = 0; v < o.vocab; ++v) out[v] = static_cast<float>(FakeMix(x ^ (uint64_t(v) << 32)) >> 40) / 2097152.0f;
  out[0] = -100.0f;  // never BOS
  out[1] = (o.eos_at_len > 0 && len >= o.eos_at_len) ? 100.0f : -100.0f;
}

// Logits row of the history `h` (the same function the fake model applies).
inline void FakeLogits(const std::vector<TokenId>& h, const FakeOptions& o, float* out) {
  uint64_t x = kFakeHashSeed;
  for (TokenId t : h) x = FakeHashStep(x, t);
  FakeLogitsOfHash(x, static_cast<int64_t>(h.size()), o, out);
}

// The fake model's "hidden state" of a logits row (SeqStep::hidden_out): the history's hash and
// length, 16 bits per float (exact), so a test drafter can continue the history exactly.
inline void FakeHidden(uint64_t x, int64_t len, float* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<float>((x >> (16 * i)) & 0xffff);
  for (int i = 0; i < 2; ++i) out[4 + i] = static_cast<float>((static_cast<uint64_t>(len) >> (16 * i)) & 0xffff);
}
inline void FakeHiddenDecode(const float* in, uint64_t* x, int64_t* len) {
  *x = 0;
  for (int i = 0; i < 4; ++i) *x |= static_cast<uint64_t>(in[i]) << (16 * i);
  uint64_t l = 0;
  for (int i = 0; i < 2; ++i) l |= static_cast<uint64_t>(in[4 + i]) << (16 * i);
  *len = static_cast<int64_t>(l);
}

class FakeKv : public KvStorage {
 public:
  FakeKv(int blocks, int slots, int bs, int ring)
      : nb_(blocks), ns_(slots), bs_(bs), ring_(ring), blocks_(size_t(blocks) * bs, -1),
        rings_(size_t(slots) * ring, {-1, -1}) {}
  int num_blocks() const override { return nb_; }
  int num_slots() const override { return ns_; }
  void CopySlot(int from, int to) override {
    ++copies;
    for (int i = 0; i < ring_; ++i) rings_[size_t(to) * ring_ + i] = rings_[size_t(from) * ring_ + i];
  }
  void ResetSlot(int slot) override {
    for (int i = 0; i < ring_; ++i) rings_[size_t(slot) * ring_ + i] = {-1, -1};
  }
  size_t bytes() const override { return blocks_.size() * 8; }
  int64_t& At(int block, int64_t off) { return blocks_[size_t(block) * bs_ + off]; }
  std::pair<int64_t, int64_t>& Ring(int slot, int64_t pos) { return rings_[size_t(slot) * ring_ + pos % ring_]; }
  std::atomic<int> copies{0};

 private:
  int nb_, ns_, bs_, ring_;
  std::vector<int64_t> blocks_;
  std::vector<std::pair<int64_t, int64_t>> rings_;
};

class FakeModel : public Model {
 public:
  explicit FakeModel(FakeOptions o = {}) : o_(o) {
    cfg_.vocab_size = o.vocab;
  }
  const ModelConfig& config() const override { return cfg_; }
  std::unique_ptr<KvStorage> NewKvStorage(int num_blocks, int num_slots) const override {
    return std::make_unique<FakeKv>(num_blocks, num_slots, cfg_.block_size, cfg_.swa_ring);
  }
  Status Forward(std::span<const SeqStep> batch, KvStorage& kvs, std::vector<float>* logits) override {
    auto& kv = static_cast<FakeKv&>(kvs);
    const auto t0 = std::chrono::steady_clock::now();
    double spin = o_.ns_per_step;
    logits->clear();
    max_batch = std::max<int>(max_batch, static_cast<int>(batch.size()));
    ++steps;
    for (const auto& s : batch) {
      const int64_t end = s.start_pos + static_cast<int64_t>(s.tokens.size());
      if (static_cast<int64_t>(s.block_table.size()) * cfg_.block_size < end) return Internal("block table too short");
      if (s.prefill && s.start_pos == 0) ++prefills_from_zero;
      tokens += static_cast<int64_t>(s.tokens.size());
      spin += o_.ns_per_token * s.tokens.size() + o_.ns_per_token_ctx * s.tokens.size() * s.start_pos;
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        const int64_t p = s.start_pos + static_cast<int64_t>(i);
        if (s.tokens[i] >= static_cast<TokenId>(o_.vocab)) return Internal("token outside vocab");
        int64_t& cell = kv.At(s.block_table[p / cfg_.block_size], p % cfg_.block_size);
        if (p < s.kv_written) {
          if (cell != s.tokens[i]) return Internal("kv_written block holds another token at " + std::to_string(p));
        } else {
          cell = s.tokens[i];
        }
        kv.Ring(s.swa_slot, p) = {p, s.tokens[i]};
      }
      if (!s.want_logits) continue;
      std::vector<TokenId> h(end);
      for (int64_t p = 0; p < end; ++p) {
        const int64_t t = kv.At(s.block_table[p / cfg_.block_size], p % cfg_.block_size);
        if (t < 0) return Internal("read unwritten KV at " + std::to_string(p));
        h[p] = static_cast<TokenId>(t);
      }
      for (int64_t p = std::max<int64_t>(0, end - cfg_.window); p < end; ++p) {
        auto [rp, rt] = kv.Ring(s.swa_slot, p);
        if (rp == p && rt != h[p]) return Internal("ring disagrees with blocks at " + std::to_string(p));
      }
      // One row per logits token (a verify span asks for several), oldest first.
      const int64_t first = end - s.logits_count;
      if (s.logits_count < 1 || first < s.start_pos) return Internal("logits_count outside the step");
      uint64_t x = kFakeHashSeed;
      for (int64_t p = 0; p <= first; ++p) x = FakeHashStep(x, h[p]);
      for (int64_t p = first; p < end; ++p) {
        if (p > first) x = FakeHashStep(x, h[p]);
        logits->resize(logits->size() + o_.vocab);
        FakeLogitsOfHash(x, p + 1, o_, logits->data() + logits->size() - o_.vocab);
        if (s.hidden_out) FakeHidden(x, p + 1, s.hidden_out + (p - first) * cfg_.hidden);
      }
    }
    while (std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() < spin) {
    }
    return Status::Ok();
  }

  std::atomic<int> max_batch{0}, steps{0}, prefills_from_zero{0};
  std::atomic<int64_t> tokens{0};

 private:
  FakeOptions o_;
  ModelConfig cfg_;
};

}  // namespace ladle::engine::testing
