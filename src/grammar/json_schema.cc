// JSON Schema → grammar IR (grammar.h: AddJsonSchema, JsonSchemaGrammar, JsonObjectGrammar).
// docs/json_schema.md has the keyword table; in short:
//   * combinators are flattened first: $ref targets and allOf members are intersected
//     (json_schema_merge.cc), anyOf/oneOf become alternatives (a oneOf whose branches are not
//     provably disjoint is reported), then each flat alternative is compiled per JSON type;
//   * a schema that is only a $ref compiles to a rule per target, which is how recursion works
//     and how definitions used many times stay one grammar rule;
//   * strings, numbers and formats are lexical grammars from json_schema_lexical.cc;
//   * objects follow the schema's `properties` order (a reported restriction), then
//     unlisted keys, which cannot spell a listed name.
// Anything not enforced exactly is either an error naming the keyword's JSON path or an
// Approximation in the CompileReport. Unknown keywords are ignored (JSON Schema treats them
// as annotations); known validation keywords that are not supported are errors.
#include <deque>
#include <map>
#include <set>

#include <fmt/format.h>

#include "json_schema_compiler.h"
#include "ladle/core/numbers.h"
#include "ladle/grammar/grammar.h"
#include "ladle/json/json.h"

namespace ladle::grammar::schema_internal {

constexpr int kMaxNesting = 64;        // schema nesting depth (C++ recursion)
constexpr int kMaxRefChain = 32;       // $ref → $ref inlining without consuming input
constexpr size_t kMaxAlternatives = 128;  // anyOf × anyOf products after flattening
constexpr int kMaxPrettyDepth = 24;    // pretty whitespace needs a rule per nesting level


bool IsAnnotation(std::string_view k) {
  static const std::set<std::string_view> kNames = {
      "title", "description", "examples", "example", "default", "$comment", "$schema", "$id", "id",
      "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema",
      "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$defs", "definitions", "$vocabulary", "discriminator",
      "xml", "externalDocs", "format_hint"};
  return kNames.count(k) > 0 || k.starts_with("x-");
}

bool IsUnsupportedKeyword(std::string_view k) {
  static const std::set<std::string_view> kNames = {
      "not", "if", "contains", "minContains", "maxContains", "dependentRequired", "dependentSchemas",
      "dependencies", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};
  return kNames.count(k) > 0;
}

unsigned TypeMask(std::string_view t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBool;
  if (t == "object") return kObject;
  if (t == "array") return kArray;
  if (t == "integer") return kInt;
  if (t == "number") return kInt | kFrac;
  if (t == "string") return kString;
  return 0;
}

unsigned ValueMask(const Value& v) {
  switch (v.type()) {
    case Value::Type::kNull: return kNull;
    case Value::Type::kBool: return kBool;
    case Value::Type::kObject: return kObject;
    case Value::Type::kArray: return kArray;
    case Value::Type::kString: return kString;
    case Value::Type::kNumber: {
      auto d = ParseDecimal(v.as_string());
      return d && d->IsInteger() ? kInt : kFrac;
    }
  }
  return 0;
}

std::string PointerEscape(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Old spellings → draft 2020-12 spellings, so the rest of the compiler sees one form.
Result<Value> Canonical(const Value& s, const std::string& path) {
  if (!s.is_object()) return s;
  Value c = s;
  auto erase = [&](std::string_view k) {
    auto& o = c.as_object();
    std::erase_if(o, [&](const Value::Member& m) { return m.first == k; });
  };
  if (const Value* t = c.Find("type")) {
    if (t->is_string()) {
      c.Set("type", Value::MakeArray({*t}));
    } else if (!t->is_array()) {
      return InvalidArgument(fmt::format("{}/type: must be a string or an array", path));
    }
    for (const Value& x : c.Find("type")->as_array()) {
      if (!x.is_string() || TypeMask(x.as_string()) == 0) return InvalidArgument(fmt::format("{}/type: unknown type", path));
    }
  }
  if (const Value* k = c.Find("const")) {
    Value e = Value::MakeArray({*k});
    if (const Value* en = c.Find("enum")) {
      Value::Array keep;
      for (const Value& x : en->as_array()) {
        if (schema_internal::SchemaValueEqual(x, *k)) keep.push_back(x);
      }
      e = Value::MakeArray(std::move(keep));
    }
    erase("const");
    c.Set("enum", std::move(e));
  }
  if (const Value* en = c.Find("enum"); en && !en->is_array()) return InvalidArgument(fmt::format("{}/enum: must be an array", path));
  if (const Value* n = c.Find("nullable")) {
    bool nullable = n->is_bool() && n->as_bool();
    erase("nullable");
    if (nullable) {
      if (Value* t = const_cast<Value*>(c.Find("type"))) t->as_array().push_back(Value::String("null"));
      if (Value* e = const_cast<Value*>(c.Find("enum"))) e->as_array().push_back(Value::Null());
    }
  }
  for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"}) {
    const Value* ex = c.Find(k);
    if (!ex || !ex->is_bool()) continue;
    const char* base = k[9] == 'M' && k[10] == 'i' ? "minimum" : "maximum";
    bool on = ex->as_bool();
    Value bound = c.Find(base) ? *c.Find(base) : Value();
    erase(k);
    if (on && !bound.is_null()) {
      erase(base);
      c.Set(k, std::move(bound));
    }
  }
  if (const Value* items = c.Find("items"); items && items->is_array()) {
    Value prefix = *items;
    erase("items");
    c.Set("prefixItems", std::move(prefix));
    if (const Value* add = c.Find("additionalItems")) {
      Value a = *add;
      erase("additionalItems");
      c.Set("items", std::move(a));
    }
  } else {
    erase("additionalItems");  // meaningless without the array form of items
  }
  // dependentRequired / dependentSchemas / dependencies: "a present ⇒ X" is
  // anyOf[a absent, a present ∧ X] — exact, at the price of alternatives.
  for (const char* k : {"dependentRequired", "dependentSchemas", "dependencies"}) {
    const Value* d = c.Find(k);
    if (!d) continue;
    if (!d->is_object()) return InvalidArgument(fmt::format("{}/{}: must be an object", path, k));
    Value all = c.Find("allOf") ? *c.Find("allOf") : Value::MakeArray();
    if (!all.is_array()) return InvalidArgument(fmt::format("{}/allOf: must be an array", path));
    for (const auto& [name, dep] : d->as_object()) {
      Value absent = Value::MakeObject({{"properties", Value::MakeObject({{name, Value::Bool(false)}})}});
      Value present;
      if (dep.is_array()) {
        // Dependents first, then the trigger: the order unlisted required keys are generated in.
        Value req = dep;
        req.as_array().push_back(Value::String(name));
        present = Value::MakeObject({{"required", std::move(req)}});
      } else {
        present = Value::MakeObject({{"allOf", Value::MakeArray({Value::MakeObject({{"required", Value::MakeArray({Value::String(name)})}}), dep})}});
      }
      all.as_array().push_back(Value::MakeObject({{"anyOf", Value::MakeArray({std::move(absent), std::move(present)})}}));
    }
    erase(k);
    c.Set("allOf", std::move(all));
  }
  // `not`: the forms that are combinators in disguise become them; {type}/{enum} stay for
  // CompileFlat; anything else stays and is an error there.
  if (const Value* n = c.Find("not")) {
    Value neg = *n;
    std::vector<Value> extra;  // conjuncts replacing the `not`
    bool keep = false;
    if (neg.is_bool()) {
      if (neg.as_bool()) extra.push_back(Value::Bool(false));
    } else if (neg.is_object()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : neg.as_object()) {
        if (!IsAnnotation(k)) keys.push_back(k);
      }
      auto negate_all = [&](const Value& list, bool conj) {
        Value::Array out;
        for (const Value& x : list.as_array()) out.push_back(Value::MakeObject({{"not", x}}));
        extra.push_back(Value::MakeObject({{conj ? "allOf" : "anyOf", Value::MakeArray(std::move(out))}}));
      };
      if (keys.empty()) {
        extra.push_back(Value::Bool(false));
      } else if (keys.size() == 1 && keys[0] == "not") {
        extra.push_back(*neg.Find("not"));
      } else if (keys.size() == 1 && keys[0] == "anyOf" && neg.Find("anyOf")->is_array()) {
        negate_all(*neg.Find("anyOf"), true);
      } else if (keys.size() == 1 && keys[0] == "allOf" && neg.Find("allOf")->is_array()) {
        negate_all(*neg.Find("allOf"), false);
      } else if (keys.size() == 1 && keys[0] == "required" && neg.Find("required")->is_array() &&
                 !neg.Find("required")->as_array().empty()) {
        // Not all of them present: an object lacking at least one (non-objects satisfy
        // `required` vacuously, so its negation wants an object).
        Value::Array alts;
        for (const Value& name : neg.Find("required")->as_array()) {
          if (!name.is_string()) return InvalidArgument(fmt::format("{}/not/required: names must be strings", path));
          alts.push_back(Value::MakeObject({{"type", Value::MakeArray({Value::String("object")})},
                                            {"properties", Value::MakeObject({{name.as_string(), Value::Bool(false)}})}}));
        }
        extra.push_back(Value::MakeObject({{"anyOf", Value::MakeArray(std::move(alts))}}));
      } else {
        keep = true;
      }
    }
    if (!keep) {
      erase("not");
      if (!extra.empty()) {
        Value all = c.Find("allOf") ? *c.Find("allOf") : Value::MakeArray();
        if (!all.is_array()) return InvalidArgument(fmt::format("{}/allOf: must be an array", path));
        for (auto& x : extra) all.as_array().push_back(std::move(x));
        c.Set("allOf", std::move(all));
      }
    }
  }
  // Without "if", "then"/"else" are inert; "if" alone has no effect either. Together they
  // stay, and the compiler reports "if" as unsupported.
  if (!c.Find("if")) {
    erase("then");
    erase("else");
  } else if (!c.Find("then") && !c.Find("else")) {
    erase("if");
  }
  return c;
}


