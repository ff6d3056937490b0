// Differential test of the regex front-end against PCRE2: for each pattern, strings that our
// grammar generates, mutations of them, and random strings over the pattern's own characters
// must get the same verdict from ReferenceMatches(RegexGrammar(p)) and from PCRE2, in
// whole-match and in search mode.
//
// PCRE2 is made to speak ECMAScript: UTF mode, $ only at the very end (DOLLAR_ENDONLY),
// \uXXXX and \u{...} (ALT_BSUX, EXTRA_ALT_BSUX), [] and [^] (ALLOW_EMPTY_CLASS), and the
// pattern is rewritten where the dialects differ: ECMAScript's `.` excludes \r, U+2028 and
// U+2029, its \s is a fixed Unicode list (PCRE2's is ASCII without UCP), its \v is VT (PCRE2's
// is a class), and Annex B's `[\w-.]` is an error in PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ladle/grammar/grammar.h"
#include "ladle/json/json.h"
#include "reference_recognizer.h"
#include "test_data.h"

namespace ladle::grammar {
namespace {

constexpr const char* kSpaceMembers = "\\t\\n\\u000B\\f\\r \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000\\uFEFF";

// ECMAScript pattern -> equivalent PCRE2 pattern; nullopt when there is no simple rewrite.
std::optional<std::string> ToPcre2(std::string_view p) {
  std::string out;
  bool in_class = false;
  bool prev_class_escape = false;  // inside a class: the last atom was \d, \w, ...
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      bool class_escape = false;
      switch (e) {
        case 's':
          out += in_class ? std::string(kSpaceMembers) : "[" + std::string(kSpaceMembers) + "]";
          class_escape = true;
          break;
        case 'S':
          if (in_class) return std::nullopt;
          out += "[^" + std::string(kSpaceMembers) + "]";
          break;
        case 'v': out += "\\u000B"; break;
        case '0': out += "\\u0000"; break;
        case 'd': case 'D': case 'w': case 'W':
          out += '\\';
          out += e;
          class_escape = true;
          break;
        case 'u': {
          // PCRE2 has no surrogates: a \uHIGH\uLOW pair becomes one \u{...}.
          auto hex4 = [&](size_t at) -> long {
            if (at + 4 > p.size()) return -1;
            std::string h(p.substr(at, 4));
            if (h.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) return -1;
            return std::stol(h, nullptr, 16);
          };
          long hi = hex4(i + 1), lo = i + 6 < p.size() && p[i + 5] == '\\' && p[i + 6] == 'u' ? hex4(i + 7) : -1;
          if (hi >= 0xD800 && hi <= 0xDBFF && lo >= 0xDC00 && lo <= 0xDFFF) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "\\u{%lX}", 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
            out += buf;
            i += 10;
          } else {
            out += "\\u";
          }
          break;
        }
        case 'p': case 'P':
          return std::nullopt;  // Unicode versions differ; regex_test.cc covers \p
        default:
          out += '\\';
          out += e;
      }
      prev_class_escape = in_class && class_escape;
      continue;
    }
    if (in_class) {
      if (c == '-' && prev_class_escape) {
        out += "\\-";
      } else if (c == '-' && i + 1 < p.size() && p[i + 1] == '\\' && i + 2 < p.size() &&
                 std::string_view("dDwWsS").find(p[i + 2]) != std::string_view::npos) {
        out += "\\-";
      } else if (c == ']') {
        in_class = false;
        out += c;
      } else if (c == '[') {
        out += "\\[";  // PCRE2 would read [: as a POSIX class
      } else {
        out += c;
      }
      prev_class_escape = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      // ECMAScript: ']' right after '[' or '[^' closes an empty class.
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out += p[++i];
        in_class = false;
      }
      continue;
    }
    if (c == '.') {
      out += "[^\\n\\r\\u2028\\u2029]";
      continue;
    }
    out += c;
  }
  return out;
}

