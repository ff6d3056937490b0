// Grammar IR -> per-rule DFAs (automaton.h).
//
// Each unit's expression becomes a Thompson NFA over {byte sets, special tokens, rule calls},
// then a DFA by subset construction over the unit's byte classes. Small non-recursive rules
// are inlined into their callers: a call costs a stack push at run time and makes tokens that
// cross the callee's end "uncertain" for the mask cache, so flattening them pays.
#include "automaton.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>
#include <xxhash.h>

namespace ladle::grammar {

namespace {

using Clock = std::chrono::steady_clock;

// Rules up to this many NFA states (estimated, fully inlined) are copied into callers,
// unless they contain an unbounded repeat: those (string bodies, digit runs) are where most
// tokens stay inside the rule, so keeping them as their own unit lets one cached mask entry
// serve every caller and, through the structural key, every grammar in the process. Bounded
// pieces (whitespace, literals, small alternations) are flattened: a call costs a push and
// makes tokens crossing the callee's end uncertain.
constexpr uint64_t kInlineMaxStates = 400;
constexpr uint64_t kSaturate = uint64_t{1} << 40;
// Rough heap cost of one NFA state with its edges, and of one DFA state's bookkeeping.
constexpr size_t kNfaStateBytes = 64;
constexpr size_t kDfaStateBytes = 96;

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

// ---- NFA -----------------------------------------------------------------------------------

enum class EdgeKind : uint8_t { kEps, kBytes, kCall, kSpecial };

struct NfaEdge {
  EdgeKind kind;
  int32_t to;
  int32_t arg;   // byte-set index, rule id or token id
  int32_t next;  // the state's next edge (-1: last)
};

// Edges in one flat array linked per state: grammars have hundreds of thousands of states
// with one or two edges each, and a vector per state is a malloc per state.
struct Nfa {
  std::vector<int32_t> head;  // by state: first edge or -1
  std::vector<NfaEdge> edges;
  std::vector<ByteSet> sets;
  int32_t start = 0, final = 1;
  size_t size() const { return head.size(); }
  template <typename F>
  void ForEdges(int32_t s, F&& f) const {
    for (int32_t e = head[s]; e >= 0; e = edges[e].next) f(edges[e]);
  }
};

struct Budget {
  Clock::time_point deadline;
  size_t max_bytes;
  size_t used = 0;
  uint32_t max_ms;
  uint32_t tick = 0;
  Status Charge(size_t bytes) {
    used += bytes;
    if (used > max_bytes) {
      return ResourceExhausted(fmt::format("grammar compile exceeded {} MiB", max_bytes >> 20));
    }
    if ((++tick & 255) == 0 && Clock::now() > deadline) {
      return ResourceExhausted(fmt::format("grammar compile exceeded {} ms", max_ms));
    }
    return Status::Ok();
  }
};

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
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, buf.data(), buf.size() * sizeof(uint64_t));
    XXH3_128bits_update(st, e.text.data(), e.text.size());
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    slot = {h.high64, h.low64 | 1};
    return slot;
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
  std::vector<std::pair<uint64_t, uint64_t>> hash_memo_;
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

// What gets compiled: every non-inlined rule reachable from the root, plus extracted large
// repeats (deduplicated by structural hash).
struct UnitTable {
  struct Unit {
    ExprId body;
    RuleId rule;  // the rule itself, or the rule an extracted expression came from
  };
  std::vector<Unit> units;
  std::vector<int32_t> of_rule;
  std::map<std::pair<uint64_t, uint64_t>, int32_t> of_expr;