void Compiler::IndexIds(const Value& v, const std::string& path) {
  if (v.is_array()) {
    for (size_t i = 0; i < v.as_array().size(); ++i) IndexIds(v.as_array()[i], path + "/" + std::to_string(i));
  }
  if (!v.is_object()) return;
  for (const char* k : {"$id", "$anchor"}) {
    const Value* id = v.Find(k);
    if (!id || !id->is_string()) continue;
    // Base-URI scoping is not modelled: a name defined twice is ambiguous, hence an error on use.
    auto [it, fresh] = ids_.emplace(std::string(k[1] == 'a' ? "#" : "") + id->as_string(), &v);
    if (!fresh) it->second = nullptr;
  }
  for (const auto& [k, c] : v.as_object()) {
    if (k != "enum" && k != "const" && k != "examples" && k != "default") IndexIds(c, path + "/" + PointerEscape(k));
  }
}

void Compiler::Approx(std::string path, std::string what) {
  if (!report_ || !reported_.emplace(path, what).second) return;
  report_->approximations.push_back({std::move(path), std::move(what)});
}

Status Compiler::Check(const std::string& path, int nesting) {
  if (nesting > kMaxNesting) return ResourceExhausted(fmt::format("{}: schema nested deeper than {} levels", path, kMaxNesting));
  if (b_.num_exprs() - start_exprs_ > opts_.max_exprs) {
    return ResourceExhausted(fmt::format("{}: grammar exceeds {} expressions", path, opts_.max_exprs));
  }
  return Status();
}

