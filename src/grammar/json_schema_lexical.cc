// Lexical grammars of the JSON Schema compiler: JSON strings, numbers with exact decimal
// bounds (digit-by-digit range grammars), multipleOf automata, `format`s, and the rewrite of a
// decoded-text grammar (a `pattern`) into JSON string content.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "json_schema_internal.h"

namespace ladle::grammar::schema_internal {

namespace {

bool AllChar(std::string_view s, char c) {
  return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; });
}

std::string StripLeadingZeros(std::string s) {
  size_t i = 0;
  while (i + 1 < s.size() && s[i] == '0') ++i;
  s.erase(0, i);
  return s.empty() ? "0" : s;
}

int CompareInt(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

std::string Increment(std::string s) {
  int i = static_cast<int>(s.size()) - 1;
  while (i >= 0 && s[static_cast<size_t>(i)] == '9') s[static_cast<size_t>(i--)] = '0';
  if (i < 0) return "1" + s;
  ++s[static_cast<size_t>(i)];
  return s;
}

// s > 0.
std::string Decrement(std::string s) {
  int i = static_cast<int>(s.size()) - 1;
  while (i >= 0 && s[static_cast<size_t>(i)] == '0') s[static_cast<size_t>(i--)] = '9';
  --s[static_cast<size_t>(i)];
  return StripLeadingZeros(s);
}

enum FracKind { kGe = 0, kLe = 1, kBetween = 2 };

}  // namespace

std::optional<Decimal> ParseDecimal(std::string_view t) {
  Decimal d;
  size_t i = 0;
  if (i < t.size() && t[i] == '-') {
    d.negative = true;
    ++i;
  }
  std::string digits;
  long point = -1;
  for (; i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.'); ++i) {
    if (t[i] == '.') {
      if (point >= 0) return std::nullopt;
      point = static_cast<long>(digits.size());
    } else {
      digits += t[i];
    }
  }
  if (digits.empty()) return std::nullopt;
  if (point < 0) point = static_cast<long>(digits.size());
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
    long e = 0;
    if (i == t.size()) return std::nullopt;
    for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
      e = e * 10 + (t[i] - '0');
      if (e > 1000) return std::nullopt;
    }
    point += neg ? -e : e;
  }
  if (i != t.size()) return std::nullopt;
  if (point < 0) {
    digits.insert(0, static_cast<size_t>(-point), '0');
    point = 0;
  }
  if (point > static_cast<long>(digits.size())) digits.append(static_cast<size_t>(point) - digits.size(), '0');
  d.int_digits = StripLeadingZeros(digits.substr(0, static_cast<size_t>(point)));
  d.frac_digits = digits.substr(static_cast<size_t>(point));
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.IsZero()) d.negative = false;
  return d;
}

int CompareDecimal(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int mag = CompareInt(a.int_digits, b.int_digits);
  if (mag == 0) {
    size_t n = std::max(a.frac_digits.size(), b.frac_digits.size());
    std::string fa = a.frac_digits, fb = b.frac_digits;
    fa.resize(n, '0');
    fb.resize(n, '0');
    mag = fa.compare(fb) < 0 ? -1 : (fa == fb ? 0 : 1);
  }
  return a.negative ? -mag : mag;
}

std::string DecimalText(const Decimal& d) {
  return (d.negative ? "-" : "") + d.int_digits + (d.frac_digits.empty() ? "" : "." + d.frac_digits);
}

ExprId Lexical::Cached(ExprId* slot, const char* name, ExprId body) {
  if (*slot < 0) *slot = b_.Ref(b_.AddRule(name, body));
  return *slot;
}

ExprId Lexical::Digits(uint32_t min, uint32_t max) {
  if (digit_ < 0) digit_ = b_.ByteRange('0', '9');
  return b_.Repeat(digit_, min, max);
}

ExprId Lexical::Hex(uint32_t n) {
  ByteSet h;
  h.SetRange('0', '9');
  h.SetRange('a', 'f');
  h.SetRange('A', 'F');
  return b_.Repeat(b_.Bytes(h), n, n);
}

