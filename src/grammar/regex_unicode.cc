// UnicodePropertyRanges (regex_unicode.h): one pass over all code points builds the range
// list of every General_Category once; groups (L, LC, ...) are unions of their members.
#include "regex_unicode.h"

#include <utf8proc.h>

#include <array>
#include <string>
#include <utility>

namespace ladle::grammar {

namespace {

constexpr int kNumCategories = 30;  // UTF8PROC_CATEGORY_CN .. UTF8PROC_CATEGORY_CO

struct CategoryTables {
  std::array<std::vector<CodeRange>, kNumCategories> ranges;
  CategoryTables() {
    int current = -1;
    uint32_t start = 0;
    for (uint32_t cp = 0; cp <= 0x110000; ++cp) {
      const int cat = cp <= 0x10FFFF ? utf8proc_category(static_cast<utf8proc_int32_t>(cp)) : -2;
      if (cat == current) continue;
      if (current >= 0 && current < kNumCategories) ranges[static_cast<size_t>(current)].push_back({start, cp - 1});
      current = cat;
      start = cp;
    }
  }
};

const CategoryTables& Tables() {
  static const CategoryTables t;
  return t;
}

// name -> the categories it unites (by UTF8PROC_CATEGORY_* value).
struct Alias {
  std::string_view short_name, long_name, extra;
  std::vector<int> cats;
};

const std::vector<Alias>& Aliases() {
  static const std::vector<Alias> a = {
      {"L", "Letter", "", {1, 2, 3, 4, 5}},
      {"LC", "Cased_Letter", "", {1, 2, 3}},
      {"Lu", "Uppercase_Letter", "", {1}},
      {"Ll", "Lowercase_Letter", "", {2}},
      {"Lt", "Titlecase_Letter", "", {3}},
      {"Lm", "Modifier_Letter", "", {4}},
      {"Lo", "Other_Letter", "", {5}},
      {"M", "Mark", "Combining_Mark", {6, 7, 8}},
      {"Mn", "Nonspacing_Mark", "", {6}},
      {"Mc", "Spacing_Mark", "", {7}},
      {"Me", "Enclosing_Mark", "", {8}},
      {"N", "Number", "", {9, 10, 11}},
      {"Nd", "Decimal_Number", "digit", {9}},
      {"Nl", "Letter_Number", "", {10}},
      {"No", "Other_Number", "", {11}},
      {"P", "Punctuation", "punct", {12, 13, 14, 15, 16, 17, 18}},
      {"Pc", "Connector_Punctuation", "", {12}},
      {"Pd", "Dash_Punctuation", "", {13}},
      {"Ps", "Open_Punctuation", "", {14}},
      {"Pe", "Close_Punctuation", "", {15}},
      {"Pi", "Initial_Punctuation", "", {16}},
      {"Pf", "Final_Punctuation", "", {17}},
      {"Po", "Other_Punctuation", "", {18}},
      {"S", "Symbol", "", {19, 20, 21, 22}},
      {"Sm", "Math_Symbol", "", {19}},
      {"Sc", "Currency_Symbol", "", {20}},
      {"Sk", "Modifier_Symbol", "", {21}},
      {"So", "Other_Symbol", "", {22}},
      {"Z", "Separator", "", {23, 24, 25}},
      {"Zs", "Space_Separator", "", {23}},
      {"Zl", "Line_Separator", "", {24}},
      {"Zp", "Paragraph_Separator", "", {25}},
      {"C", "Other", "", {0, 26, 27, 28, 29}},
      {"Cc", "Control", "cntrl", {26}},
      {"Cf", "Format", "", {27}},
      {"Cs", "Surrogate", "", {28}},
      {"Co", "Private_Use", "", {29}},
      {"Cn", "Unassigned", "", {0}},
  };
  return a;
}

}  // namespace

std::optional<std::vector<CodeRange>> UnicodePropertyRanges(std::string_view name) {
  for (std::string_view prefix : {"General_Category=", "gc="}) {
    if (name.substr(0, prefix.size()) == prefix) {
      name.remove_prefix(prefix.size());
      break;
    }
  }
  if (name == "Any") return std::vector<CodeRange>{{0, 0x10FFFF}};
  if (name == "ASCII") return std::vector<CodeRange>{{0, 0x7F}};
  if (name == "Assigned") {
    // Everything but Cn: the complement of the unassigned ranges.
    std::vector<CodeRange> out;
    uint32_t next = 0;
    for (CodeRange r : Tables().ranges[0]) {
      if (r.lo > next) out.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return out;
  }
  for (const Alias& a : Aliases()) {
    if (name != a.short_name && name != a.long_name && (a.extra.empty() || name != a.extra)) continue;
    std::vector<CodeRange> out;
    for (int c : a.cats) {
      const auto& r = Tables().ranges[static_cast<size_t>(c)];
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace ladle::grammar