ExprId Compiler::Ws() {
  if (ws_ < 0) {
    ByteSet s;
    for (char c : std::string_view(" \t\n\r")) s.Set(static_cast<uint8_t>(c));
    ws_ = b_.Ref(b_.AddRule("ws", b_.Repeat(b_.Bytes(s), 0, opts_.max_whitespace)));
  }
  return ws_;
}

ExprId Compiler::Open(int depth) {
  switch (opts_.whitespace) {
    case JsonSchemaOptions::Whitespace::kCompact: return b_.Empty();
    case JsonSchemaOptions::Whitespace::kPretty: return b_.Literal("\n" + std::string(2 * (depth + 1), ' '));
    default: return Ws();
  }
}

ExprId Compiler::Sep(int depth) {
  if (opts_.whitespace == JsonSchemaOptions::Whitespace::kBounded) return b_.Seq({Ws(), b_.Literal(","), Ws()});
  return b_.Seq({b_.Literal(","), Open(depth)});
}

ExprId Compiler::Close(int depth) {
  switch (opts_.whitespace) {
    case JsonSchemaOptions::Whitespace::kCompact: return b_.Empty();
    case JsonSchemaOptions::Whitespace::kPretty: return b_.Literal("\n" + std::string(2 * depth, ' '));
    default: return Ws();
  }
}

