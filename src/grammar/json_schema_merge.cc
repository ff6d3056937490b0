// Canonical schema forms and allOf intersection for the JSON Schema compiler. Merging works
// on schema objects (json::Value) so that the merged result goes through the same compiler
// as any hand-written schema.
#include <algorithm>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "json_schema_internal.h"

namespace ladle::grammar::schema_internal {

namespace {

using json::Value;

bool IsAnnotation(std::string_view k) {
  static const std::set<std::string_view> kAnnotations = {
      "title", "description", "examples", "example", "default", "$comment", "$schema", "$id", "id",
      "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema",
      "$anchor", "$defs", "definitions", "$vocabulary", "discriminator", "xml", "externalDocs"};
  return kAnnotations.count(k) > 0 || k.starts_with("x-");
}

std::vector<std::string> Types(const Value& s) {
  std::vector<std::string> out;
  if (const Value* t = s.Find("type")) {
    for (const Value& v : t->as_array()) out.push_back(v.as_string());
  }
  return out;
}

Value TypesValue(const std::vector<std::string>& ts) {
  Value::Array a;
  for (const auto& t : ts) a.push_back(Value::String(t));
  return Value::MakeArray(std::move(a));
}

Value AllOf2(const Value& a, const Value& b) {
  if (a.is_bool() && a.as_bool()) return b;
  if (b.is_bool() && b.as_bool()) return a;
  return Value::MakeObject({{"allOf", Value::MakeArray({a, b})}});
}

std::optional<Decimal> Num(const Value* v) {
  if (!v || !v->is_number()) return std::nullopt;
  return ParseDecimal(v->as_string());
}

uint64_t Gcd(uint64_t a, uint64_t b) { return std::gcd(a, b); }

}  // namespace

bool SchemaValueEqual(const Value& a, const Value& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kNull: return true;
    case Value::Type::kBool: return a.as_bool() == b.as_bool();
    case Value::Type::kString: return a.as_string() == b.as_string();
    case Value::Type::kNumber: {
      auto x = ParseDecimal(a.as_string()), y = ParseDecimal(b.as_string());
      return x && y ? CompareDecimal(*x, *y) == 0 : a.as_string() == b.as_string();
    }
    case Value::Type::kArray: {
      if (a.as_array().size() != b.as_array().size()) return false;
      for (size_t i = 0; i < a.as_array().size(); ++i) {
        if (!SchemaValueEqual(a.as_array()[i], b.as_array()[i])) return false;
      }
      return true;
    }
    case Value::Type::kObject: {
      if (a.as_object().size() != b.as_object().size()) return false;
      for (const auto& [k, v] : a.as_object()) {
        const Value* w = b.Find(k);
        if (!w || !SchemaValueEqual(v, *w)) return false;
      }
      return true;
    }
  }
  return false;
}

