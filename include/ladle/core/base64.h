// Base64 (RFC 4648 §4, the standard alphabet with '=' padding) that never throws: etcd's JSON
// gateway carries keys and values this way, as Go's encoding/json does for []byte.
//
//   std::string b = Base64Encode("/ladle/engines/");          // "L2xhZGxlL2VuZ2luZXMv"
//   std::optional<std::string> raw = Base64Decode(b);          // nullopt on malformed input
#pragma once

#include <array>
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
  // A table, four characters to three bytes per step, into a sized buffer: images arrive as
  // megabytes of base64 in data: URLs, and a character-at-a-time loop cost 20 ms on 1.7 MB.
  static constexpr auto kValue = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 26; ++i) t[static_cast<size_t>('A' + i)] = static_cast<int8_t>(i);
    for (int i = 0; i < 26; ++i) t[static_cast<size_t>('a' + i)] = static_cast<int8_t>(26 + i);
    for (int i = 0; i < 10; ++i) t[static_cast<size_t>('0' + i)] = static_cast<int8_t>(52 + i);
    t[static_cast<size_t>('+')] = 62;
    t[static_cast<size_t>('/')] = 63;
    return t;
  }();
  if (in.size() % 4 == 0 && !in.empty()) {
    if (in.back() == '=') in.remove_suffix(1);
    if (in.back() == '=') in.remove_suffix(1);
  }
  if (in.size() % 4 == 1) return std::nullopt;
  const size_t full = in.size() / 4, rest = in.size() % 4;
  std::string out(full * 3 + (rest == 0 ? 0 : rest - 1), '\0');
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  char* o = out.data();
  for (size_t g = 0; g < full; ++g, p += 4, o += 3) {
    const int a = kValue[p[0]], b = kValue[p[1]], c = kValue[p[2]], d = kValue[p[3]];
    if ((a | b | c | d) < 0) return std::nullopt;
    const uint32_t v = (static_cast<uint32_t>(a) << 18) | (static_cast<uint32_t>(b) << 12) |
                       (static_cast<uint32_t>(c) << 6) | static_cast<uint32_t>(d);
    o[0] = static_cast<char>(v >> 16);
    o[1] = static_cast<char>(v >> 8);
    o[2] = static_cast<char>(v);
  }
  if (rest > 0) {  // 2 or 3 characters: 1 or 2 bytes, the bits after them zero
    uint32_t v = 0;
    for (size_t k = 0; k < rest; ++k) {
      const int x = kValue[p[k]];
      if (x < 0) return std::nullopt;
      v = (v << 6) | static_cast<uint32_t>(x);
    }
    if (rest == 2) {
      if ((v & 0xF) != 0) return std::nullopt;
      o[0] = static_cast<char>(v >> 4);
    } else {
      if ((v & 0x3) != 0) return std::nullopt;
      o[0] = static_cast<char>(v >> 10);
      o[1] = static_cast<char>(v >> 2);
    }
  }
  return out;
}

}  // namespace ladle