ExprId Lexical::StringChar() {
  if (char_ >= 0) return char_;
  auto& b = b_;
  ExprId plain = b.CodePoints({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
  ByteSet simple;
  for (char c : std::string_view("\"\\/bfnrt")) simple.Set(static_cast<uint8_t>(c));
  ByteSet not_d;
  not_d.SetRange('0', '9');
  not_d.SetRange('a', 'c');
  not_d.SetRange('A', 'C');
  not_d.SetRange('e', 'f');
  not_d.SetRange('E', 'F');
  ByteSet d;
  d.Set('d');
  d.Set('D');
  ByteSet high, low;
  for (char c : std::string_view("89abAB")) high.Set(static_cast<uint8_t>(c));
  for (char c : std::string_view("cdefCDEF")) low.Set(static_cast<uint8_t>(c));
  // A surrogate pair is one code point, so it is one character for minLength/maxLength; a
  // lone surrogate is not a character at all.
  ExprId bmp = b.Alt({b.Seq({b.Bytes(not_d), Hex(3)}), b.Seq({b.Bytes(d), b.ByteRange('0', '7'), Hex(2)})});
  ExprId pair = b.Seq({b.Bytes(d), b.Bytes(high), Hex(2), b.Literal("\\u"), b.Bytes(d), b.Bytes(low), Hex(2)});
  uesc_ = b.Alt({bmp, pair});
  esc_ = b.Seq({b.Literal("\\"), b.Alt({b.Bytes(simple), b.Seq({b.Literal("u"), uesc_})})});
  return Cached(&char_, "char", b.Alt({plain, esc_}));
}

ExprId Lexical::UnicodeEscapeBody() {
  StringChar();
  return uesc_;
}

ExprId Lexical::Escape() {
  StringChar();
  return esc_;
}

ExprId Lexical::AnyString() {
  if (string_ >= 0) return string_;
  ExprId c = StringChar();
  return Cached(&string_, "string", b_.Seq({b_.Literal("\""), b_.Star(c), b_.Literal("\"")}));
}

ExprId Lexical::AnyNumber() {
  if (number_ >= 0) return number_;
  auto& b = b_;
  ByteSet e, pm;
  e.Set('e');
  e.Set('E');
  pm.Set('+');
  pm.Set('-');
  ExprId intpart = b.Alt({b.Literal("0"), b.Seq({b.ByteRange('1', '9'), Digits(0, kUnbounded)})});
  ExprId body = b.Seq({b.Optional(b.Literal("-")), intpart, b.Optional(b.Seq({b.Literal("."), Digits(1, kUnbounded)})),
                       b.Optional(b.Seq({b.Bytes(e), b.Optional(b.Bytes(pm)), Digits(1, kUnbounded)}))});
  return Cached(&number_, "number", body);
}

ExprId Lexical::IntegralTail() {
  if (!integral_fraction) return b_.Empty();
  return b_.Optional(b_.Seq({b_.Literal("."), b_.Plus(b_.Literal("0"))}));
}

ExprId Lexical::AnyInteger() {
  if (integer_ >= 0) return integer_;
  auto& b = b_;
  ExprId intpart = b.Alt({b.Literal("0"), b.Seq({b.ByteRange('1', '9'), Digits(0, kUnbounded)})});
  ExprId body = b.Seq({b.Optional(b.Literal("-")), intpart, IntegralTail()});
  return Cached(&integer_, "integer", body);
}

// Canonical integers (no leading zeros) of one length in [lo, hi].
ExprId Lexical::SameLength(const std::string& lo, const std::string& hi) {
  auto& b = b_;
  if (lo.empty()) return b.Empty();
  if (lo == hi) return b.Literal(lo);
  size_t k = lo.size() - 1;
  std::string lr = lo.substr(1), hr = hi.substr(1);
  if (AllChar(lr, '0') && AllChar(hr, '9')) {
    return b.Seq({b.ByteRange(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0])), Digits(static_cast<uint32_t>(k), static_cast<uint32_t>(k))});
  }
  if (lo[0] == hi[0]) return b.Seq({b.Literal(lo.substr(0, 1)), SameLength(lr, hr)});
  std::vector<ExprId> alts;
  alts.push_back(b.Seq({b.Literal(lo.substr(0, 1)), SameLength(lr, std::string(k, '9'))}));
  if (hi[0] - lo[0] > 1) {
    alts.push_back(b.Seq({b.ByteRange(static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1)),
                          Digits(static_cast<uint32_t>(k), static_cast<uint32_t>(k))}));
  }
  alts.push_back(b.Seq({b.Literal(hi.substr(0, 1)), SameLength(std::string(k, '0'), hr)}));
  return b.Alt(std::move(alts));
}

