// Topology and LoadLedger: see include/ladle/lb/load_ledger.h.
#include "ladle/lb/load_ledger.h"

#include <algorithm>

#include "ladle/core/logging.h"

namespace ladle::lb {

Topology::Topology(std::vector<uint32_t> ranks_per_engine) : ranks_(std::move(ranks_per_engine)) {
  offset_.reserve(ranks_.size() + 1);
  offset_.push_back(0);
  for (uint32_t r : ranks_) {
    LADLE_CHECK(r > 0);
    offset_.push_back(offset_.back() + r);
  }
}

Topology Topology::Uniform(uint32_t engines, uint32_t ranks) {
  return Topology(std::vector<uint32_t>(engines, ranks));
}

RankTarget Topology::TargetOf(uint32_t flat) const {
  LADLE_CHECK(flat < ranks());
  // upper_bound over the prefix sums: the engine whose range holds flat.
  const auto it = std::upper_bound(offset_.begin(), offset_.end(), flat);
  const auto engine = static_cast<uint32_t>(it - offset_.begin() - 1);
  return {engine, flat - offset_[engine]};
}

void LoadLedger::Assign(RequestId id, uint32_t flat, double load) {
  LADLE_CHECK(flat < ranks_.size());
  const bool inserted = entries_.emplace(id, Entry{flat, load}).second;
  LADLE_CHECK(inserted);
  ranks_[flat].requests += 1;
  ranks_[flat].load += load;
}

bool LoadLedger::Release(RequestId id) {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  RankLoad& r = ranks_[it->second.flat];
  r.requests -= 1;
  // An empty rank is exactly 0, so float residue from many += / -= never accumulates into a
  // phantom load that would bias PickRank.
  r.load = r.requests == 0 ? 0.0 : r.load - it->second.load;
  entries_.erase(it);
  return true;
}

bool LoadLedger::Adjust(RequestId id, double delta) {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  it->second.load += delta;
  ranks_[it->second.flat].load += delta;
  return true;
}

bool LoadLedger::Set(RequestId id, double load) {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  return Adjust(id, load - it->second.load);
}

std::optional<uint32_t> LoadLedger::RankOf(RequestId id) const {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.flat;
}

std::optional<double> LoadLedger::LoadOf(RequestId id) const {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.load;
}

std::vector<RequestId> LoadLedger::RequestsOn(uint32_t first, uint32_t count) const {
  std::vector<RequestId> out;
  for (const auto& [id, e] : entries_) {
    if (e.flat >= first && e.flat < first + count) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ladle::lb
