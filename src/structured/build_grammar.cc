// ConstraintSpec → grammar IR: the front-end step, shared by the server's in-process compile
// and `ladle grammar-worker`, so both build the very same grammar from the same spec.
#include "ladle/json/json.h"
#include "ladle/structured/constraint.h"
#include "structured_internal.h"

namespace ladle::structured {

namespace {

grammar::JsonSchemaOptions SchemaOptions(const ConstraintSpec& spec) {
  grammar::JsonSchemaOptions o;
  o.whitespace = spec.whitespace;
  o.max_whitespace = spec.max_whitespace;
  o.allow_unlisted_properties = spec.allow_unlisted_properties;
  return o;
}

}  // namespace

Result<grammar::Grammar> BuildGrammar(const ConstraintSpec& spec, grammar::CompileReport* report) {
  switch (spec.kind) {
    case ConstraintKind::kJsonObject:
      return grammar::JsonObjectGrammar(SchemaOptions(spec));
    case ConstraintKind::kJsonSchema: {
      LADLE_ASSIGN_OR_RETURN(json::Value schema, json::Parse(spec.payload));
      return grammar::JsonSchemaGrammar(schema, SchemaOptions(spec), report);
    }
    case ConstraintKind::kRegex:
      return grammar::RegexGrammar(spec.payload);
    case ConstraintKind::kEbnf:
      return grammar::EbnfGrammar(spec.payload);
    case ConstraintKind::kToolCall:
      return BuildToolCallSpecGrammar(spec, report);
  }
  return InvalidArgument("unknown constraint kind");
}

}  // namespace ladle::structured
