// Grammar IR -> one Thompson NFA per unit (automaton_nfa.h): UTF-8 byte sequences for
// code-point classes, counted repeats as chains, and the policy of what is inlined into a
// unit and what becomes a unit of its own.
#include <algorithm>
#include <map>

#include <xxhash.h>

#include "automaton_nfa.h"

namespace ladle::grammar::automaton_internal {

namespace {

// Rules up to this many NFA states (estimated, fully inlined) are copied into callers,
// unless they contain an unbounded repeat: those (string bodies, digit runs) are where most
// tokens stay inside the rule, so keeping them as their own unit lets one cached mask entry
// serve every caller and, through the structural key, every grammar in the process. Bounded
// pieces (whitespace, literals, small alternations) are flattened: a call costs a push and
// makes tokens crossing the callee's end uncertain.
constexpr uint64_t kInlineMaxStates = 400;
constexpr uint64_t kSaturate = uint64_t{1} << 40;

// ---- UTF-8 ranges -> byte-range sequences ------------------------------------------------

struct Utf8Seq {
  int n = 0;
  uint8_t lo[4]{}, hi[4]{};
};

int Encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [lo, hi] until each piece's encodings form a cartesian product of byte ranges.
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<Utf8Seq>& out) {
  static constexpr uint32_t kLenMax[3] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t m : kLenMax) {
    if (lo <= m && hi > m) {
      SplitUtf8(lo, m, out);
      SplitUtf8(m + 1, hi, out);
      return;
    }
  }
  if (hi >= 0x80) {
    for (int i = 1; i < 4; ++i) {
      uint32_t m = (1u << (6 * i)) - 1;
      if ((lo & ~m) != (hi & ~m)) {
        if ((lo & m) != 0) {
          SplitUtf8(lo, lo | m, out);
          SplitUtf8((lo | m) + 1, hi, out);
          return;
        }
        if ((hi & m) != m) {
          SplitUtf8(lo, (hi & ~m) - 1, out);
          SplitUtf8(hi & ~m, hi, out);
          return;
        }
      }
    }
  }
  Utf8Seq s;
  s.n = Encode(lo, s.lo);
  Encode(hi, s.hi);
  out.push_back(s);
}

class Analysis {
 public:
  explicit Analysis(const Grammar& g) : g_(g) {
    FindRecursive();
    size_memo_.assign(g.exprs.size(), UINT64_MAX);
    unbounded_.assign(g.exprs.size(), 0);
    inline_.assign(g.rules.size(), 0);
    rule_done_.assign(g.rules.size(), 0);
  }
  // Structural hash of an expression tree (rule references by id): equal hashes = the same
  // language within this grammar, so extracted units dedup.
  std::pair<uint64_t, uint64_t> Hash(ExprId id) {
    if (hash_memo_.empty()) hash_memo_.resize(g_.exprs.size());
    auto& slot = hash_memo_[id];
    if (slot.first || slot.second) return slot;
    const Expr& e = g_.exprs[id];
    std::vector<uint64_t> buf{static_cast<uint64_t>(e.kind), e.token_id, e.min, e.max,
                              static_cast<uint64_t>(static_cast<uint32_t>(e.rule)), e.text.size()};
    for (uint64_t w : e.bytes.bits) buf.push_back(w);
    for (CodeRange r : e.ranges) buf.push_back((uint64_t{r.lo} << 32) | r.hi);
    for (ExprId c : e.children) {
      auto h = Hash(c);
      buf.push_back(h.first);
      buf.push_back(h.second);
    }
    const XXH128_hash_t h = Digest(buf, e.text);
    slot = {h.high64, h.low64 | 1};
    return slot;
  }