// Canonical non-negative integers in [lo, hi] (hi absent = unbounded).
ExprId Lexical::IntRange(const std::string& lo, const std::optional<std::string>& hi) {
  auto& b = b_;
  if (hi && CompareInt(lo, *hi) > 0) return b.Nothing();
  std::vector<ExprId> alts;
  size_t last = hi ? hi->size() : lo.size();
  for (size_t k = lo.size(); k <= last; ++k) {
    std::string a = k == lo.size() ? lo : "1" + std::string(k - 1, '0');
    std::string z = (hi && k == hi->size()) ? *hi : std::string(k, '9');
    alts.push_back(SameLength(a, z));
  }
  if (!hi) {
    alts.push_back(b.Seq({b.ByteRange('1', '9'), Digits(static_cast<uint32_t>(lo.size()), kUnbounded)}));
  }
  return b.Alt(std::move(alts));
}

// Digit strings d (after the point) with 0.d meeting the bound(s); `any_empty` admits the
// empty string when the value 0.0 itself qualifies. kGe uses (s, ss), kLe uses (t, ts).
ExprId Lexical::FracTail(int kind, const std::string& s, bool ss, const std::string& t, bool ts, bool with_point,
                         uint32_t places) {
  bool zero_ok = true;
  if (kind != kLe) zero_ok = zero_ok && s.empty() && !ss;
  if (kind != kGe) zero_ok = zero_ok && !(t.empty() && ts);
  ExprId ne = FracNe(kind, s, ss, t, ts, places);
  if (with_point) ne = b_.Seq({b_.Literal("."), ne});
  return zero_ok ? b_.Optional(ne) : ne;
}

