#include "ladle/server/auth.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace ladle::server {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool ConstantTimeEquals(std::string_view presented, std::string_view secret) {
  // Walk the whole secret whatever `presented` holds; fold every difference (and the length
  // difference) into one accumulator so no branch depends on where the first mismatch is.
  // volatile keeps the compiler from turning the loop back into an early-exit memcmp.
  volatile unsigned char diff = presented.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff = diff | (p ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

ApiKeys::ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}

Result<ApiKeys> ApiKeys::Load(std::string_view env_list, const std::string& key_file) {
  std::vector<std::string> keys;
  while (!env_list.empty()) {
    const size_t comma = env_list.find(',');
    std::string_view k = Trim(env_list.substr(0, comma));
    if (!k.empty()) keys.emplace_back(k);
    if (comma == std::string_view::npos) break;
    env_list.remove_prefix(comma + 1);
  }
  if (!key_file.empty()) {
    std::ifstream in(key_file);
    if (!in) return IoError("cannot read api key file " + key_file);
    std::string line;
    while (std::getline(in, line)) {
      std::string_view k = Trim(line);
      if (k.empty() || k.front() == '#') continue;
      keys.emplace_back(k);
    }
  }
  return ApiKeys(std::move(keys));
}

bool ApiKeys::Allows(std::string_view authorization, std::string_view x_api_key) const {
  if (open()) return true;
  std::string_view presented = Trim(x_api_key);
  authorization = Trim(authorization);
  constexpr std::string_view kBearer = "Bearer ";
  if (presented.empty() && authorization.size() > kBearer.size()) {
    // The scheme name is case-insensitive (RFC 9110 §11.1).
    bool bearer = true;
    for (size_t i = 0; i < kBearer.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(authorization[i])) != std::tolower(static_cast<unsigned char>(kBearer[i]))) bearer = false;
    }
    if (bearer) presented = Trim(authorization.substr(kBearer.size()));
  }
  if (presented.empty()) return false;
  bool ok = false;
  for (const auto& k : keys_) ok = ConstantTimeEquals(presented, k) | ok;  // no short-circuit
  return ok;
}

}  // namespace ladle::server