class Pcre2 {
 public:
  explicit Pcre2(const std::string& pattern) {
    pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
    pcre2_set_compile_extra_options(cc, PCRE2_EXTRA_ALT_BSUX);
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX | PCRE2_ALLOW_EMPTY_CLASS, &err,
                          &off, cc);
    pcre2_compile_context_free(cc);
    if (!code_) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      error_ = reinterpret_cast<char*>(buf);
      return;
    }
    md_ = pcre2_match_data_create_from_pattern(code_, nullptr);
    mc_ = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(mc_, 5'000'000);
  }
  ~Pcre2() {
    if (mc_) pcre2_match_context_free(mc_);
    if (md_) pcre2_match_data_free(md_);
    if (code_) pcre2_code_free(code_);
  }
  bool ok() const { return code_ != nullptr; }
  const std::string& error() const { return error_; }
  // 1 match, 0 no match, -1 PCRE2 gave up (match limit) or rejected the subject.
  int Match(std::string_view s, bool full) const {
    int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                         full ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0, md_, mc_);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    return -1;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* md_ = nullptr;
  pcre2_match_context* mc_ = nullptr;
  std::string error_;
};

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A random sentence of a regex grammar (no rule references besides the root), with unbounded
// repeats cut short; nullopt when it ran into an empty language.
std::optional<std::string> Generate(const Grammar& g, std::mt19937& rng) {
  std::string out;
  bool dead = false;
  auto pick = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  auto gen = [&](auto&& self, ExprId id, int depth) -> void {
    if (dead || out.size() > 400 || depth > 300) {
      dead = true;
      return;
    }
    const Expr& e = g.exprs[static_cast<size_t>(id)];
    switch (e.kind) {
      case ExprKind::kEmpty: break;
      case ExprKind::kNothing: dead = true; break;
      case ExprKind::kLiteral: out += e.text; break;
      case ExprKind::kByteSet: {
        std::vector<int> bytes;
        for (int b = 0; b < 256; ++b) {
          if (e.bytes.Has(static_cast<uint8_t>(b))) bytes.push_back(b);
        }
        out += static_cast<char>(bytes[pick(0, static_cast<uint32_t>(bytes.size() - 1))]);
        break;
      }
      case ExprKind::kCodePoints: {
        const CodeRange& r = e.ranges[pick(0, static_cast<uint32_t>(e.ranges.size() - 1))];
        // Mostly the edges of a range (where off-by-one bugs live), sometimes inside.
        uint32_t cp = pick(0, 2) == 0 ? r.lo : pick(0, 1) == 0 ? r.hi : pick(r.lo, r.hi);
        AppendUtf8(out, cp);
        break;
      }
      case ExprKind::kSpecialToken: dead = true; break;
      case ExprKind::kSeq:
        for (ExprId c : e.children) self(self, c, depth + 1);
        break;
      case ExprKind::kAlt: self(self, e.children[pick(0, static_cast<uint32_t>(e.children.size() - 1))], depth + 1); break;
      case ExprKind::kRepeat: {
        uint32_t hi = e.max == kUnbounded ? e.min + 3 : std::min(e.max, e.min + 6);
        uint32_t n = pick(e.min, hi);
        for (uint32_t k = 0; k < n && !dead; ++k) self(self, e.children[0], depth + 1);
        break;
      }
      case ExprKind::kRuleRef: self(self, g.rules[static_cast<size_t>(e.rule)].body, depth + 1); break;
    }
  };
  gen(gen, g.rules[static_cast<size_t>(g.root)].body, 0);
  if (dead) return std::nullopt;
  return out;
}

// Code points of a UTF-8 string (input is valid).
std::vector<std::string> Chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

struct DiffStats {
  size_t patterns = 0, compared = 0, mismatches = 0, skipped = 0;
  std::vector<std::string> report;
};

