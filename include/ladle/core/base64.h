// Base64 (RFC 4648 §4, the standard alphabet with '=' padding) that never throws: etcd's JSON
// gateway carries keys and values this way, as Go's encoding/json does for []byte.
//
//   std::string b = Base64Encode("/ladle/engines/");          // "L2xhZGxlL2VuZ2luZXMv"
//   std::optional<std::string> raw = Base64Decode(b);          // nullopt on malformed input
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ladle {

inline std::string Base64Encode(std::string_view in) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) |
                       static_cast<uint8_t>(in[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  if (const size_t rest = in.size() - i; rest > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << 16;
    if (rest == 2) v |= static_cast<uint32_t>(static_cast<uint8_t>(in[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

// The bytes `in` encodes; nullopt for a character outside the alphabet, padding anywhere but
// the end, a length that no encoding has, or non-zero bits after the last byte. Padding may
// be left out ("YQ" and "YQ==" both decode to "a").
inline std::optional<std::string> Base64Decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 == 0 && !in.empty()) {
    if (in.back() == '=') in.remove_suffix(1);
    if (in.back() == '=') in.remove_suffix(1);
  }
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if ((acc & ((1u << bits) - 1)) != 0) return std::nullopt;  // leftover bits must be zero
  return out;
}

}  // namespace ladle
