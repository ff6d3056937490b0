// JSON Schema compiler: each keyword's accepted and rejected texts, checked with the
// reference recognizer (the slow, obviously-correct oracle over the IR).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ladle/grammar/grammar.h"
#include "ladle/json/json.h"
#include "reference_recognizer.h"

namespace ladle::grammar {
namespace {

struct Compiled {
  Grammar g;
  CompileReport report;
};

Compiled MustCompile(std::string_view schema, JsonSchemaOptions opts = {}) {
  auto v = json::Parse(schema);
  EXPECT_TRUE(v.ok()) << schema;
  Compiled c;
  auto g = JsonSchemaGrammar(*v, opts, &c.report);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().ToString();
  if (g.ok()) c.g = std::move(*g);
  return c;
}

Status CompileError(std::string_view schema) {
  auto v = json::Parse(schema);
  EXPECT_TRUE(v.ok()) << schema;
  auto g = JsonSchemaGrammar(*v, {});
  return g.ok() ? Status() : g.status();
}

bool HasApprox(const CompileReport& r, std::string_view path_part) {
  for (const auto& a : r.approximations) {
    if (a.path.find(path_part) != std::string::npos) return true;
  }
  return false;
}

// Compact whitespace keeps the texts below short; whitespace modes have their own test.
void Expect(std::string_view schema, std::vector<std::string> accept, std::vector<std::string> reject,
            JsonSchemaOptions opts = {.whitespace = JsonSchemaOptions::Whitespace::kCompact}) {
  Compiled c = MustCompile(schema, opts);
  auto rec = ReferenceRecognizer::Create(c.g);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  for (const auto& s : accept) EXPECT_TRUE(rec->Matches(s)) << schema << " should accept " << s;
  for (const auto& s : reject) EXPECT_FALSE(rec->Matches(s)) << schema << " should reject " << s;
}

TEST(JsonSchema, Types) {
  Expect(R"({"type":"null"})", {"null"}, {"0", "\"\"", "nul"});
  Expect(R"({"type":"boolean"})", {"true", "false"}, {"null", "1"});
  Expect(R"({"type":["string","null"]})", {"null", "\"x\""}, {"1", "[]"});
  Expect(R"({"type":"integer"})", {"0", "-7", "12", "1.0", "3.00"}, {"1.5", "01", "-", "1e3", "\"1\""});
  Expect(R"({"type":"number"})", {"0", "-7.25", "1e3", "1E-2", "0.5"}, {"01", ".5", "1.", "+1", "1e"});
  Expect(R"({})", {"null", "{\"a\":[1,{}]}", "\"s\"", "-0.5"}, {"", "{", "nul"});
  Expect(R"(true)", {"[]"}, {""});
  Expect(R"(false)", {}, {"null", "{}"});
}

TEST(JsonSchema, Strings) {
  Expect(R"({"type":"string"})", {R"("")", R"("a\"b")", R"("\u00e9\n")", "\"\xC3\xA9\"", R"("\ud83d\ude00")"},
         {R"("a)", "\"a\nb\"", R"("\x")", R"("\ud83d")", R"("\u12")"});
  Expect(R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", R"("abc")", R"("\n\t")", "\"\xC3\xA9\xC3\xA9\"",
                                                             R"("\ud83d\ude00x")"},
         {R"("a")", R"("abcd")", "\"\xC3\xA9\""});
}

TEST(JsonSchema, EnumAndConst) {
  Expect(R"({"enum":["a",1,null,[1,2],{"k":true}]})", {R"("a")", "1", "1.0", "null", "[1,2]", R"({"k":true})"},
         {R"("b")", "2", "[2,1]", "{}"});
  Expect(R"({"const":0})", {"0", "-0", "0.0"}, {"1"});
  Expect(R"({"type":"string","enum":["a",1]})", {R"("a")"}, {"1"});
  Expect(R"({"enum":[1.5]})", {"1.5", "1.50"}, {"1.55", "15"});
}

TEST(JsonSchema, IntegerRanges) {
  Expect(R"({"type":"integer","minimum":1,"maximum":12})", {"1", "9", "10", "12"}, {"0", "13", "-1", "012", "100"});
  Expect(R"({"type":"integer","minimum":-15,"maximum":7})", {"-15", "-9", "-1", "0", "7", "-0"}, {"-16", "8", "-20"});
  Expect(R"({"type":"integer","minimum":0})", {"0", "5", "123456789012345678901234567890"}, {"-1"});
  Expect(R"({"type":"integer","exclusiveMaximum":100})", {"99", "-100000", "0"}, {"100", "101", "1000"});
  Expect(R"({"type":"integer","exclusiveMinimum":1.5,"maximum":3.9})", {"2", "3"}, {"1", "4"});
  Expect(R"({"type":"integer","minimum":5,"exclusiveMinimum":true})", {"6"}, {"5"});  // draft 4 form
  Expect(R"({"type":"integer","minimum":10,"maximum":2})", {}, {"5", "10", "2"});
}