ExprId Compiler::Colon() {
  switch (opts_.whitespace) {
    case JsonSchemaOptions::Whitespace::kCompact: return b_.Literal(":");
    case JsonSchemaOptions::Whitespace::kPretty: return b_.Literal(": ");
    default: return b_.Seq({Ws(), b_.Literal(":"), Ws()});
  }
}

// open items close, or the empty container (json.dumps prints "{}" / "[]" even when indenting).
ExprId Compiler::Container(char open, char close, ExprId items, bool allow_empty, int depth) {
  std::string o(1, open), c(1, close);
  ExprId full = b_.Seq({b_.Literal(o), Open(depth), items, Close(depth), b_.Literal(c)});
  if (!allow_empty) return full;
  ExprId empty = opts_.whitespace == JsonSchemaOptions::Whitespace::kBounded ? b_.Seq({b_.Literal(o), Ws(), b_.Literal(c)})
                                                                            : b_.Literal(o + c);
  return b_.Alt({empty, full});
}

ExprId Compiler::AnyValue(int depth) {
  depth = Eff(depth);
  if (depth > kMaxPrettyDepth) {
    Approx("", fmt::format("pretty whitespace: values nested deeper than {} levels are not allowed", kMaxPrettyDepth));
    return b_.Nothing();
  }
  if (auto it = any_value_.find(depth); it != any_value_.end()) return b_.Ref(it->second);
  RuleId r = b_.DeclareRule(depth ? fmt::format("value_{}", depth) : "value");
  any_value_[depth] = r;
  ExprId arr = Container('[', ']', b_.Seq({AnyValue(depth + 1), b_.Star(b_.Seq({Sep(depth), AnyValue(depth + 1)}))}), true, depth);
  b_.DefineRule(r, b_.Alt({AnyObject(depth), arr, lex_.AnyString(), lex_.AnyNumber(), b_.Literal("true"),
                           b_.Literal("false"), b_.Literal("null")}));
  return b_.Ref(r);
}

ExprId Compiler::AnyObject(int depth) {
  depth = Eff(depth);
  if (auto it = any_object_.find(depth); it != any_object_.end()) return b_.Ref(it->second);
  RuleId r = b_.DeclareRule(depth ? fmt::format("object_{}", depth) : "object");
  any_object_[depth] = r;
  ExprId kv = b_.Seq({lex_.AnyString(), Colon(), AnyValue(depth + 1)});
  b_.DefineRule(r, Container('{', '}', b_.Seq({kv, b_.Star(b_.Seq({Sep(depth), kv}))}), true, depth));
  return b_.Ref(r);
}

