#include "kv_storage.h"

#include <cstdlib>
#include <cstring>

#include "ladle/core/logging.h"

namespace ladle::engine::model {

ModelKvStorage::ModelKvStorage(const ModelConfig& c, int num_blocks, int num_slots)
    : config_(c), num_blocks_(num_blocks), num_slots_(num_slots), layers_(c.encoder_layers + c.decoder_layers) {
  size_t kv_dim = static_cast<size_t>(c.heads) * c.head_dim;
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

}  // namespace ladle::engine::model
