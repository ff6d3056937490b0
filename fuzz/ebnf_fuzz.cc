// libFuzzer target for the GBNF front-end (build and run with scripts/fuzz).
//
// The input is grammar text. Checked:
//   * no crash, hang or sanitizer report, however malformed or deeply nested;
//   * a failure is kParseError or kResourceExhausted with a "line L:C" position (or the
//     missing-root message);
//   * a grammar that compiles passes the reference/automaton agreement checks of
//     grammar_fuzz_common.h (left recursion makes the automaton compile fail, which is fine).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "grammar_fuzz_common.h"
#include "ladle/grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ladle::grammar;
  if (size > 8192) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto g = fuzz::Bounded("ebnf_fuzz", "EbnfGrammar", 5.0, [&] { return EbnfGrammar(text); });
  if (!g.ok()) {
    const ladle::Status st = g.status();
    const auto code = st.code();
    if (code != ladle::StatusCode::kParseError && code != ladle::StatusCode::kResourceExhausted) {
      fuzz::Fail("ebnf_fuzz", "unexpected error code: " + st.ToString());
    }
    const std::string& msg = st.message();
    if (msg.find(" at line ") == std::string::npos && msg.find("no 'root' rule") == std::string::npos) {
      fuzz::Fail("ebnf_fuzz", "error without a position: " + st.ToString());
    }
    return 0;
  }
  uint64_t seed = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;
  fuzz::CheckGrammar("ebnf_fuzz", *g, seed);
  return 0;
}
