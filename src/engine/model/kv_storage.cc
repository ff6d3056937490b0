#include "kv_storage.h"

#include <cstdlib>
#include <cstring>

#include "ladle/core/logging.h"

namespace ladle::engine::model {

ModelKvStorage::ModelKvStorage(const ModelConfig& c, int num_blocks, int num_slots)
    : config_(c), num_blocks_(num_blocks), num_slots_(num_slots), layers_(c.encoder_layers + c.decoder_layers) {
  size_t kv_dim = static_cast<size_t>(c.heads) * c.head_dim;
  kv_dim_ = kv_dim;
  block_floats_ = 2 * static_cast<size_t>(c.block_size) * kv_dim;
  ring_layer_floats_ = static_cast<size_t>(c.swa_ring) * kv_dim;
  slot_floats_ = static_cast<size_t>(layers_) * 2 * ring_layer_floats_ + static_cast<size_t>(c.swa_ring) * c.hidden;
  global_floats_ = block_floats_ * static_cast<size_t>(num_blocks);
  ring_floats_ = slot_floats_ * static_cast<size_t>(num_slots);
  global_ = static_cast<float*>(std::calloc(global_floats_ + 1, sizeof(float)));
  rings_ = static_cast<float*>(std::calloc(ring_floats_ + 1, sizeof(float)));
  if (global_ == nullptr || rings_ == nullptr) {
    // No exceptions across modules: NewKvStorage reports this as nullptr (see ok()).
    std::free(global_);
    std::free(rings_);
    global_ = rings_ = nullptr;
    return;
  }
  states_.resize(static_cast<size_t>(num_slots));
}

ModelKvStorage::~ModelKvStorage() {
  std::free(global_);
  std::free(rings_);
}

// The engine's block manager hands out every slot and block index these take: one out of range
// is a bug upstream (it would copy another sequence's KV), so it stops the process rather than
// being skipped in silence.
void ModelKvStorage::CopySlot(int from, int to) {
  LADLE_CHECK(from >= 0 && to >= 0 && from < num_slots_ && to < num_slots_);
  if (from == to) return;
  std::memcpy(SlotBase(to), SlotBase(from), slot_floats_ * sizeof(float));
  states_[static_cast<size_t>(to)] = states_[static_cast<size_t>(from)];
}

void ModelKvStorage::ResetSlot(int slot) {
  LADLE_CHECK(slot >= 0 && slot < num_slots_);
  states_[static_cast<size_t>(slot)] = SlotState{};
}

void ModelKvStorage::CopyBlock(int from, int to) {
  LADLE_CHECK(from >= 0 && to >= 0 && from < num_blocks_ && to < num_blocks_);
  if (from == to) return;
  std::memcpy(GlobalK(to), GlobalK(from), block_floats_ * sizeof(float));
}

bool ModelKvStorage::ReadBlock(int block, std::span<uint8_t> out) const {
  LADLE_CHECK(block >= 0 && block < num_blocks_);
  if (out.size() != block_bytes()) return false;
  std::memcpy(out.data(), GlobalBlock(block), out.size());
  return true;
}

bool ModelKvStorage::WriteBlock(int block, std::span<const uint8_t> in) {
  LADLE_CHECK(block >= 0 && block < num_blocks_);
  if (in.size() != block_bytes()) return false;
  std::memcpy(GlobalK(block), in.data(), in.size());
  return true;
}

size_t ModelKvStorage::swa_bytes() const {
  return (static_cast<size_t>(config_.encoder_layers) * swa_layer_floats() +
          static_cast<size_t>(config_.window) * config_.hidden) *
         sizeof(float);
}

void ModelKvStorage::CaptureSwaLayer(int slot, int layer, int64_t anchor, uint8_t* dst) const {
  const int R = config_.swa_ring, W = config_.window;
  const float* k = SlotBase(slot) + static_cast<size_t>(layer) * 2 * ring_layer_floats_;
  const float* v = k + ring_layer_floats_;
  float* out = reinterpret_cast<float*>(dst) + static_cast<size_t>(layer) * swa_layer_floats();
  for (int64_t p = anchor - W, i = 0; p < anchor; ++p, ++i) {
    std::memcpy(out + static_cast<size_t>(i) * kv_dim_, k + static_cast<size_t>(p % R) * kv_dim_, kv_dim_ * sizeof(float));
    std::memcpy(out + (static_cast<size_t>(W) + static_cast<size_t>(i)) * kv_dim_, v + static_cast<size_t>(p % R) * kv_dim_,
                kv_dim_ * sizeof(float));
  }
}

void ModelKvStorage::CaptureSwaHidden(int64_t anchor, const float* rows_from, int64_t rows_pos0, int slot,
                                      uint8_t* dst) const {
  const int R = config_.swa_ring, W = config_.window, H = config_.hidden;
  const float* ring = SlotBase(slot) + static_cast<size_t>(layers_) * 2 * ring_layer_floats_;
  float* out = reinterpret_cast<float*>(dst) + static_cast<size_t>(config_.encoder_layers) * swa_layer_floats();
  for (int64_t p = anchor - W, i = 0; p < anchor; ++p, ++i) {
    // Positions of this step come from its rows (the ring may already hold later ones).
    const float* src = rows_from != nullptr && p >= rows_pos0 ? rows_from + static_cast<size_t>(p - rows_pos0) * H
                                                              : ring + static_cast<size_t>(p % R) * H;
    std::memcpy(out + static_cast<size_t>(i) * H, src, sizeof(float) * static_cast<size_t>(H));
  }
}

bool ModelKvStorage::ReadSwa(int slot, int64_t anchor, std::span<uint8_t> out) const {
  LADLE_CHECK(slot >= 0 && slot < num_slots_);
  if (out.size() != swa_bytes() || config_.encoder_layers == 0) return false;
  const RingRange& r = states_[static_cast<size_t>(slot)].encoder;
  const int64_t lo = anchor - config_.window;
  // The window must have been written by this slot's sequence and not yet overwritten.
  if (lo < 0 || lo < r.lo || anchor > r.hi || r.hi - config_.swa_ring > lo) return false;
  for (int l = 0; l < config_.encoder_layers; ++l) CaptureSwaLayer(slot, l, anchor, out.data());
  CaptureSwaHidden(anchor, nullptr, 0, slot, out.data());
  return true;
}

bool ModelKvStorage::WriteSwa(int slot, int64_t anchor, std::span<const uint8_t> in) {
  LADLE_CHECK(slot >= 0 && slot < num_slots_);
  const int R = config_.swa_ring, W = config_.window, H = config_.hidden;
  if (in.size() != swa_bytes() || anchor < W || config_.encoder_layers == 0) return false;
  const float* src = reinterpret_cast<const float*>(in.data());
  for (int l = 0; l < config_.encoder_layers; ++l) {
    float* k = RingK(slot, l);
    float* v = RingV(slot, l);
    const float* from = src + static_cast<size_t>(l) * swa_layer_floats();
    for (int64_t p = anchor - W, i = 0; p < anchor; ++p, ++i) {
      std::memcpy(k + static_cast<size_t>(p % R) * kv_dim_, from + static_cast<size_t>(i) * kv_dim_, kv_dim_ * sizeof(float));
      std::memcpy(v + static_cast<size_t>(p % R) * kv_dim_, from + (static_cast<size_t>(W) + static_cast<size_t>(i)) * kv_dim_,
                  kv_dim_ * sizeof(float));
    }
  }
  const float* hid = src + static_cast<size_t>(config_.encoder_layers) * swa_layer_floats();
  float* ring = HiddenRing(slot);
  for (int64_t p = anchor - W, i = 0; p < anchor; ++p, ++i) {
    std::memcpy(ring + static_cast<size_t>(p % R) * H, hid + static_cast<size_t>(i) * H, sizeof(float) * static_cast<size_t>(H));
  }
  // The encoder continues from the window; the decoder ring holds nothing of this sequence.
  states_[static_cast<size_t>(slot)] = SlotState{{anchor - W, anchor}, {anchor, anchor}};
  return true;
}

size_t ModelKvStorage::slot_state_bytes() const {
  return 4 * sizeof(int64_t) + slot_floats_ * sizeof(float);
}

bool ModelKvStorage::ReadSlotState(int slot, int64_t pos, std::span<uint8_t> out) const {
  LADLE_CHECK(slot >= 0 && slot < num_slots_);
  if (out.size() != slot_state_bytes() || pos < 0) return false;
  const SlotState& st = states_[static_cast<size_t>(slot)];
  if (st.encoder.hi != pos || st.decoder.hi != pos) return false;
  const int64_t header[4] = {st.encoder.lo, st.encoder.hi, st.decoder.lo, st.decoder.hi};
  std::memcpy(out.data(), header, sizeof header);
  const int R = config_.swa_ring;
  float* dst = reinterpret_cast<float*>(out.data() + sizeof header);
  const float* base = SlotBase(slot);
  // Every ring of the slot (K and V of each layer, then the encoder outputs) has R rows of
  // `width` floats, position p at row p % R: copied out in position order.
  auto copy_ring = [&](const float* ring, size_t width) {
    for (int64_t p = pos - R; p < pos; ++p, dst += width) {
      if (p < 0) {
        std::memset(dst, 0, width * sizeof(float));
      } else {
        std::memcpy(dst, ring + static_cast<size_t>(p % R) * width, width * sizeof(float));
      }
    }
  };
  for (int l = 0; l < layers_; ++l) {
    copy_ring(base + static_cast<size_t>(l) * 2 * ring_layer_floats_, kv_dim_);
    copy_ring(base + static_cast<size_t>(l) * 2 * ring_layer_floats_ + ring_layer_floats_, kv_dim_);
  }
  copy_ring(base + static_cast<size_t>(layers_) * 2 * ring_layer_floats_, static_cast<size_t>(config_.hidden));
  return true;
}

bool ModelKvStorage::SlotStateFits(int64_t pos, std::span<const uint8_t> in) const {
  if (in.size() != slot_state_bytes() || pos < 0) return false;
  int64_t h[4];
  std::memcpy(h, in.data(), sizeof h);
  // Ranges a ReadSlotState at `pos` could have produced: lo <= hi = pos.
  return h[1] == pos && h[3] == pos && h[0] >= 0 && h[0] <= pos && h[2] >= 0 && h[2] <= pos;
}

bool ModelKvStorage::WriteSlotState(int slot, int64_t pos, std::span<const uint8_t> in) {
  LADLE_CHECK(slot >= 0 && slot < num_slots_);
  if (!SlotStateFits(pos, in)) return false;
  int64_t h[4];
  std::memcpy(h, in.data(), sizeof h);
  const int R = config_.swa_ring;
  const float* src = reinterpret_cast<const float*>(in.data() + sizeof h);
  float* base = SlotBase(slot);
  auto copy_ring = [&](float* ring, size_t width) {
    for (int64_t p = pos - R; p < pos; ++p, src += width) {
      if (p >= 0) std::memcpy(ring + static_cast<size_t>(p % R) * width, src, width * sizeof(float));
    }
  };
  for (int l = 0; l < layers_; ++l) {
    copy_ring(base + static_cast<size_t>(l) * 2 * ring_layer_floats_, kv_dim_);
    copy_ring(base + static_cast<size_t>(l) * 2 * ring_layer_floats_ + ring_layer_floats_, kv_dim_);
  }
  copy_ring(base + static_cast<size_t>(layers_) * 2 * ring_layer_floats_, static_cast<size_t>(config_.hidden));
  states_[static_cast<size_t>(slot)] = SlotState{{h[0], h[1]}, {h[2], h[3]}};
  return true;
}

}  // namespace ladle::engine::model
