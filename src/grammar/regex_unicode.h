// Unicode property classes for the regex front-end (\p{...} / \P{...}), from utf8proc's
// General_Category tables (utf8proc's Unicode version, which can lag the newest by one).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "ladle/grammar/grammar.h"

namespace ladle::grammar {

// The code points of a General_Category value by its ECMAScript name: short (`Lu`, `L`),
// long (`Uppercase_Letter`, `Letter`), or prefixed (`gc=Lu`, `General_Category=Letter`),
// plus the binary properties `Any`, `ASCII` and `Assigned`. nullopt for any other property
// (scripts, other binary properties), which the caller reports as unsupported.
std::optional<std::vector<CodeRange>> UnicodePropertyRanges(std::string_view name);

}  // namespace ladle::grammar
