// ConstraintWire / ParseConstraintWire: a constrained request's spec and mask options as one
// JSON object, for engines in other processes (docs/cluster.md, "The request as data").
#include <fmt/format.h>

#include "ladle/json/json.h"
#include "ladle/structured/mask_provider.h"

namespace ladle::structured {

std::string ConstraintWire(const ConstraintSpec& spec, const MaskOptions& opts) {
  json::Value::Object m;
  m.emplace_back("n", json::Value::Int(opts.n));
  m.emplace_back("max_tokens", json::Value::Int(opts.max_tokens));
  m.emplace_back("budget_aware", json::Value::Bool(opts.budget_aware));
  m.emplace_back("margin", json::Value::Int(opts.margin));
  m.emplace_back("starts_in_reasoning", json::Value::Bool(opts.starts_in_reasoning));
  if (opts.trigger_id) m.emplace_back("trigger_id", json::Value::Int(*opts.trigger_id));
  m.emplace_back("trigger_text", json::Value::String(opts.trigger_text));
  json::Value::Array toks;
  for (engine::TokenId t : opts.trigger_tokens) toks.push_back(json::Value::Int(t));
  m.emplace_back("trigger_tokens", json::Value::MakeArray(std::move(toks)));
  json::Value::Object o;
  auto parsed = json::Parse(SpecToJson(spec));
  o.emplace_back("spec", parsed.ok() ? std::move(parsed).value() : json::Value());
  o.emplace_back("mask", json::Value::MakeObject(std::move(m)));
  return json::Dump(json::Value::MakeObject(std::move(o)));
}

Result<WireConstraint> ParseConstraintWire(std::string_view text) {
  LADLE_ASSIGN_OR_RETURN(json::Value v, json::Parse(text));
  const json::Value* spec = v.Find("spec");
  const json::Value* mask = v.Find("mask");
  if (spec == nullptr || !spec->is_object() || mask == nullptr || !mask->is_object()) {
    return InvalidArgument("constraint wire: expected {\"spec\": {...}, \"mask\": {...}}");
  }
  WireConstraint w;
  LADLE_ASSIGN_OR_RETURN(w.spec, SpecFromJson(json::Dump(*spec)));
  auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t* out) -> Status {
    const json::Value* f = mask->Find(key);
    if (f == nullptr) return Status::Ok();
    if (!f->is_number()) return InvalidArgument(fmt::format("constraint wire: mask.{} must be a number", key));
    LADLE_ASSIGN_OR_RETURN(int64_t n, f->as_int64());
    if (n < lo || n > hi) return InvalidArgument(fmt::format("constraint wire: mask.{} out of range", key));
    *out = n;
    return Status::Ok();
  };
  int64_t n = 1, max_tokens = 256, margin = 4, trigger = -1;
  LADLE_RETURN_IF_ERROR(integer("n", 1, 1024, &n));
  LADLE_RETURN_IF_ERROR(integer("max_tokens", 0, 1 << 30, &max_tokens));
  LADLE_RETURN_IF_ERROR(integer("margin", 0, 1 << 20, &margin));
  LADLE_RETURN_IF_ERROR(integer("trigger_id", 0, INT32_MAX, &trigger));
  w.opts.n = static_cast<int>(n);
  w.opts.max_tokens = static_cast<uint32_t>(max_tokens);
  w.opts.margin = static_cast<uint32_t>(margin);
  if (trigger >= 0) w.opts.trigger_id = static_cast<engine::TokenId>(trigger);
  if (const json::Value* f = mask->Find("budget_aware"); f && f->is_bool()) w.opts.budget_aware = f->as_bool();
  if (const json::Value* f = mask->Find("starts_in_reasoning"); f && f->is_bool()) w.opts.starts_in_reasoning = f->as_bool();
  if (const json::Value* f = mask->Find("trigger_text"); f && f->is_string()) w.opts.trigger_text = f->as_string();
  if (const json::Value* f = mask->Find("trigger_tokens"); f && f->is_array()) {
    for (const json::Value& t : f->as_array()) {
      if (!t.is_number()) return InvalidArgument("constraint wire: mask.trigger_tokens must hold token ids");
      LADLE_ASSIGN_OR_RETURN(int64_t id, t.as_int64());
      if (id < 0 || id > INT32_MAX) return InvalidArgument("constraint wire: mask.trigger_tokens out of range");
      w.opts.trigger_tokens.push_back(static_cast<engine::TokenId>(id));
    }
  }
  return w;
}

}  // namespace ladle::structured