  // Structural hash across grammars: like Hash, but an inlinable rule reference hashes as
  // its rule's body, so the result names the same expression in any grammar. Nullopt when
  // the expression reaches a rule that is not inlined (a call: the unit's DFA would then
  // name rule ids of this grammar).
  std::optional<std::pair<uint64_t, uint64_t>> DeepHash(ExprId id) {
    if (deep_memo_.empty()) deep_memo_.resize(g_.exprs.size());
    auto& slot = deep_memo_[id];
    if (slot.first == 1 && slot.second == 0) return std::nullopt;  // known not to qualify
    if (slot.first || slot.second) return slot;
    const Expr& e = g_.exprs[id];
    std::vector<uint64_t> buf{static_cast<uint64_t>(e.kind), e.token_id, e.min, e.max, e.text.size()};
    for (uint64_t w : e.bytes.bits) buf.push_back(w);
    for (CodeRange r : e.ranges) buf.push_back((uint64_t{r.lo} << 32) | r.hi);
    auto fail = [&] {
      deep_memo_[id] = {1, 0};
      return std::nullopt;
    };
    if (e.kind == ExprKind::kRuleRef) {
      if (e.rule < 0 || !Inlinable(e.rule)) return fail();
      auto h = DeepHash(g_.rules[e.rule].body);
      if (!h) return fail();
      buf.push_back(h->first);
      buf.push_back(h->second);
    }
    for (ExprId c : e.children) {
      auto h = DeepHash(c);
      if (!h) return fail();
      buf.push_back(h->first);
      buf.push_back(h->second);
    }
    const XXH128_hash_t h = Digest(buf, e.text);
    std::pair<uint64_t, uint64_t> out{h.high64, h.low64 | 2};  // never the {1, 0} marker
    deep_memo_[id] = out;
    return out;
  }