TEST(JsonSchema, NumberRanges) {
  Expect(R"({"type":"number","minimum":0})", {"0", "0.0", "3.5", "100"}, {"-0.5", "-1"});
  Expect(R"({"type":"number","minimum":1.5,"maximum":2.25})", {"1.5", "1.50", "1.6", "2", "2.25", "2.2499"},
         {"1.49", "1.4999", "2.251", "2.3", "3", "1"});
  Expect(R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", {"0.5", "0.0001", "0.999"},
         {"0", "0.0", "1", "1.0", "-0.1"});
  Expect(R"({"type":"number","minimum":-2.5,"maximum":-1})", {"-2.5", "-2", "-1", "-1.0", "-1.75"},
         {"-2.6", "-0.5", "0", "1"});
  Expect(R"({"type":"number","exclusiveMaximum":0})", {"-0.1", "-5"}, {"0", "-0", "0.1"});
}

TEST(JsonSchema, MultipleOf) {
  Expect(R"({"type":"integer","multipleOf":3})", {"0", "3", "-12", "99", "3.0"}, {"1", "10", "-4"});
  Expect(R"({"type":"integer","multipleOf":5,"minimum":0,"maximum":20})", {"0", "5", "20"}, {"3", "25", "-5"});
  Expect(R"({"type":"number","multipleOf":0.01})", {"1", "1.5", "1.25", "1.250"}, {"1.255"});
  Expect(R"({"type":"number","multipleOf":0.01,"minimum":0.005,"maximum":2.5})", {"0.01", "1.5", "2.5", "2.50", "0.10"},
         {"0", "0.005", "2.51", "1.255", "-1", "0.001"});
  Expect(R"({"type":"number","multipleOf":0.1,"exclusiveMinimum":0})", {"0.1", "7", "3.20"}, {"0", "0.0", "0.05", "-0.1"});
}

