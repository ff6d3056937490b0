// GrammarBuilder and Grammar::ToString (grammar.h).
#include <algorithm>

#include <fmt/format.h>

#include "ladle/grammar/grammar.h"

namespace ladle::grammar {

namespace {

constexpr uint32_t kMaxScalar = 0x10FFFF;

std::vector<CodeRange> Normalise(std::vector<CodeRange> r) {
  std::vector<CodeRange> split;
  split.reserve(r.size() + 1);
  for (CodeRange c : r) {
    if (c.lo > c.hi) continue;
    c.hi = std::min(c.hi, kMaxScalar);
    if (c.lo > kMaxScalar) continue;
    // Surrogates are not scalar values: UTF-8 cannot encode them.
    if (c.lo < 0xD800 && c.hi >= 0xD800) {
      if (c.hi > 0xDFFF) split.push_back({0xE000, c.hi});
      c.hi = 0xD7FF;
    } else if (c.lo >= 0xD800 && c.lo <= 0xDFFF) {
      if (c.hi <= 0xDFFF) continue;
      c.lo = 0xE000;
    }
    split.push_back(c);
  }
  std::sort(split.begin(), split.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
  std::vector<CodeRange> out;
  for (CodeRange c : split) {
    if (!out.empty() && c.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, c.hi);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<CodeRange> Complement(const std::vector<CodeRange>& r) {
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (CodeRange c : r) {
    if (c.lo > next) out.push_back({next, c.lo - 1});
    next = c.hi + 1;
  }
  if (next <= kMaxScalar) out.push_back({next, kMaxScalar});
  return Normalise(std::move(out));
}

std::string EscapeLiteral(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string CodePointText(uint32_t cp) {
  if (cp >= 0x21 && cp < 0x7F && cp != ']' && cp != '\\' && cp != '-' && cp != '^') {
    return std::string(1, static_cast<char>(cp));
  }
  return cp <= 0xFFFF ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp);
}

}  // namespace

ExprId GrammarBuilder::Push(Expr e) {
  g_.exprs.push_back(std::move(e));
  return static_cast<ExprId>(g_.exprs.size() - 1);
}

ExprId GrammarBuilder::Empty() { return Push(Expr{.kind = ExprKind::kEmpty}); }
ExprId GrammarBuilder::Nothing() { return Push(Expr{.kind = ExprKind::kNothing}); }

ExprId GrammarBuilder::Literal(std::string_view bytes) {
  if (bytes.empty()) return Empty();
  Expr e{.kind = ExprKind::kLiteral};
  e.text = std::string(bytes);
  return Push(std::move(e));
}

ExprId GrammarBuilder::Bytes(const ByteSet& set) {
  if (set.Empty()) return Nothing();
  Expr e{.kind = ExprKind::kByteSet};
  e.bytes = set;
  return Push(std::move(e));
}

ExprId GrammarBuilder::ByteRange(uint8_t lo, uint8_t hi) {
  ByteSet s;
  if (lo <= hi) s.SetRange(lo, hi);
  return Bytes(s);
}

ExprId GrammarBuilder::CodePoints(std::vector<CodeRange> ranges, bool negate) {
  std::vector<CodeRange> r = Normalise(std::move(ranges));
  if (negate) r = Complement(r);
  if (r.empty()) return Nothing();
  Expr e{.kind = ExprKind::kCodePoints};
  e.ranges = std::move(r);
  return Push(std::move(e));
}

ExprId GrammarBuilder::AnyCodePoint() { return CodePoints({{0, kMaxScalar}}); }

ExprId GrammarBuilder::SpecialToken(uint32_t token_id) {
  Expr e{.kind = ExprKind::kSpecialToken};
  e.token_id = token_id;
  return Push(std::move(e));
}

ExprId GrammarBuilder::Seq(std::vector<ExprId> parts) {
  std::vector<ExprId> flat;
  for (ExprId p : parts) {
    const Expr& e = expr(p);
    if (e.kind == ExprKind::kEmpty) continue;
    if (e.kind == ExprKind::kNothing) return Nothing();
    if (e.kind == ExprKind::kSeq) {
      flat.insert(flat.end(), e.children.begin(), e.children.end());
    } else {
      flat.push_back(p);
    }
  }
  if (flat.empty()) return Empty();
  if (flat.size() == 1) return flat[0];
  Expr e{.kind = ExprKind::kSeq};
  e.children = std::move(flat);
  return Push(std::move(e));
}

ExprId GrammarBuilder::SeqThen(std::vector<ExprId> parts, ExprId rest) {
  ExprId head = Seq(std::move(parts));
  const Expr& r = expr(rest);
  if (r.kind == ExprKind::kEmpty) return head;
  const Expr& h = expr(head);
  if (h.kind == ExprKind::kNothing || r.kind == ExprKind::kNothing) return Nothing();
  if (h.kind == ExprKind::kEmpty) return rest;
  Expr e{.kind = ExprKind::kSeq};
  if (h.kind == ExprKind::kSeq) e.children = h.children;
  else e.children.push_back(head);
  e.children.push_back(rest);
  return Push(std::move(e));
}

ExprId GrammarBuilder::Alt(std::vector<ExprId> alternatives) {
  std::vector<ExprId> flat;
  for (ExprId p : alternatives) {
    const Expr& e = expr(p);
    if (e.kind == ExprKind::kNothing) continue;
    if (e.kind == ExprKind::kAlt) {
      flat.insert(flat.end(), e.children.begin(), e.children.end());
    } else {
      flat.push_back(p);
    }
  }
  if (flat.empty()) return Nothing();
  if (flat.size() == 1) return flat[0];
  Expr e{.kind = ExprKind::kAlt};
  e.children = std::move(flat);
  return Push(std::move(e));
}

ExprId GrammarBuilder::Repeat(ExprId x, uint32_t min, uint32_t max) {
  if (max < min) return Nothing();
  if (max == 0) return Empty();
  if (min == 1 && max == 1) return x;
  const Expr& e = expr(x);
  if (e.kind == ExprKind::kEmpty) return x;
  if (e.kind == ExprKind::kNothing) return min == 0 ? Empty() : x;
  Expr r{.kind = ExprKind::kRepeat};
  r.children = {x};
  r.min = min;
  r.max = max;
  return Push(std::move(r));
}

RuleId GrammarBuilder::DeclareRule(std::string name) {
  g_.rules.push_back(Rule{std::move(name), -1});
  return static_cast<RuleId>(g_.rules.size() - 1);
}

void GrammarBuilder::DefineRule(RuleId rule, ExprId body) { g_.rules[static_cast<size_t>(rule)].body = body; }

RuleId GrammarBuilder::AddRule(std::string name, ExprId body) {
  RuleId r = DeclareRule(std::move(name));
  DefineRule(r, body);
  return r;
}

ExprId GrammarBuilder::Ref(RuleId rule) {
  Expr e{.kind = ExprKind::kRuleRef};
  e.rule = rule;
  return Push(std::move(e));
}

std::optional<RuleId> GrammarBuilder::FindRule(std::string_view name) const {
  for (size_t i = 0; i < g_.rules.size(); ++i) {
    if (g_.rules[i].name == name) return static_cast<RuleId>(i);
  }
  return std::nullopt;
}

Result<Grammar> GrammarBuilder::Build(RuleId root) {
  const auto nexpr = static_cast<ExprId>(g_.exprs.size());
  const auto nrule = static_cast<RuleId>(g_.rules.size());
  if (root < 0 || root >= nrule) return InvalidArgument(fmt::format("grammar root rule {} does not exist", root));
  for (const Rule& r : g_.rules) {
    if (r.body < 0 || r.body >= nexpr) return InvalidArgument(fmt::format("grammar rule '{}' is not defined", r.name));
  }
  for (const Expr& e : g_.exprs) {
    for (ExprId c : e.children) {
      if (c < 0 || c >= nexpr) return Internal("grammar expression refers to a missing child");
    }
    if (e.kind == ExprKind::kRuleRef && (e.rule < 0 || e.rule >= nrule)) {
      return Internal("grammar expression refers to a missing rule");
    }
  }
  g_.root = root;
  Grammar out = std::move(g_);
  g_ = Grammar{};
  return out;
}

std::string Grammar::ToString() const {
  // Prints each expression inline; rule references print the rule's name.
  auto print = [&](auto&& self, ExprId id, std::string& out) -> void {
    const Expr& e = exprs[static_cast<size_t>(id)];
    switch (e.kind) {
      case ExprKind::kEmpty: out += "\"\""; break;
      case ExprKind::kNothing: out += "[]"; break;
      case ExprKind::kLiteral: out += "\"" + EscapeLiteral(e.text) + "\""; break;
      case ExprKind::kByteSet: {
        out += "<bytes ";
        for (int b = 0; b < 256; ++b) {
          if (!e.bytes.Has(static_cast<uint8_t>(b))) continue;
          int hi = b;
          while (hi + 1 < 256 && e.bytes.Has(static_cast<uint8_t>(hi + 1))) ++hi;
          out += hi == b ? fmt::format("{:02X} ", b) : fmt::format("{:02X}-{:02X} ", b, hi);
          b = hi;
        }
        out.back() = '>';
        break;
      }
      case ExprKind::kCodePoints:
        out += "[";
        for (CodeRange r : e.ranges) {
          out += CodePointText(r.lo);
          if (r.hi != r.lo) out += "-" + CodePointText(r.hi);
        }
        out += "]";
        break;
      case ExprKind::kSpecialToken: out += fmt::format("<[{}]>", e.token_id); break;
      case ExprKind::kSeq:
      case ExprKind::kAlt: {
        out += "(";
        for (size_t i = 0; i < e.children.size(); ++i) {
          if (i) out += e.kind == ExprKind::kSeq ? " " : " | ";
          self(self, e.children[i], out);
        }
        out += ")";
        break;
      }
      case ExprKind::kRepeat:
        self(self, e.children[0], out);
        if (e.max == kUnbounded) {
          out += fmt::format("{{{},}}", e.min);
        } else {
          out += fmt::format("{{{},{}}}", e.min, e.max);
        }
        break;
      case ExprKind::kRuleRef: out += rules[static_cast<size_t>(e.rule)].name; break;
    }
  };
  std::string out;
  // Root first, then the rest in declaration order.
  std::vector<size_t> order{static_cast<size_t>(root)};
  for (size_t i = 0; i < rules.size(); ++i) {
    if (i != static_cast<size_t>(root)) order.push_back(i);
  }
  for (size_t i : order) {
    out += rules[i].name + " ::= ";
    print(print, rules[i].body, out);
    out += "\n";
  }
  return out;
}

}  // namespace ladle::grammar