  int32_t ForRule(const Grammar& g, RuleId r) {
    if (of_rule.empty()) of_rule.assign(g.rules.size(), -1);
    if (of_rule[r] < 0) {
      of_rule[r] = static_cast<int32_t>(units.size());
      units.push_back({g.rules[r].body, r});
    }
    return of_rule[r];
  }
  int32_t ForExpr(ExprId e, RuleId within, std::pair<uint64_t, uint64_t> hash) {
    auto [it, fresh] = of_expr.try_emplace(hash, static_cast<int32_t>(units.size()));
    if (fresh) units.push_back({e, within});
    return it->second;
  }
};

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, Analysis& an, Budget& budget, UnitTable& units)
      : g_(g), an_(an), budget_(budget), units_(units) {}

  Result<Nfa> Build(int32_t unit) {
    nfa_ = Nfa{};
    set_index_.clear();
    single_.fill(-1);
    NewState();
    NewState();
    within_ = units_.units[unit].rule;
    top_ = units_.units[unit].body;
    repeat_count_.clear();
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
        for (const Utf8Seq& s : seqs) {
          int32_t cur = from;
          for (int i = 0; i < s.n; ++i) {
            int32_t nxt = to;
            if (i + 1 < s.n) {
              LADLE_ASSIGN_OR_RETURN(nxt, NewStateChecked());
            }
            ByteEdge(cur, nxt, s.lo[i], s.hi[i]);
            cur = nxt;
          }
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

  Status EmitRepeat(const Expr& e, int32_t from, int32_t to, int depth) {
    ExprId x = e.children[0];
    int32_t cur;
    LADLE_ASSIGN_OR_RETURN(cur, NewStateChecked());
    Edge(from, EdgeKind::kEps, cur);
    for (uint32_t i = 0; i < e.min; ++i) {
      int32_t nxt;
      LADLE_ASSIGN_OR_RETURN(nxt, NewStateChecked());
      LADLE_RETURN_IF_ERROR(Emit(x, cur, nxt, depth + 1));
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
      LADLE_RETURN_IF_ERROR(Emit(x, cur, nxt, depth + 1));
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
  size_t visits_ = 0;
  Nfa nfa_;
  std::map<std::array<uint64_t, 4>, int32_t> set_index_;
  std::array<int32_t, 256> single_{};
};

// ---- Subset construction -------------------------------------------------------------------

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    return XXH3_64bits(v.data(), v.size() * sizeof(int32_t));
  }
};

struct Dfa {
  std::array<uint8_t, 256> class_map{};
  uint16_t num_classes = 1;
  std::vector<uint8_t> accepting;
  std::vector<int32_t> next;  // state * num_classes + class, local ids
  std::vector<std::vector<std::pair<RuleId, int32_t>>> calls;
  std::vector<std::vector<std::pair<uint32_t, int32_t>>> specials;
  size_t size() const { return accepting.size(); }
};

class Determinizer {
 public:
  Determinizer(const Nfa& nfa, Budget& budget) : nfa_(nfa), budget_(budget) {}

  Result<Dfa> Run() {
    ComputeClasses();
    mark_.assign(nfa_.size(), 0);
    std::vector<int32_t> s0 = Closure({nfa_.start});
    Intern(std::move(s0));
    std::vector<std::vector<int32_t>> bucket(dfa_.num_classes);
    for (size_t d = 0; d < states_.size(); ++d) {
      LADLE_RETURN_IF_ERROR(budget_.Charge(kDfaStateBytes + dfa_.num_classes * sizeof(int32_t)));
      for (auto& b : bucket) b.clear();
      calls_.clear();
      specials_.clear();
      bool acc = false;
      for (int32_t s : states_[d]) {
        if (s == nfa_.final) acc = true;
        nfa_.ForEdges(s, [&](const NfaEdge& e) {
          switch (e.kind) {
            case EdgeKind::kBytes:
              for (uint8_t c : set_classes_[e.arg]) bucket[c].push_back(e.to);
              break;
            case EdgeKind::kCall: calls_.push_back({e.arg, e.to}); break;
            case EdgeKind::kSpecial: specials_.push_back({e.arg, e.to}); break;
            case EdgeKind::kEps: break;
          }
        });
      }
      dfa_.accepting.push_back(acc);
      std::vector<int32_t> row(dfa_.num_classes, -1);
      // Wide edges (any code point) put the same targets in many classes: determinise each
      // distinct bucket once.
      same_.clear();
      for (uint16_t c = 0; c < dfa_.num_classes; ++c) {
        if (bucket[c].empty()) continue;
        uint64_t h = XXH3_64bits(bucket[c].data(), bucket[c].size() * sizeof(int32_t));
        auto [it, fresh] = same_.try_emplace(h, c);
        if (!fresh && bucket[it->second] == bucket[c]) {
          row[c] = row[it->second];
        } else {
          row[c] = Intern(Closure(bucket[c]));
        }
      }
      dfa_.next.insert(dfa_.next.end(), row.begin(), row.end());
      dfa_.calls.emplace_back();
      ForGroups(calls_, [&](int32_t r, const std::vector<int32_t>& targets) {
        dfa_.calls.back().push_back({r, Intern(Closure(targets))});
      });
      dfa_.specials.emplace_back();
      ForGroups(specials_, [&](int32_t t, const std::vector<int32_t>& targets) {
        dfa_.specials.back().push_back({static_cast<uint32_t>(t), Intern(Closure(targets))});
      });
    }
    return std::move(dfa_);
  }

 private:
  void ComputeClasses() {
    // Refine the partition of 0..255 by every byte set of the NFA.
    std::array<uint16_t, 256> cls{};
    uint16_t n = 1;
    for (const ByteSet& s : nfa_.sets) {
      std::map<std::pair<uint16_t, bool>, uint16_t> remap;
      uint16_t m = 0;
      for (int b = 0; b < 256; ++b) {
        auto key = std::make_pair(cls[b], s.Has(static_cast<uint8_t>(b)));
        auto [it, fresh] = remap.try_emplace(key, m);
        if (fresh) ++m;
        cls[b] = it->second;
      }
      n = m;
    }
    dfa_.num_classes = n;
    for (int b = 0; b < 256; ++b) dfa_.class_map[b] = static_cast<uint8_t>(cls[b]);
    set_classes_.resize(nfa_.sets.size());
    for (size_t i = 0; i < nfa_.sets.size(); ++i) {
      std::vector<uint8_t> seen(n, 0);
      for (int b = 0; b < 256; ++b) {
        if (nfa_.sets[i].Has(static_cast<uint8_t>(b)) && !seen[cls[b]]) {
          seen[cls[b]] = 1;
          set_classes_[i].push_back(static_cast<uint8_t>(cls[b]));
        }
      }
    }
  }

  // Calls (specials) grouped by rule (token), in ascending order, targets merged.
  template <typename F>
  void ForGroups(std::vector<std::pair<int32_t, int32_t>>& edges, F&& f) {
    std::sort(edges.begin(), edges.end());
    for (size_t i = 0; i < edges.size();) {
      group_.clear();
      size_t j = i;
      for (; j < edges.size() && edges[j].first == edges[i].first; ++j) group_.push_back(edges[j].second);
      f(edges[i].first, group_);
      i = j;
    }
  }

  std::vector<int32_t> Closure(const std::vector<int32_t>& seeds) {
    ++stamp_;
    std::vector<int32_t> out, todo;
    for (int32_t s : seeds) {
      if (mark_[s] != stamp_) {
        mark_[s] = stamp_;
        todo.push_back(s);
      }
    }
    while (!todo.empty()) {
      int32_t s = todo.back();
      todo.pop_back();
      out.push_back(s);
      nfa_.ForEdges(s, [&](const NfaEdge& e) {
        if (e.kind == EdgeKind::kEps && mark_[e.to] != stamp_) {
          mark_[e.to] = stamp_;
          todo.push_back(e.to);
        }
      });
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  int32_t Intern(std::vector<int32_t> set) {
    auto [it, fresh] = index_.try_emplace(set, static_cast<int32_t>(states_.size()));
    if (fresh) states_.push_back(std::move(set));
    return it->second;
  }

  const Nfa& nfa_;
  Budget& budget_;
  Dfa dfa_;
  std::vector<std::vector<uint8_t>> set_classes_;
  std::vector<std::pair<int32_t, int32_t>> calls_, specials_;
  std::unordered_map<uint64_t, uint16_t> same_;
  std::vector<int32_t> group_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> index_;
  std::vector<std::vector<int32_t>> states_;
};

// Left recursion: a unit that can call itself before consuming anything. Nullability is a
// fixpoint (a unit is nullable if its start reaches acceptance through calls of nullable
// units), then the "left-call" graph must be acyclic.
Status CheckLeftRecursion(const Automaton& a, const Grammar& g) {
  const size_t nu = a.unit_start.size();
  std::vector<uint8_t> nullable(nu, 0);
  auto left_walk = [&](size_t u, std::vector<int32_t>* called) {
    std::vector<int32_t> todo{a.unit_start[u]};
    std::vector<int32_t> seen{a.unit_start[u]};
    bool acc = false;
    while (!todo.empty()) {
      int32_t s = todo.back();
      todo.pop_back();
      if (a.accepting[s]) acc = true;
      for (uint32_t i = a.call_begin[s]; i < a.call_begin[s + 1]; ++i) {
        const auto& c = a.calls[i];
        int32_t cu = a.unit_of[c.callee];
        if (called) called->push_back(cu);
        if (nullable[cu] && std::find(seen.begin(), seen.end(), c.ret) == seen.end()) {
          seen.push_back(c.ret);
          todo.push_back(c.ret);
        }
      }
    }
    return acc;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t u = 0; u < nu; ++u) {
      if (!nullable[u] && left_walk(u, nullptr)) nullable[u] = changed = true;
    }
  }
  std::vector<std::vector<int32_t>> left(nu);
  for (size_t u = 0; u < nu; ++u) left_walk(u, &left[u]);
  std::vector<uint8_t> color(nu, 0);  // 0 new, 1 on path, 2 done
  for (size_t root = 0; root < nu; ++root) {
    if (color[root]) continue;
    std::vector<std::pair<int32_t, size_t>> st{{static_cast<int32_t>(root), 0}};
    color[root] = 1;
    while (!st.empty()) {
      auto& [u, i] = st.back();
      if (i < left[u].size()) {
        int32_t w = left[u][i++];
        if (color[w] == 1) {
          return InvalidArgument(fmt::format(
              "grammar rule '{}' is left-recursive (it can reach itself without consuming input)",
              g.rules[a.unit_rule[w]].name));
        }
        if (color[w] == 0) {
          color[w] = 1;
          st.push_back({w, 0});
        }
        continue;
      }
      color[u] = 2;
      st.pop_back();
    }
  }
  return Status::Ok();
}

}  // namespace

size_t Automaton::MemoryBytes() const {
  return unit_rule.size() * (sizeof(RuleId) + sizeof(int32_t) + 256 + 2) +
         num_states() * (sizeof(int32_t) + 1 + 3 * sizeof(uint32_t) + sizeof(ByteSet) + sizeof(uint32_t)) +
         next.size() * sizeof(int32_t) + calls.size() * sizeof(Call) + specials.size() * sizeof(Special);
}

Result<Automaton> BuildAutomaton(const Grammar& g, const CompileOptions& opts,
                                 Clock::time_point deadline) {
  Budget budget{deadline, opts.max_memory_bytes, 0, opts.max_compile_ms};
  Analysis an(g);
  UnitTable table;
  NfaBuilder nb(g, an, budget, table);
  table.ForRule(g, g.root);
  std::vector<Dfa> dfas;
  for (size_t u = 0; u < table.units.size(); ++u) {
    LADLE_ASSIGN_OR_RETURN(Nfa nfa, nb.Build(static_cast<int32_t>(u)));
    Determinizer det(nfa, budget);
    LADLE_ASSIGN_OR_RETURN(Dfa dfa, det.Run());
    budget.used -= std::min(budget.used, nfa.size() * kNfaStateBytes);  // the NFA is freed
    dfas.push_back(std::move(dfa));
  }
  const size_t num_units = table.units.size();
  Automaton a;
  std::vector<int32_t> base(num_units);
  size_t total = 0;
  for (size_t u = 0; u < num_units; ++u) {
    base[u] = static_cast<int32_t>(total);
    total += dfas[u].size();
  }
  if (total > INT32_MAX / 2) return ResourceExhausted("grammar automaton has too many states");
  for (const auto& unit : table.units) a.unit_rule.push_back(unit.rule);
  for (size_t u = 0; u < num_units; ++u) {
    const Dfa& d = dfas[u];
    a.unit_start.push_back(base[u]);
    a.class_map.push_back(d.class_map);
    a.num_classes.push_back(d.num_classes);
    for (size_t s = 0; s < d.size(); ++s) {
      a.unit_of.push_back(static_cast<int32_t>(u));
      a.accepting.push_back(d.accepting[s]);
      a.trans_off.push_back(static_cast<uint32_t>(a.next.size()));
      for (uint16_t c = 0; c < d.num_classes; ++c) {
        int32_t t = d.next[s * d.num_classes + c];
        a.next.push_back(t < 0 ? -1 : base[u] + t);
      }
      a.call_begin.push_back(static_cast<uint32_t>(a.calls.size()));
      for (const auto& [r, ret] : d.calls[s]) {
        a.calls.push_back({base[r], base[u] + ret});
      }
      a.special_begin.push_back(static_cast<uint32_t>(a.specials.size()));
      for (const auto& [t, nx] : d.specials[s]) a.specials.push_back({t, base[u] + nx});
    }
  }
  a.call_begin.push_back(static_cast<uint32_t>(a.calls.size()));
  a.special_begin.push_back(static_cast<uint32_t>(a.specials.size()));
  a.start = base[0];
  LADLE_RETURN_IF_ERROR(CheckLeftRecursion(a, g));
  if (Clock::now() > deadline) {
    return ResourceExhausted(fmt::format("grammar compile exceeded {} ms", opts.max_compile_ms));
  }
  FinishAutomaton(a);
  return a;
}

void FinishAutomaton(Automaton& a) {
  const size_t n = a.num_states();
  a.dist.assign(n, kInfDist);
  // Shortest completion is a grammar problem (Knuth 1977): each state's value is the minimum
  // over its edges of 1 + dist(target) (bytes, specials) or dist(callee) + dist(ret) (calls).
  // Those functions are superior (never below any argument), so a Dijkstra-style pass that
  // finalises states in increasing order is exact in one sweep.
  struct Edge {
    int32_t owner, x, y;  // y = -1 for one-argument edges
    uint32_t add;
    uint8_t pending;
  };
  std::vector<Edge> edges;
  std::vector<uint32_t> stamp(n, UINT32_MAX);
  for (size_t i = 0; i < n; ++i) {
    const auto g = static_cast<int32_t>(i);
    const uint16_t nc = a.num_classes[a.unit_of[i]];
    auto one = [&](int32_t t) {
      if (stamp[t] == i) return;  // one edge per distinct target
      stamp[t] = static_cast<uint32_t>(i);
      edges.push_back({g, t, -1, 1, 1});
    };
    for (uint16_t c = 0; c < nc; ++c) {
      int32_t t = a.next[a.trans_off[i] + c];
      if (t >= 0) one(t);
    }
    for (uint32_t k = a.special_begin[i]; k < a.special_begin[i + 1]; ++k) one(a.specials[k].next);
    for (uint32_t k = a.call_begin[i]; k < a.call_begin[i + 1]; ++k) {
      const auto& c = a.calls[k];
      edges.push_back({g, c.callee, c.ret, 0, static_cast<uint8_t>(c.ret != c.callee ? 2 : 1)});
    }
  }
  // deps in CSR form: state -> the edges it is an argument of.
  std::vector<uint32_t> dep_begin(n + 1, 0), deps;
  for (const Edge& e : edges) {
    ++dep_begin[e.x + 1];
    if (e.y >= 0 && e.y != e.x) ++dep_begin[e.y + 1];
  }
  for (size_t i = 0; i < n; ++i) dep_begin[i + 1] += dep_begin[i];
  deps.resize(dep_begin[n]);
  {
    std::vector<uint32_t> fill(dep_begin.begin(), dep_begin.end() - 1);
    for (uint32_t ei = 0; ei < edges.size(); ++ei) {
      deps[fill[edges[ei].x]++] = ei;
      if (edges[ei].y >= 0 && edges[ei].y != edges[ei].x) deps[fill[edges[ei].y]++] = ei;
    }
  }
  using Item = std::pair<uint32_t, int32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> pq;
  std::vector<uint8_t> done(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (a.accepting[i]) {
      a.dist[i] = 0;
      pq.push({0, static_cast<int32_t>(i)});
    }
  }
  while (!pq.empty()) {
    auto [d, g] = pq.top();
    pq.pop();
    if (done[g] || d != a.dist[g]) continue;
    done[g] = 1;
    for (uint32_t k = dep_begin[g]; k < dep_begin[g + 1]; ++k) {
      Edge& e = edges[deps[k]];
      if (--e.pending > 0) continue;
      uint64_t v = uint64_t{a.dist[e.x]} + (e.y >= 0 ? a.dist[e.y] : 0) + e.add;
      if (v < a.dist[e.owner]) {
        a.dist[e.owner] = static_cast<uint32_t>(std::min<uint64_t>(v, kInfDist - 1));
        pq.push({a.dist[e.owner], e.owner});
      }
    }
  }
  // Prune everything that cannot complete.
  std::vector<Automaton::Call> calls;
  std::vector<Automaton::Special> specials;
  std::vector<uint32_t> cb, sb;
  a.out_bytes.assign(n, ByteSet{});
  // The bytes of each class, per unit.
  std::vector<std::vector<ByteSet>> class_bytes(a.class_map.size());
  for (size_t u = 0; u < a.class_map.size(); ++u) {
    class_bytes[u].resize(a.num_classes[u]);
    for (int b = 0; b < 256; ++b) class_bytes[u][a.class_map[u][b]].Set(static_cast<uint8_t>(b));
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t u = a.unit_of[i];
    const uint16_t nc = a.num_classes[u];
    for (uint16_t c = 0; c < nc; ++c) {
      int32_t& t = a.next[a.trans_off[i] + c];
      if (t >= 0 && a.dist[t] == kInfDist) t = -1;
      if (t >= 0) {
        for (int w = 0; w < 4; ++w) a.out_bytes[i].bits[w] |= class_bytes[u][c].bits[w];
      }
    }
    cb.push_back(static_cast<uint32_t>(calls.size()));
    for (uint32_t k = a.call_begin[i]; k < a.call_begin[i + 1]; ++k) {
      const auto& c = a.calls[k];
      if (a.dist[c.callee] != kInfDist && a.dist[c.ret] != kInfDist) calls.push_back(c);
    }
    sb.push_back(static_cast<uint32_t>(specials.size()));
    for (uint32_t k = a.special_begin[i]; k < a.special_begin[i + 1]; ++k) {
      if (a.dist[a.specials[k].next] != kInfDist) specials.push_back(a.specials[k]);
    }
  }
  cb.push_back(static_cast<uint32_t>(calls.size()));
  sb.push_back(static_cast<uint32_t>(specials.size()));
  a.calls = std::move(calls);
  a.specials = std::move(specials);
  a.call_begin = std::move(cb);
  a.special_begin = std::move(sb);
  if (a.start >= 0 && a.dist[a.start] == kInfDist) a.start = -1;
}

}  // namespace ladle::grammar