  static XXH128_hash_t Digest(const std::vector<uint64_t>& words, const std::string& text) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, words.data(), words.size() * sizeof(uint64_t));
    XXH3_128bits_update(st, text.data(), text.size());
    const XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return h;
  }

  bool Inlinable(RuleId r) {
    if (recursive_[r]) return false;
    if (!rule_done_[r]) {
      rule_done_[r] = 1;
      const ExprId body = g_.rules[r].body;
      inline_[r] = Size(body) <= kInlineMaxStates && !unbounded_[body];
    }
    return inline_[r];
  }

  uint64_t Size(ExprId id) {
    if (size_memo_[id] != UINT64_MAX) return size_memo_[id];
    const Expr& e = g_.exprs[id];
    uint64_t s = 1;
    bool unb = e.kind == ExprKind::kRepeat && e.max == kUnbounded;
    for (ExprId c : e.children) {
      Size(c);
      unb = unb || unbounded_[c];
    }
    if (e.kind == ExprKind::kRuleRef && Inlinable(e.rule)) {
      Size(g_.rules[e.rule].body);
      unb = unb || unbounded_[g_.rules[e.rule].body];
    }
    unbounded_[id] = unb;
    switch (e.kind) {
      case ExprKind::kLiteral: s = e.text.size() + 1; break;
      case ExprKind::kCodePoints: s = 8 + 4 * e.ranges.size(); break;
      case ExprKind::kSeq:
      case ExprKind::kAlt:
        s = 1;
        for (ExprId c : e.children) s = std::min(kSaturate, s + Size(c));
        break;
      case ExprKind::kRepeat: {
        uint64_t copies = e.max == kUnbounded ? std::max<uint64_t>(e.min, 1) : e.max;
        s = std::min(kSaturate, Size(e.children[0]) * std::min(copies, kSaturate) + 2);
        break;
      }
      case ExprKind::kRuleRef: s = Inlinable(e.rule) ? Size(g_.rules[e.rule].body) : 1; break;
      default: break;
    }
    return size_memo_[id] = s;
  }

  // Tarjan's SCC over the rule reference graph; recursive = in a cycle.
  void FindRecursive() {
    const size_t n = g_.rules.size();
    std::vector<std::vector<RuleId>> refs(n);
    for (size_t r = 0; r < n; ++r) {
      std::vector<ExprId> todo{g_.rules[r].body};
      std::vector<uint8_t> seen(g_.exprs.size(), 0);
      while (!todo.empty()) {
        ExprId x = todo.back();
        todo.pop_back();
        if (seen[x]) continue;
        seen[x] = 1;
        const Expr& e = g_.exprs[x];
        if (e.kind == ExprKind::kRuleRef) refs[r].push_back(e.rule);
        for (ExprId c : e.children) todo.push_back(c);
      }
    }
    recursive_.assign(n, 0);
    std::vector<int> index(n, -1), low(n, 0);
    std::vector<uint8_t> on(n, 0);
    std::vector<RuleId> st;
    int counter = 0;
    // Iterative Tarjan: deep rule chains must not overflow the C++ stack.
    for (size_t root = 0; root < n; ++root) {
      if (index[root] >= 0) continue;
      std::vector<std::pair<RuleId, size_t>> call{{static_cast<RuleId>(root), 0}};
      while (!call.empty()) {
        auto& [v, i] = call.back();
        if (i == 0) {
          index[v] = low[v] = counter++;
          st.push_back(v);
          on[v] = 1;
        }
        if (i < refs[v].size()) {
          RuleId w = refs[v][i++];
          if (w == v) recursive_[v] = 1;
          if (index[w] < 0) {
            call.push_back({w, 0});
          } else if (on[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        if (low[v] == index[v]) {
          std::vector<RuleId> comp;
          RuleId w;
          do {
            w = st.back();
            st.pop_back();
            on[w] = 0;
            comp.push_back(w);
          } while (w != v);
          if (comp.size() > 1) {
            for (RuleId c : comp) recursive_[c] = 1;
          }
        }
        RuleId done = v;
        call.pop_back();
        if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
      }
    }
  }

  const Grammar& g_;
  std::vector<std::pair<uint64_t, uint64_t>> hash_memo_, deep_memo_;
  std::vector<uint8_t> recursive_;
  std::vector<uint64_t> size_memo_;
  std::vector<uint8_t> unbounded_;  // by expression: contains an unbounded repeat (inlined refs included)
  std::vector<uint8_t> inline_, rule_done_;
};

// Repeats whose expansion exceeds this many NFA states become their own unit (a call):
// `char{0,255}` inlined into an object rule multiplies that rule's DFA by the rest of the
// object; as a unit it is compiled once and its states are shared by every use.
constexpr uint64_t kExtractStates = 1024;
// An unbounded repeat of a body this large that occurs more than once in one unit, with the
// copies together over kExtractStates (the `char*` tail after every node of an "any key but
// these" trie), also becomes a unit:
// Thompson copies are distinct NFA states, so subset construction would build equivalent
// DFA states once per copy.
constexpr uint64_t kShareMinStates = 16;
constexpr size_t kMaxCountVisits = 1 << 20;
// Expressions at least this large are emitted once per (expression, exit state) and later
// occurrences enter the same fragment: see Emit.
constexpr uint64_t kMemoMinStates = 24;
// A counted repeat's body this large is called instead of copied (EmitCopy).
constexpr uint64_t kCallBodyStates = 128;

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, Analysis& an, Budget& budget, UnitTable& units)
      : g_(g), an_(an), budget_(budget), units_(units) {}

  Result<Nfa> Build(int32_t unit) { return BuildExpr(units_.units[unit].body, units_.units[unit].rule); }

  Result<Nfa> BuildExpr(ExprId top, RuleId within) {
    nfa_ = Nfa{};
    set_index_.clear();
    single_.fill(-1);
    NewState();
    NewState();
    within_ = within;
    top_ = top;
    repeat_count_.clear();
    emitted_.clear();
    visits_ = 0;
    CountRepeats(top_, 0);
    LADLE_RETURN_IF_ERROR(Emit(top_, nfa_.start, nfa_.final, 0));
    return std::move(nfa_);
  }

 private:
  Result<int32_t> NewStateChecked() {
    LADLE_RETURN_IF_ERROR(budget_.Charge(kNfaStateBytes));
    return NewState();
  }
  int32_t NewState() {
    nfa_.head.push_back(-1);
    return static_cast<int32_t>(nfa_.head.size() - 1);
  }
  int32_t SetIndex(const ByteSet& s) {
    auto [it, fresh] = set_index_.try_emplace(s.bits, static_cast<int32_t>(nfa_.sets.size()));
    if (fresh) nfa_.sets.push_back(s);
    return it->second;
  }
  void Edge(int32_t from, EdgeKind k, int32_t to, int32_t arg = 0) {
    nfa_.edges.push_back(NfaEdge{k, to, arg, nfa_.head[from]});
    nfa_.head[from] = static_cast<int32_t>(nfa_.edges.size() - 1);
  }
  void ByteEdge(int32_t from, int32_t to, uint8_t lo, uint8_t hi) {
    if (lo == hi) {  // literals: the common case, no hashing
      int32_t& idx = single_[lo];
      if (idx < 0) {
        ByteSet s;
        s.Set(lo);
        idx = SetIndex(s);
      }
      Edge(from, EdgeKind::kBytes, to, idx);
      return;
    }
    ByteSet s;
    s.SetRange(lo, hi);
    Edge(from, EdgeKind::kBytes, to, SetIndex(s));
  }

  bool Shared(ExprId id, const Expr& e) {
    if (e.max != kUnbounded || an_.Size(e.children[0]) < kShareMinStates) return false;
    // Only where the copies add up: a string rule used for a key and a value keeps its body
    // inline (tokens ending the string stay "accepted" instead of "uncertain").
    auto it = repeat_count_.find(an_.Hash(id));
    return it != repeat_count_.end() && it->second >= 2 &&
           static_cast<uint64_t>(it->second) * an_.Size(e.children[0]) > kExtractStates;
  }

  void CountRepeats(ExprId id, int depth) {
    if (++visits_ > kMaxCountVisits || depth > 2000) return;
    const Expr& e = g_.exprs[id];
    if (e.kind == ExprKind::kRepeat && e.max == kUnbounded && an_.Size(e.children[0]) >= kShareMinStates) {
      if (++repeat_count_[an_.Hash(id)] > 1) return;  // its inside was counted the first time
    }
    if (e.kind == ExprKind::kRepeat && id != top_ && an_.Size(id) > kExtractStates) return;  // a unit
    if (e.kind == ExprKind::kRuleRef) {
      if (an_.Inlinable(e.rule)) CountRepeats(g_.rules[e.rule].body, depth + 1);
      return;
    }
    for (ExprId c : e.children) CountRepeats(c, depth + 1);
  }

  // Adds a path from `from` to `to` matching expression `id`. Fragments only add edges out of
  // `from` and into `to` (never the reverse), so alternatives may share both ends.
  Status Emit(ExprId id, int32_t from, int32_t to, int depth) {
    if (depth > 2000) return ResourceExhausted("grammar expression nesting exceeds 2000 levels");
    const Expr& e = g_.exprs[id];
    // The IR is a DAG: an object's optional-property chain shares each tail between the
    // alternative that starts there and the tail before it. Expanding it as a tree made the
    // NFA (and the DFA: subset construction does not merge equivalent states) quadratic in
    // the property count: 388k NFA states, 1.3 s, for 131 optional properties. A fragment
    // with the same exit state is the same language to the same place, so later occurrences
    // enter the first copy through an epsilon edge. Fragments never add edges into their
    // entry's predecessors, so a fresh entry state is safe to share.
    if (e.kind != ExprKind::kLiteral && an_.Size(id) >= kMemoMinStates) {
      auto [it, fresh] = emitted_.try_emplace({id, to}, -1);
      if (!fresh) {
        Edge(from, EdgeKind::kEps, it->second);
        return Status::Ok();
      }
      int32_t entry;
      LADLE_ASSIGN_OR_RETURN(entry, NewStateChecked());
      emitted_[{id, to}] = entry;
      Edge(from, EdgeKind::kEps, entry);
      return EmitBody(id, e, entry, to, depth);
    }
    return EmitBody(id, e, from, to, depth);
  }

  Status EmitBody(ExprId id, const Expr& e, int32_t from, int32_t to, int depth) {
    switch (e.kind) {
      case ExprKind::kEmpty: Edge(from, EdgeKind::kEps, to); return Status::Ok();
      case ExprKind::kNothing: return Status::Ok();
      case ExprKind::kLiteral: {
        int32_t cur = from;
        for (size_t i = 0; i < e.text.size(); ++i) {
          int32_t nxt = to;
          if (i + 1 < e.text.size()) {
            LADLE_ASSIGN_OR_RETURN(nxt, NewStateChecked());
          }
          auto b = static_cast<uint8_t>(e.text[i]);
          ByteEdge(cur, nxt, b, b);
          cur = nxt;
        }
        return Status::Ok();
      }
      case ExprKind::kByteSet: Edge(from, EdgeKind::kBytes, to, SetIndex(e.bytes)); return Status::Ok();
      case ExprKind::kCodePoints: {
        std::vector<Utf8Seq> seqs;
        for (CodeRange r : e.ranges) SplitUtf8(r.lo, r.hi, seqs);
        // Built from the end, with equal suffixes shared (each state "needs these bytes, then
        // `to`" exists once): the continuation-byte tails of all 2-, 3- and 4-byte ranges then
        // merge, and subset construction yields the minimal ~13 states per JSON string
        // character instead of ~38 — a third of the states of every length-bounded string unit.
        struct Tail {
          uint8_t lo, hi;
          int32_t to, state;
        };
        std::vector<Tail> tails;
        for (const Utf8Seq& s : seqs) {
          int32_t next = to;
          for (int i = s.n - 1; i >= 1; --i) {
            int32_t state = -1;
            for (const Tail& t : tails) {
              if (t.lo == s.lo[i] && t.hi == s.hi[i] && t.to == next) state = t.state;
            }
            if (state < 0) {
              LADLE_ASSIGN_OR_RETURN(state, NewStateChecked());
              ByteEdge(state, next, s.lo[i], s.hi[i]);
              tails.push_back({s.lo[i], s.hi[i], next, state});
            }
            next = state;
          }
          ByteEdge(from, next, s.lo[0], s.hi[0]);
        }
        return Status::Ok();
      }
      case ExprKind::kSpecialToken:
        Edge(from, EdgeKind::kSpecial, to, static_cast<int32_t>(e.token_id));
        return Status::Ok();
      case ExprKind::kSeq: {
        int32_t cur = from;
        for (size_t i = 0; i < e.children.size(); ++i) {
          int32_t nxt = to;
          if (i + 1 < e.children.size()) {
            LADLE_ASSIGN_OR_RETURN(nxt, NewStateChecked());
          }
          LADLE_RETURN_IF_ERROR(Emit(e.children[i], cur, nxt, depth + 1));
          cur = nxt;
        }
        return Status::Ok();
      }
      case ExprKind::kAlt:
        for (ExprId c : e.children) LADLE_RETURN_IF_ERROR(Emit(c, from, to, depth + 1));
        return Status::Ok();
      case ExprKind::kRepeat:
        if (id != top_ && (an_.Size(id) > kExtractStates || Shared(id, e))) {
          Edge(from, EdgeKind::kCall, to, units_.ForExpr(id, within_, an_.Hash(id)));
          return Status::Ok();
        }
        return EmitRepeat(e, from, to, depth);
      case ExprKind::kRuleRef:
        if (an_.Inlinable(e.rule)) return Emit(g_.rules[e.rule].body, from, to, depth + 1);
        Edge(from, EdgeKind::kCall, to, units_.ForRule(g_, e.rule));
        return Status::Ok();
    }
    return Status::Ok();
  }

  // One copy of a counted repeat's body: inline, or a call when the body is large enough
  // that copying it `max` times is what costs (`maxItems: 255` of a 400-state object was a
  // 109k-state NFA; as a call the chain is 255 edges and the object is compiled once).
  Status EmitCopy(const Expr& e, ExprId x, int32_t from, int32_t to, int depth) {
    if (e.max != kUnbounded && e.max > 1 && an_.Size(x) >= kCallBodyStates &&
        an_.Size(x) * e.max > kExtractStates) {
      Edge(from, EdgeKind::kCall, to, units_.ForExpr(x, within_, an_.Hash(x)));
      return Status::Ok();
    }
    return Emit(x, from, to, depth + 1);
  }

  Status EmitRepeat(const Expr& e, int32_t from, int32_t to, int depth) {
    ExprId x = e.children[0];
    int32_t cur;
    LADLE_ASSIGN_OR_RETURN(cur, NewStateChecked());
    Edge(from, EdgeKind::kEps, cur);
    for (uint32_t i = 0; i < e.min; ++i) {
      int32_t nxt;
      LADLE_ASSIGN_OR_RETURN(nxt, NewStateChecked());
      LADLE_RETURN_IF_ERROR(EmitCopy(e, x, cur, nxt, depth));
      cur = nxt;
    }
    if (e.max == kUnbounded) {
      // cur -x-> back -> cur: a fresh loop state keeps the fragment's ends loop-free.
      int32_t back;
      LADLE_ASSIGN_OR_RETURN(back, NewStateChecked());
      LADLE_RETURN_IF_ERROR(Emit(x, cur, back, depth + 1));
      Edge(back, EdgeKind::kEps, cur);
      Edge(cur, EdgeKind::kEps, to);
      return Status::Ok();
    }
    // Optional copies, each able to stop: x{0,n} as n states, not n nested alternations.
    for (uint32_t i = e.min; i < e.max; ++i) {
      Edge(cur, EdgeKind::kEps, to);
      int32_t nxt;
      LADLE_ASSIGN_OR_RETURN(nxt, NewStateChecked());
      LADLE_RETURN_IF_ERROR(EmitCopy(e, x, cur, nxt, depth));
      cur = nxt;
    }
    Edge(cur, EdgeKind::kEps, to);
    return Status::Ok();
  }

  const Grammar& g_;
  Analysis& an_;
  Budget& budget_;
  UnitTable& units_;
  RuleId within_ = -1;
  ExprId top_ = -1;
  std::map<std::pair<uint64_t, uint64_t>, int> repeat_count_;
  std::map<std::pair<ExprId, int32_t>, int32_t> emitted_;  // (expression, exit) -> entry state
  size_t visits_ = 0;
  Nfa nfa_;
  std::map<std::array<uint64_t, 4>, int32_t> set_index_;
  std::array<int32_t, 256> single_{};
};

}  // namespace