Result<const Value*> Compiler::Resolve(const std::string& ref, const std::string& path) {
  std::string base, frag = ref;
  if (size_t hash = ref.find('#'); hash != std::string::npos) {
    base = ref.substr(0, hash);
    frag = ref.substr(hash);
  } else {
    base = ref;
    frag = "";
  }
  const Value* doc = &root_;
  if (!base.empty()) {
    auto it = ids_.find(base);
    if (it == ids_.end()) return Unsupported(fmt::format("{}/$ref: remote reference '{}' is not supported", path, ref));
    if (!it->second) return Unsupported(fmt::format("{}/$ref: '{}' names several subschemas (base URIs are not resolved)", path, ref));
    doc = it->second;
  }
  if (frag.empty() || frag == "#") return doc;
  if (frag[1] != '/') {
    auto it = ids_.find(frag);
    if (it == ids_.end()) return NotFound(fmt::format("{}/$ref: anchor '{}' not found", path, ref));
    if (!it->second) return Unsupported(fmt::format("{}/$ref: anchor '{}' is defined several times (base URIs are not resolved)", path, ref));
    return it->second;
  }
  const Value* cur = doc;
  size_t pos = 2;
  while (true) {
    size_t next = frag.find('/', pos);
    std::string tok = frag.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    std::string dec;
    for (size_t i = 0; i < tok.size(); ++i) {
      if (tok[i] == '~' && i + 1 < tok.size()) {
        dec += tok[i + 1] == '1' ? '/' : '~';
        ++i;
      } else if (tok[i] == '%' && i + 2 < tok.size() && isxdigit(tok[i + 1]) && isxdigit(tok[i + 2])) {
        dec += static_cast<char>(*ParseU64(std::string_view(tok).substr(i + 1, 2), 16));  // two hex digits
        i += 2;
      } else {
        dec += tok[i];
      }
    }
    if (cur->is_object()) {
      cur = cur->Find(dec);
    } else if (auto idx = cur->is_array() ? ParseU64(dec) : std::nullopt; idx && *idx < cur->as_array().size()) {
      // ParseU64, not std::stoul: an index past 2^64 is "does not resolve", not an exception.
      cur = &cur->as_array()[*idx];
    } else {
      cur = nullptr;
    }
    if (!cur) return NotFound(fmt::format("{}/$ref: '{}' does not resolve in this document", path, ref));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return cur;
}

bool OnlyRef(const Value& c) {
  if (!c.is_object() || !c.Find("$ref")) return false;
  for (const auto& [k, v] : c.as_object()) {
    if (k != "$ref" && !IsAnnotation(k)) return false;
  }
  return true;
}

Result<ExprId> Compiler::RefRule(const Value& s, const std::string& path, int depth) {
  const Value* ref = s.Find("$ref");
  if (!ref->is_string()) return InvalidArgument(fmt::format("{}/$ref: must be a string", path));
  LADLE_ASSIGN_OR_RETURN(const Value* target, Resolve(ref->as_string(), path));
  // A chain of bare $refs that loops back consumes nothing: left recursion.
  std::set<const Value*> seen{target};
  for (const Value* t = target; t->is_object() && OnlyRef(*t) && t->Find("$ref")->is_string();) {
    LADLE_ASSIGN_OR_RETURN(t, Resolve(t->Find("$ref")->as_string(), path));
    if (!seen.insert(t).second) return InvalidArgument(fmt::format("{}/$ref: reference cycle that matches nothing", path));
  }
  auto key = std::make_pair(target, Eff(depth));
  if (auto it = ref_rules_.find(key); it != ref_rules_.end()) return b_.Ref(it->second);
  std::string name = "ref" + ref->as_string();
  RuleId r = b_.DeclareRule(Eff(depth) ? fmt::format("{}@{}", name, depth) : name);
  ref_rules_[key] = r;
  LADLE_ASSIGN_OR_RETURN(ExprId body, Compile(*target, ref->as_string().substr(ref->as_string().find('#') == std::string::npos ? 0 : ref->as_string().find('#') + 1), depth));
  b_.DefineRule(r, body);
  return b_.Ref(r);
}

Result<std::vector<Value>> Compiler::Expand(const Value& s0, const std::string& path, int ref_chain) {
  if (s0.is_bool()) return s0.as_bool() ? std::vector<Value>{Value::MakeObject()} : std::vector<Value>{};
  if (!s0.is_object()) return InvalidArgument(fmt::format("{}: a schema must be an object or a boolean", path));
  if (ref_chain > kMaxRefChain) return Unsupported(fmt::format("{}: $ref/allOf chain deeper than {} (recursion without a value in between)", path, kMaxRefChain));
  if (ref_overrides_ && s0.Find("$ref") && s0.Find("$ref")->is_string()) {
    LADLE_ASSIGN_OR_RETURN(const Value* target, Resolve(s0.Find("$ref")->as_string(), path));
    return Expand(*target, path + "/$ref", ref_chain + 1);
  }
  LADLE_ASSIGN_OR_RETURN(Value s, Canonical(s0, path));
  // `s` is this call's own copy: its plain members move into `base` (copying them again was
  // a quadratic share of front-end time on deeply nested schemas: every level re-copied its
  // whole subtree twice more).
  Value base = Value::MakeObject();
  for (auto& [k, v] : s.as_object()) {
    if (k != "$ref" && k != "allOf" && k != "anyOf" && k != "oneOf") base.Set(k, std::move(v));
  }
  std::vector<std::vector<Value>> parts;
  if (const Value* ref = s.Find("$ref")) {
    if (!ref->is_string()) return InvalidArgument(fmt::format("{}/$ref: must be a string", path));
    LADLE_ASSIGN_OR_RETURN(const Value* target, Resolve(ref->as_string(), path));
    LADLE_ASSIGN_OR_RETURN(auto alts, Expand(*target, path + "/$ref", ref_chain + 1));
    parts.push_back(std::move(alts));
  }
  for (const char* k : {"allOf", "anyOf", "oneOf"}) {
    const Value* list = s.Find(k);
    if (!list) continue;
    if (!list->is_array() || list->as_array().empty()) return InvalidArgument(fmt::format("{}/{}: must be a non-empty array", path, k));
    std::vector<std::vector<Value>> branches;
    for (size_t i = 0; i < list->as_array().size(); ++i) {
      LADLE_ASSIGN_OR_RETURN(auto alts, Expand(list->as_array()[i], fmt::format("{}/{}/{}", path, k, i), ref_chain + 1));
      branches.push_back(std::move(alts));
    }
    if (std::string_view(k) == "allOf") {
      for (auto& br : branches) parts.push_back(std::move(br));
    } else {
      if (std::string_view(k) == "oneOf") {
        // The sibling `type` narrows what both branches see.
        unsigned base_mask = kAllTypes;
        if (const Value* t = base.Find("type"); t && t->is_array()) {
          base_mask = 0;
          for (const Value& x : t->as_array()) base_mask |= TypeMask(x.as_string());
          if (base_mask & (kInt | kFrac)) base_mask |= kInt | kFrac;
        }
        CheckOneOf(branches, path + "/oneOf", base_mask);
      }
      std::vector<Value> any;
      for (auto& br : branches) any.insert(any.end(), br.begin(), br.end());
      parts.push_back(std::move(any));
    }
  }
  std::vector<Value> out;
  out.push_back(std::move(base));
  for (auto& part : parts) {
    std::vector<Value> next;
    for (const Value& x : out) {
      for (const Value& y : part) {
        LADLE_ASSIGN_OR_RETURN(Value m, MergeSchemas(x, y, path));
        next.push_back(std::move(m));
        if (next.size() > kMaxAlternatives) {
          return Unsupported(fmt::format("{}: combinators expand to more than {} alternatives", path, kMaxAlternatives));
        }
      }
    }
    out = std::move(next);
  }
  return out;
}

// oneOf = anyOf when no instance can match two branches. Proven here only for branches of
// disjoint types, disjoint enums, or objects with a required discriminator of disjoint values.
void Compiler::CheckOneOf(const std::vector<std::vector<Value>>& branches, const std::string& path, unsigned base_mask) {
  auto mask = [base_mask](const Value& f) {
    unsigned m = base_mask;
    if (const Value* t = f.Find("type")) {
      m = 0;
      for (const Value& x : t->as_array()) m |= TypeMask(x.as_string());
    }
    if (const Value* e = f.Find("enum")) {
      unsigned em = 0;
      for (const Value& x : e->as_array()) em |= ValueMask(x);
      m &= em;
    }
    if (m & kInt) m |= kFrac;  // 1.0 is both
    if (m & kFrac) m |= kInt;
    return m;
  };
  auto disjoint_enums = [](const Value* a, const Value* b) {
    if (!a || !b) return false;
    for (const Value& x : a->as_array()) {
      for (const Value& y : b->as_array()) {
        if (schema_internal::SchemaValueEqual(x, y)) return false;
      }
    }
    return true;
  };
  auto required = [](const Value& f, const std::string& name) {
    const Value* r = f.Find("required");
    if (!r || !r->is_array()) return false;
    for (const Value& x : r->as_array()) {
      if (x.is_string() && x.as_string() == name) return true;
    }
    return false;
  };
  auto disjoint = [&](const Value& a, const Value& b) {
    if (!(mask(a) & mask(b))) return true;
    if (disjoint_enums(a.Find("enum"), b.Find("enum"))) return true;
    const Value* pa = a.Find("properties");
    const Value* pb = b.Find("properties");
    // An object needing a key that the other side forbids (closed, not listed there).
    auto closed_without = [&](const Value& x, const Value& y) {
      const Value* add = y.Find("additionalProperties");
      const Value* req = x.Find("required");
      if (!add || !add->is_bool() || add->as_bool() || y.Find("patternProperties") || !req || !req->is_array()) return false;
      if ((mask(x) & ~kObject) || (mask(y) & ~kObject)) return false;
      const Value* yp = y.Find("properties");
      for (const Value& n : req->as_array()) {
        if (n.is_string() && !(yp && yp->is_object() && yp->Find(n.as_string()))) return true;
      }
      return false;
    };
    if (closed_without(a, b) || closed_without(b, a)) return true;
    if (!pa || !pb || mask(a) != kObject || mask(b) != kObject || !pa->is_object() || !pb->is_object()) return false;
    for (const auto& [name, sa] : pa->as_object()) {
      const Value* sb = pb->Find(name);
      if (!sb || !sa.is_object() || !sb->is_object() || !required(a, name) || !required(b, name)) continue;
      auto ca = Canonical(sa, path), cb = Canonical(*sb, path);
      if (ca.ok() && cb.ok() && disjoint_enums(ca->Find("enum"), cb->Find("enum"))) return true;
    }
    return false;
  };
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = i + 1; j < branches.size(); ++j) {
      for (const Value& a : branches[i]) {
        for (const Value& b : branches[j]) {
          if (!disjoint(a, b)) {
            Approx(path, fmt::format("oneOf compiled as anyOf: branches {} and {} are not provably disjoint", i, j));
            return;
          }
        }
      }
    }
  }
}