ExprId Lexical::FracNe(int kind, const std::string& s, bool ss, const std::string& t, bool ts, uint32_t places) {
  auto& b = b_;
  // `places`: how many more digits may be non-zero (multipleOf 10^-k); the rest are zeros.
  if (places == 0) {
    bool zero_ok = (kind == kLe || (s.empty() && !ss)) && (kind == kGe || !(t.empty() && ts));
    return zero_ok ? b.Plus(b.Literal("0")) : b.Nothing();
  }
  const uint32_t next = places == kUnbounded ? kUnbounded : places - 1;
  auto rest_any = [&] {
    return next == kUnbounded ? Digits(0, kUnbounded) : b.Seq({Digits(0, next), b.Star(b.Literal("0"))});
  };
  auto digit = [&](int d) { return b.Literal(std::string(1, static_cast<char>('0' + d))); };
  auto range = [&](int lo, int hi) { return b.ByteRange(static_cast<uint8_t>('0' + lo), static_cast<uint8_t>('0' + hi)); };
  if (kind == kGe) {
    if (s.empty()) {
      if (places == kUnbounded) return ss ? b.Seq({b.Star(b.Literal("0")), range(1, 9), rest_any()}) : Digits(1, kUnbounded);
      if (!ss) return b.Seq({Digits(1, places), b.Star(b.Literal("0"))});
      return b.Alt({b.Seq({range(1, 9), rest_any()}), b.Seq({digit(0), FracNe(kGe, "", true, "", false, next)})});
    }
    int s0 = s[0] - '0';
    std::vector<ExprId> alts;
    if (s0 < 9) alts.push_back(b.Seq({range(s0 + 1, 9), rest_any()}));
    alts.push_back(b.Seq({digit(s0), FracTail(kGe, s.substr(1), ss, "", false, false, next)}));
    return b.Alt(std::move(alts));
  }
  if (kind == kLe) {
    if (t.empty()) return ts ? b.Nothing() : b.Plus(b.Literal("0"));
    int t0 = t[0] - '0';
    std::vector<ExprId> alts;
    if (t0 > 0) alts.push_back(b.Seq({range(0, t0 - 1), rest_any()}));
    alts.push_back(b.Seq({digit(t0), FracTail(kLe, "", false, t.substr(1), ts, false, next)}));
    return b.Alt(std::move(alts));
  }
  // Between: requires 0.s <= 0.t.
  if (t.empty()) return (ts || !s.empty() || ss) ? b.Nothing() : b.Plus(b.Literal("0"));
  if (s.empty() && !ss) return FracNe(kLe, s, ss, t, ts, places);
  int t0 = t[0] - '0';
  if (s.empty()) {  // strictly above zero
    if (t0 == 0) return b.Seq({digit(0), FracTail(kBetween, "", true, t.substr(1), ts, false, next)});
    std::vector<ExprId> alts;
    alts.push_back(b.Seq({digit(0), FracNe(kGe, "", true, "", false, next)}));
    if (t0 > 1) alts.push_back(b.Seq({range(1, t0 - 1), rest_any()}));
    alts.push_back(b.Seq({digit(t0), FracTail(kLe, "", false, t.substr(1), ts, false, next)}));
    return b.Alt(std::move(alts));
  }
  int s0 = s[0] - '0';
  if (s0 == t0) return b.Seq({digit(s0), FracTail(kBetween, s.substr(1), ss, t.substr(1), ts, false, next)});
  std::vector<ExprId> alts;
  alts.push_back(b.Seq({digit(s0), FracTail(kGe, s.substr(1), ss, "", false, false, next)}));
  if (t0 - s0 > 1) alts.push_back(b.Seq({range(s0 + 1, t0 - 1), rest_any()}));
  alts.push_back(b.Seq({digit(t0), FracTail(kLe, "", false, t.substr(1), ts, false, next)}));
  return b.Alt(std::move(alts));
}

// Non-negative magnitudes (no sign) in [lo, hi].
ExprId Lexical::Magnitude(const Bound& lo, const std::optional<Bound>& hi, bool integer_only) {
  auto& b = b_;
  if (hi) {
    int c = CompareDecimal(lo.value, hi->value);
    if (c > 0 || (c == 0 && (lo.exclusive || hi->exclusive))) return b.Nothing();
  }
  if (integer_only) {
    std::string ilo = lo.value.int_digits;
    if (lo.exclusive || !lo.value.frac_digits.empty()) ilo = Increment(ilo);
    std::optional<std::string> ihi;
    if (hi) {
      ihi = hi->value.int_digits;
      if (hi->exclusive && hi->value.frac_digits.empty()) {
        if (*ihi == "0") return b.Nothing();
        ihi = Decrement(*ihi);
      }
    }
    return b.Seq({IntRange(ilo, ihi), IntegralTail()});
  }
  const uint32_t places = frac_places_;
  ExprId any_frac = b.Optional(b.Seq({b.Literal("."), places == kUnbounded ? Digits(1, kUnbounded)
                                                      : places == 0 ? b.Plus(b.Literal("0"))
                                                                    : b.Seq({Digits(1, places), b.Star(b.Literal("0"))})}));
  const std::string& li = lo.value.int_digits;
  ExprId at_lo = b.Seq({b.Literal(li), FracTail(kGe, lo.value.frac_digits, lo.exclusive, "", false, true, places)});
  if (!hi) return b.Alt({at_lo, b.Seq({IntRange(Increment(li), std::nullopt), any_frac})});
  const std::string& ui = hi->value.int_digits;
  if (li == ui) {
    return b.Seq({b.Literal(li), FracTail(kBetween, lo.value.frac_digits, lo.exclusive, hi->value.frac_digits, hi->exclusive, true, places)});
  }
  std::vector<ExprId> alts{at_lo};
  std::string mid_lo = Increment(li);
  if (CompareInt(mid_lo, ui) < 0) alts.push_back(b.Seq({IntRange(mid_lo, Decrement(ui)), any_frac}));
  alts.push_back(b.Seq({b.Literal(ui), FracTail(kLe, "", false, hi->value.frac_digits, hi->exclusive, true, places)}));
  return b.Alt(std::move(alts));
}