// Compares one pattern on generated, mutated and random strings; appends mismatches.
void DiffPattern(const std::string& pattern, uint32_t seed, size_t per_pattern, DiffStats& st) {
  auto translated = ToPcre2(pattern);
  if (!translated) {
    ++st.skipped;
    return;
  }
  Pcre2 re(*translated);
  auto full_g = RegexGrammar(pattern);
  auto search_g = RegexGrammar(pattern, RegexOptions{.search = true});
  if (!full_g.ok() || !re.ok()) {
    // Both must reject, or the rejection must be one of our documented refusals.
    if (full_g.ok() != re.ok() && (re.ok() || full_g.ok())) {
      const bool ours_refuses = !full_g.ok() && (full_g.status().code() == StatusCode::kUnsupported ||
                                                 full_g.status().code() == StatusCode::kResourceExhausted);
      if (!ours_refuses) {
        ++st.mismatches;
        st.report.push_back("compile disagreement on /" + pattern + "/: ours " +
                            (full_g.ok() ? std::string("ok") : full_g.status().ToString()) + ", pcre2 " +
                            (re.ok() ? std::string("ok") : re.error()));
      }
    }
    ++st.skipped;
    return;
  }
  ++st.patterns;
  auto full = ReferenceRecognizer::Create(*full_g);
  auto search = ReferenceRecognizer::Create(*search_g);
  ASSERT_TRUE(full.ok() && search.ok());

  std::mt19937 rng(seed);
  std::vector<std::string> subjects = {""};
  std::vector<std::string> alphabet = {"a", "Z", "0", "9", "_", "-", ".", " ", "\n", "\r", "\t", "/", "\xC3\xA9",
                                       "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xE2\x80\xA8", "\xC2\xA0"};
  for (const std::string& ch : Chars(pattern)) alphabet.push_back(ch);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  for (size_t k = 0; k < per_pattern; ++k) {
    if (auto s = Generate(*full_g, rng)) {
      subjects.push_back(*s);
      // A near miss: one code point deleted, replaced or inserted.
      auto chars = Chars(*s);
      const size_t at = chars.empty() ? 0 : pick(chars.size() + 1);
      switch (pick(3)) {
        case 0:
          if (at < chars.size()) chars.erase(chars.begin() + static_cast<long>(at));
          break;
        case 1:
          if (at < chars.size()) chars[at] = alphabet[pick(alphabet.size())];
          break;
        default: chars.insert(chars.begin() + static_cast<long>(at), alphabet[pick(alphabet.size())]);
      }
      std::string m;
      for (auto& c : chars) m += c;
      subjects.push_back(m);
    }
    std::string r;
    const size_t len = pick(10);
    for (size_t i = 0; i < len; ++i) r += alphabet[pick(alphabet.size())];
    subjects.push_back(r);
  }
  std::set<std::string> done;
  for (const std::string& s : subjects) {
    if (!done.insert(s).second) continue;
    for (bool is_full : {true, false}) {
      const int want = re.Match(s, is_full);
      if (want < 0) continue;
      const bool got = is_full ? full->Matches(s) : search->Matches(s);
      ++st.compared;
      if (got != (want == 1)) {
        ++st.mismatches;
        if (st.report.size() < 40) {
          st.report.push_back(std::string(is_full ? "full" : "search") + " /" + pattern + "/ on \"" + s +
                              "\": ours " + (got ? "match" : "no match") + ", pcre2 " +
                              (want ? "match" : "no match") + " (pcre2 pattern " + *translated + ")");
        }
      }
    }
  }
}

// Syntax coverage: every construct of the dialect, alone and combined.
const std::vector<std::string>& CuratedPatterns() {
  static const std::vector<std::string> p = {
      "abc", "a|b|c", "a*", "a+", "a?", "a*?", "a+?b", "a??b", "a{3}", "a{2,}", "a{2,4}", "a{0,1}?",
      "(ab)+", "(?:ab|cd)*e", "(?<word>\\w+)-(?<n>\\d+)", "a(b(c(d)?)?)?", "(a|ab)(c|bcd)(d*)",
      ".", ".*", "a.c", "[abc]", "[^abc]", "[a-z0-9]+", "[^a-z]", "[-a]", "[a-]", "[\\]]", "[\\\\]",
      "[\\d\\s]", "[^\\d\\s]+", "[\\w-.]+", "[\\b]", "[]", "[^]", "a[]b", "x[^]y", "\\d{2,3}", "\\D+",
      "\\w*", "\\W", "\\s", "\\S+", "\\t\\n\\r\\f\\v", "\\x41\\x7a", "\\u00e9+", "\\u{1F600}", "\\uD83D\\uDE00",
      "\\cA", "\\0", "\\/\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\-", "a{", "a{,2}", "a{x}", "}", "]",
      "^abc$", "^abc", "abc$", "^$", "^a|b$", "^(a|b)$", "^(?:[a-z]+\\.)*[a-z]+$",
      "caf\xC3\xA9", "[\xC3\xA0-\xC3\xBF]+", "[\xE4\xB8\x80-\xE9\xBE\xA5]{1,3}", "\xF0\x9F\x98\x80?",
      "[^\xE4\xB8\xAD]", "(\\d+(\\.\\d*)?|\\.\\d+)([eE][-+]?\\d+)?", "[+-]?\\d+", "\"([^\"\\\\]|\\\\.)*\"",
      "(a*)*b", "(a|b)*abb", "((a{1,2}){2}){1,2}", "(|a)+", "a||b", "(?:)", "()*", "x*y*z*",
      "[\\u0000-\\u001f]", "[\\x00-\\x7F]+", "[^\\x00-\\x7F]", "[\\s\\S]", "\\s*,\\s*", "#[0-9a-fA-F]{6}",
      "(^a|b)c", "(^x|y$)", "^([^,]|$)", "(a|^b)(c$|d)", "((^a))b", "(^$)|x",
  };
  return p;
}