struct NfaCompiler::State {
  State(const Grammar& g, Budget& budget, UnitTable& units) : g(g), units(units), an(g), nb(g, an, budget, units) {}
  const Grammar& g;
  const UnitTable& units;
  Analysis an;
  NfaBuilder nb;
};

NfaCompiler::NfaCompiler(const Grammar& g, Budget& budget, UnitTable& units)
    : s_(std::make_unique<State>(g, budget, units)) {}
NfaCompiler::~NfaCompiler() = default;
Result<Nfa> NfaCompiler::Build(int32_t unit) { return s_->nb.Build(unit); }
Result<Nfa> NfaCompiler::BuildPart(int32_t unit, ExprId e) {
  return s_->nb.BuildExpr(e, s_->units.units[unit].rule);
}

std::optional<std::pair<uint64_t, uint64_t>> NfaCompiler::UnitKey(int32_t unit) {
  return s_->an.DeepHash(s_->units.units[unit].body);
}

std::optional<std::pair<ExprId, ExprId>> NfaCompiler::SequenceOfTwo(int32_t unit) const {
  const Expr& e = s_->g.exprs[s_->units.units[unit].body];
  if (e.kind != ExprKind::kSeq || e.children.size() != 2) return std::nullopt;
  return std::make_pair(e.children[0], e.children[1]);
}

std::optional<CountedRepeat> NfaCompiler::LayeredRepeat(int32_t unit) const {
  const Expr& e = s_->g.exprs[s_->units.units[unit].body];
  if (e.kind != ExprKind::kRepeat || e.max == kUnbounded || e.max < kLayeredMinCopies) return std::nullopt;
  // A body large enough to be called per copy (EmitCopy) stays that way: layering would copy it.
  if (s_->an.Size(e.children[0]) >= kCallBodyStates) return std::nullopt;
  return CountedRepeat{e.children[0], e.min, e.max};
}

}  // namespace ladle::grammar::automaton_internal
