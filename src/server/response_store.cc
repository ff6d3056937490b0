#include "response_store.h"

#include <fmt/format.h>

#include "ladle/core/logging.h"

namespace ladle::server {

namespace {

frontend::ApiError NotFoundError(std::string param, std::string message, std::string code) {
  frontend::ApiError e;
  e.status = StatusCode::kInvalidArgument;
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

const std::string* StringField(const json::Value& v, std::string_view key) {
  const json::Value* f = v.Find(key);
  return f != nullptr && f->is_string() ? &f->as_string() : nullptr;
}

}  // namespace

void ResponseStore::Put(std::string response_id, uint64_t owner, json::Value input, json::Value output,
                        int64_t now_ms) {
  if (!enabled() || response_id.empty()) return;
  Entry e;
  e.id = std::move(response_id);
  e.owner = owner;
  e.expires_ms = now_ms + opts_.ttl_s * 1000;
  e.bytes = json::Dump(input).size() + json::Dump(output).size() + e.id.size() + 64;
  e.input = std::move(input);
  e.output = std::move(output);
  std::lock_guard lock(mu_);
  if (by_response_.count(e.id)) return;  // ids are fresh per response; a repeat is ignored
  order_.push_back(std::move(e));
  auto it = std::prev(order_.end());
  by_response_.emplace(it->id, it);
  bytes_ += it->bytes;
  if (it->output.is_array()) {
    for (const auto& item : it->output.as_array()) {
      if (const std::string* id = StringField(item, "id")) by_item_[*id] = it;
    }
  }
  EvictLocked(now_ms);
}

void ResponseStore::EvictLocked(int64_t now_ms) {
  // The newest entry stays even if it alone is over the byte bound: its client is about to use it.
  while (!order_.empty() && (order_.front().expires_ms <= now_ms || order_.size() > opts_.max_entries ||
                             (bytes_ > opts_.max_bytes && order_.size() > 1))) {
    Entry& victim = order_.front();
    if (victim.output.is_array()) {
      for (const auto& item : victim.output.as_array()) {
        const std::string* id = StringField(item, "id");
        if (id == nullptr) continue;
        auto f = by_item_.find(*id);
        if (f != by_item_.end() && &*f->second == &victim) by_item_.erase(f);
      }
    }
    by_response_.erase(victim.id);
    LADLE_CHECK(bytes_ >= victim.bytes);
    bytes_ -= victim.bytes;
    order_.pop_front();
  }
  LADLE_CHECK(by_response_.size() == order_.size());
}

const ResponseStore::Entry* ResponseStore::FindLocked(std::string_view response_id, uint64_t owner,
                                                      int64_t now_ms) const {
  auto it = by_response_.find(std::string(response_id));
  if (it == by_response_.end() || it->second->owner != owner || it->second->expires_ms <= now_ms) return nullptr;
  return &*it->second;
}

std::variant<ResponseStore::Resolved, frontend::ApiError> ResponseStore::Resolve(std::string_view body,
                                                                                  uint64_t owner, int64_t now_ms,
                                                                                  const frontend::Limits& limits) {
  Resolved out;
  out.body = std::string(body);
  auto doc = json::Parse(body, json::ParseOptions{limits.max_json_depth, limits.max_body_bytes});
  if (!doc.ok() || !doc->is_object()) return out;  // the adapter words the error
  if (const json::Value* s = doc->Find("store"); s != nullptr && s->is_bool()) out.store = s->as_bool();
  json::Value input = json::Value::MakeArray();
  if (const json::Value* in = doc->Find("input")) {
    if (in->is_string()) {
      json::Value msg = json::Value::MakeObject();
      msg.Set("type", json::Value::String("message"));
      msg.Set("role", json::Value::String("user"));
      msg.Set("content", json::Value::String(in->as_string()));
      input.as_array().push_back(std::move(msg));
    } else if (in->is_array()) {
      input = *in;
    } else {
      return out;
    }
  }
  bool changed = false;
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < input.as_array().size(); ++i) {
    json::Value& item = input.as_array()[i];
    const std::string* type = item.is_object() ? StringField(item, "type") : nullptr;
    if (type == nullptr || *type != "item_reference") continue;
    const std::string* id = StringField(item, "id");
    if (id == nullptr) continue;  // the adapter reports the missing id
    auto f = by_item_.find(*id);
    const bool live = f != by_item_.end() && f->second->owner == owner && f->second->expires_ms > now_ms;
    if (!live) {
      return NotFoundError(fmt::format("input[{}]", i),
                           fmt::format("Item with id '{}' not found. This server keeps stored responses for {} s "
                                       "(in memory); send the item itself, or set store to true on the request "
                                       "that produced it.",
                                       *id, opts_.ttl_s),
                           "item_not_found");
    }
    for (const auto& stored : f->second->output.as_array()) {
      const std::string* sid = StringField(stored, "id");
      if (sid != nullptr && *sid == *id) {
        item = stored;
        break;
      }
    }
    changed = true;
  }
  if (const json::Value* prev = doc->Find("previous_response_id"); prev != nullptr && !prev->is_null()) {
    if (!prev->is_string()) return out;  // the adapter reports the type
    const Entry* e = FindLocked(prev->as_string(), owner, now_ms);
    if (e == nullptr) {
      return NotFoundError("previous_response_id",
                           fmt::format("Previous response with id '{}' not found. This server keeps stored "
                                       "responses for {} s (in memory).",
                                       prev->as_string(), opts_.ttl_s),
                           "previous_response_not_found");
    }
    json::Value joined = json::Value::MakeArray();
    for (const auto& it : e->input.as_array()) joined.as_array().push_back(it);
    if (e->output.is_array()) {
      for (const auto& it : e->output.as_array()) joined.as_array().push_back(it);
    }
    for (auto& it : input.as_array()) joined.as_array().push_back(std::move(it));
    input = std::move(joined);
    auto& members = doc->as_object();
    for (auto m = members.begin(); m != members.end();) {
      m = m->first == "previous_response_id" ? members.erase(m) : std::next(m);
    }
    changed = true;
  }
  if (changed) {
    doc->Set("input", input);
    out.body = json::Dump(*doc);
  }
  out.input = std::move(input);
  return out;
}

size_t ResponseStore::entries() const {
  std::lock_guard lock(mu_);
  return order_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace ladle::server
