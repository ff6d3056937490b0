// Pushdown simulation over interned stacks (matcher_sim.h).
#include "matcher_sim.h"

#include <algorithm>

namespace ladle::grammar {

namespace {
inline uint64_t Mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}
}  // namespace

int32_t Arena::Intern(const Automaton& a, int32_t state, int32_t parent) {
  const uint64_t key = Key(state, parent);
  size_t mask = table_.size() - 1;
  for (size_t i = Mix(key) & mask;; i = (i + 1) & mask) {
    int32_t id = table_[i];
    if (id < 0) {
      uint32_t below = parent >= 0 ? nodes_[static_cast<size_t>(parent)].dist : 0;
      uint32_t own = a.dist[state];
      uint32_t d = own == kInfDist || below == kInfDist ? kInfDist : own + below;
      id = static_cast<int32_t>(nodes_.size());
      nodes_.push_back({state, parent, d});
      table_[i] = id;
      if (nodes_.size() * 2 > table_.size()) Grow();
      return id;
    }
    const StackNode& n = nodes_[static_cast<size_t>(id)];
    if (n.state == state && n.parent == parent) return id;
  }
}

void Arena::Grow() {
  std::vector<int32_t> t(table_.size() * 2, -1);
  size_t mask = t.size() - 1;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    size_t i = Mix(Key(nodes_[id].state, nodes_[id].parent)) & mask;
    while (t[i] >= 0) i = (i + 1) & mask;
    t[i] = static_cast<int32_t>(id);
  }
  table_ = std::move(t);
}

void Arena::Clear() {
  nodes_.clear();
  table_.assign(1024, -1);
}

void Simulator::Visit(int32_t n) {
  if (mark_.size() <= static_cast<size_t>(n)) mark_.resize(std::max<size_t>(n + 1, mark_.size() * 2), 0);
  if (mark_[n] == stamp_) return;
  mark_[n] = stamp_;
  if (++visited_ > max_stacks_) {
    overflowed_ = true;
    return;
  }
  work_.push_back(n);
}

void Simulator::Close(std::span<const int32_t> seeds, StackSet& out) {
  out.tops.clear();
  out.can_end = out.barrier = false;
  if (++stamp_ == 0) {
    std::fill(mark_.begin(), mark_.end(), 0);
    stamp_ = 1;
  }
  work_.clear();
  visited_ = 0;
  for (int32_t s : seeds) Visit(s);
  while (!work_.empty() && !overflowed_) {
    const int32_t n = work_.back();
    work_.pop_back();
    const StackNode node = arena_[n];
    const int32_t g = node.state;
    if (a_.Active(g)) out.tops.push_back(n);
    if (a_.accepting[g]) {
      if (node.parent == kEnd) {
        out.can_end = true;
      } else if (node.parent == kBarrier) {
        out.barrier = true;
      } else {
        Visit(node.parent);
      }
    }
    for (uint32_t k = a_.call_begin[g]; k < a_.call_begin[g + 1]; ++k) {
      const Automaton::Call c = a_.calls[k];
      int32_t ret = arena_.Intern(a_, c.ret, node.parent);
      Visit(arena_.Intern(a_, c.callee, ret));
    }
  }
  std::sort(out.tops.begin(), out.tops.end());
}

bool Simulator::StepByte(const StackSet& in, uint8_t b, StackSet& out) {
  seeds_.clear();
  for (int32_t n : in.tops) {
    const StackNode node = arena_[n];
    int32_t t = a_.Next(node.state, b);
    if (t >= 0) seeds_.push_back(arena_.Intern(a_, t, node.parent));
  }
  if (seeds_.empty()) {
    out.tops.clear();
    out.can_end = out.barrier = false;
    return false;
  }
  Close(seeds_, out);
  return true;
}

bool Simulator::StepSpecial(const StackSet& in, uint32_t token, StackSet& out) {
  seeds_.clear();
  for (int32_t n : in.tops) {
    const StackNode node = arena_[n];
    for (uint32_t k = a_.special_begin[node.state]; k < a_.special_begin[node.state + 1]; ++k) {
      if (a_.specials[k].token == token) seeds_.push_back(arena_.Intern(a_, a_.specials[k].next, node.parent));
    }
  }
  if (seeds_.empty()) {
    out.tops.clear();
    out.can_end = out.barrier = false;
    return false;
  }
  Close(seeds_, out);
  return true;
}

bool Simulator::StepBytes(const StackSet& in, std::string_view bytes, StackSet& out) {
  if (bytes.empty()) {
    out = in;
    return true;
  }
  StackSet cur = in;
  for (char c : bytes) {
    if (!StepByte(cur, static_cast<uint8_t>(c), out)) return false;
    std::swap(cur, out);
  }
  out = std::move(cur);
  return true;
}

uint32_t Simulator::Shortest(const StackSet& s) const {
  if (s.can_end) return 0;
  uint32_t best = kInfDist;
  for (int32_t n : s.tops) best = std::min(best, arena_[n].dist);
  return best;
}

}  // namespace ladle::grammar