ExprId Lexical::NumberRange(const std::optional<Bound>& lo, const std::optional<Bound>& hi, bool integer_only,
                            uint32_t max_places) {
  auto& b = b_;
  frac_places_ = max_places;
  if (lo && hi) {
    int c = CompareDecimal(lo->value, hi->value);
    if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive))) return b.Nothing();
  }
  auto abs = [](Decimal d) {
    d.negative = false;
    return d;
  };
  std::vector<ExprId> alts;
  // Non-negative spellings (no '-').
  bool hi_pos = !hi || !hi->value.negative;
  if (hi_pos && !(hi && hi->value.IsZero() && hi->exclusive)) {
    Bound nlo = (lo && !lo->value.negative) ? *lo : Bound{};
    alts.push_back(Magnitude(nlo, hi, integer_only));
  }
  // '-' spellings: -y in [lo, hi]  <=>  y in [-hi, -lo]; "-0" counts as zero.
  bool lo_pos = lo && !lo->value.negative && !lo->value.IsZero();
  if (!lo_pos) {
    Bound ylo;
    if (hi && hi->value.IsZero()) ylo.exclusive = hi->exclusive;
    if (hi && hi->value.negative) ylo = Bound{abs(hi->value), hi->exclusive};
    std::optional<Bound> yhi;
    if (lo) yhi = Bound{abs(lo->value), lo->exclusive};
    alts.push_back(b.Seq({b.Literal("-"), Magnitude(ylo, yhi, integer_only)}));
  }
  return b.Alt(std::move(alts));
}

ExprId Lexical::MultipleOf(uint64_t k) {
  auto& b = b_;
  // Right-linear automaton over the remainder of the digits read so far.
  std::vector<RuleId> state(k);
  for (uint64_t r = 0; r < k; ++r) state[r] = b.DeclareRule(fmt::format("multiple_of_{}_r{}", k, r));
  auto step = [&](uint64_t r, int lo_digit) {
    std::map<uint64_t, ByteSet> by_target;
    for (int d = lo_digit; d <= 9; ++d) by_target[(r * 10 + static_cast<uint64_t>(d)) % k].Set(static_cast<uint8_t>('0' + d));
    std::vector<ExprId> alts;
    for (auto& [target, set] : by_target) alts.push_back(b.Seq({b.Bytes(set), b.Ref(state[target])}));
    return alts;
  };
  for (uint64_t r = 0; r < k; ++r) {
    std::vector<ExprId> alts = step(r, 0);
    if (r == 0) alts.push_back(b.Empty());
    b.DefineRule(state[r], b.Alt(std::move(alts)));
  }
  ExprId first = b.Alt(step(0, 1));
  return b.Seq({b.Optional(b.Literal("-")), b.Alt({b.Literal("0"), first}),
                IntegralTail()});
}

