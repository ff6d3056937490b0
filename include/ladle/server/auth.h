// API-key access control for `ladle serve`. Keys come from LADLE_API_KEYS (comma-separated)
// and/or a key file (one key per line, '#' comments). With no keys configured the server is
// open. Keys are compared in constant time and never logged or echoed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::server {

// Compares `presented` with `secret` in time that depends only on the secret's length, so a
// client cannot learn a key byte by byte from response timing.
bool ConstantTimeEquals(std::string_view presented, std::string_view secret);

class ApiKeys {
 public:
  ApiKeys() = default;
  explicit ApiKeys(std::vector<std::string> keys);

  // Keys from `env_list` (the LADLE_API_KEYS value, may be empty) plus `key_file` (may be
  // empty: none). kIoError when the file cannot be read.
  static Result<ApiKeys> Load(std::string_view env_list, const std::string& key_file);

  bool open() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }

  // True when open, or when the `Authorization: Bearer <key>` value or the `x-api-key`
  // value matches a configured key. Every key is compared, matched or not.
  bool Allows(std::string_view authorization, std::string_view x_api_key) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace ladle::server