TEST(JsonSchema, Formats) {
  Expect(R"({"type":"string","format":"date"})", {R"("2024-02-29")", R"("2000-02-29")", R"("2023-12-31")"},
         {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")", R"("23-01-01")"});
  Expect(R"({"type":"string","format":"date-time"})", {R"("2023-01-01T10:20:30Z")", R"("2023-01-01t10:20:30.5+05:30")"},
         {R"("2023-01-01 10:20:30Z")", R"("2023-01-01T24:00:00Z")", R"("2023-01-01T10:20:30")"});
  Expect(R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
         {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"});
  Expect(R"({"type":"string","format":"ipv4"})", {R"("192.168.0.1")", R"("0.0.0.0")", R"("255.255.255.255")"},
         {R"("256.1.1.1")", R"("01.1.1.1")", R"("1.1.1")"});
  Expect(R"({"type":"string","format":"ipv6"})", {R"("::1")", R"("::")", R"("2001:db8::8a2e:370:7334")",
                                                  R"("1:2:3:4:5:6:7:8")", R"("::ffff:192.0.2.1")"},
         {R"("1:2:3:4:5:6:7:8:9")", R"("1::2::3")", R"("12345::")"});
  Expect(R"({"type":"string","format":"email"})", {R"("a.b@example.com")"}, {R"("a@")", R"("@b.com")", R"("a..b@c.d")", R"("user@localhost")", R"("a@b.")"});
  Expect(R"({"type":"string","format":"uri"})", {R"("https://example.com/a?b=c#d")"}, {R"("no scheme")", R"("//x")"});
  Compiled c = MustCompile(R"({"type":"string","format":"idn-hostname"})");
  EXPECT_TRUE(HasApprox(c.report, "/format"));
}

TEST(JsonSchema, Pattern) {
  Expect(R"({"type":"string","pattern":"^[a-z]+$"})", {R"("abc")"}, {R"("ab1")", R"("")"});
  Expect(R"({"type":"string","pattern":"b"})", {R"("abc")", R"("b")"}, {R"("ac")"});
  Expect(R"({"type":"string","pattern":"^a\"b$"})", {R"("a\"b")"}, {R"("a"b")"});
}

TEST(JsonSchema, Objects) {
  const char* s = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"],
                      "additionalProperties":false})";
  Expect(s, {R"({"a":1})", R"({"a":1,"b":"x"})", R"({"b":"x","a":1})"},
         {R"({})", R"({"b":"x"})", R"({"a":1,"c":2})", R"({"a":"1"})", R"({"a":1,"a":2})", R"({"b":"x","a":1,"b":"y"})"});
  // Schema order is the explicit option (json_schema_key_order_test.cc covers any order).
  Expect(s, {R"({"a":1,"b":"x"})"}, {R"({"b":"x","a":1})"},
         {.whitespace = JsonSchemaOptions::Whitespace::kCompact, .key_order = JsonSchemaOptions::KeyOrder::kSchema});
  // Unlisted keys: anything but a listed name.
  const char* open = R"({"properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})";
  Expect(open, {R"({})", R"({"a":1,"z":true})", R"({"ab":false})", R"({"":true})"},
         {R"({"a":true})", R"({"z":1})", R"({"a":1,"a":true})"});
  Expect(R"({"required":["x"]})", {R"({"x":null})", R"({"x":1,"y":2})"}, {R"({})", R"({"y":2})"});
  Expect(R"({"properties":{"a":{},"b":{}},"minProperties":1,"maxProperties":2})",
         {R"({"a":1})", R"({"b":1})", R"({"a":1,"b":2})", R"({"z":1})", R"({"a":1,"z":1})"},
         {R"({})", R"({"a":1,"b":2,"z":3})", R"({"y":1,"z":1,"x":1})"});
  Expect(R"({"type":"object","maxProperties":1})", {R"({})", R"({"k":1})"}, {R"({"k":1,"j":2})"});
  Expect(R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false})",
         {R"({"x-a":1})", R"({})"}, {R"({"x-a":"s"})", R"({"y":1})"});
  // Any order of listed keys (the default) is exact; schema order is reported (and so is
  // "unlisted keys after the listed ones" where unlisted keys are allowed).
  EXPECT_FALSE(HasApprox(MustCompile(R"({"properties":{"a":{},"b":{}},"additionalProperties":false})").report, "/properties"));
  Compiled c = MustCompile(R"({"properties":{"a":{},"b":{}}})", {.key_order = JsonSchemaOptions::KeyOrder::kSchema});
  EXPECT_TRUE(HasApprox(c.report, "/properties"));
}

TEST(JsonSchema, UnlistedPropertiesOption) {
  JsonSchemaOptions o{.whitespace = JsonSchemaOptions::Whitespace::kCompact, .allow_unlisted_properties = false};
  Expect(R"({"properties":{"a":{}}})", {R"({"a":1})", R"({})"}, {R"({"b":1})"}, o);
}

TEST(JsonSchema, Arrays) {
  Expect(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})", {"[1]", "[1,2,3]"},
         {"[]", "[1,2,3,4]", "[\"a\"]", "[1,]"});
  Expect(R"({"prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})", {"[]", "[1]", "[1,\"a\"]"},
         {"[1,\"a\",2]", "[\"a\"]"});
  Expect(R"({"items":[{"type":"integer"}],"additionalItems":{"type":"boolean"}})", {"[1,true,false]"},
         {"[1,2]"});  // draft 4-2019 form
  Expect(R"({"prefixItems":[{"type":"integer"},{"type":"integer"}],"minItems":2})", {"[1,2]", "[1,2,\"x\"]"}, {"[1]"});
  Compiled c = MustCompile(R"({"type":"array","uniqueItems":true})");
  EXPECT_TRUE(HasApprox(c.report, "/uniqueItems"));
}

