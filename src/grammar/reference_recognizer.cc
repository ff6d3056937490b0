// ReferenceRecognizer (reference_recognizer.h): the IR lowered to a CFG, then Earley with the
// Aycock-Horspool nullable fix. Unproductive symbols are pruned first so that "some item is
// alive at the end of the input" means exactly "the input is a viable prefix".
#include "reference_recognizer.h"

#include <algorithm>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "ladle/tokenizer/tokenizer.h"

namespace ladle::grammar {

namespace {

// Symbols in productions: >= 0 a nonterminal, < 0 terminal number (-s - 1).
using Sym = int32_t;

struct Terminal {
  enum Kind : uint8_t { kBytes, kCodePoints, kSpecial } kind = kBytes;
  ByteSet bytes;
  std::vector<CodeRange> ranges;
  uint32_t token = 0;
};

struct Production {
  Sym lhs = 0;
  uint32_t begin = 0, size = 0;  // into Cfg::rhs
};

struct Item {
  uint32_t prod, dot, origin;
  bool operator==(const Item&) const = default;
};

struct ItemHash {
  size_t operator()(const Item& i) const {
    uint64_t h = (uint64_t{i.prod} * 0x9E3779B97F4A7C15ull) ^ (uint64_t{i.dot} << 32) ^ i.origin;
    h ^= h >> 29;
    return static_cast<size_t>(h * 0xBF58476D1CE4E5B9ull);
  }
};

bool InRanges(uint32_t cp, const std::vector<CodeRange>& ranges) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const CodeRange& r) { return v < r.lo; });
  if (it == ranges.begin()) return false;
  --it;
  return cp >= it->lo && cp <= it->hi;
}

// Some scalar value (not a surrogate) in [lo, hi] is in `ranges`.
bool IntervalHitsRanges(uint32_t lo, uint32_t hi, const std::vector<CodeRange>& ranges) {
  for (const CodeRange& r : ranges) {
    uint32_t a = std::max(lo, r.lo), b = std::min(hi, r.hi);
    if (a > b) continue;
    // [a, b] minus the surrogate block.
    if (a < 0xD800 || b > 0xDFFF) return true;
  }
  return false;
}

// Length of the UTF-8 sequence a lead byte starts, 0 if it cannot start one.
int Utf8Length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

}  // namespace

struct ReferenceRecognizer::Cfg {
  std::vector<Terminal> terminals;
  std::vector<Production> prods;
  std::vector<Sym> rhs;
  std::vector<std::vector<uint32_t>> by_lhs;  // nonterminal -> production indices
  std::vector<bool> nullable;
  size_t num_nt = 0;
  Sym start = 0;
  uint32_t start_prod = 0;
  bool empty_language = false;

  Sym NewNt() { return static_cast<Sym>(num_nt++); }
  void Add(Sym lhs, std::initializer_list<Sym> syms) { Add(lhs, std::vector<Sym>(syms)); }
  void Add(Sym lhs, const std::vector<Sym>& syms) {
    prods.push_back(Production{lhs, static_cast<uint32_t>(rhs.size()), static_cast<uint32_t>(syms.size())});
    rhs.insert(rhs.end(), syms.begin(), syms.end());
  }
  Sym AddTerminal(Terminal t) {
    terminals.push_back(std::move(t));
    return -static_cast<Sym>(terminals.size());
  }
  const Terminal& Term(Sym s) const { return terminals[static_cast<size_t>(-s - 1)]; }
  Sym At(const Item& it) const { return rhs[prods[it.prod].begin + it.dot]; }
  bool Done(const Item& it) const { return it.dot == prods[it.prod].size; }
};

