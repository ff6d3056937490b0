// The classifier's slices (mask_cache.h): the string-body slice (a precomputed set of the
// tokens the JSON string body accepts, proved contained by a breadth-first check) and the
// layer slice (a layered counted repeat's boundaries, from a per-body token table). Each
// replaces a walk over the whole vocabulary by a walk over the few tokens that leave the body.
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <xxhash.h>

#include "classify_internal.h"

namespace ladle::grammar {

using namespace classify_internal;

namespace {

constexpr uint32_t kUnsetDist = kInfDist - 1;
using BodyShorts = std::array<uint32_t, StringBody::kStates>;

enum class Containment { kYes, kNo, kUnknown };

// Records the completion length after a path that ends in body state c; false once body
// state c has been seen with two different lengths (budget data would not be exact).
inline bool NoteShort(BodyShorts& s, int c, uint32_t d) {
  if (s[c] == kUnsetDist) s[c] = d;
  return s[c] == d && d != kInfDist;
}

// The containment check on the DFAs themselves, without stacks: a path is followed in
// every DFA state it may be in (up to kMaxAlts), a call adding the callee's start. Returns
// and pops are not followed, so this only ever proves containment too rarely, never too
// often: every stack it follows is one of the classifier's. With one state and no calls met,
// the classifier's set after a path is the closure of that state, whose completion length is
// the state's own (callee stacks the closure adds complete no sooner), and a dead path is a
// dead set (kNo); otherwise budget data is not derived here (`budget` = false) and a dead
// path says nothing (kUnknown: the set-level check decides).
Containment RawContainment(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, const ByteSet& skip,
                           BodyShorts& shorts, bool& budget, bool& one_state) {
  constexpr size_t kMaxAlts = 4, kMaxPairs = 4096;
  using Alts = std::array<int32_t, kMaxAlts>;  // sorted, -1 padded
  bool calls_met = false;
  auto close = [&](Alts& x) {
    if (x[1] < 0 && a.call_begin[x[0]] == a.call_begin[x[0] + 1]) return true;
    for (size_t i = 0; i < kMaxAlts && x[i] >= 0; ++i) {
      const int32_t g = x[i];
      for (uint32_t k = a.call_begin[g]; k < a.call_begin[g + 1]; ++k) {
        calls_met = true;
        const int32_t callee = a.calls[k].callee;
        if (std::find(x.begin(), x.end(), callee) != x.end()) continue;
        auto free = std::find(x.begin(), x.end(), -1);
        if (free == x.end()) return false;
        *free = callee;
      }
    }
    std::sort(x.begin(), x.end(), [](int32_t p, int32_t q) { return static_cast<uint32_t>(p) < static_cast<uint32_t>(q); });
    return true;
  };
  struct Pair {
    Alts x;
    int8_t body;
    uint8_t depth;
  };
  struct KeyHash {
    size_t operator()(const std::pair<Alts, int8_t>& k) const {
      uint64_t h = static_cast<uint64_t>(k.second);
      for (int32_t g : k.first) h = h * 0x9E3779B97F4A7C15ULL + static_cast<uint32_t>(g);
      return h ^ (h >> 29);
    }
  };
  // Seen pairs: a single DFA state's body states as a bit mask (generation-stamped scratch
  // by state: the common case), several states' in a map.
  struct Scratch {
    std::vector<uint16_t> mask;
    std::vector<uint32_t> gen_of;
    uint32_t gen = 0;
  };
  thread_local Scratch sc;
  if (sc.mask.size() < a.num_states()) {
    sc.mask.assign(a.num_states(), 0);
    sc.gen_of.assign(a.num_states(), 0);
  }
  if (++sc.gen == 0) {
    std::fill(sc.gen_of.begin(), sc.gen_of.end(), 0);
    sc.gen = 1;
  }
  std::unordered_map<std::pair<Alts, int8_t>, char, KeyHash> seen;
  auto fresh = [&](const Alts& x, int8_t c) {
    if (x[1] >= 0) return seen.emplace(std::make_pair(x, c), 0).second;
    const int32_t g = x[0];
    if (sc.gen_of[g] != sc.gen) {
      sc.gen_of[g] = sc.gen;
      sc.mask[g] = 0;
    }
    const bool f = !(sc.mask[g] >> c & 1);
    sc.mask[g] |= static_cast<uint16_t>(1u << c);
    return f;
  };
  // One byte per block of bytes that step alike: the same body target (the quote and dead
  // bytes left out) and the same class in every alternative's unit. Cached by (units, body
  // state): a walk meets few combinations.
  struct RepEntry {
    Alts units;
    int8_t body;
    std::vector<uint8_t> reps;
    std::vector<ByteSet> blocks;  // parallel to reps: every byte of the block
  };
  std::vector<RepEntry> rep_cache;
  auto Reps = [&](const Alts& x, int8_t body) -> const RepEntry& {
    Alts units;
    units.fill(-1);
    for (size_t i = 0; i < kMaxAlts && x[i] >= 0; ++i) units[i] = a.unit_of[x[i]];
    std::sort(units.begin(), units.end());
    for (const RepEntry& r : rep_cache) {
      if (r.body == body && r.units == units) return r;
    }
    // Refined by body target (the quote apart), then by each unit's classes.
    std::array<uint8_t, 256> block{};
    RefineBlocks(block, [&](int b) { return b == '"' ? 0 : StringBody::Step(body, static_cast<uint8_t>(b)) + 1; });
    for (int32_t u : units) {
      if (u >= 0) RefineBlocks(block, [&](int b) { return a.class_map[u][b]; });
    }
    RepEntry r{units, body, {}, {}};
    std::array<int16_t, 256> slot;
    slot.fill(-1);
    for (int b = 0; b < 256; ++b) {
      if (b == '"' || StringBody::Step(body, static_cast<uint8_t>(b)) < 0) continue;
      if (block[b] == b) {
        slot[b] = static_cast<int16_t>(r.reps.size());
        r.reps.push_back(static_cast<uint8_t>(b));
        r.blocks.emplace_back();
      }
      r.blocks[static_cast<size_t>(slot[block[b]])].Set(static_cast<uint8_t>(b));
    }
    rep_cache.push_back(std::move(r));
    return rep_cache.back();
  };
  Alts s0;
  s0.fill(-1);
  s0[0] = state;
  if (!close(s0)) return Containment::kUnknown;
  // A pair is expanded once, at its least depth, so what it is checked on there must cover
  // every deeper visit: the bytes tokens have at that offset *or any later one* (a byte may
  // occur at offset 3 in a body state and never at offset 1). The start is the exception
  // when it has excluded first bytes: its depth-0 visit leaves them out, so a later visit
  // of the start pair (after ':' in "://", say) is expanded again in full (a fuzzer find:
  // "://" was accepted in a string that forbids '/').
  std::array<std::array<ByteSet, StringBody::kStates>, TokenVocabulary::Impl::kShortTokenBytes + 1> later{};
  for (size_t d = TokenVocabulary::Impl::kShortTokenBytes; d-- > 0;) {
    for (int c = 0; c < StringBody::kStates; ++c) {
      const ByteSet& here = v.body_next[d * StringBody::kStates + static_cast<size_t>(c)];
      for (int w = 0; w < 4; ++w) later[d][c].bits[w] = here.bits[w] | later[d + 1][c].bits[w];
    }
  }
  std::vector<Pair> queue{{s0, 0, 0}};
  if (skip.Empty()) fresh(s0, 0);
  for (size_t k = 0; k < queue.size(); ++k) {
    const Pair p = queue[k];
    const bool single = !calls_met && p.x[1] < 0;
    if (p.depth > 0) {
      if (single) {
        budget &= NoteShort(shorts, p.body, a.dist[p.x[0]]);
      } else {
        budget = false;
      }
    }
    if (p.depth == TokenVocabulary::Impl::kShortTokenBytes) continue;
    const RepEntry& reps = Reps(p.x, p.body);
    // Only bytes some token has here or deeper in this body state (the start: here only,
    // less the excluded first bytes).
    ByteSet next = later[p.depth][static_cast<size_t>(p.body)];
    if (p.depth == 0) {
      next = v.body_next[static_cast<size_t>(p.body)];
      for (int w = 0; w < 4; ++w) next.bits[w] &= ~skip.bits[w];
    }
    for (size_t r = 0; r < reps.reps.size(); ++r) {
      const ByteSet& blk = reps.blocks[r];
      if (!((blk.bits[0] & next.bits[0]) | (blk.bits[1] & next.bits[1]) | (blk.bits[2] & next.bits[2]) |
            (blk.bits[3] & next.bits[3]))) {
        continue;
      }
      const uint8_t b = reps.reps[r];
      const int c = StringBody::Step(p.body, b);
      Alts y;
      y.fill(-1);
      size_t n = 0;
      for (size_t i = 0; i < kMaxAlts && p.x[i] >= 0; ++i) {
        const int32_t g = p.x[i];
        const int32_t t = a.next[a.trans_off[g] + a.class_map[a.unit_of[g]][b]];
        if (t >= 0 && std::find(y.begin(), y.begin() + n, t) == y.begin() + n) y[n++] = t;
      }
      if (n == 0) return calls_met ? Containment::kUnknown : Containment::kNo;
      if (!close(y)) return Containment::kUnknown;
      if (fresh(y, static_cast<int8_t>(c))) {
        if (queue.size() >= kMaxPairs) return Containment::kUnknown;
        queue.push_back({y, static_cast<int8_t>(c), static_cast<uint8_t>(p.depth + 1)});
      }
    }
  }
  if (calls_met) budget = false;
  one_state = !calls_met;
  return Containment::kYes;
}

// Listed tokens walked on the DFA from `state` alone, which is exact while the path meets
// no state with calls (callee stacks would join) and no accepting one (the frame could pop)
// before the token's last byte. Tokens that do are left in `rest` for the set walk.
void RawWalkList(const Automaton& a, const TokenVocabulary::Impl& v, const std::vector<uint32_t>& pos,
                 const std::vector<uint16_t>& lcp, int32_t state, Accepted& acc, std::vector<uint32_t>& rest) {
  std::vector<int32_t> lv(1, state);
  size_t valid = 0;
  for (size_t k = 0; k < pos.size(); ++k) {
    std::string_view tok = v.SortedBytes(pos[k]);
    const size_t len = tok.size();
    if (lv.size() < len + 1) lv.resize(len + 1);
    size_t p = std::min<size_t>(lcp[k], valid);
    bool left = false, dead = false;
    for (; p < len; ++p) {
      const int32_t g = lv[p];
      if (a.accepting[g] || a.call_begin[g] != a.call_begin[g + 1]) {
        left = true;
        break;
      }
      const int32_t t = a.next[a.trans_off[g] + a.class_map[a.unit_of[g]][static_cast<uint8_t>(tok[p])]];
      if (t < 0) {
        dead = true;
        break;
      }
      lv[p + 1] = t;
    }
    valid = p;
    if (left) {
      rest.push_back(pos[k]);
    } else if (!dead) {
      acc.ids.push_back(v.sorted[pos[k]]);
      acc.after.push_back(a.dist[lv[len]]);
    }
  }
}


// The same check over the classifier's sets (calls followed, several stacks at once).
bool SetContainment(SetDfa& dfa, int32_t start, const ByteSet& skip, BodyShorts& shorts, bool& budget) {
  constexpr size_t kMaxPairs = 4096;
  struct Pair {
    int32_t set;
    int8_t body;
    uint8_t depth;
  };
  std::vector<Pair> queue{{start, 0, 0}};
  std::vector<uint16_t> seen;  // by set: the body states paired with it so far
  auto mark = [&](int32_t x, int c) {
    if (seen.size() <= static_cast<size_t>(x)) seen.resize(static_cast<size_t>(x) + 64, 0);
    const bool fresh = !(seen[x] >> c & 1);
    seen[x] |= static_cast<uint16_t>(1u << c);
    return fresh;
  };
  // As in RawContainment: with excluded first bytes the depth-0 visit does not cover a later
  // visit of the start pair, which is then expanded in full.
  if (skip.Empty()) mark(start, 0);
  for (size_t k = 0; k < queue.size(); ++k) {
    const Pair p = queue[k];
    if (p.depth > 0) budget &= NoteShort(shorts, p.body, dfa.Short(p.set));
    if (p.depth == TokenVocabulary::Impl::kShortTokenBytes) continue;
    // One byte per (automaton byte block, body target): the others step alike.
    uint64_t done[4 * StringBody::kStates] = {};
    for (int b = 0; b < 256; ++b) {
      if (b == '"' || (p.depth == 0 && skip.Has(static_cast<uint8_t>(b)))) continue;
      const int c = StringBody::Step(p.body, static_cast<uint8_t>(b));
      if (c < 0) continue;
      const uint8_t r = dfa.Rep(p.set, static_cast<uint8_t>(b));
      uint64_t& w = done[c * 4 + (r >> 6)];
      if (w >> (r & 63) & 1) continue;
      w |= uint64_t{1} << (r & 63);
      const int32_t x = dfa.Step(p.set, static_cast<uint8_t>(b));
      if (x == SetDfa::kDead || dfa.overflowed()) return false;
      if (mark(x, c)) {
        if (queue.size() >= kMaxPairs) return false;
        queue.push_back({x, static_cast<int8_t>(c), static_cast<uint8_t>(p.depth + 1)});
      }
    }
  }
  return true;
}

}  // namespace

bool ClassifyStringBody(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state, MaskEntry* out) {
  if (v.body_ok_count == 0) return false;
  // 1. Containment: every path of at most kShortTokenBytes non-quote bytes that the string
  //    body takes from a character boundary must be alive from `state` too. A breadth-first
  //    walk over (state, body state) pairs; a pair is expanded once, at its least depth,
  //    which covers every longer way to it. Along the way: whether a body state fixes the
  //    completion length after the paths that end in it (then budget data is exact without
  //    walking the 125k tokens; past depth 0 only, since no token is empty).
  BodyShorts short_of;
  short_of.fill(kUnsetDist);
  bool budget = true;
  bool one_state = false;
  // First bytes the state has no transition on, when dying there rejects (no pop, no callee):
  // the tokens that start with them are left out of the check and of the accepted set. The
  // rest of an unlisted key starts this way (one excluded character, then any string).
  ByteSet skip;
  if (!a.accepting[state] && a.call_begin[state] == a.call_begin[state + 1]) {
    for (int b = 0x20; b < 0x80; ++b) {
      if (b != '"' && a.next[a.trans_off[state] + a.class_map[a.unit_of[state]][b]] < 0) skip.Set(static_cast<uint8_t>(b));
    }
  }
  const Containment raw = RawContainment(a, v, state, skip, short_of, budget, one_state);
  if (raw == Containment::kNo) return false;
  SetDfa dfa(a);
  const int32_t start = dfa.Start(state);
  if (raw == Containment::kUnknown) {
    short_of.fill(kUnsetDist);
    budget = true;
    if (!SetContainment(dfa, start, skip, short_of, budget)) return false;
  }
  // 2. Every body-accepted token is accepted here; the rest are walked: on the DFA alone
  //    where that is exact, else (and for the tokens that leave those conditions) as sets.
  Accepted acc;
  MaskEntry e;
  const std::vector<uint32_t>* lists[] = {&v.body_bad_pos, &v.quote_pos, &v.long_pos};
  const std::vector<uint16_t>* lcps[] = {&v.body_bad_lcp, &v.quote_lcp, &v.long_lcp};
  for (int l = 0; l < 3; ++l) {
    if (!one_state) {
      WalkList(dfa, v, *lists[l], *lcps[l], start, acc, e);
      continue;
    }
    std::vector<uint32_t> rest;
    RawWalkList(a, v, *lists[l], *lcps[l], state, acc, rest);
    if (!rest.empty()) WalkList(dfa, v, rest, ListLcp(v, rest), start, acc, e);
  }
  if (dfa.overflowed()) return false;
  MergeRanges(e.uncertain);
  e.uncertain_count = 0;
  for (auto [lo, hi] : e.uncertain) e.uncertain_count += hi - lo;
  e.accepted_bits = v.body_ok;
  size_t skipped = 0;
  if (!skip.Empty()) {
    for (int b = 0x20; b < 0x80; ++b) {
      if (!skip.Has(static_cast<uint8_t>(b))) continue;
      for (uint32_t i = v.first_byte_end[b - 1]; i < v.first_byte_end[b]; ++i) {
        const TokenId id = v.sorted[i];
        uint64_t& w = e.accepted_bits[id >> 6];
        const uint64_t bit = uint64_t{1} << (id & 63);
        skipped += (w & bit) != 0;
        w &= ~bit;
      }
    }
    budget = false;  // body_end's exceptions would include the skipped tokens
  }
  for (TokenId id : acc.ids) e.accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  e.accepted_count = v.body_ok_count - skipped + acc.ids.size();  // the walked lists are disjoint from it
  // 3. Budget data: the body-accepted tokens at the completion length of their end state's
  //    sets, the walked ones at their own.
  budget &= short_of[0] != kUnsetDist;
  if (budget) {
    e.budget_base = e.budget_min = e.budget_max = short_of[0];
    auto note = [&](uint32_t d) {
      e.budget_min = std::min(e.budget_min, d);
      e.budget_max = std::max(e.budget_max, d);
    };
    for (int c = 1; c < StringBody::kStates && budget; ++c) {
      if (v.body_end[c].empty()) continue;
      budget = short_of[c] != kUnsetDist;  // every body path was walked, so it is set
      if (!budget || short_of[c] == e.budget_base) continue;
      note(short_of[c]);
      for (TokenId id : v.body_end[c]) e.budget_exceptions.push_back({id, short_of[c]});
    }
    for (size_t k = 0; k < acc.ids.size(); ++k) {
      note(acc.after[k]);
      if (acc.after[k] != e.budget_base) e.budget_exceptions.push_back({acc.ids[k], acc.after[k]});
    }
    std::sort(e.budget_exceptions.begin(), e.budget_exceptions.end());
    budget = budget && e.budget_exceptions.size() <= kMaxBudgetExceptions;
  }
  if (!budget) {
    e.budget_known = false;
    e.budget_deferred = true;
    e.budget_exceptions.clear();
  }
  *out = std::move(e);
  return true;
}

namespace {

// Per layered unit, what each token does from a layer boundary on the layer's own DFA (the
// body's): `chars` by sorted trie position is how many layers it advances — complete copies,
// plus one for a copy it leaves unfinished — or kWalk when it leaves the body (a quote, a
// byte the body rejects, past 254 copies); those are listed for a walk. Equal bodies (every
// JSON string with a maxLength, in any grammar) share one table, process-wide, and so do
// the entries built from it: an entry is frame-local, so at a boundary it depends only on
// the layers left and how many of them must still be taken, whichever grammar it is in.
struct LayerTokens {
  static constexpr uint8_t kWalk = 0xFF;
  std::vector<uint8_t> chars;
  uint8_t most = 0;                          // the largest `chars` below kWalk
  ByteSet first;                             // the bytes a copy of the body can start with
  std::vector<std::vector<TokenId>> by_chars;  // [c]: the body tokens with chars == c
  std::vector<uint64_t> all_bits;            // every body token
  size_t all_count = 0;
  std::vector<uint32_t> walk_pos;
  std::vector<uint16_t> walk_lcp;
  mutable std::mutex mu;
  mutable std::map<std::pair<uint32_t, uint32_t>, std::shared_ptr<const MaskEntry>> entries;  // (left, need)
};

// Slices whose walked list is larger than this are no cheaper than a full classification.
constexpr size_t kMaxLayerWalk = 16384;

std::shared_ptr<const LayerTokens> LayerTokensFor(const Automaton& a, const TokenVocabulary::Impl& v,
                                                  const Automaton::Layered& l) {
  const int32_t u = l.unit, n = l.per_layer, s0 = a.unit_start[u];
  const uint16_t nc = a.num_classes[u];
  // The layer's table relative to its start: n rows, targets local (n = the next layer's start).
  std::vector<int32_t> rows(static_cast<size_t>(n) * nc);
  for (int32_t x = 0; x < n; ++x) {
    for (uint16_t c = 0; c < nc; ++c) {
      const int32_t t = a.next[a.trans_off[s0 + x] + c];
      rows[static_cast<size_t>(x) * nc + c] = t < s0 || t > s0 + n ? -1 : t - s0;
    }
  }
  XXH3_state_t* hs = XXH3_createState();
  XXH3_128bits_reset(hs);
  XXH3_128bits_update(hs, &v.fingerprint, sizeof v.fingerprint);
  XXH3_128bits_update(hs, &n, sizeof n);
  XXH3_128bits_update(hs, a.class_map[u].data(), 256);
  XXH3_128bits_update(hs, rows.data(), rows.size() * sizeof(int32_t));
  const XXH128_hash_t h = XXH3_128bits_digest(hs);
  XXH3_freeState(hs);
  const std::pair<uint64_t, uint64_t> key{h.low64, h.high64};
  static std::mutex mu;
  static auto* cache = new std::unordered_map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const LayerTokens>,
                                              PairKeyHash>();  // never destroyed, like the mask cache
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  auto lt = std::make_shared<LayerTokens>();
  for (int b = 0; b < 256; ++b) {
    if (rows[a.class_map[u][b]] >= 0) lt->first.Set(static_cast<uint8_t>(b));
  }
  const size_t total = v.sorted.size();
  lt->chars.assign(total, LayerTokens::kWalk);
  lt->by_chars.resize(LayerTokens::kWalk);
  lt->all_bits.assign(v.words(), 0);
  const auto& cm = a.class_map[u];
  std::vector<int32_t> at(1, 0);     // at[d]: layer-local state after d bytes of the current token
  std::vector<uint32_t> done(1, 0);  // done[d]: copies completed by then
  size_t valid = 0;
  for (size_t i = 0; i < total;) {
    std::string_view tok = v.SortedBytes(static_cast<uint32_t>(i));
    const size_t len = tok.size();
    if (at.size() < len + 1) {
      at.resize(len + 1);
      done.resize(len + 1);
    }
    size_t p = std::min<size_t>(v.lcp[i], valid);
    for (; p < len; ++p) {
      const int32_t t = rows[static_cast<size_t>(at[p]) * nc + cm[static_cast<uint8_t>(tok[p])]];
      if (t < 0) break;
      at[p + 1] = t == n ? 0 : t;
      done[p + 1] = done[p] + (t == n ? 1 : 0);
    }
    if (p < len) {  // every token below this prefix leaves the body the same way
      valid = p;
      const uint32_t end = v.GroupEnd(static_cast<uint32_t>(i), p + 1);
      for (uint32_t j = static_cast<uint32_t>(i); j < end; ++j) lt->walk_pos.push_back(j);
      i = end;
      continue;
    }
    valid = len;
    const uint32_t adv = done[len] + (at[len] != 0 ? 1 : 0);
    if (adv < LayerTokens::kWalk && adv > 0) {
      const TokenId id = v.sorted[i];
      lt->chars[i] = static_cast<uint8_t>(adv);
      lt->most = std::max(lt->most, static_cast<uint8_t>(adv));
      lt->by_chars[adv].push_back(id);
      lt->all_bits[id >> 6] |= uint64_t{1} << (id & 63);
      ++lt->all_count;
    } else {
      lt->walk_pos.push_back(static_cast<uint32_t>(i));
    }
    ++i;
  }
  lt->walk_lcp = ListLcp(v, lt->walk_pos);
  std::lock_guard<std::mutex> lock(mu);
  return cache->try_emplace(key, std::move(lt)).first->second;
}

}  // namespace

std::shared_ptr<const MaskEntry> ClassifyLayer(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
  const int32_t u = a.unit_of[state];
  const Automaton::Layered* l = nullptr;
  for (const auto& x : a.layered) {
    if (x.unit == u) l = &x;
  }
  if (!l) return nullptr;
  const int32_t local = state - a.unit_start[u];
  const uint32_t layer = static_cast<uint32_t>(local / l->per_layer);
  if (local % l->per_layer != 0 || layer >= l->max) return nullptr;  // inside a copy, or the end
  const std::shared_ptr<const LayerTokens> lt = LayerTokensFor(a, v, *l);
  if (lt->walk_pos.size() > kMaxLayerWalk) return nullptr;
  // A token crosses at most as many boundaries as it has bytes: counts past that look alike.
  const auto cap = static_cast<uint32_t>(v.max_token_len + 1);
  const uint32_t left = std::min(l->max - layer, cap);
  const uint32_t need = std::min(l->min > layer ? l->min - layer : 0u, cap);
  {
    std::lock_guard<std::mutex> lock(lt->mu);
    if (auto it = lt->entries.find({left, need}); it != lt->entries.end()) return it->second;
  }
  // Body tokens take `chars` layers: accepted while that many are left. The others reach the
  // last layer's end, where the frame may pop, before they are through: uncertain.
  auto e = std::make_shared<MaskEntry>();
  size_t within = 0;
  for (uint32_t c = 1; c <= std::min<uint32_t>(left, lt->most); ++c) within += lt->by_chars[c].size();
  if (2 * within >= lt->all_count) {
    e->accepted_bits = lt->all_bits;
    for (uint32_t c = left + 1; c <= lt->most; ++c) {
      for (TokenId id : lt->by_chars[c]) e->accepted_bits[id >> 6] &= ~(uint64_t{1} << (id & 63));
    }
  } else {
    e->accepted_bits.assign(v.words(), 0);
    for (uint32_t c = 1; c <= left; ++c) {
      for (TokenId id : lt->by_chars[c]) e->accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
  e->accepted_count = within;
  if (left < lt->most) {
    // They pop at a boundary and go on with a byte that starts a copy of the body.
    MaskEntry pops;
    for (size_t i = 0; i < lt->chars.size(); ++i) {
      const uint8_t c = lt->chars[i];
      if (c != LayerTokens::kWalk && c > left) AddUncertain(pops, static_cast<uint32_t>(i), static_cast<uint32_t>(i) + 1);
    }
    e->pop_uncertain = std::move(pops.uncertain);
    e->pop_first = lt->first;
  }
  // The tokens that leave the body, walked on the stack sets as in a full classification.
  SetDfa dfa(a);
  Accepted acc;
  MaskEntry walked;
  WalkList(dfa, v, lt->walk_pos, lt->walk_lcp, dfa.Start(state), acc, walked);
  if (dfa.overflowed()) return nullptr;
  for (TokenId id : acc.ids) e->accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  e->accepted_count += acc.ids.size();
  e->uncertain.insert(e->uncertain.end(), walked.uncertain.begin(), walked.uncertain.end());
  std::sort(e->uncertain.begin(), e->uncertain.end());
  MergeRanges(e->uncertain);
  e->uncertain_count = 0;
  for (auto [lo, hi] : e->uncertain) e->uncertain_count += hi - lo;
  // Completion lengths vary with the count: budget narrowing takes the full classification.
  e->budget_known = false;
  e->budget_deferred = true;
  std::lock_guard<std::mutex> lock(lt->mu);
  return lt->entries.try_emplace({left, need}, std::move(e)).first->second;
}

}  // namespace ladle::grammar
