// SetDfa (set_dfa.h): the memoised steps over closed stack sets.
#include "set_dfa.h"

namespace ladle::grammar {

void SetDfa::Clear() {
  sets_.clear();
  short_.clear();
  loop_known_.clear();
  loop_yes_.clear();
  index_.clear();
  trans_.clear();
  rep_.clear();
  plain_of_.clear();
  by_plain_.clear();
  memo_rows_ = 0;
}

bool SetDfa::LoopsOn(int32_t set, const ByteSet& bytes) {
  if (loop_known_.size() < sets_.size()) {
    loop_known_.resize(sets_.size());
    loop_yes_.resize(sets_.size());
  }
  for (int w = 0; w < 4; ++w) {
    // Bytes already known not to loop: no.
    if (bytes.bits[w] & loop_known_[set].bits[w] & ~loop_yes_[set].bits[w]) return false;
  }
  for (int w = 0; w < 4; ++w) {
    uint64_t unknown = bytes.bits[w] & ~loop_known_[set].bits[w];
    while (unknown) {
      const int b = w * 64 + __builtin_ctzll(unknown);
      unknown &= unknown - 1;
      const bool loops = Step(set, static_cast<uint8_t>(b)) == set;
      // Step may grow sets_ (and so these vectors' owners): index again after it.
      if (loop_known_.size() < sets_.size()) {
        loop_known_.resize(sets_.size());
        loop_yes_.resize(sets_.size());
      }
      loop_known_[set].Set(static_cast<uint8_t>(b));
      if (!loops) return false;
      loop_yes_[set].Set(static_cast<uint8_t>(b));
    }
  }
  return true;
}

// rep_[set * 256 + b]: the least byte that every top's unit puts in b's class.
void SetDfa::BuildReps(const StackSet& s) {
  const Automaton& a = sim_.automaton();
  units_.clear();
  for (int32_t n : s.tops) {
    const int32_t u = a.unit_of[arena_[n].state];
    if (std::find(units_.begin(), units_.end(), u) == units_.end()) units_.push_back(u);
  }
  // The one-block partition refined by each unit's classes.
  std::array<uint8_t, 256> block{};
  for (int32_t u : units_) RefineBlocks(block, [&](int b) { return a.class_map[u][b]; });
  rep_.insert(rep_.end(), block.begin(), block.end());
}

int32_t SetDfa::Compute(int32_t set, uint8_t b) {
  // The common case inside a frame, stepped on the DFA alone: no simulated step, and the
  // set found by its top node instead of by its key string.
  if (const int32_t n = plain_of_[set]; n >= 0) {
    const Automaton& a = sim_.automaton();
    const int32_t g = arena_[n].state;
    const int32_t t = a.next[a.trans_off[g] + a.class_map[a.unit_of[g]][b]];
    if (t < 0) return kDead;
    if (Plain(t)) {
      const int32_t m = arena_.Intern(a, t, arena_[n].parent);
      if (auto it = by_plain_.find(m); it != by_plain_.end()) return it->second;
      StackSet one;
      one.tops.push_back(m);
      return Intern(std::move(one));
    }
  }
  StackSet out;
  if (!sim_.StepByte(sets_[set], b, out)) return kDead;
  return Intern(std::move(out));
}

int32_t SetDfa::Intern(StackSet s) {
  std::string key(reinterpret_cast<const char*>(s.tops.data()), s.tops.size() * sizeof(int32_t));
  key.push_back(static_cast<char>(s.barrier | (s.can_end << 1)));
  auto [it, fresh] = index_.try_emplace(std::move(key), static_cast<int32_t>(sets_.size()));
  if (fresh) {
    if (sets_.size() < max_sets_) BuildReps(s);
    int32_t plain = -1;
    if (s.tops.size() == 1 && !s.barrier && !s.can_end && Plain(arena_[s.tops[0]].state)) {
      plain = s.tops[0];
      by_plain_.emplace(plain, it->second);
    }
    plain_of_.push_back(plain);
    sets_.push_back(std::move(s));
    if (sets_.size() <= max_sets_) {
      trans_.resize(sets_.size() * 256, kUnknown);
      memo_rows_ = sets_.size();
    }
  }
  return it->second;
}

}  // namespace ladle::grammar