Result<ReferenceRecognizer> ReferenceRecognizer::Create(const Grammar& g, size_t max_symbols) {
  auto cfg = std::make_unique<Cfg>();
  Cfg& c = *cfg;
  const size_t ne = g.exprs.size(), nr = g.rules.size();
  if (g.root < 0 || static_cast<size_t>(g.root) >= nr) return InvalidArgument("grammar has no root rule");

  // Nonterminals 0..ne-1 are expressions, ne..ne+nr-1 rules.
  c.num_nt = ne + nr;
  auto rule_nt = [&](RuleId r) { return static_cast<Sym>(ne + static_cast<size_t>(r)); };
  std::array<Sym, 256> byte_term{};
  byte_term.fill(0);
  auto byte_sym = [&](uint8_t b) {
    if (byte_term[b] == 0) {
      Terminal t;
      t.bytes.Set(b);
      byte_term[b] = c.AddTerminal(std::move(t));
    }
    return byte_term[b];
  };
  for (size_t r = 0; r < nr; ++r) {
    ExprId body = g.rules[r].body;
    if (body < 0 || static_cast<size_t>(body) >= ne) {
      return InvalidArgument(fmt::format("grammar rule '{}' is not defined", g.rules[r].name));
    }
    c.Add(rule_nt(static_cast<RuleId>(r)), {static_cast<Sym>(body)});
  }
  for (size_t id = 0; id < ne; ++id) {
    const Expr& e = g.exprs[id];
    const Sym lhs = static_cast<Sym>(id);
    for (ExprId ch : e.children) {
      // The builder only ever refers back to existing nodes; a forward reference would be a
      // hand-made IR with possible cycles, which the lowering below does not expect.
      if (ch < 0 || static_cast<size_t>(ch) >= id) {
        return InvalidArgument(fmt::format("grammar expression {} refers to a later or missing child", id));
      }
    }
    if (c.rhs.size() > max_symbols) {
      return ResourceExhausted(fmt::format("reference recognizer: grammar expands past {} symbols", max_symbols));
    }
    switch (e.kind) {
      case ExprKind::kEmpty: c.Add(lhs, {}); break;
      case ExprKind::kNothing: break;
      case ExprKind::kLiteral: {
        std::vector<Sym> syms;
        for (unsigned char ch : e.text) syms.push_back(byte_sym(ch));
        c.Add(lhs, syms);
        break;
      }
      case ExprKind::kByteSet: {
        Terminal t;
        t.bytes = e.bytes;
        if (!t.bytes.Empty()) c.Add(lhs, {c.AddTerminal(std::move(t))});
        break;
      }
      case ExprKind::kCodePoints: {
        Terminal t;
        t.kind = Terminal::kCodePoints;
        t.ranges = e.ranges;
        std::sort(t.ranges.begin(), t.ranges.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
        if (!t.ranges.empty()) c.Add(lhs, {c.AddTerminal(std::move(t))});
        break;
      }
      case ExprKind::kSpecialToken: {
        Terminal t;
        t.kind = Terminal::kSpecial;
        t.token = e.token_id;
        c.Add(lhs, {c.AddTerminal(std::move(t))});
        break;
      }
      case ExprKind::kSeq: {
        std::vector<Sym> syms(e.children.begin(), e.children.end());
        c.Add(lhs, syms);
        break;
      }
      case ExprKind::kAlt:
        for (ExprId ch : e.children) c.Add(lhs, {static_cast<Sym>(ch)});
        break;
      case ExprKind::kRepeat: {
        if (e.children.size() != 1) return InvalidArgument("grammar repeat without exactly one child");
        if (e.max < e.min) break;  // empty language
        const Sym x = static_cast<Sym>(e.children[0]);
        const size_t extra = e.max == kUnbounded ? 2 : 2 * static_cast<size_t>(e.max - e.min);
        if (c.rhs.size() + e.min + extra > max_symbols) {
          return ResourceExhausted(fmt::format("reference recognizer: grammar expands past {} symbols", max_symbols));
        }
        std::vector<Sym> syms(e.min, x);
        if (e.max == kUnbounded) {
          Sym star = c.NewNt();  // star ::= "" | star x   (left recursion: linear in Earley)
          c.Add(star, {});
          c.Add(star, {star, x});
          syms.push_back(star);
        } else if (e.max > e.min) {
          Sym tail = c.NewNt();  // tail_0 ::= "" ; tail_k ::= "" | x tail_{k-1}
          c.Add(tail, {});
          for (uint32_t k = e.min; k < e.max; ++k) {
            Sym next = c.NewNt();
            c.Add(next, {});
            c.Add(next, {x, tail});
            tail = next;
          }
          syms.push_back(tail);
        }
        c.Add(lhs, syms);
        break;
      }
      case ExprKind::kRuleRef:
        if (e.rule < 0 || static_cast<size_t>(e.rule) >= nr) return InvalidArgument("grammar refers to a missing rule");
        c.Add(lhs, {rule_nt(e.rule)});
        break;
    }
  }
  c.start = c.NewNt();
  c.Add(c.start, {rule_nt(g.root)});

  // Productive nonterminals (fixpoint), then drop every production using an unproductive one.
  std::vector<bool> productive(c.num_nt, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (const Production& p : c.prods) {
      if (productive[static_cast<size_t>(p.lhs)]) continue;
      bool all = true;
      for (uint32_t i = 0; i < p.size && all; ++i) {
        Sym s = c.rhs[p.begin + i];
        all = s < 0 || productive[static_cast<size_t>(s)];
      }
      if (all) {
        productive[static_cast<size_t>(p.lhs)] = true;
        changed = true;
      }
    }
  }
  std::vector<Production> kept;
  for (const Production& p : c.prods) {
    bool all = productive[static_cast<size_t>(p.lhs)];
    for (uint32_t i = 0; i < p.size && all; ++i) {
      Sym s = c.rhs[p.begin + i];
      all = s < 0 || productive[static_cast<size_t>(s)];
    }
    if (all) kept.push_back(p);
  }
  c.prods = std::move(kept);
  c.empty_language = !productive[static_cast<size_t>(c.start)];

  c.by_lhs.assign(c.num_nt, {});
  for (uint32_t i = 0; i < c.prods.size(); ++i) {
    c.by_lhs[static_cast<size_t>(c.prods[i].lhs)].push_back(i);
    if (c.prods[i].lhs == c.start) c.start_prod = i;
  }
  c.nullable.assign(c.num_nt, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (const Production& p : c.prods) {
      if (c.nullable[static_cast<size_t>(p.lhs)]) continue;
      bool all = true;
      for (uint32_t i = 0; i < p.size && all; ++i) {
        Sym s = c.rhs[p.begin + i];
        all = s >= 0 && c.nullable[static_cast<size_t>(s)];
      }
      if (all) {
        c.nullable[static_cast<size_t>(p.lhs)] = true;
        changed = true;
      }
    }
  }
  return ReferenceRecognizer(std::move(cfg));
}

ReferenceRecognizer::ReferenceRecognizer(std::unique_ptr<Cfg> cfg) : cfg_(std::move(cfg)) {}
ReferenceRecognizer::ReferenceRecognizer(ReferenceRecognizer&&) noexcept = default;
ReferenceRecognizer& ReferenceRecognizer::operator=(ReferenceRecognizer&&) noexcept = default;
ReferenceRecognizer::~ReferenceRecognizer() = default;

bool ReferenceRecognizer::Run(std::span<const Symbol> in, bool prefix) const {
  const Cfg& c = *cfg_;
  if (c.empty_language) return false;
  const size_t n = in.size();
  std::vector<std::vector<Item>> sets(n + 1);
  // Per set: nonterminal -> indices of items in that set waiting on it (for completion).
  std::vector<std::unordered_map<Sym, std::vector<uint32_t>>> waiting(n + 1);
  // Dedup only for sets still being filled (the current one and up to 3 ahead via UTF-8 scans).
  std::vector<std::unordered_set<Item, ItemHash>> seen(n + 1);
  bool partial_ok = false;
  size_t furthest = 0;

  auto add = [&](size_t pos, Item it) {
    if (!seen[pos].insert(it).second) return;
    sets[pos].push_back(it);
    furthest = std::max(furthest, pos);
  };
  add(0, Item{c.start_prod, 0, 0});

  for (size_t i = 0; i <= n; ++i) {
    if (sets[i].empty()) {
      if (furthest < i) return prefix && partial_ok;  // nothing alive anywhere ahead
      continue;
    }
    std::vector<Item>& set = sets[i];
    for (size_t k = 0; k < set.size(); ++k) {
      const Item it = set[k];
      if (c.Done(it)) {
        const Sym lhs = c.prods[it.prod].lhs;
        auto w = waiting[it.origin].find(lhs);
        if (w == waiting[it.origin].end()) continue;
        if (it.origin == i) {
          // `add` may grow the very list we iterate: go by index over a snapshot length.
          for (size_t q = 0; q < w->second.size(); ++q) {
            Item p = sets[i][w->second[q]];
            add(i, Item{p.prod, p.dot + 1, p.origin});
          }
        } else {
          for (uint32_t j : w->second) {
            Item p = sets[it.origin][j];
            add(i, Item{p.prod, p.dot + 1, p.origin});
          }
        }
        continue;
      }
      const Sym s = c.At(it);
      if (s >= 0) {
        waiting[i][s].push_back(static_cast<uint32_t>(k));
        for (uint32_t p : c.by_lhs[static_cast<size_t>(s)]) add(i, Item{p, 0, static_cast<uint32_t>(i)});
        if (c.nullable[static_cast<size_t>(s)]) add(i, Item{it.prod, it.dot + 1, it.origin});
        continue;
      }
      if (i == n) continue;
      const Terminal& t = c.Term(s);
      const Symbol x = in[i];
      const Item next{it.prod, it.dot + 1, it.origin};
      switch (t.kind) {
        case Terminal::kSpecial:
          if (x.special && x.value == t.token) add(i + 1, next);
          break;
        case Terminal::kBytes:
          if (!x.special && x.value < 256 && t.bytes.Has(static_cast<uint8_t>(x.value))) add(i + 1, next);
          break;
        case Terminal::kCodePoints: {
          if (x.special || x.value >= 256) break;
          const int len = Utf8Length(static_cast<uint8_t>(x.value));
          if (len == 0) break;
          static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
          static constexpr uint32_t kMax[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
          static constexpr uint32_t kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
          uint32_t cp = x.value & kLeadMask[len];
          int have = 1;
          bool valid = true;
          for (; have < len && i + have < n; ++have) {
            const Symbol y = in[i + have];
            if (y.special || y.value < 0x80 || y.value > 0xBF) {
              valid = false;
              break;
            }
            cp = (cp << 6) | (y.value & 0x3F);
          }
          if (!valid) break;
          if (have == len) {
            if (cp >= kMin[len] && cp <= kMax[len] && (cp < 0xD800 || cp > 0xDFFF) && InRanges(cp, t.ranges)) {
              add(i + static_cast<size_t>(len), next);
            }
          } else if (prefix) {
            // Input ends inside the sequence: can some completion land in the class?
            const int missing = len - have;
            uint32_t lo = cp << (6 * missing), hi = lo | ((1u << (6 * missing)) - 1);
            lo = std::max(lo, kMin[len]);
            hi = std::min(hi, kMax[len]);
            if (lo <= hi && IntervalHitsRanges(lo, hi, t.ranges)) partial_ok = true;
          }
          break;
        }
      }
    }
    seen[i] = {};
  }
  if (prefix) return partial_ok || !sets[n].empty();
  for (const Item& it : sets[n]) {
    if (it.prod == c.start_prod && c.Done(it) && it.origin == 0) return true;
  }
  return false;
}

bool ReferenceRecognizer::Matches(std::span<const Symbol> input) const { return Run(input, false); }
bool ReferenceRecognizer::IsPrefix(std::span<const Symbol> input) const { return Run(input, true); }
bool ReferenceRecognizer::Matches(std::string_view bytes) const { return Matches(BytesToSymbols(bytes)); }
bool ReferenceRecognizer::IsPrefix(std::string_view bytes) const { return IsPrefix(BytesToSymbols(bytes)); }

std::vector<Symbol> BytesToSymbols(std::string_view bytes) {
  std::vector<Symbol> out;
  out.reserve(bytes.size());
  for (unsigned char b : bytes) out.push_back(ByteSymbol(b));
  return out;
}

namespace {
template <typename In>
bool RunOnce(const Grammar& g, In input, Status* error, bool prefix) {
  auto r = ReferenceRecognizer::Create(g);
  if (!r.ok()) {
    if (error) *error = r.status();
    return false;
  }
  if (error) *error = Status::Ok();
  return prefix ? r->IsPrefix(input) : r->Matches(input);
}
}  // namespace

bool ReferenceMatches(const Grammar& g, std::span<const Symbol> input, Status* error) {
  return RunOnce(g, input, error, false);
}
bool ReferenceMatches(const Grammar& g, std::string_view bytes, Status* error) {
  return RunOnce(g, bytes, error, false);
}
bool ReferenceIsPrefix(const Grammar& g, std::span<const Symbol> input, Status* error) {
  return RunOnce(g, input, error, true);
}
bool ReferenceIsPrefix(const Grammar& g, std::string_view bytes, Status* error) {
  return RunOnce(g, bytes, error, true);
}

std::optional<std::vector<Symbol>> RandomSentence(const Grammar& g, uint64_t seed, size_t soft_length,
                                                  int soft_depth) {
  // height[e]: the least depth of a finite derivation of e (kInf: none). Always following a
  // child of smaller height is what makes the "finish soon" mode terminate, even through
  // rules that reach themselves without consuming anything.
  constexpr uint32_t kInf = UINT32_MAX;
  const size_t ne = g.exprs.size(), nr = g.rules.size();
  if (g.root < 0 || static_cast<size_t>(g.root) >= nr) return std::nullopt;
  std::vector<uint32_t> height(ne, kInf), rule_height(nr, kInf);
  auto valid = [&](ExprId id) { return id >= 0 && static_cast<size_t>(id) < ne; };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < ne; ++i) {
      const Expr& e = g.exprs[i];
      uint32_t h = kInf;
      switch (e.kind) {
        case ExprKind::kEmpty: case ExprKind::kLiteral: case ExprKind::kSpecialToken: h = 1; break;
        case ExprKind::kByteSet: h = e.bytes.Empty() ? kInf : 1; break;
        case ExprKind::kCodePoints: h = e.ranges.empty() ? kInf : 1; break;
        case ExprKind::kNothing: break;
        case ExprKind::kSeq: {
          uint32_t m = 0;
          for (ExprId c : e.children) m = std::max(m, valid(c) ? height[static_cast<size_t>(c)] : kInf);
          h = m == kInf ? kInf : m + 1;
          break;
        }
        case ExprKind::kAlt:
          for (ExprId c : e.children) {
            const uint32_t ch = valid(c) ? height[static_cast<size_t>(c)] : kInf;
            if (ch != kInf) h = std::min(h, ch + 1);
          }
          break;
        case ExprKind::kRepeat: {
          const uint32_t ch = !e.children.empty() && valid(e.children[0]) ? height[static_cast<size_t>(e.children[0])] : kInf;
          if (e.max < e.min) break;
          h = e.min == 0 ? 1 : ch == kInf ? kInf : ch + 1;
          break;
        }
        case ExprKind::kRuleRef:
          if (e.rule >= 0 && static_cast<size_t>(e.rule) < nr && rule_height[static_cast<size_t>(e.rule)] != kInf) {
            h = rule_height[static_cast<size_t>(e.rule)] + 1;
          }
          break;
      }
      if (h < height[i]) {
        height[i] = h;
        changed = true;
      }
    }
    for (size_t r = 0; r < nr; ++r) {
      const ExprId body = g.rules[r].body;
      const uint32_t h = valid(body) ? height[static_cast<size_t>(body)] : kInf;
      if (h < rule_height[r]) {
        rule_height[r] = h;
        changed = true;
      }
    }
  }
  const ExprId root_body = g.rules[static_cast<size_t>(g.root)].body;
  if (!valid(root_body) || height[static_cast<size_t>(root_body)] == kInf) return std::nullopt;

  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  std::vector<Symbol> out;
  auto emit_cp = [&](uint32_t cp) {
    std::string s;
    tokenizer::AppendUtf8(s, cp);
    for (unsigned char b : s) out.push_back(ByteSymbol(b));
  };
  auto gen = [&](auto&& self, ExprId id, int depth) -> void {
    const Expr& e = g.exprs[static_cast<size_t>(id)];
    const bool finish = depth > soft_depth || out.size() > soft_length;
    switch (e.kind) {
      case ExprKind::kEmpty: case ExprKind::kNothing: break;
      case ExprKind::kLiteral:
        for (unsigned char b : e.text) out.push_back(ByteSymbol(b));
        break;
      case ExprKind::kByteSet: {
        const uint64_t n = pick(0, 255);
        for (unsigned k = 0; k < 256; ++k) {
          const auto b = static_cast<uint8_t>((n + k) & 255);
          if (e.bytes.Has(b)) {
            out.push_back(ByteSymbol(b));
            break;
          }
        }
        break;
      }
      case ExprKind::kCodePoints: {
        const CodeRange& r = e.ranges[pick(0, e.ranges.size() - 1)];
        const uint64_t how = pick(0, 3);
        uint32_t cp = how == 0 ? r.lo : how == 1 ? r.hi : static_cast<uint32_t>(pick(r.lo, r.hi));
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = r.lo < 0xD800 ? r.lo : r.hi;  // hand-made IR only
        emit_cp(cp);
        break;
      }
      case ExprKind::kSpecialToken: out.push_back(SpecialSymbol(e.token_id)); break;
      case ExprKind::kSeq:
        for (ExprId c : e.children) self(self, c, depth + 1);
        break;
      case ExprKind::kAlt: {
        // Among finite children: any (normally) or one of the lowest (when finishing).
        const uint32_t here = height[static_cast<size_t>(id)];
        std::vector<ExprId> ok;
        for (ExprId c : e.children) {
          const uint32_t ch = height[static_cast<size_t>(c)];
          if (ch == kInf) continue;
          if (finish && ch + 1 != here) continue;
          ok.push_back(c);
        }
        self(self, ok[pick(0, ok.size() - 1)], depth + 1);
        break;
      }
      case ExprKind::kRepeat: {
        uint64_t n = e.min;
        if (!finish) {
          const uint64_t extra = e.max == kUnbounded ? 3 : std::min<uint64_t>(e.max - e.min, 4);
          n += pick(0, extra);
        }
        if (n > 0 && height[static_cast<size_t>(e.children[0])] == kInf) n = 0;  // min == 0 here
        for (uint64_t k = 0; k < n; ++k) self(self, e.children[0], depth + 1);
        break;
      }
      case ExprKind::kRuleRef: self(self, g.rules[static_cast<size_t>(e.rule)].body, depth + 1); break;
    }
  };
  gen(gen, root_body, 0);
  return out;
}

std::optional<std::string> RandomText(const Grammar& g, uint64_t seed, size_t soft_length, int soft_depth) {
  auto s = RandomSentence(g, seed, soft_length, soft_depth);
  if (!s) return std::nullopt;
  std::string out;
  for (Symbol x : *s) {
    if (x.special) return std::nullopt;
    out += static_cast<char>(x.value);
  }
  return out;
}

}  // namespace ladle::grammar