TEST(JsonSchema, Combinators) {
  Expect(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})", {"1", R"("a")"}, {R"("ab")", "null"});
  Expect(R"({"allOf":[{"type":"integer","minimum":2},{"maximum":4}]})", {"2", "4"}, {"1", "5", "\"a\""});
  Expect(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
                      {"properties":{"b":{"type":"string"}},"required":["b"]}]})",
         {R"({"a":1,"b":"x"})"}, {R"({"a":1})", R"({"b":"x"})"});
  Expect(R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]})",
         {R"({"a":1})"}, {R"({"b":1})", R"({"a":1,"b":1})"});
  Expect(R"({"type":"object","properties":{"k":{"type":"string"}},"anyOf":[{"required":["k"]},{"maxProperties":0}]})",
         {R"({"k":"v"})", "{}"}, {R"({"k":1})"});
  Compiled disjoint = MustCompile(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})");
  EXPECT_TRUE(disjoint.report.approximations.empty());
  Compiled closed = MustCompile(R"({"oneOf":[{"type":"object","required":["a"],"additionalProperties":false,"properties":{"a":{}}},
                                             {"type":"object","required":["b"],"properties":{"b":{}},"additionalProperties":false}]})");
  EXPECT_FALSE(HasApprox(closed.report, "/oneOf"));
  Compiled tagged = MustCompile(R"({"type":"object","oneOf":[{"properties":{"t":{"enum":["a"]}},"required":["t"]},
                                                             {"properties":{"t":{"const":"b"}},"required":["t"]}]})");
  EXPECT_FALSE(HasApprox(tagged.report, "/oneOf"));
  Compiled overlap = MustCompile(R"({"oneOf":[{"type":"string"},{"minLength":2}]})");
  EXPECT_TRUE(HasApprox(overlap.report, "/oneOf"));
}

