// CompiledGrammar and GrammarMatcher (matcher.h): the per-request pushdown matcher and the
// token mask (cached accepted sets + simulation of the uncertain tokens only).
#include <algorithm>
#include <deque>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "matcher_impl.h"
#include "matcher_sim.h"
#include "set_dfa.h"

namespace ladle::grammar {

namespace {
// Interned stack nodes are garbage once no stack set refers to them; past this many the arena
// is compacted to the live ones.
constexpr size_t kCompactNodes = size_t{1} << 20;
// The uncertain-token walks memoise steps for at most this many stack sets per matcher
// (~1.3 MiB at most; MaskBench's matchers stay far below it).
constexpr size_t kWalkMaxSets = 1024;
// Jump-forward never returns more than this (a grammar can force arbitrarily long text).
constexpr size_t kMaxJumpForward = 4096;

inline void SetBit(uint64_t* bits, TokenId id) { bits[id >> 6] |= uint64_t{1} << (id & 63); }
inline bool HasBit(const uint64_t* bits, TokenId id) { return (bits[id >> 6] >> (id & 63)) & 1; }

}  // namespace

// ---- CompiledGrammar ------------------------------------------------------------------------

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;

std::shared_ptr<const CompiledGrammar> FinishCompiled(std::unique_ptr<CompiledGrammar::Impl> impl, bool eager,
                                                      std::chrono::steady_clock::time_point eager_until) {
  impl->cache = std::make_unique<MaskCache>(impl->automaton.num_states());
  auto cg = std::make_shared<const CompiledGrammar>(std::move(impl));
  if (eager) {
    const Automaton& a = cg->impl().automaton;
    for (size_t g = 0; g < a.num_states(); ++g) {
      if (std::chrono::steady_clock::now() > eager_until) break;
      if (a.HasBytes(static_cast<int32_t>(g))) {
        cg->impl().cache->Get(a, cg->vocab().impl(), static_cast<int32_t>(g));
      }
    }
  }
  return cg;
}

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Compile(
    Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab, const CompileOptions& opts) {
  if (!vocab) return InvalidArgument("CompiledGrammar::Compile: no vocabulary");
  if (grammar.rules.empty() || grammar.root < 0 || static_cast<size_t>(grammar.root) >= grammar.rules.size()) {
    return InvalidArgument("grammar has no root rule");
  }
  for (const Rule& r : grammar.rules) {
    if (r.body < 0 || static_cast<size_t>(r.body) >= grammar.exprs.size()) {
      return InvalidArgument(fmt::format("grammar rule '{}' is not defined", r.name));
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.max_compile_ms);
  auto impl = std::make_unique<Impl>();
  LADLE_ASSIGN_OR_RETURN(impl->automaton, BuildAutomaton(grammar, opts, deadline));
  impl->grammar = std::move(grammar);
  impl->vocab = std::move(vocab);
  return FinishCompiled(std::move(impl), opts.eager_mask_cache, deadline);
}

const TokenVocabulary& CompiledGrammar::vocab() const { return *impl_->vocab; }
const Grammar& CompiledGrammar::grammar() const { return impl_->grammar; }
size_t CompiledGrammar::MemoryBytes() const {
  size_t ir = impl_->grammar.exprs.size() * sizeof(Expr) + impl_->grammar.rules.size() * sizeof(Rule);
  return sizeof(Impl) + ir + impl_->automaton.MemoryBytes() + impl_->cache->MemoryBytes();
}

// ---- GrammarMatcher -------------------------------------------------------------------------

struct GrammarMatcher::Impl {
  Impl(std::shared_ptr<const CompiledGrammar> g, const MatcherOptions& o)
      : cg(std::move(g)),
        a(cg->impl().automaton),
        v(cg->vocab().impl()),
        opts(o),
        sim(a, arena),
        dfa(sim, kWalkMaxSets) {
    sim.SetMaxStacks(opts.max_parallel_stacks);
    ResetState();
  }

  struct Snapshot {
    StackSet set;
    bool terminated;
  };

  std::shared_ptr<const CompiledGrammar> cg;
  const Automaton& a;
  const TokenVocabulary::Impl& v;
  MatcherOptions opts;
  Arena arena;
  Simulator sim;
  // The uncertain-token walks' memo of steps over stack sets: it names sets of this arena's
  // node ids, so it is cleared whenever the arena is (ResetState, Compact), and when it has
  // grown past kWalkMaxSets (at the start of a walk, when no id is held).
  SetDfa dfa;
  StackSet cur;
  bool terminated = false;
  std::deque<Snapshot> history;
  std::optional<uint32_t> remaining;
  bool forced = false;
  Status failure;
  uint64_t accepted = 0;  // tokens accepted (for the failure message)
  size_t compact_at = kCompactNodes;
  // Scratch.
  std::vector<int32_t> levels;
  std::vector<int32_t> states;
  std::vector<PosRange> ranges;

  void ResetState() {
    dfa.Clear();
    arena.Clear();
    compact_at = kCompactNodes;
    history.clear();
    terminated = false;
    forced = false;
    remaining.reset();
    failure = Status::Ok();
    accepted = 0;
    sim.ClearOverflow();
    cur = StackSet{};
    if (a.start >= 0) {
      int32_t root = arena.Intern(a, a.start, kEnd);
      sim.Close(std::span<const int32_t>(&root, 1), cur);
      CheckOverflow();
    }
  }

  // True (and the matcher failed) once a closure overflowed max_parallel_stacks.
  bool CheckOverflow() {
    if (!sim.overflowed()) return false;
    if (failure.ok()) {
      failure = ResourceExhausted(fmt::format(
          "grammar too ambiguous: more than {} parses alive after {} tokens (MatcherOptions::max_parallel_stacks)",
          opts.max_parallel_stacks, accepted));
    }
    return true;
  }

  bool IsEos(TokenId id) const { return v.IsEos(id); }

  // The set after `id`, or nullopt. Never changes the matcher.
  bool Advance(TokenId id, StackSet& out) {
    if (id >= v.vocab_size) return false;
    StackSet by_special;
    // Only an id the vocabulary has as a token takes a `<[id]>` edge (TakesSpecialEdge): not a
    // hole or an EOS id the grammar happens to name.
    bool sp = v.TakesSpecialEdge(id) && sim.StepSpecial(cur, id, by_special);
    bool by = false;
    if (!v.special[id] && !v.bytes[id].empty()) by = sim.StepBytes(cur, v.bytes[id], out);
    if (CheckOverflow()) return false;
    if (!sp) return by;
    if (!by) {
      out = std::move(by_special);
      return true;
    }
    out.tops.insert(out.tops.end(), by_special.tops.begin(), by_special.tops.end());
    std::sort(out.tops.begin(), out.tops.end());
    out.tops.erase(std::unique(out.tops.begin(), out.tops.end()), out.tops.end());
    out.can_end |= by_special.can_end;
    return true;
  }

  void Push(StackSet next, bool term) {
    ++accepted;
    if (opts.max_rollback > 0) {
      history.push_back({std::move(cur), terminated});
      if (history.size() > opts.max_rollback) history.pop_front();
    }
    cur = std::move(next);
    terminated = term;
    if (arena.size() > compact_at) {
      Compact();
      // Deep live stacks stay: compact again only once garbage could double the arena.
      compact_at = std::max(kCompactNodes, 2 * arena.size());
    }
  }

  // Re-interns the live stacks into a fresh arena.
  void Compact() {
    Arena fresh;
    std::unordered_map<int32_t, int32_t> map;
    std::vector<int32_t> chain;
    auto remap = [&](int32_t n) {
      chain.clear();
      for (int32_t x = n; x >= 0 && !map.count(x); x = arena[x].parent) chain.push_back(x);
      for (size_t i = chain.size(); i-- > 0;) {
        int32_t x = chain[i];
        int32_t p = arena[x].parent;
        int32_t np = p >= 0 ? map.at(p) : p;
        map[x] = fresh.Intern(a, arena[x].state, np);
      }
      return map.at(n);
    };
    auto remap_set = [&](StackSet& s) {
      for (int32_t& t : s.tops) t = remap(t);
      std::sort(s.tops.begin(), s.tops.end());
    };
    remap_set(cur);
    for (Snapshot& h : history) remap_set(h.set);
    dfa.Clear();
    arena = std::move(fresh);
  }

  void FillMask(uint64_t* bits) {
    const size_t words = v.words();
    std::fill(bits, bits + words, 0);
    if (!failure.ok()) return;
    auto set_eos = [&] {
      for (TokenId e : v.eos) SetBit(bits, e);
    };
    if (terminated) {
      set_eos();
      return;
    }
    if (cur.can_end) set_eos();
    states.clear();
    for (int32_t n : cur.tops) {
      const int32_t g = arena[n].state;
      for (uint32_t k = a.special_begin[g]; k < a.special_begin[g + 1]; ++k) {
        if (v.TakesSpecialEdge(a.specials[k].token)) SetBit(bits, a.specials[k].token);
      }
      if (a.HasBytes(g)) states.push_back(g);
    }
    std::sort(states.begin(), states.end());
    states.erase(std::unique(states.begin(), states.end()), states.end());
    std::vector<const MaskEntry*> entries;
    entries.reserve(states.size());
    for (int32_t g : states) {
      entries.push_back(&cg->impl().cache->Get(a, v, g));
      entries.back()->OrInto(bits);
    }
    ranges.clear();
    bool merge = entries.size() > 1;
    for (size_t i = 0; i < entries.size(); ++i) {
      const MaskEntry* e = entries[i];
      ranges.insert(ranges.end(), e->uncertain.begin(), e->uncertain.end());
      if (!e->pop_uncertain.empty() && CanContinueAfterPop(states[i], e->pop_first)) {
        ranges.insert(ranges.end(), e->pop_uncertain.begin(), e->pop_uncertain.end());
        merge = true;
      }
    }
    if (merge) MergeRanges(ranges);
    const bool budget = opts.budget_aware && remaining.has_value();
    uint32_t uncertain_worst = 0;  // the largest completion an uncertain token leaves
    if (!ranges.empty()) {
      WalkRanges(
          dfa, v, StartWalk(), ranges, levels, [&](uint32_t pos) { return HasBit(bits, v.sorted[pos]); },
          [&](uint32_t pos, int32_t end) {
            SetBit(bits, v.sorted[pos]);
            if (budget) uncertain_worst = std::max(uncertain_worst, dfa.Short(end));
          });
    }
    if (budget && !CheckOverflow()) ApplyBudget(bits, uncertain_worst);
    // A walk that overflowed left the mask incomplete: allow nothing rather than a guess.
    if (CheckOverflow()) std::fill(bits, bits + words, 0);
  }

  // The walk's start: the current stacks' set id (the memo is dropped first if it is full).
  int32_t StartWalk() {
    if (dfa.size() > dfa.max_sets()) dfa.Clear();
    return dfa.Enter(cur);
  }

  // Whether some stack whose top frame is in `state` can, once that frame pops, consume a
  // byte in `first` (out_bytes of the closure below it).
  bool CanContinueAfterPop(int32_t state, const ByteSet& first) {
    for (int32_t n : cur.tops) {
      if (arena[n].state != state) continue;
      const int32_t parent = arena[n].parent;
      if (parent < 0) continue;  // popping the root ends the document: no byte follows
      StackSet below;
      sim.Close(std::span<const int32_t>(&parent, 1), below);
      for (int32_t t : below.tops) {
        const ByteSet& out = a.out_bytes[arena[t].state];
        for (int w = 0; w < 4; ++w) {
          if (out.bits[w] & first.bits[w]) return true;
        }
      }
      if (sim.overflowed()) return true;  // incomplete: walk them (the walk reports it)
    }
    return false;
  }

  // Keeps only tokens after which the shortest completion still fits in remaining - 1.
  void ApplyBudget(uint64_t* bits, uint32_t uncertain_worst) {
    const uint32_t r = *remaining;
    const uint32_t shortest = sim.Shortest(cur);
    if (shortest == kInfDist) return;
    const uint32_t limit = r == 0 ? 0 : r - 1;
    // Nothing to do unless some allowed token can leave more than `limit`: an upper bound
    // from the entries' largest completions (plus the stack below), the uncertain tokens
    // walked for the mask, and the specials. Entries without budget data fall back to
    // starting `lookahead` tokens before the budget runs out.
    uint64_t worst = uncertain_worst;
    bool bounded = true;
    for (int32_t n : cur.tops) {
      const StackNode& node = arena[n];
      const int32_t g = node.state;
      if (a.HasSpecials(g)) {
        worst = kInfDist;  // specials are rare: KeepWithin measures them exactly
        break;
      }
      if (!a.HasBytes(g)) continue;
      const MaskEntry& e = cg->impl().cache->GetWithBudget(a, v, g);
      if (e.accepted_count == 0) continue;
      if (!e.budget_known) {
        bounded = false;
        break;
      }
      const uint64_t below = node.parent >= 0 ? arena[node.parent].dist : 0;
      worst = std::max<uint64_t>(worst, below == kInfDist ? kInfDist : e.budget_max + below);
    }
    if (bounded && worst <= limit) return;
    if (!bounded && static_cast<uint64_t>(r) > static_cast<uint64_t>(shortest) + opts.margin + opts.lookahead) return;
    std::vector<uint64_t> keep(v.words(), 0);
    uint32_t best = KeepWithin(bits, limit, keep);
    // Nothing fits (the budget was already too small): keep the tokens that get closest.
    if (best > limit && best != kInfDist) {
      std::fill(keep.begin(), keep.end(), 0);
      KeepWithin(bits, best, keep);
    }
    bool removed = false;
    for (size_t w = 0; w < keep.size(); ++w) {
      if (keep[w] != bits[w]) removed = true;
      bits[w] = keep[w];
    }
    if (removed) forced = true;
  }

  // Sets in `keep` the allowed tokens (`bits`) after which the shortest completion is at most
  // `limit`, and returns the smallest such completion over all allowed tokens. Accepted tokens
  // come from the mask entries' completion lengths (no simulation); only the uncertain ranges,
  // specials, and entries without budget data are simulated.
  uint32_t KeepWithin(const uint64_t* bits, uint32_t limit, std::vector<uint64_t>& keep) {
    uint32_t best = kInfDist;
    auto offer = [&](TokenId t, uint32_t d) {
      best = std::min(best, d);
      if (d <= limit) SetBit(keep.data(), t);
    };
    for (TokenId e : v.eos) {
      if (HasBit(bits, e)) offer(e, 0);
    }
    ranges.clear();
    bool walk_all = false;
    std::vector<uint64_t> tmp;
    for (int32_t n : cur.tops) {
      // By value, not a reference into the arena: Advance below pushes nodes, and a reallocation
      // would leave a reference dangling (ASan caught it on a forced DSML call under budget).
      const int32_t g = arena[n].state;
      const int32_t parent = arena[n].parent;
      for (uint32_t k = a.special_begin[g]; k < a.special_begin[g + 1]; ++k) {
        TokenId t = a.specials[k].token;
        if (!v.TakesSpecialEdge(t)) continue;
        StackSet s;
        if (Advance(t, s)) offer(t, sim.Shortest(s));
      }
      if (!a.HasBytes(g) || walk_all) continue;
      const MaskEntry& e = cg->impl().cache->GetWithBudget(a, v, g);
      ranges.insert(ranges.end(), e.uncertain.begin(), e.uncertain.end());
      ranges.insert(ranges.end(), e.pop_uncertain.begin(), e.pop_uncertain.end());  // a superset is safe
      if (e.accepted_count == 0) continue;
      if (!e.budget_known) {
        walk_all = true;
        continue;
      }
      const uint64_t below = parent >= 0 ? arena[parent].dist : 0;
      if (below == kInfDist) continue;
      best = static_cast<uint32_t>(std::min<uint64_t>(best, e.budget_min + below));
      if (e.budget_min + below > limit) continue;
      // This frame's accepted tokens at their completion lengths, then OR into keep (another
      // stack may keep a token this one would drop).
      tmp.assign(v.words(), 0);
      if (e.budget_base + below <= limit) e.OrInto(tmp.data());
      for (auto [t, d] : e.budget_exceptions) {
        if (d + below <= limit) {
          SetBit(tmp.data(), t);
        } else {
          tmp[t >> 6] &= ~(uint64_t{1} << (t & 63));
        }
      }
      for (size_t w = 0; w < tmp.size(); ++w) keep[w] |= tmp[w] & bits[w];
    }
    auto walked = [&](uint32_t pos, int32_t end) { offer(v.sorted[pos], dfa.Short(end)); };
    if (walk_all) {
      const PosRange all{0, static_cast<uint32_t>(v.sorted.size())};
      WalkRanges(
          dfa, v, StartWalk(), std::span<const PosRange>(&all, 1), levels,
          [&](uint32_t pos) { return !HasBit(bits, v.sorted[pos]); }, walked);
    } else if (!ranges.empty()) {
      MergeRanges(ranges);
      WalkRanges(
          dfa, v, StartWalk(), ranges, levels,
          [&](uint32_t pos) { return !HasBit(bits, v.sorted[pos]) || HasBit(keep.data(), v.sorted[pos]); }, walked);
    }
    return best;
  }

  std::string_view SortedBytes(uint32_t pos) const {
    return std::string_view(v.sorted_blob).substr(v.sorted_off[pos], v.sorted_off[pos + 1] - v.sorted_off[pos]);
  }

  // The longest non-special token that is a prefix of `s`. The last sorted token <= s is
  // either such a prefix (then the longest: a longer one would sort between it and s) or
  // shares c < its length bytes with s, and no prefix longer than c can exist.
  std::optional<TokenId> LongestPrefixToken(std::string_view s) const {
    std::string_view q = s.substr(0, std::max<size_t>(v.max_token_len, 1));
    while (!q.empty()) {
      size_t lo = 0, hi = v.sorted.size();
      while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (SortedBytes(static_cast<uint32_t>(mid)) <= q) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      if (lo == 0) return std::nullopt;
      const std::string_view t = SortedBytes(static_cast<uint32_t>(lo - 1));
      if (q.starts_with(t)) return v.sorted[lo - 1];
      size_t c = 0;
      while (c < t.size() && c < q.size() && t[c] == q[c]) ++c;
      q = q.substr(0, c);
    }
    return std::nullopt;
  }

  // Appends `text` split greedily into the longest tokens; false if some byte starts none.
  bool AppendGreedy(std::string_view text, std::vector<TokenId>& out) const {
    while (!text.empty()) {
      const std::optional<TokenId> t = LongestPrefixToken(text);
      if (!t) return false;
      out.push_back(*t);
      text.remove_prefix(v.bytes[*t].size());
    }
    return true;
  }

  // GrammarMatcher::ShortestCompletion: walks the cheapest stack down its `dist` edges
  // (every state on it can reach acceptance, so each step finds an edge one closer).
  std::optional<std::vector<TokenId>> ShortestCompletion() const {
    std::vector<TokenId> out;
    if (!failure.ok()) return std::nullopt;
    if (terminated || cur.can_end) return out;
    int32_t best = -1;
    for (int32_t n : cur.tops) {
      if (best < 0 || arena[n].dist < arena[best].dist) best = n;
    }
    if (best < 0 || arena[best].dist == kInfDist) return std::nullopt;
    std::vector<int32_t> frames;  // bottom first
    for (int32_t n = best; n >= 0; n = arena[n].parent) frames.push_back(arena[n].state);
    std::reverse(frames.begin(), frames.end());
    std::string text;
    // Calls whose callee completes empty could in principle cycle; a valid walk takes at
    // most one step per unit of distance plus one per frame pushed and popped.
    const uint64_t max_steps = 8 * uint64_t{arena[best].dist} + 4 * frames.size() + 256;
    for (uint64_t step = 0; !frames.empty(); ++step) {
      if (step > max_steps) return std::nullopt;
      const int32_t g = frames.back();
      const uint64_t d = a.dist[g];
      if (d == 0 && a.accepting[g]) {
        frames.pop_back();
        continue;
      }
      bool moved = false;
      for (int b = 0; b < 256 && !moved; ++b) {
        if (!a.out_bytes[g].Has(static_cast<uint8_t>(b))) continue;
        const int32_t t = a.Next(g, static_cast<uint8_t>(b));
        if (t >= 0 && a.dist[t] != kInfDist && uint64_t{a.dist[t]} + 1 == d) {
          text.push_back(static_cast<char>(b));
          frames.back() = t;
          moved = true;
        }
      }
      for (uint32_t k = a.special_begin[g]; k < a.special_begin[g + 1] && !moved; ++k) {
        const Automaton::Special& sp = a.specials[k];
        // An edge no token can take (a hole, EOS) is no completion; dist counts it (the
        // automaton is vocabulary-independent), so another edge may be one closer, or none.
        if (!v.TakesSpecialEdge(sp.token)) continue;
        if (a.dist[sp.next] != kInfDist && uint64_t{a.dist[sp.next]} + 1 == d) {
          if (!AppendGreedy(text, out)) return std::nullopt;
          text.clear();
          out.push_back(sp.token);
          frames.back() = sp.next;
          moved = true;
        }
      }
      // Calls last, and those that make progress in the callee first.
      for (int pass = 0; pass < 2 && !moved; ++pass) {
        for (uint32_t k = a.call_begin[g]; k < a.call_begin[g + 1] && !moved; ++k) {
          const Automaton::Call& c = a.calls[k];
          if ((a.dist[c.callee] == 0) != (pass == 1)) continue;
          if (a.dist[c.callee] == kInfDist || a.dist[c.ret] == kInfDist) continue;
          if (uint64_t{a.dist[c.callee]} + a.dist[c.ret] != d) continue;
          frames.back() = c.ret;
          frames.push_back(c.callee);
          moved = true;
        }
      }
      if (!moved) return std::nullopt;
    }
    if (!AppendGreedy(text, out)) return std::nullopt;
    return out;
  }

  std::string JumpForward() {
    std::string out;
    if (terminated || !failure.ok()) return out;
    StackSet s = cur, nx;
    while (out.size() < kMaxJumpForward) {
      if (s.can_end || s.tops.empty()) break;
      ByteSet any;
      bool special = false;
      for (int32_t n : s.tops) {
        const int32_t g = arena[n].state;
        if (a.HasSpecials(g)) special = true;
        for (int w = 0; w < 4; ++w) any.bits[w] |= a.out_bytes[g].bits[w];
      }
      if (special) break;
      int count = 0, only = -1;
      for (int w = 0; w < 4; ++w) count += __builtin_popcountll(any.bits[w]);
      if (count != 1) break;
      for (int b = 0; b < 256; ++b) {
        if (any.Has(static_cast<uint8_t>(b))) only = b;
      }
      if (!sim.StepByte(s, static_cast<uint8_t>(only), nx)) break;
      if (CheckOverflow()) return {};
      out.push_back(static_cast<char>(only));
      std::swap(s, nx);
    }
    // Never end inside a code point: drop an incomplete trailing UTF-8 sequence.
    size_t i = out.size(), cont = 0;
    while (i > 0 && cont < 4 && (static_cast<uint8_t>(out[i - 1]) & 0xC0) == 0x80) {
      --i;
      ++cont;
    }
    if (i > 0) {
      auto lead = static_cast<uint8_t>(out[i - 1]);
      size_t need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      if (need > cont + 1) out.resize(i - 1);
    }
    return out;
  }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, const MatcherOptions& opts)
    : impl_(std::make_unique<Impl>(std::move(grammar), opts)) {}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

void GrammarMatcher::FillNextTokenMask(uint64_t* bits) { impl_->FillMask(bits); }

bool GrammarMatcher::AcceptToken(TokenId id) {
  Impl& m = *impl_;
  if (id >= m.v.vocab_size || !m.failure.ok()) return false;
  if (m.IsEos(id)) {
    if (!m.terminated && !m.cur.can_end) return false;
    m.Push(m.cur, true);
    return true;
  }
  if (m.terminated) return false;
  StackSet next;
  if (!m.Advance(id, next)) return false;
  m.Push(std::move(next), false);
  return true;
}

bool GrammarMatcher::AcceptString(std::string_view bytes) {
  Impl& m = *impl_;
  if (!m.failure.ok()) return false;
  if (m.terminated) return bytes.empty();
  StackSet next;
  const bool ok = m.sim.StepBytes(m.cur, bytes, next);
  if (m.CheckOverflow() || !ok) return false;
  m.Push(std::move(next), false);
  return true;
}

Status GrammarMatcher::Rollback(uint32_t n) {
  Impl& m = *impl_;
  if (n > m.history.size()) {
    return OutOfRange(fmt::format("cannot roll back {} tokens: only {} can be undone", n, m.history.size()));
  }
  for (uint32_t i = 0; i < n; ++i) {
    m.cur = std::move(m.history.back().set);
    m.terminated = m.history.back().terminated;
    m.history.pop_back();
  }
  return Status::Ok();
}

std::string GrammarMatcher::FindJumpForwardString() { return impl_->JumpForward(); }
bool GrammarMatcher::CanTerminate() const { return impl_->terminated || impl_->cur.can_end; }
bool GrammarMatcher::IsTerminated() const { return impl_->terminated; }
void GrammarMatcher::Reset() { impl_->ResetState(); }
void GrammarMatcher::SetRemainingTokens(uint32_t remaining) { impl_->remaining = remaining; }

uint32_t GrammarMatcher::ShortestCompletionTokens() const {
  if (impl_->terminated) return 0;
  return impl_->sim.Shortest(impl_->cur);
}

std::optional<std::vector<TokenId>> GrammarMatcher::ShortestCompletion() const {
  return impl_->ShortestCompletion();
}

bool GrammarMatcher::ForcedByBudget() const { return impl_->forced; }
const Status& GrammarMatcher::status() const { return impl_->failure; }

}  // namespace ladle::grammar
