// libFuzzer target for the regex front-end (build and run with scripts/fuzz).
//
// The input is a pattern. It is compiled in whole-match and in search mode; checked:
//   * no crash, hang or sanitizer report, however malformed or deeply nested the pattern;
//   * a failure is a Status whose message names the offset, with one of the codes the
//     dialect documents (kParseError, kUnsupported, kResourceExhausted);
//   * a grammar that compiles passes the reference/automaton agreement checks of
//     grammar_fuzz_common.h.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "grammar_fuzz_common.h"
#include "ladle/grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ladle::grammar;
  if (size > 4096) return 0;
  const std::string_view pattern(reinterpret_cast<const char*>(data), size);
  uint64_t seed = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;
  for (bool search : {false, true}) {
    auto g = fuzz::Bounded("regex_fuzz", "RegexGrammar", 5.0, [&] { return RegexGrammar(pattern, RegexOptions{.search = search}); });
    if (!g.ok()) {
      const auto code = g.status().code();
      if (code != ladle::StatusCode::kParseError && code != ladle::StatusCode::kUnsupported &&
          code != ladle::StatusCode::kResourceExhausted) {
        fuzz::Fail("regex_fuzz", "unexpected error code: " + g.status().ToString());
      }
      if (g.status().message().find(" at offset ") == std::string::npos) {
        fuzz::Fail("regex_fuzz", "error without an offset: " + g.status().ToString());
      }
      return 0;  // both modes parse the same way
    }
    fuzz::CheckGrammar("regex_fuzz", *g, seed + search);
  }
  return 0;
}
