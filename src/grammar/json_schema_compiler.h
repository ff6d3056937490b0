// The JSON Schema compiler's internal class, shared by json_schema.cc (combinators, $ref,
// whitespace) and json_schema_types.cc (per-type grammars). Not a public interface.
#pragma once

#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "json_schema_internal.h"

namespace ladle::grammar::schema_internal {

using json::Value;

// JSON type bits; kInt is the integral part of "number".
enum TypeBit : unsigned { kNull = 1, kBool = 2, kObject = 4, kArray = 8, kInt = 16, kFrac = 32, kString = 64 };
constexpr unsigned kAllTypes = 127;

bool IsAnnotation(std::string_view k);
bool IsUnsupportedKeyword(std::string_view k);
unsigned TypeMask(std::string_view t);
unsigned ValueMask(const Value& v);
std::string PointerEscape(std::string_view key);
size_t CodePointCount(std::string_view s);
// Old spellings (items arrays, boolean exclusiveMinimum, const, nullable, type strings) → 2020-12.
Result<Value> Canonical(const Value& s, const std::string& path);
// {"$ref": ...} with nothing but annotations beside it.
bool OnlyRef(const Value& s);

struct ObjectProp {
  std::string name;
  ExprId kv;  // "name": value
  bool required;
};

class Compiler {
 public:
  Compiler(GrammarBuilder& b, const Value& root, const JsonSchemaOptions& opts, CompileReport* report)
      : b_(b), lex_(b), root_(root), opts_(opts), report_(report), start_exprs_(b.num_exprs()) {
    IndexIds(root, "");
    if (const Value* meta = root.is_object() ? root.Find("$schema") : nullptr; meta && meta->is_string()) {
      const std::string& m = meta->as_string();
      if (m.find("draft-04") != std::string::npos || m.find("draft-03") != std::string::npos) lex_.integral_fraction = false;
      // Before 2019-09, keywords beside a $ref are ignored.
      for (const char* d : {"draft-03", "draft-04", "draft-05", "draft-06", "draft-07"}) {
        if (m.find(d) != std::string::npos) ref_overrides_ = true;
      }
    }
  }

  Result<ExprId> Compile(const Value& s, const std::string& path, int depth);
  ExprId AnyValue(int depth);
  ExprId AnyObject(int depth);

 private:
  // Whitespace between tokens at nesting `depth` (the container's own depth).
  ExprId Ws();
  ExprId Open(int depth);
  ExprId Sep(int depth);
  ExprId Close(int depth);
  ExprId Colon();
  ExprId Container(char open, char close, ExprId items, bool allow_empty, int depth);

  Status Check(const std::string& path, int nesting);
  void Approx(std::string path, std::string what);
  Result<const Value*> Resolve(const std::string& ref, const std::string& path);
  Result<ExprId> RefRule(const Value& s, const std::string& path, int depth);
  Result<std::vector<Value>> Expand(const Value& s, const std::string& path, int ref_chain);
  void CheckOneOf(const std::vector<std::vector<Value>>& branches, const std::string& path, unsigned base_mask);
  Result<ExprId> CompileFlat(const Value& s, const std::string& path, int depth);
  Result<ExprId> Literal(const Value& v, int depth);
  ExprId NumberLiteral(std::string_view text);
  Result<ExprId> StringGrammar(const Value& s, const std::string& path);
  Result<ExprId> NumberGrammar(const Value& s, const std::string& path, bool integer_only);
  Result<ExprId> ArrayGrammar(const Value& s, const std::string& path, int depth);
  Result<ExprId> ObjectGrammar(const Value& s, const std::string& path, int depth);
  Result<ExprId> CountedObject(const std::vector<ObjectProp>& props, ExprId extra, bool has_extra, uint64_t min_p,
                               uint64_t max_p, const std::string& path, int depth);
  // kAny key order (json_schema_object.cc): subset states over the listed keys.
  Result<ExprId> AnyOrderObject(const std::vector<ObjectProp>& props, ExprId extra, bool has_extra, uint64_t min_p,
                                uint64_t max_p, const std::string& path, int depth);
  Result<ExprId> RegexContent(const std::string& pattern, const std::string& path);
  ExprId KeyNotIn(const std::vector<std::string>& names);
  bool EnumValueFits(const Value& v, const Value& s, const std::string& path);
  int Eff(int depth) const { return opts_.whitespace == JsonSchemaOptions::Whitespace::kPretty ? depth : 0; }
  void IndexIds(const Value& v, const std::string& path);

  GrammarBuilder& b_;
  Lexical lex_;
  const Value& root_;
  JsonSchemaOptions opts_;
  CompileReport* report_;
  size_t start_exprs_;
  int nesting_ = 0;
  ExprId ws_ = -1;
  std::map<std::pair<const Value*, int>, RuleId> ref_rules_;
  std::map<int, RuleId> any_value_, any_object_;
  std::map<std::string, const Value*> ids_;
  std::set<std::pair<std::string, std::string>> reported_;
  std::map<std::vector<std::string>, ExprId> key_cache_;
  std::map<std::pair<uint32_t, uint32_t>, ExprId> length_rules_;
  std::map<std::pair<bool, std::vector<uint32_t>>, ExprId> diverge_rules_;
  ExprId key_tail_ = -1;
  uint64_t order_states_ = 0;  // subset states spent on any-order objects (json_schema_object.cc)
  bool ref_overrides_ = false;  // drafts 3-7: siblings of $ref are ignored
};

}  // namespace ladle::grammar::schema_internal