// Real `pattern`s from JSONSchemaBench schemas (guidance-ai/jsonschemabench, MaskBench data).
const std::vector<std::string>& RealPatterns() {
  static const std::vector<std::string> p = {
      "^(SK)[0-9]{10}$",
      "[\\p{Zs}A-Za-z0-9+\\.,\\-_:;()]*",
      "^(?:\\S+\\s+){0,9}\\S+$",
      "^uk.gov.ons.edc.eq:feedback$",
      "^https?://",
      "^[a-zA-Z0-9 _-]+$",
      "^$|^\\+?([\\d\\s()-]){9,20}$",
      "/api/v1/user_identities/\\d+/programs",
      "^[a-zA-Z0-9_-]{1,}$",
      "(LATEX|MATHML|MATH_TEMPLATE|MVAR_TEMPLATE|LATEXII|LATEXCE)",
      "^[0-4]?[0-7]{3}$",
      "^((c1d3g3).{4,8}){6,6}",
      "^[A-Za-z0-9 &'\\(\\)\\*,\\-\\./@\xC2\xA3]{1,32}$",
      "/.*/",
      "(^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$)",
      "^\\+44[\\d]{10}$",
      "int|float|vec2|vec3|vec4",
      "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z$",
      "^unstruct_event_.*",
      "^[\\w\\s-]+$",
      "^DOI*$",
      "^@(\\w){1,15}$",
      "^[0-9]{8}-[\\w\\d]+-sbi[0-9]{3}$",
      "/(\\*|GET|POST|PUT|PATCH|DELETE)(\\:/.*)?/g",
      "^(([0-9]|[a-f]){2}){0,32}$",
      "^(tail|metallic|wings|horns|color|black|forelimbs|hindlimbs|armor|dilute|bogbreath|nose|(, ))*$",
      "^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$",
      "^[\\S]+$",
      "_Localised$",
      "^-?[_a-zA-Z]+[_a-zA-Z0-9-]*$",
      "^[0-9]{4}(-[0-9]{2}){0,2}$",
      "^z9((.){10,10}){10,10}z9$",
      "^[a-zA-Z0-9_\\.~]+$",
      "^[a-z\\d_\\.-]+@([a-z\\d\\.-]+\\.)+[a-z]+$",
      "^(https?://)?[\\w-]+(\\.[\\w-]+)*(:\\d+)?/api/v(\\d+){1}/graph\\?.+$",
      "^[a-fA-F0-9]{40}$",
      "^[A-Z]{3}$",
      "^([01]?[0-9]|2[0-3]):[0-5][0-9]$",
      "^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$",
      "^[^\\s@]+@[^\\s@]+\\.[^\\s@]+$",
      "^#([A-Fa-f0-9]{6}|[A-Fa-f0-9]{3})$",
      "^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(?:-((?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\\.(?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\\+([0-9a-zA-Z-]+(?:\\.[0-9a-zA-Z-]+)*))?$",
      "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
      "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
      "^[a-zA-Z][a-zA-Z0-9_]*$",
      "^\\d+(\\.\\d+)?$",
      "^[^/]+/[^/]+$",
      "^(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS)$",
      "^\\S+$",
      "^[0-9]+(ms|s|m|h)$",
      "^(iglu:[a-zA-Z0-9-_.]+/[a-zA-Z0-9-_]+/[a-zA-Z0-9-_]+/[0-9]+-[0-9]+-[0-9]+)$",
      "^[a-zA-Z0-9!#$%&'*+/=?^_`{|}~.-]+$",
      "^\\$\\{[a-zA-Z_][a-zA-Z0-9_]*\\}$",
      "^(\\*|[0-9]+)(\\.(\\*|[0-9]+)){0,2}$",
      "^[ -~]*$",
      "^.{1,255}$",
      "^[^<>]*$",
      "[a-z]{2}(-[A-Z]{2})?",
      "^P(?!$)(\\d+Y)?(\\d+M)?(\\d+W)?(\\d+D)?(T(?=\\d)(\\d+H)?(\\d+M)?(\\d+S)?)?$",
      "^\\d{5}(?:[-\\s]\\d{4})?$",
  };
  return p;
}