std::optional<ExprId> Lexical::FormatContent(std::string_view f, std::string* approx) {
  auto& b = b_;
  approx->clear();
  auto lit = [&](const char* s) { return b.Literal(s); };
  auto r = [&](char lo, char hi) { return b.ByteRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)); };
  auto d = [&](uint32_t n) { return Digits(n, n); };
  auto one_of = [&](std::string_view chars) {
    ByteSet s;
    for (char c : chars) s.Set(static_cast<uint8_t>(c));
    return b.Bytes(s);
  };
  auto full_date = [&] {
    ExprId d31 = b.Alt({b.Seq({lit("0"), r('1', '9')}), b.Seq({r('1', '2'), d(1)}), b.Seq({lit("3"), r('0', '1')})});
    ExprId d30 = b.Alt({b.Seq({lit("0"), r('1', '9')}), b.Seq({r('1', '2'), d(1)}), lit("30")});
    ExprId d28 = b.Alt({b.Seq({lit("0"), r('1', '9')}), b.Seq({lit("1"), d(1)}), b.Seq({lit("2"), r('0', '8')})});
    ExprId m31 = b.Alt({lit("01"), lit("03"), lit("05"), lit("07"), lit("08"), lit("10"), lit("12")});
    ExprId m30 = b.Alt({lit("04"), lit("06"), lit("09"), lit("11")});
    ExprId any_year = b.Seq({d(4), lit("-"), b.Alt({b.Seq({m31, lit("-"), d31}), b.Seq({m30, lit("-"), d30}), b.Seq({lit("02-"), d28})})});
    // Leap years: the last two digits a non-zero multiple of 4, or "00" after a multiple of 4.
    ExprId mult4 = b.Alt({b.Seq({one_of("02468"), one_of("048")}), b.Seq({one_of("13579"), one_of("26")})});
    ExprId mult4_nz = b.Alt({b.Seq({lit("0"), one_of("48")}), b.Seq({one_of("2468"), one_of("048")}), b.Seq({one_of("13579"), one_of("26")})});
    ExprId leap = b.Seq({b.Alt({b.Seq({d(2), mult4_nz}), b.Seq({mult4, lit("00")})}), lit("-02-29")});
    return b.Alt({any_year, leap});
  };
  auto full_time = [&] {
    ExprId hh = b.Alt({b.Seq({r('0', '1'), d(1)}), b.Seq({lit("2"), r('0', '3')})});
    ExprId mm = b.Seq({r('0', '5'), d(1)});
    ExprId hms = b.Alt({b.Seq({hh, lit(":"), mm, lit(":"), mm}), b.Seq({hh, lit(":59:60")})});
    ExprId frac = b.Optional(b.Seq({lit("."), Digits(1, kUnbounded)}));
    ExprId offset = b.Alt({one_of("Zz"), b.Seq({one_of("+-"), hh, lit(":"), mm})});
    return b.Seq({hms, frac, offset});
  };
  // At least `min_labels` dot-separated labels (an email domain needs two, as ajv-formats and
  // every mail system outside a LAN require).
  auto hostname = [&](uint32_t min_labels = 1) {
    ByteSet alnum;
    alnum.SetRange('a', 'z');
    alnum.SetRange('A', 'Z');
    alnum.SetRange('0', '9');
    ByteSet inner = alnum;
    inner.Set('-');
    ExprId label = b.Seq({b.Bytes(alnum), b.Optional(b.Seq({b.Repeat(b.Bytes(inner), 0, 61), b.Bytes(alnum)}))});
    ExprId more = b.Seq({lit("."), label});
    return b.Seq({label, min_labels > 1 ? b.Seq({b.Repeat(more, min_labels - 1, min_labels - 1), b.Star(more)})
                                        : b.Star(more)});
  };
  auto ipv4 = [&] {
    ExprId octet = b.Alt({b.Seq({lit("25"), r('0', '5')}), b.Seq({lit("2"), r('0', '4'), d(1)}), b.Seq({lit("1"), d(2)}),
                          b.Seq({r('1', '9'), d(1)}), d(1)});
    return b.Seq({octet, lit("."), octet, lit("."), octet, lit("."), octet});
  };
  if (f == "date") return full_date();
  if (f == "time" || f == "date-time") {
    *approx = "leap second :60 accepted at minute 59 of any hour (not checked against the UTC offset)";
    if (f == "time") return full_time();
    return b.Seq({full_date(), one_of("Tt"), full_time()});
  }
  if (f == "uuid") return b.Seq({Hex(8), lit("-"), Hex(4), lit("-"), Hex(4), lit("-"), Hex(4), lit("-"), Hex(12)});
  if (f == "ipv4") return ipv4();
  if (f == "ipv6") {
    ExprId h16 = b.Seq({Hex(1), b.Repeat(Hex(1), 0, 3)});
    ExprId h16c = b.Seq({h16, lit(":")});
    ExprId ls32 = b.Alt({b.Seq({h16, lit(":"), h16}), ipv4()});
    // RFC 3986 section 3.2.2: up to `max_left` groups before "::", the rest after it.
    auto left = [&](uint32_t max_left) {
      return max_left == 0 ? b.Empty() : b.Optional(b.Seq({b.Repeat(h16c, 0, max_left - 1), h16}));
    };
    std::vector<ExprId> alts{b.Seq({b.Repeat(h16c, 6, 6), ls32})};
    for (uint32_t right = 0; right <= 5; ++right) {
      alts.push_back(b.Seq({left(5 - right), lit("::"), b.Repeat(h16c, right, right), ls32}));
    }
    alts.push_back(b.Seq({left(6), lit("::"), h16}));
    alts.push_back(b.Seq({left(7), lit("::")}));
    return b.Alt(std::move(alts));
  }
  if (f == "hostname") {
    *approx = "hostname: label syntax and label length checked, total length (253) not";
    return hostname();
  }
  if (f == "email") {
    *approx = "email: dot-atom local part and a domain of two or more hostname labels only (no quoted local parts or IP literals), lengths unchecked";
    ByteSet atext;
    atext.SetRange('a', 'z');
    atext.SetRange('A', 'Z');
    atext.SetRange('0', '9');
    for (char c : std::string_view("!#$%&'*+/=?^_`{|}~-")) atext.Set(static_cast<uint8_t>(c));
    ExprId word = b.Plus(b.Bytes(atext));
    return b.Seq({word, b.Star(b.Seq({lit("."), word})), lit("@"), hostname(2)});
  }
  if (f == "uri") {
    *approx = "uri: scheme and the RFC 3986 character set checked, not the authority/path structure";
    ByteSet scheme_rest, uric;
    scheme_rest.SetRange('a', 'z');
    scheme_rest.SetRange('A', 'Z');
    scheme_rest.SetRange('0', '9');
    uric = scheme_rest;
    for (char c : std::string_view("+.-")) scheme_rest.Set(static_cast<uint8_t>(c));
    for (char c : std::string_view("-._~:/?#[]@!$&'()*+,;=")) uric.Set(static_cast<uint8_t>(c));
    ByteSet alpha;
    alpha.SetRange('a', 'z');
    alpha.SetRange('A', 'Z');
    return b.Seq({b.Bytes(alpha), b.Star(b.Bytes(scheme_rest)), lit(":"),
                  b.Star(b.Alt({b.Bytes(uric), b.Seq({lit("%"), Hex(2)})}))});
  }
  return std::nullopt;
}