Result<ExprId> Compiler::Compile(const Value& s, const std::string& path, int depth) {
  ++nesting_;
  struct Guard {
    int& n;
    ~Guard() { --n; }
  } guard{nesting_};
  LADLE_RETURN_IF_ERROR(Check(path, nesting_));
  if (opts_.whitespace == JsonSchemaOptions::Whitespace::kPretty && depth > kMaxPrettyDepth) {
    Approx(path, fmt::format("pretty whitespace: values nested deeper than {} levels are not allowed", kMaxPrettyDepth));
    return b_.Nothing();
  }
  if (s.is_bool()) return s.as_bool() ? AnyValue(depth) : b_.Nothing();
  if (!s.is_object()) return InvalidArgument(fmt::format("{}: a schema must be an object or a boolean", path));
  if (OnlyRef(s) || (ref_overrides_ && s.Find("$ref"))) return RefRule(s, path, depth);
  // A bare anyOf/oneOf compiles its branches separately, so $ref branches stay rule calls.
  bool only_union = false;
  const char* union_key = s.Find("anyOf") ? "anyOf" : "oneOf";
  if ((s.Find("anyOf") != nullptr) != (s.Find("oneOf") != nullptr) && s.Find(union_key)->is_array() &&
      !s.Find(union_key)->as_array().empty()) {
    only_union = true;
    for (const auto& [k, v] : s.as_object()) {
      if (k != union_key && !IsAnnotation(k)) only_union = false;
    }
  }
  if (only_union) {
    const auto& list = s.Find(union_key)->as_array();
    if (std::string_view(union_key) == "oneOf") {
      std::vector<std::vector<Value>> branches;
      for (size_t i = 0; i < list.size(); ++i) {
        LADLE_ASSIGN_OR_RETURN(auto alts, Expand(list[i], fmt::format("{}/oneOf/{}", path, i), 0));
        branches.push_back(std::move(alts));
      }
      CheckOneOf(branches, path + "/oneOf", kAllTypes);
    }
    std::vector<ExprId> alts;
    for (size_t i = 0; i < list.size(); ++i) {
      LADLE_ASSIGN_OR_RETURN(ExprId e, Compile(list[i], fmt::format("{}/{}/{}", path, union_key, i), depth));
      alts.push_back(e);
    }
    return b_.Alt(std::move(alts));
  }
  LADLE_ASSIGN_OR_RETURN(auto flats, Expand(s, path, 0));
  std::vector<ExprId> alts;
  for (const Value& f : flats) {
    LADLE_ASSIGN_OR_RETURN(ExprId e, CompileFlat(f, path, depth));
    alts.push_back(e);
  }
  return b_.Alt(std::move(alts));
}

}  // namespace ladle::grammar::schema_internal
