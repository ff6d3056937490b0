// A small owned JSON value for the frontend and the grammar compiler: parsed with simdjson,
// object keys kept in document order, numbers kept as text: integers with their digits,
// floats as Python's repr of the parsed double — exactly what json.loads then json.dumps
// prints, so the int/float distinction survives. Dump() reproduces Python's json.dumps
// byte for byte, which DeepSeek's prompt templates depend on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::json {

class Value {
 public:
  enum class Type : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<Value>;
  using Member = std::pair<std::string, Value>;
  using Object = std::vector<Member>;  // document order; duplicate keys keep the last on lookup

  Value() = default;  // null
  static Value Null() { return Value(); }
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Double(double d);
  // A number from JSON text (e.g. "1", "1.50", "1e3", "123456789012345678901234567890").
  static Value NumberText(std::string text);
  static Value String(std::string s);
  static Value MakeArray(Array a = {});
  static Value MakeObject(Object o = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // A number whose text has no fraction or exponent (Python would load it as int).
  bool is_integer() const;

  bool as_bool() const { return bool_; }
  const std::string& as_string() const { return str_; }  // the string, or a number's text
  double as_double() const;
  // Fails unless the number is an integer that fits.
  Result<int64_t> as_int64() const;
  const Array& as_array() const { return array_; }
  Array& as_array() { return array_; }
  const Object& as_object() const { return object_; }
  Object& as_object() { return object_; }

  // Object lookup (last duplicate wins, as Python's json.loads); nullptr if absent or not an object.
  const Value* Find(std::string_view key) const;
  // Appends or replaces a member.
  void Set(std::string key, Value v);

  std::string_view TypeName() const;  // "null", "boolean", "number", "string", "array", "object"

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  std::string str_;  // string value, or number text
  Array array_;
  Object object_;
};

struct ParseOptions {
  size_t max_depth = 128;
  size_t max_bytes = 64 << 20;
};

// Parses one JSON document. Errors are kParseError with simdjson's reason.
Result<Value> Parse(std::string_view text, const ParseOptions& opts = {});

enum class Style {
  kCompact,  // {"a":1,"b":[1,2]}
  kPython,   // json.dumps(v, ensure_ascii=False): {"a": 1, "b": [1, 2]}
};

// Serialises v. Strings are escaped as Python's json module does with ensure_ascii=False
// (", \, and control characters; \u00XX for other controls); floats print as Python's repr
// ("1.0", "1e-05", "1e+16"); integers keep their digits.
std::string Dump(const Value& v, Style style = Style::kCompact);
void DumpTo(const Value& v, Style style, std::string* out);

// Appends s as a JSON string literal (with quotes) to *out.
void AppendQuoted(std::string_view s, std::string* out);
// Appends s JSON-escaped without quotes (for streaming a string piece by piece).
void AppendEscaped(std::string_view s, std::string* out);

// Python's repr() of a double ("0.1", "1.0", "1e-05", "1e+16", "inf" → "Infinity" in JSON).
std::string PythonFloatRepr(double d);

}  // namespace ladle::json
