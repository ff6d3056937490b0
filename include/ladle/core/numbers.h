// Number parsing that never throws. User input (a JSON Schema's `$ref` index, `minLength`,
// `multipleOf`, a regex or GBNF repeat count, a trace file's column) must never reach a
// standard-library call that throws: std::stoul("99999999999999999999") throws out_of_range,
// and an exception inside a pool task is an answer that never comes. scripts/check-deps fails
// CI when std::sto* appears in src/.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

namespace ladle {

// The whole of `s` as an unsigned integer in `base`; nullopt when `s` is empty, has any other
// character (no sign, no spaces) or does not fit in uint64_t.
inline std::optional<uint64_t> ParseU64(std::string_view s, int base = 10) {
  uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The whole of `s` as a signed integer (a leading '-' only); nullopt as for ParseU64.
inline std::optional<int64_t> ParseI64(std::string_view s, int base = 10) {
  int64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The whole of `s` as a double (no leading '+', no spaces); nullopt when malformed or out of
// range.
inline std::optional<double> ParseDouble(std::string_view s) {
  double v = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace ladle
