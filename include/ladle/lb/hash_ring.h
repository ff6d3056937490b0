// Consistent hashing over the live entrypoints, for the sharded SWA directory (the recipe's
// "logically unified directory, sharded by key across Entrypoints"): the entrypoint that owns
// an SWA key records where that SWA entry lives.
//
// Each member (an entrypoint id) is placed at `vnodes` points on a 64-bit ring, point i being
// XXH3-64 of the id with seed i; a key (the 128-bit SWA key: the store's chain key) is hashed
// with XXH3-64 to a point and owned by the first member point at or after it, wrapping. So
// every entrypoint computes the same owner from the same live set, and when a member leaves
// only the keys it owned move (to the next points' owners); every other key keeps its owner,
// which is what lets an entrypoint leave losing only its shard (SWA misses, then replays).
//
//   HashRing ring;                 // 64 virtual nodes per member
//   ring.Add("ep-0"); ring.Add("ep-1");
//   std::string_view owner = *ring.Owner({key.hi, key.lo});
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/status.h"

namespace ladle::lb {

struct SwaKey {
  uint64_t hi = 0, lo = 0;
};

class HashRing {
 public:
  explicit HashRing(uint32_t vnodes = 64);  // vnodes > 0 (CHECKed)

  // kAlreadyExists / kNotFound when the member is (not) present; kInvalidArgument for "".
  Status Add(std::string_view member);
  Status Remove(std::string_view member);
  bool Contains(std::string_view member) const;

  // The owner of `key`; nothing when the ring is empty. The view lives until the next
  // Add/Remove.
  std::optional<std::string_view> Owner(SwaKey key) const;
  // Members in sorted order.
  const std::vector<std::string>& members() const { return members_; }
  size_t size() const { return members_.size(); }
  uint32_t vnodes() const { return vnodes_; }

  // The ring point of a key (exposed for tests and for callers that cache it).
  static uint64_t KeyPoint(SwaKey key);

 private:
  struct Point {
    uint64_t pos;
    uint32_t member;  // index into members_
  };
  void Rebuild();

  uint32_t vnodes_;
  std::vector<std::string> members_;  // sorted
  std::vector<Point> points_;         // sorted by (pos, member name): deterministic on collisions
};

}  // namespace ladle::lb