Result<ExprId> Lexical::JsonEscaped(ExprId root) {
  auto& b = b_;
  std::map<ExprId, ExprId> memo;
  // The spellings of one decoded character that JSON requires or allows to be escaped.
  auto escaped = [&](uint32_t c) -> ExprId {
    std::vector<ExprId> alts;
    switch (c) {
      case '"': alts.push_back(b.Literal("\\\"")); break;
      case '\\': alts.push_back(b.Literal("\\\\")); break;
      case '/': alts = {b.Literal("/"), b.Literal("\\/")}; break;
      case '\b': alts.push_back(b.Literal("\\b")); break;
      case '\f': alts.push_back(b.Literal("\\f")); break;
      case '\n': alts.push_back(b.Literal("\\n")); break;
      case '\r': alts.push_back(b.Literal("\\r")); break;
      case '\t': alts.push_back(b.Literal("\\t")); break;
      default: break;
    }
    if (c < 0x20 || c == '"' || c == '\\') {
      ByteSet lo_hex;
      std::string h = fmt::format("{:02x}", c);
      ExprId second = h[1] >= 'a' ? b.Alt({b.Literal(h.substr(1)), b.Literal(std::string(1, static_cast<char>(h[1] - 32)))}) : b.Literal(h.substr(1));
      ExprId first = h[0] >= 'a' ? b.Alt({b.Literal(h.substr(0, 1)), b.Literal(std::string(1, static_cast<char>(h[0] - 32)))}) : b.Literal(h.substr(0, 1));
      alts.push_back(b.Seq({b.Literal("\\u00"), first, second}));
    }
    return b.Alt(std::move(alts));
  };
  auto needs = [](uint32_t c) { return c < 0x20 || c == '"' || c == '\\' || c == '/'; };
  auto rec = [&](auto&& self, ExprId id) -> Result<ExprId> {
    if (auto it = memo.find(id); it != memo.end()) return it->second;
    Expr e = b.expr(id);  // copy: the builder's table grows below
    ExprId out = id;
    switch (e.kind) {
      case ExprKind::kLiteral: {
        std::vector<ExprId> parts;
        std::string run;
        for (unsigned char c : e.text) {
          if (needs(c)) {
            if (!run.empty()) parts.push_back(b.Literal(run));
            run.clear();
            parts.push_back(escaped(c));
          } else {
            run += static_cast<char>(c);
          }
        }
        if (!run.empty()) parts.push_back(b.Literal(run));
        out = b.Seq(std::move(parts));
        break;
      }
      case ExprKind::kByteSet: {
        ByteSet safe = e.bytes;
        std::vector<ExprId> alts;
        for (unsigned c = 0; c < 0x80; ++c) {
          if (needs(c) && e.bytes.Has(static_cast<uint8_t>(c))) {
            safe.bits[c >> 6] &= ~(uint64_t{1} << (c & 63));
            alts.push_back(escaped(c));
          }
        }
        alts.insert(alts.begin(), b.Bytes(safe));
        out = b.Alt(std::move(alts));
        break;
      }
      case ExprKind::kCodePoints: {
        std::vector<CodeRange> keep;
        std::vector<ExprId> alts;
        for (CodeRange cr : e.ranges) {
          for (uint32_t c = cr.lo; c <= std::min<uint32_t>(cr.hi, 0x7F); ++c) {
            if (needs(c)) alts.push_back(escaped(c));
          }
          keep.push_back(cr);
        }
        // Remove the characters that must be escaped from the raw set.
        std::vector<CodeRange> raw;
        for (CodeRange cr : keep) {
          uint32_t lo = cr.lo;
          for (uint32_t c = cr.lo; c <= std::min<uint32_t>(cr.hi, 0x7F); ++c) {
            if (c < 0x20 || c == '"' || c == '\\') {
              if (c > lo) raw.push_back({lo, c - 1});
              lo = c + 1;
            }
          }
          if (lo <= cr.hi) raw.push_back({lo, cr.hi});
        }
        alts.insert(alts.begin(), raw.empty() ? b.Nothing() : b.CodePoints(raw));
        out = b.Alt(std::move(alts));
        break;
      }
      case ExprKind::kSeq:
      case ExprKind::kAlt: {
        std::vector<ExprId> kids;
        for (ExprId c : e.children) {
          LADLE_ASSIGN_OR_RETURN(ExprId k, self(self, c));
          kids.push_back(k);
        }
        out = e.kind == ExprKind::kSeq ? b.Seq(std::move(kids)) : b.Alt(std::move(kids));
        break;
      }
      case ExprKind::kRepeat: {
        LADLE_ASSIGN_OR_RETURN(ExprId k, self(self, e.children[0]));
        out = b.Repeat(k, e.min, e.max);
        break;
      }
      case ExprKind::kRuleRef: return Unsupported("pattern grammar uses rules; cannot embed it in a JSON string");
      default: break;
    }
    memo[id] = out;
    return out;
  };
  return rec(rec, root);
}

}  // namespace ladle::grammar::schema_internal