TEST(JsonSchema, RefsAndRecursion) {
  const char* tree = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                         "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],
                         "additionalProperties":false}},"$ref":"#/$defs/node"})";
  Expect(tree, {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]})"}, {R"({"v":1,"kids":[{}]})"});
  Expect(R"({"definitions":{"a":{"type":"integer"}},"properties":{"x":{"$ref":"#/definitions/a"}}})",
         {R"({"x":1})"}, {R"({"x":"1"})"});
  Expect(R"({"anyOf":[{"type":"null"},{"type":"array","items":{"$ref":"#"}}]})", {"null", "[]", "[[null],null]"}, {"[1]"});
  Expect(R"({"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":1})", {R"("a")"}, {R"("ab")", "1"});
  // Draft 7 and earlier ignore the siblings of $ref.
  Expect(R"({"$schema":"http://json-schema.org/draft-07/schema#","$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":1})",
         {R"("a")", R"("ab")"}, {"1"});
  EXPECT_EQ(CompileError(R"({"$ref":"http://example.com/schema.json"})").code(), StatusCode::kUnsupported);
  EXPECT_FALSE(CompileError(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").ok());
  EXPECT_EQ(CompileError(R"({"$ref":"#/$defs/missing"})").code(), StatusCode::kNotFound);
}

TEST(JsonSchema, Nullable) {
  Expect(R"({"type":"string","nullable":true})", {"null", R"("a")"}, {"1"});
  Expect(R"({"enum":["a"],"nullable":true})", {"null", R"("a")"}, {R"("b")"});
}

TEST(JsonSchema, Not) {
  Expect(R"({"not":{"type":"string"}})", {"1", "null", "[]"}, {R"("a")"});
  Expect(R"({"type":["string","null"],"not":{"type":"null"}})", {R"("a")"}, {"null"});
  Expect(R"({"type":"string","not":{"enum":["a","bc"]}})", {R"("b")", R"("")", R"("bcd")", R"("ab")"}, {R"("a")", R"("bc")"});
  Expect(R"({"not":{"const":true}})", {"false", "1"}, {"true"});
  Expect(R"({"type":"object","not":{"required":["a","b"]}})", {R"({})", R"({"a":1})", R"({"b":1})"}, {R"({"a":1,"b":2})"});
  Expect(R"({"not":{"not":{"type":"integer"}}})", {"1"}, {R"("a")"});
  Expect(R"({"not":{"anyOf":[{"type":"integer"},{"type":"string"}]}})", {"null", "1.5"}, {"1", R"("a")"});
  Expect(R"({"not":{}})", {}, {"1", "null"});
}

TEST(JsonSchema, Dependencies) {
  Expect(R"({"properties":{"a":{},"b":{}},"dependentRequired":{"a":["b"]}})", {R"({})", R"({"b":1})", R"({"a":1,"b":2})"},
         {R"({"a":1})"});
  Expect(R"({"properties":{"a":{},"b":{}},"dependencies":{"a":{"properties":{"b":{"type":"integer"}}}}})",
         {R"({"b":"x"})", R"({"a":1,"b":2})", R"({"a":1})"}, {R"({"a":1,"b":"x"})"});
}

TEST(JsonSchema, UnsupportedKeywordsAreErrorsWithPaths) {
  Status s = CompileError(R"({"properties":{"a":{"not":{"minimum":3}}}})");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("/properties/a/not"), std::string::npos) << s.message();
  EXPECT_EQ(CompileError(R"({"contains":{"type":"integer"}})").code(), StatusCode::kUnsupported);
  EXPECT_EQ(CompileError(R"({"if":{"type":"integer"},"then":{"minimum":1}})").code(), StatusCode::kUnsupported);
  EXPECT_TRUE(CompileError(R"({"then":{"minimum":1}})").ok());  // inert without "if"
  EXPECT_TRUE(CompileError(R"({"unknownKeyword":5,"title":"x"})").ok());
}

TEST(JsonSchema, Whitespace) {
  const char* s = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
  Expect(s, {"{\n  \"a\": [\n    1,\n    2\n  ]\n}", "{}", "{\n  \"a\": []\n}"}, {R"({"a":[1,2]})", "{ }"},
         {.whitespace = JsonSchemaOptions::Whitespace::kPretty});
  Expect(s, {R"({ "a" : [ 1 , 2 ] })", R"({"a":[1,2]})", "{\n\"a\":\t[]}"}, {"{     \"a\":[]}"},
         {.whitespace = JsonSchemaOptions::Whitespace::kBounded, .max_whitespace = 4});
}

TEST(JsonSchema, Budget) {
  auto v = json::Parse(R"({"type":"object","properties":{"a":{"type":"string","format":"date-time"}}})");
  ASSERT_TRUE(v.ok());
  auto g = JsonSchemaGrammar(*v, {.max_exprs = 50});
  EXPECT_EQ(g.status().code(), StatusCode::kResourceExhausted);
  std::string deep = "true";
  for (int i = 0; i < 100; ++i) deep = R"({"items":)" + deep + "}";
  auto d = json::Parse(deep);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(JsonSchemaGrammar(*d, {}).status().code(), StatusCode::kResourceExhausted);
}

TEST(JsonObject, AnyObject) {
  auto g = JsonObjectGrammar({.whitespace = JsonSchemaOptions::Whitespace::kCompact});
  ASSERT_TRUE(g.ok());
  auto rec = ReferenceRecognizer::Create(*g);
  ASSERT_TRUE(rec.ok());
  EXPECT_TRUE(rec->Matches(R"({})"));
  EXPECT_TRUE(rec->Matches(R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(rec->Matches(R"([])"));
  EXPECT_FALSE(rec->Matches(R"("a")"));
  EXPECT_FALSE(rec->Matches(R"({"a":})"));
}

// Issue 12: numbers in user input never reach a throwing standard-library call. Each of these
// once threw (std::stoul) or could; each must be a Status or a grammar, never an exception.
TEST(JsonSchema, HugeNumbersAreStatusesNotExceptions) {
  const char* kSchemas[] = {
      R"({"type":"object","properties":{"b":{"type":"array","prefixItems":[{"type":"integer"}]},)"
      R"("c":{"$ref":"#/properties/b/prefixItems/99999999999999999999999"}}})",
      R"({"$defs":{"a":[{"type":"integer"}]},"$ref":"#/$defs/a/18446744073709551616"})",
      R"({"$defs":{"a":[{"type":"integer"}]},"$ref":"#/$defs/a/-1"})",
      R"({"$defs":{"a":[{"type":"integer"}]},"$ref":"#/$defs/a/%39%39%39%39%39%39%39%39%39%39%39%39%39%39%39%39%39%39%39%39%39"})",
      R"({"type":"string","minLength":99999999999999999999999,"maxLength":99999999999999999999999})",
      R"({"type":"array","minItems":1e400,"maxItems":18446744073709551616})",
      R"({"type":"integer","minimum":-99999999999999999999999999,"maximum":99999999999999999999999,"multipleOf":99999999999999999999})",
      R"({"type":"integer","minimum":-999999999999999,"maximum":999999999999999,"multipleOf":7})",
      R"({"type":"number","multipleOf":1e-400})",
  };
  for (const char* schema : kSchemas) {
    auto v = json::Parse(schema);
    if (!v.ok()) continue;  // a number simdjson refuses is the parser's 400, also fine
    EXPECT_NO_THROW({
      auto g = JsonSchemaGrammar(*v, {});
      (void)g;
    }) << schema;
  }
  auto v = json::Parse(kSchemas[0]);
  ASSERT_TRUE(v.ok());
  auto g = JsonSchemaGrammar(*v, {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound) << g.status().ToString();
  EXPECT_NE(g.status().message().find("does not resolve"), std::string::npos) << g.status().ToString();
}

}  // namespace
}  // namespace ladle::grammar