TEST(RegexPcre2, ConvertsTheDialect) {
  EXPECT_EQ(*ToPcre2("a.b"), "a[^\\n\\r\\u2028\\u2029]b");
  EXPECT_EQ(*ToPcre2("[\\w-.]"), "[\\w\\-.]");
  EXPECT_EQ(*ToPcre2("[].]"), "[][^\\n\\r\\u2028\\u2029]]");  // [] is empty in ECMAScript
  EXPECT_EQ(*ToPcre2("\\uD83D\\uDE00"), "\\u{1F600}");
  EXPECT_FALSE(ToPcre2("[\\S]").has_value());
}

TEST(RegexPcre2, CuratedPatternsAgree) {
  DiffStats st;
  uint32_t seed = 1;
  for (const std::string& p : CuratedPatterns()) DiffPattern(p, seed++, 60, st);
  std::string all;
  for (const auto& r : st.report) all += r + "\n";
  EXPECT_EQ(st.mismatches, 0u) << all;
  EXPECT_GE(st.patterns, 80u);
  EXPECT_GE(st.compared, 5000u);
  std::printf("curated: %zu patterns, %zu verdicts compared, %zu skipped\n", st.patterns, st.compared, st.skipped);
}

TEST(RegexPcre2, RealSchemaPatternsAgree) {
  DiffStats st;
  uint32_t seed = 1000;
  for (const std::string& p : RealPatterns()) DiffPattern(p, seed++, 60, st);
  std::string all;
  for (const auto& r : st.report) all += r + "\n";
  EXPECT_EQ(st.mismatches, 0u) << all;
  EXPECT_GE(st.patterns, 50u);
  std::printf("real: %zu patterns, %zu verdicts compared, %zu skipped\n", st.patterns, st.compared, st.skipped);
}

void CollectPatterns(const json::Value& v, std::set<std::string>& out) {
  if (v.is_array()) {
    for (const auto& x : v.as_array()) CollectPatterns(x, out);
  } else if (v.is_object()) {
    for (const auto& [k, x] : v.as_object()) {
      if (k == "pattern" && x.is_string()) out.insert(x.as_string());
      if (k == "patternProperties" && x.is_object()) {
        for (const auto& [pk, px] : x.as_object()) out.insert(pk);
      }
      CollectPatterns(x, out);
    }
  }
}

// Every distinct `pattern` / patternProperties key of the MaskBench schemas. Uses an unpacked
// copy when one exists ($LADLE_MASKBENCH_DATA, or where bench/grammar unpacks it), else
// unpacks the shared archive into a temporary directory for the duration of the test.
TEST(RegexPcre2, AllMaskBenchPatternsAgree) {
  namespace fs = std::filesystem;
  std::string data = testing::EnvOr("LADLE_MASKBENCH_DATA",
                                    testing::EnvOr("LADLE_CACHE", LADLE_TEST_CACHE_DIR) + "/maskbench-dev/maskbench/data");
  fs::path tmp;
  if (!fs::is_directory(data)) {
    const std::string archive =
        testing::EnvOr("LADLE_SHARED", LADLE_TEST_SHARED_DIR) + "/jsonschemabench/maskbench-dev.tar.zst";
    LADLE_REQUIRE_DATA(archive);
    tmp = fs::temp_directory_path() / ("ladle-regex-maskbench-" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    const std::string cmd = "zstd -dc '" + archive + "' | tar -x -C '" + tmp.string() + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    data = (tmp / "maskbench" / "data").string();
  }
  std::set<std::string> patterns;
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(data)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream f(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    auto doc = json::Parse(ss.str());
    if (!doc.ok()) continue;
    if (const json::Value* schema = doc->Find("schema")) CollectPatterns(*schema, patterns);
    ++files;
  }
  if (!tmp.empty()) fs::remove_all(tmp);
  ASSERT_GT(files, 1000u);
  ASSERT_GT(patterns.size(), 500u);
  DiffStats st;
  size_t refused = 0;
  uint32_t seed = 7;
  for (const std::string& p : patterns) {
    auto g = RegexGrammar(p);
    if (!g.ok()) ++refused;
    DiffPattern(p, seed++, 25, st);
  }
  std::string all;
  for (const auto& r : st.report) all += r + "\n";
  EXPECT_EQ(st.mismatches, 0u) << all;
  std::printf("maskbench: %zu files, %zu distinct patterns, %zu compared on %zu verdicts, %zu refused by us, %zu skipped\n",
              files, patterns.size(), st.patterns, st.compared, refused, st.skipped);
}

}  // namespace
}  // namespace ladle::grammar
