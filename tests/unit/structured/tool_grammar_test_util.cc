// The one use of <regex> in the tool-grammar tests (tool_grammar_test_util.h, Validate).
#include <regex>
#include <string>

namespace ladle::structured::tool_test {

bool PatternSearch(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern));
}

}  // namespace ladle::structured::tool_test
