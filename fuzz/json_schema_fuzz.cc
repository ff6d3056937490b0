// libFuzzer target for the JSON Schema compiler (build and run with scripts/fuzz).
//
// The input is a JSON document used as a schema (inputs that are not JSON are dropped). The
// whitespace mode comes from the input's hash. Checked:
//   * no crash, hang or sanitizer report (deep nesting, recursive $refs, huge bounds);
//   * a failure is a Status, never an abort; the compile budget (max_exprs) holds;
//   * every random sentence of the schema's grammar is a JSON document (json::Parse);
//   * the grammar passes the reference/automaton agreement checks of grammar_fuzz_common.h.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>

#include "grammar_fuzz_common.h"
#include "ladle/grammar/grammar.h"
#include "ladle/json/json.h"

namespace {

// json::Parse (simdjson) refuses numbers a double cannot hold, e.g. 1e999, which JSON's
// grammar allows. So every number outside strings is checked against JSON's number syntax
// and replaced by 0 before parsing; nullopt when one is malformed.
std::optional<std::string> NeutraliseNumbers(std::string_view s) {
  static const std::regex kNumber("-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?");
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < s.size()) {
        out += s[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i;
      while (j < s.size() && std::string_view("0123456789+-.eE").find(s[j]) != std::string_view::npos) ++j;
      if (!std::regex_match(std::string(s.substr(i, j - i)), kNumber)) return std::nullopt;
      out += '0';
      i = j - 1;
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ladle::grammar;
  if (size > 16384) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto schema = ladle::json::Parse(text);
  if (!schema.ok()) return 0;
  uint64_t seed = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;
  JsonSchemaOptions opts;
  opts.whitespace = static_cast<JsonSchemaOptions::Whitespace>(seed % 3);
  opts.max_whitespace = 2;
  opts.max_exprs = 1 << 16;
  CompileReport report;
  auto g = fuzz::Bounded("json_schema_fuzz", "JsonSchemaGrammar", 5.0, [&] { return JsonSchemaGrammar(*schema, opts, &report); });
  if (!g.ok()) return 0;
  if (g->exprs.size() > opts.max_exprs + 64) {
    fuzz::Fail("json_schema_fuzz", "grammar has " + std::to_string(g->exprs.size()) + " nodes, budget " +
                                       std::to_string(opts.max_exprs));
  }
  for (uint64_t k = 0; k < 3; ++k) {
    auto sentence = RandomText(*g, seed + k, 64, 24);
    if (!sentence) break;
    auto neutral = NeutraliseNumbers(*sentence);
    if (!neutral) fuzz::Fail("json_schema_fuzz", "a sentence of the schema grammar has a malformed number: " + *sentence);
    auto doc = ladle::json::Parse(*neutral);
    if (!doc.ok()) {
      fuzz::Fail("json_schema_fuzz", "a sentence of the schema grammar is not JSON (" + doc.status().ToString() +
                                         "): " + *sentence + "\nschema: " + std::string(text));
    }
  }
  fuzz::CheckGrammar("json_schema_fuzz", *g, seed);
  return 0;
}
