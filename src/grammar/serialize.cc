// CompiledGrammar::Serialize / Deserialize: the Grammar IR and the finished automaton as a
// flat little-endian byte string. Mask caches are not included (they rebuild lazily, and the
// process-wide cache usually has them already). Deserialize validates every index so a
// corrupt or hostile blob is an error, never an out-of-bounds read.
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "matcher_impl.h"

namespace ladle::grammar {

namespace {

constexpr char kMagic[8] = {'L', 'A', 'D', 'L', 'E', 'G', 'A', '1'};

class Writer {
 public:
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutStr(std::string_view s) {
    Put<uint64_t>(s.size());
    out_.append(s);
  }
  template <typename T>
  void PutVec(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    Put<uint64_t>(v.size());
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetStr(std::string* s) {
    uint64_t n;
    if (!Get(&n) || n > in_.size() - pos_) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool GetVec(std::vector<T>* v) {
    uint64_t n;
    if (!Get(&n) || n > (in_.size() - pos_) / sizeof(T)) return false;
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), in_.data() + pos_, n * sizeof(T));  // data() may be null when empty
    pos_ += n * sizeof(T);
    return true;
  }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

Status Corrupt(std::string_view what) { return InvalidArgument(fmt::format("compiled grammar is corrupt: {}", what)); }

Status Validate(const Automaton& a, const Grammar& g) {
  const size_t n = a.unit_of.size(), nu = a.unit_rule.size();
  if (a.accepting.size() != n || a.trans_off.size() != n || a.out_bytes.size() != n || a.dist.size() != n ||
      a.call_begin.size() != n + 1 || a.special_begin.size() != n + 1) {
    return Corrupt("state table sizes differ");
  }
  if (a.unit_start.size() != nu || a.class_map.size() != nu || a.num_classes.size() != nu) {
    return Corrupt("unit table sizes differ");
  }
  if (a.start < -1 || a.start >= static_cast<int64_t>(n)) return Corrupt("start state");
  for (size_t u = 0; u < nu; ++u) {
    if (a.unit_rule[u] < 0 || static_cast<size_t>(a.unit_rule[u]) >= g.rules.size()) return Corrupt("unit rule");
    if (a.unit_start[u] < 0 || static_cast<size_t>(a.unit_start[u]) >= n) return Corrupt("unit start");
    if (a.num_classes[u] == 0 || a.num_classes[u] > 256) return Corrupt("class count");
    for (uint8_t c : a.class_map[u]) {
      if (c >= a.num_classes[u]) return Corrupt("class map");
    }
  }
  for (size_t s = 0; s < n; ++s) {
    if (a.unit_of[s] < 0 || static_cast<size_t>(a.unit_of[s]) >= nu) return Corrupt("state unit");
    if (static_cast<uint64_t>(a.trans_off[s]) + a.num_classes[a.unit_of[s]] > a.next.size()) {
      return Corrupt("transition row");
    }
    if (a.call_begin[s] > a.call_begin[s + 1] || a.special_begin[s] > a.special_begin[s + 1]) {
      return Corrupt("edge ranges");
    }
  }
  if (a.call_begin[n] != a.calls.size() || a.special_begin[n] != a.specials.size()) return Corrupt("edge ends");
  for (int32_t t : a.next) {
    if (t < -1 || t >= static_cast<int64_t>(n)) return Corrupt("transition target");
  }
  for (const auto& c : a.calls) {
    if (c.callee < 0 || c.ret < 0 || static_cast<size_t>(c.callee) >= n || static_cast<size_t>(c.ret) >= n) {
      return Corrupt("call target");
    }
  }
  for (const auto& sp : a.specials) {
    if (sp.next < 0 || static_cast<size_t>(sp.next) >= n) return Corrupt("special target");
  }
  for (const auto& l : a.layered) {
    if (l.unit < 0 || static_cast<size_t>(l.unit) >= nu || l.per_layer <= 0 || l.max == 0 || l.min > l.max) {
      return Corrupt("layered unit");
    }
    const size_t end = static_cast<size_t>(l.unit) + 1 < nu ? static_cast<size_t>(a.unit_start[l.unit + 1]) : n;
    if (end < static_cast<size_t>(a.unit_start[l.unit]) ||
        end - a.unit_start[l.unit] != uint64_t{l.max} * static_cast<uint64_t>(l.per_layer) + 1) {
      return Corrupt("layered unit size");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string CompiledGrammar::Serialize() const {
  const Grammar& g = impl_->grammar;
  const Automaton& a = impl_->automaton;
  Writer w;
  w.Put(kMagic);
  w.Put<uint64_t>(impl_->vocab->Fingerprint());
  w.Put<uint64_t>(g.exprs.size());
  for (const Expr& e : g.exprs) {
    w.Put(static_cast<uint8_t>(e.kind));
    w.PutStr(e.text);
    w.Put(e.bytes.bits);
    w.PutVec(e.ranges);
    w.Put(e.token_id);
    w.PutVec(e.children);
    w.Put(e.min);
    w.Put(e.max);
    w.Put(e.rule);
  }
  w.Put<uint64_t>(g.rules.size());
  for (const Rule& r : g.rules) {
    w.PutStr(r.name);
    w.Put(r.body);
  }
  w.Put(g.root);
  w.Put(a.start);
  w.PutVec(a.unit_rule);
  w.PutVec(a.unit_start);
  w.PutVec(a.class_map);
  w.PutVec(a.num_classes);
  w.PutVec(a.unit_of);
  w.PutVec(a.accepting);
  w.PutVec(a.trans_off);
  w.PutVec(a.call_begin);
  w.PutVec(a.special_begin);
  w.PutVec(a.out_bytes);
  w.PutVec(a.dist);
  w.PutVec(a.next);
  w.PutVec(a.calls);
  w.PutVec(a.specials);
  w.PutVec(a.layered);
  return w.Take();
}

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Deserialize(
    std::string_view bytes, std::shared_ptr<const TokenVocabulary> vocab) {
  if (!vocab) return InvalidArgument("CompiledGrammar::Deserialize: no vocabulary");
  Reader r(bytes);
  char magic[8];
  if (!r.Get(&magic) || std::memcmp(magic, kMagic, 8) != 0) return Corrupt("bad magic");
  uint64_t fp = 0;
  if (!r.Get(&fp)) return Corrupt("truncated");
  if (fp != vocab->Fingerprint()) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("compiled grammar was built for vocabulary {:016x}, not {:016x}", fp,
                              vocab->Fingerprint()));
  }
  auto impl = std::make_unique<Impl>();
  Grammar& g = impl->grammar;
  uint64_t ne = 0;
  if (!r.Get(&ne) || ne > bytes.size()) return Corrupt("expression count");
  g.exprs.resize(ne);
  for (Expr& e : g.exprs) {
    uint8_t kind;
    if (!r.Get(&kind) || kind > static_cast<uint8_t>(ExprKind::kRuleRef) || !r.GetStr(&e.text) ||
        !r.Get(&e.bytes.bits) || !r.GetVec(&e.ranges) || !r.Get(&e.token_id) || !r.GetVec(&e.children) ||
        !r.Get(&e.min) || !r.Get(&e.max) || !r.Get(&e.rule)) {
      return Corrupt("truncated expression");
    }
    e.kind = static_cast<ExprKind>(kind);
  }
  uint64_t nr = 0;
  if (!r.Get(&nr) || nr > bytes.size()) return Corrupt("rule count");
  g.rules.resize(nr);
  for (Rule& rule : g.rules) {
    if (!r.GetStr(&rule.name) || !r.Get(&rule.body)) return Corrupt("truncated rule");
    if (rule.body < 0 || static_cast<uint64_t>(rule.body) >= ne) return Corrupt("rule body");
  }
  if (!r.Get(&g.root) || g.root < 0 || static_cast<uint64_t>(g.root) >= nr) return Corrupt("root");
  for (const Expr& e : g.exprs) {
    for (ExprId c : e.children) {
      if (c < 0 || static_cast<uint64_t>(c) >= ne) return Corrupt("expression child");
    }
    if (e.kind == ExprKind::kRuleRef && (e.rule < 0 || static_cast<uint64_t>(e.rule) >= nr)) {
      return Corrupt("rule reference");
    }
  }
  Automaton& a = impl->automaton;
  if (!r.Get(&a.start) || !r.GetVec(&a.unit_rule) || !r.GetVec(&a.unit_start) || !r.GetVec(&a.class_map) ||
      !r.GetVec(&a.num_classes) || !r.GetVec(&a.unit_of) || !r.GetVec(&a.accepting) || !r.GetVec(&a.trans_off) ||
      !r.GetVec(&a.call_begin) || !r.GetVec(&a.special_begin) || !r.GetVec(&a.out_bytes) || !r.GetVec(&a.dist) ||
      !r.GetVec(&a.next) || !r.GetVec(&a.calls) || !r.GetVec(&a.specials) || !r.GetVec(&a.layered) || !r.AtEnd()) {
    return Corrupt("truncated automaton");
  }
  LADLE_RETURN_IF_ERROR(Validate(a, g));
  impl->vocab = std::move(vocab);
  return FinishCompiled(std::move(impl), false);
}

}  // namespace ladle::grammar
