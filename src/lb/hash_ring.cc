// Consistent-hash ring for the sharded SWA directory: see include/ladle/lb/hash_ring.h.
#include "ladle/lb/hash_ring.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>

#include "ladle/core/logging.h"

namespace ladle::lb {

HashRing::HashRing(uint32_t vnodes) : vnodes_(vnodes) { LADLE_CHECK(vnodes > 0); }

uint64_t HashRing::KeyPoint(SwaKey key) {
  // The key is already a hash, but of a chain the caller may structure (a session's keys share
  // a history); rehashing spreads any such pattern evenly over the ring.
  const uint64_t words[2] = {key.hi, key.lo};
  return XXH3_64bits(words, sizeof(words));
}

bool HashRing::Contains(std::string_view member) const {
  return std::binary_search(members_.begin(), members_.end(), member);
}

Status HashRing::Add(std::string_view member) {
  if (member.empty()) return InvalidArgument("hash ring member id is empty");
  const auto it = std::lower_bound(members_.begin(), members_.end(), member);
  if (it != members_.end() && *it == member) {
    return Status(StatusCode::kAlreadyExists, fmt::format("hash ring already has member '{}'", member));
  }
  members_.insert(it, std::string(member));
  Rebuild();
  return Status::Ok();
}

Status HashRing::Remove(std::string_view member) {
  const auto it = std::lower_bound(members_.begin(), members_.end(), member);
  if (it == members_.end() || *it != member) return NotFound(fmt::format("hash ring has no member '{}'", member));
  members_.erase(it);
  Rebuild();
  return Status::Ok();
}

void HashRing::Rebuild() {
  // Membership changes are rare (an entrypoint joins or leaves) and lookups are hot, so the
  // ring is one sorted array rebuilt whole; a member's points depend only on its id, so a
  // rebuild places every surviving member exactly where it was.
  points_.clear();
  points_.reserve(members_.size() * vnodes_);
  for (uint32_t m = 0; m < members_.size(); ++m) {
    for (uint32_t v = 0; v < vnodes_; ++v) {
      points_.push_back({XXH3_64bits_withSeed(members_[m].data(), members_[m].size(), v), m});
    }
  }
  // members_ is sorted, so the member index orders equal points by name: every process breaks
  // a (vanishingly rare) collision the same way.
  std::sort(points_.begin(), points_.end(),
            [](const Point& x, const Point& y) { return x.pos != y.pos ? x.pos < y.pos : x.member < y.member; });
}

std::optional<std::string_view> HashRing::Owner(SwaKey key) const {
  if (points_.empty()) return std::nullopt;
  const uint64_t p = KeyPoint(key);
  auto it = std::lower_bound(points_.begin(), points_.end(), p, [](const Point& x, uint64_t v) { return x.pos < v; });
  if (it == points_.end()) it = points_.begin();
  return std::string_view(members_[it->member]);
}

}  // namespace ladle::lb