Result<Value> MergeSchemas(const Value& a, const Value& b, const std::string& path) {
  Value out = a;
  auto unsupported = [&](std::string_view k) {
    return Unsupported(fmt::format("{}/allOf: cannot intersect '{}' from several subschemas", path, k));
  };
  // Object keywords interact (additionalProperties of one side constrains the other side's
  // properties), so they are merged together after the per-keyword loop.
  const Value* pa = a.Find("patternProperties");
  const Value* pb = b.Find("patternProperties");
  auto has_obj = [](const Value& s) {
    return s.Find("properties") || s.Find("additionalProperties") || s.Find("patternProperties");
  };
  for (const auto& [k, vb] : b.as_object()) {
    const Value* va = a.Find(k);
    if (k == "properties" || k == "additionalProperties" || k == "patternProperties" || k == "prefixItems" ||
        k == "items") {
      continue;
    }
    if (!va) {
      out.Set(k, vb);
      continue;
    }
    if (IsAnnotation(k)) continue;
    if (k == "type") {
      std::vector<std::string> ta = Types(a), tb = Types(b), t;
      auto has = [](const std::vector<std::string>& v, std::string_view x) { return std::find(v.begin(), v.end(), x) != v.end(); };
      for (const auto& x : ta) {
        if (has(tb, x)) {
          t.push_back(x);
        } else if (x == "integer" && has(tb, "number")) {
          t.push_back("integer");
        } else if (x == "number" && has(tb, "integer")) {
          t.push_back("integer");
        }
      }
      out.Set("type", TypesValue(t));
    } else if (k == "enum") {
      Value::Array keep;
      for (const Value& x : va->as_array()) {
        for (const Value& y : vb.as_array()) {
          if (SchemaValueEqual(x, y)) {
            keep.push_back(x);
            break;
          }
        }
      }
      out.Set("enum", Value::MakeArray(std::move(keep)));
    } else if (k == "required") {
      Value req = *va;
      for (const Value& x : vb.as_array()) {
        bool dup = false;
        for (const Value& y : req.as_array()) dup = dup || SchemaValueEqual(x, y);
        if (!dup) req.as_array().push_back(x);
      }
      out.Set("required", std::move(req));
    } else if (k == "minimum" || k == "exclusiveMinimum" || k == "maximum" || k == "exclusiveMaximum") {
      auto x = Num(va), y = Num(&vb);
      if (!x || !y) return unsupported(k);
      bool lower = k == "minimum" || k == "exclusiveMinimum";
      int c = CompareDecimal(*x, *y);
      out.Set(k, (lower ? c >= 0 : c <= 0) ? *va : vb);
    } else if (k == "minLength" || k == "minItems" || k == "minProperties" || k == "minContains") {
      out.Set(k, va->as_double() >= vb.as_double() ? *va : vb);
    } else if (k == "maxLength" || k == "maxItems" || k == "maxProperties" || k == "maxContains") {
      out.Set(k, va->as_double() <= vb.as_double() ? *va : vb);
    } else if (k == "uniqueItems") {
      out.Set(k, Value::Bool(va->as_bool() || vb.as_bool()));
    } else if (k == "multipleOf") {
      if (SchemaValueEqual(*va, vb)) continue;
      auto x = va->as_int64(), y = vb.as_int64();
      if (!va->is_integer() || !vb.is_integer() || !x.ok() || !y.ok() || *x <= 0 || *y <= 0) return unsupported(k);
      uint64_t l = static_cast<uint64_t>(*x) / Gcd(static_cast<uint64_t>(*x), static_cast<uint64_t>(*y)) * static_cast<uint64_t>(*y);
      out.Set(k, Value::Int(static_cast<int64_t>(l)));
    } else if (k == "not" && va->is_object() && vb.is_object() && va->as_object().size() == 1 &&
               vb.as_object().size() == 1 && va->as_object()[0].first == vb.as_object()[0].first &&
               (va->Find("type") || va->Find("enum"))) {
      // not A and not B = not (A or B): for lists of types or values that is their union.
      auto list = [](const Value& v) { return v.is_array() ? v : Value::MakeArray({v}); };
      Value u = list(va->as_object()[0].second);
      const Value more = list(vb.as_object()[0].second);
      for (const Value& x : more.as_array()) u.as_array().push_back(x);
      out.Set("not", Value::MakeObject({{va->as_object()[0].first, std::move(u)}}));
    } else if (!SchemaValueEqual(*va, vb)) {
      return unsupported(k);
    }
  }
  // Objects.
  if (has_obj(b)) {
    if ((pa || pb) && has_obj(a)) {
      if (!(pa && pb && !a.Find("properties") && !b.Find("properties") && !a.Find("additionalProperties") &&
            !b.Find("additionalProperties"))) {
        return unsupported("patternProperties");
      }
      Value merged = *pa;
      for (const auto& [pat, s] : pb->as_object()) {
        const Value* prev = merged.Find(pat);
        merged.Set(pat, prev ? AllOf2(*prev, s) : s);
      }
      out.Set("patternProperties", std::move(merged));
    } else {
      const Value* adda = a.Find("additionalProperties");
      const Value* addb = b.Find("additionalProperties");
      const Value* propa = a.Find("properties");
      const Value* propb = b.Find("properties");
      Value props = Value::MakeObject();
      if (propa) {
        for (const auto& [name, s] : propa->as_object()) {
          const Value* other = propb ? propb->Find(name) : nullptr;
          props.Set(name, other ? AllOf2(s, *other) : (addb ? AllOf2(s, *addb) : s));
        }
      }
      if (propb) {
        for (const auto& [name, s] : propb->as_object()) {
          if (propa && propa->Find(name)) continue;
          props.Set(name, adda ? AllOf2(s, *adda) : s);
        }
      }
      if (propa || propb) out.Set("properties", std::move(props));
      if (adda && addb) out.Set("additionalProperties", AllOf2(*adda, *addb));
      if (!adda && addb) out.Set("additionalProperties", *addb);
      if (pb) out.Set("patternProperties", *pb);
    }
  }
  // Arrays: position i of the result is prefix_a[i] (or items_a) ∧ prefix_b[i] (or items_b).
  if (b.Find("prefixItems") || b.Find("items")) {
    const Value* pra = a.Find("prefixItems");
    const Value* prb = b.Find("prefixItems");
    const Value* ia = a.Find("items");
    const Value* ib = b.Find("items");
    if (pra || prb) {
      size_t n = std::max(pra ? pra->as_array().size() : 0, prb ? prb->as_array().size() : 0);
      Value::Array pre;
      for (size_t i = 0; i < n; ++i) {
        auto at = [&](const Value* pr, const Value* it) -> Value {
          if (pr && i < pr->as_array().size()) return pr->as_array()[i];
          return it ? *it : Value::Bool(true);
        };
        pre.push_back(AllOf2(at(pra, ia), at(prb, ib)));
      }
      out.Set("prefixItems", Value::MakeArray(std::move(pre)));
    }
    if (ia && ib) out.Set("items", AllOf2(*ia, *ib));
    if (!ia && ib) out.Set("items", *ib);
  }
  return out;
}

}  // namespace ladle::grammar::schema_internal
