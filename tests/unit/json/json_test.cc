#include "ladle/json/json.h"

#include <gtest/gtest.h>

namespace ladle::json {
namespace {

std::string Py(std::string_view text) { return Dump(Parse(text).value(), Style::kPython); }

TEST(Json, PythonDumpsCompatible) {
  // Expected strings are what python3 -c 'import json;print(json.dumps(json.loads(X), ensure_ascii=False))' prints.
  EXPECT_EQ(Py(R"({"b":1,"a":[1,2.0,"x"],"c":{"d":null,"e":true}})"),
            R"({"b": 1, "a": [1, 2.0, "x"], "c": {"d": null, "e": true}})");
  EXPECT_EQ(Py(R"([1.50, 1e3, 1E-5, 0.0001, 1e16, 1e15, -0, -0.0, 123456789.123456789])"),
            "[1.5, 1000.0, 1e-05, 0.0001, 1e+16, 1000000000000000.0, 0, -0.0, 123456789.12345679]");
  EXPECT_EQ(Py(R"(["中文 \u00e9 \n\t\"\\ \u0001 \u007f 😀"])"), "[\"中文 é \\n\\t\\\"\\\\ \\u0001 \x7f 😀\"]");
  EXPECT_EQ(Py(R"({})"), "{}");
  EXPECT_EQ(Py(R"([])"), "[]");
  EXPECT_EQ(Py("1.7976931348623157e308"), "1.7976931348623157e+308");
  EXPECT_EQ(Py("5e-324"), "5e-324");
  EXPECT_EQ(Py("0.1"), "0.1");
}

TEST(Json, KeyOrderAndLookup) {
  auto v = Parse(R"({"z":1,"a":2,"z":3})").value();
  ASSERT_EQ(v.as_object().size(), 3u);
  EXPECT_EQ(v.as_object()[0].first, "z");
  EXPECT_EQ(v.Find("z")->as_string(), "3");  // last duplicate wins, as json.loads
  EXPECT_EQ(v.Find("missing"), nullptr);
  EXPECT_EQ(Dump(v), R"({"z":1,"a":2,"z":3})");
}

TEST(Json, NumbersAndErrors) {
  auto v = Parse("[9223372036854775807, 18446744073709551615, 2.5, -7]").value();
  EXPECT_TRUE(v.as_array()[0].is_integer());
  EXPECT_EQ(v.as_array()[0].as_int64().value(), INT64_MAX);
  EXPECT_FALSE(v.as_array()[1].as_int64().ok());
  EXPECT_FALSE(v.as_array()[2].is_integer());
  EXPECT_DOUBLE_EQ(v.as_array()[2].as_double(), 2.5);
  for (const char* bad : {"{", "[1,]", "{\"a\":}", "nul", "\"\xff\"", "[1] x", "", "{\"a\" 1}"}) {
    auto r = Parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kParseError) << bad;
    }
  }
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_FALSE(Parse(deep).ok());
  EXPECT_EQ(Parse("[1]", ParseOptions{.max_depth = 128, .max_bytes = 2}).status().code(),
            StatusCode::kResourceExhausted);
}

TEST(Json, FloatRepr) {
  EXPECT_EQ(PythonFloatRepr(1.0), "1.0");
  EXPECT_EQ(PythonFloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(PythonFloatRepr(1e22), "1e+22");
  EXPECT_EQ(PythonFloatRepr(123e-20), "1.23e-18");
  EXPECT_EQ(PythonFloatRepr(-2.5), "-2.5");
  EXPECT_EQ(PythonFloatRepr(0.00012), "0.00012");
}

}  // namespace
}  // namespace ladle::json
