// Recent Responses API responses, kept in memory so that later requests can refer to them, as
// OpenAI's `store` (on by default) promises: `item_reference` input items (the Vercel AI SDK's
// documented multi-turn sends these) and `previous_response_id`.
//
// Bounded by entries, bytes and a TTL (ServerConfig::response_store); the oldest go first. An
// entry belongs to the API key that created it: another key's reference resolves to nothing,
// as if it had expired. A reference that does not resolve is a 400 naming the item, never a
// silent omission. Internal to the server; thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>

#include "ladle/frontend/request_adapters.h"
#include "ladle/json/json.h"

namespace ladle::server {

struct ResponseStoreOptions {
  size_t max_entries = 4096;
  size_t max_bytes = 256u << 20;
  int64_t ttl_s = 3600;  // 0: store nothing
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreOptions opts) : opts_(opts) {}

  bool enabled() const { return opts_.ttl_s > 0 && opts_.max_entries > 0; }

  // Records a finished response: `input` and `output` are arrays of items as the Responses
  // API spells them (output items carry their ids).
  void Put(std::string response_id, uint64_t owner, json::Value input, json::Value output, int64_t now_ms);

  // Rewrites a Responses request body so that it needs no stored state: every item_reference in
  // `input` becomes the stored item, and previous_response_id becomes that response's input and
  // output items ahead of this input. Returns the body unchanged when it refers to nothing.
  // On a reference that does not resolve: the API error (400, param names the item).
  struct Resolved {
    std::string body;
    json::Value input;  // this request's input items after resolution (array), for Put
    bool store = true;  // the request's `store` (default true)
  };
  std::variant<Resolved, frontend::ApiError> Resolve(std::string_view body, uint64_t owner, int64_t now_ms,
                                                     const frontend::Limits& limits);

  size_t entries() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    uint64_t owner = 0;
    int64_t expires_ms = 0;
    size_t bytes = 0;
    json::Value input, output;
  };
  // Under mu_: drops expired entries from the front and enforces the bounds.
  void EvictLocked(int64_t now_ms);
  const Entry* FindLocked(std::string_view response_id, uint64_t owner, int64_t now_ms) const;

  ResponseStoreOptions opts_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // oldest first (all entries share one TTL, so also by expiry)
  std::unordered_map<std::string, std::list<Entry>::iterator> by_response_;
  std::unordered_map<std::string, std::list<Entry>::iterator> by_item_;  // output item id → entry
  size_t bytes_ = 0;
};

}  // namespace ladle::server
