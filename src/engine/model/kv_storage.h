// The reference model's physical KV memory.
//   Global KV: `num_blocks` blocks of block_size tokens, each a K plane then a V plane of
//   [block_size × heads·head_dim] floats (RoPE already applied to K). Projected once per
//   token from the encoder's last hidden state; every decoder layer reads it.
//   SWA rings: per slot, for every encoder and decoder layer, a K and a V ring of swa_ring
//   positions (position p lives at p % swa_ring), plus a ring of the encoder's output hidden
//   state, which lets the decoder replay the last window across prefill chunks.
// Each slot also records which positions its rings hold, so a step that does not continue
// the ring (a miss, a reused slot, a rollback beyond the spare slots) attends only to what
// it recomputes: SWA Bounded Replay.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ladle/engine/model.h"

namespace ladle::engine::model {

// Positions [lo, hi) were written by the sequence that owns the slot (those older than
// hi - swa_ring are already overwritten).
struct RingRange {
  int64_t lo = 0, hi = 0;
};
struct SlotState {
  RingRange encoder, decoder;
};

class ModelKvStorage final : public KvStorage {
 public:
  ModelKvStorage(const ModelConfig& c, int num_blocks, int num_slots);
  ~ModelKvStorage() override;
  bool ok() const { return global_ != nullptr; }  // false: the memory could not be allocated

  int num_blocks() const override { return num_blocks_; }
  int num_slots() const override { return num_slots_; }
  void CopySlot(int from, int to) override;
  size_t bytes() const override { return (global_floats_ + ring_floats_) * sizeof(float); }
  void ResetSlot(int slot) override;
  void CopyBlock(int from, int to) override;
  // K plane then V plane of the block, as floats in memory order.
  size_t block_bytes() const override { return block_floats_ * sizeof(float); }
  bool ReadBlock(int block, std::span<uint8_t> out) const override;
  bool WriteBlock(int block, std::span<const uint8_t> in) override;
  // Per encoder layer, K then V of the window [anchor - window, anchor), oldest first; then the
  // encoder output of the same positions. Only the encoder's state: the hit policy keeps at
  // least ring (134) tokens after any anchor, and a prefill's decoder starts over the last
  // window of the prompt from the encoder outputs, so it never reads a decoder ring entry from
  // before the anchor.
  size_t swa_bytes() const override;
  bool ReadSwa(int slot, int64_t anchor, std::span<uint8_t> out) const override;
  bool WriteSwa(int slot, int64_t anchor, std::span<const uint8_t> in) override;
  // A header of 4 int64 (encoder lo, hi, decoder lo, hi), then per layer (encoder, then
  // decoder) K then V of positions [pos - swa_ring, pos), oldest first, then the encoder
  // output of the same positions; rows of positions below 0 are zero. Positions below a ring's
  // lo are carried as they are but never read (the model attends from lo).
  size_t slot_state_bytes() const override;
  bool ReadSlotState(int slot, int64_t pos, std::span<uint8_t> out) const override;
  bool WriteSlotState(int slot, int64_t pos, std::span<const uint8_t> in) override;
  bool SlotStateFits(int64_t pos, std::span<const uint8_t> in) const override;
  // The copy of one encoder layer's window / of the encoder outputs, into `dst` at its place
  // in the swa layout; the ring must hold [anchor - window, anchor) (the model's capture).
  void CaptureSwaLayer(int slot, int layer, int64_t anchor, uint8_t* dst) const;
  void CaptureSwaHidden(int64_t anchor, const float* rows_from, int64_t rows_pos0, int slot, uint8_t* dst) const;

  // [block_size × kv_dim]
  float* GlobalK(int block) { return global_ + static_cast<size_t>(block) * block_floats_; }
  float* GlobalV(int block) { return GlobalK(block) + block_floats_ / 2; }
  // [swa_ring × kv_dim]; layer 0..encoder_layers-1 are the encoder's, then the decoder's.
  float* RingK(int slot, int layer) { return SlotBase(slot) + static_cast<size_t>(layer) * 2 * ring_layer_floats_; }
  float* RingV(int slot, int layer) { return RingK(slot, layer) + ring_layer_floats_; }
  // [swa_ring × hidden]
  float* HiddenRing(int slot) { return SlotBase(slot) + static_cast<size_t>(layers_) * 2 * ring_layer_floats_; }
  SlotState& state(int slot) { return states_[static_cast<size_t>(slot)]; }

  const ModelConfig& config() const { return config_; }

 private:
  float* SlotBase(int slot) { return rings_ + static_cast<size_t>(slot) * slot_floats_; }
  const float* SlotBase(int slot) const { return rings_ + static_cast<size_t>(slot) * slot_floats_; }
  size_t swa_layer_floats() const { return 2 * static_cast<size_t>(config_.window) * kv_dim_; }
  const float* GlobalBlock(int block) const { return global_ + static_cast<size_t>(block) * block_floats_; }

  ModelConfig config_;
  int num_blocks_, num_slots_, layers_;
  size_t kv_dim_;
  size_t block_floats_, ring_layer_floats_, slot_floats_, global_floats_, ring_floats_;
  // calloc: untouched blocks cost no resident memory until first written.
  float* global_ = nullptr;
  float* rings_ = nullptr;
  std::vector<SlotState> states_;
};

}  // namespace ladle::engine::model
