#include "ladle/json/json.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace ladle::json {

Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}
Value Value::Int(int64_t i) { return NumberText(std::to_string(i)); }
Value Value::Double(double d) {
  Value v;
  v.type_ = Type::kNumber;
  v.str_ = PythonFloatRepr(d);
  if (v.str_ == "Infinity" || v.str_ == "-Infinity" || v.str_ == "NaN") v.str_ = "null";
  return v;
}
Value Value::NumberText(std::string text) {
  Value v;
  v.type_ = Type::kNumber;
  v.str_ = std::move(text);
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.str_ = std::move(s);
  return v;
}
Value Value::MakeArray(Array a) {
  Value v;
  v.type_ = Type::kArray;
  v.array_ = std::move(a);
  return v;
}
Value Value::MakeObject(Object o) {
  Value v;
  v.type_ = Type::kObject;
  v.object_ = std::move(o);
  return v;
}

bool Value::is_integer() const {
  return type_ == Type::kNumber && str_.find_first_of(".eE") == std::string::npos;
}

double Value::as_double() const { return type_ == Type::kNumber ? std::strtod(str_.c_str(), nullptr) : 0.0; }

Result<int64_t> Value::as_int64() const {
  if (!is_integer()) return InvalidArgument("not an integer");
  int64_t v = 0;
  auto [p, ec] = std::from_chars(str_.data(), str_.data() + str_.size(), v);
  if (ec != std::errc() || p != str_.data() + str_.size()) return OutOfRange("integer out of range");
  return v;
}

const Value* Value::Find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (auto it = object_.rbegin(); it != object_.rend(); ++it) {
    if (it->first == key) return &it->second;
  }
  return nullptr;
}

void Value::Set(std::string key, Value v) {
  for (auto& m : object_) {
    if (m.first == key) {
      m.second = std::move(v);
      return;
    }
  }
  object_.emplace_back(std::move(key), std::move(v));
}

std::string_view Value::TypeName() const {
  switch (type_) {
    case Type::kNull: return "null";
    case Type::kBool: return "boolean";
    case Type::kNumber: return "number";
    case Type::kString: return "string";
    case Type::kArray: return "array";
    case Type::kObject: return "object";
  }
  return "unknown";
}

// ---- parsing ---------------------------------------------------------------------------------

namespace {

namespace dom = simdjson::dom;

Result<Value> Convert(dom::element v, size_t depth, const ParseOptions& opts) {
  if (depth > opts.max_depth) return ParseError(fmt::format("JSON nested deeper than {}", opts.max_depth));
  switch (v.type()) {
    case dom::element_type::OBJECT: {
      Value::Object out;
      for (auto field : dom::object(v)) {
        LADLE_ASSIGN_OR_RETURN(Value child, Convert(field.value, depth + 1, opts));
        out.emplace_back(std::string(field.key), std::move(child));
      }
      return Value::MakeObject(std::move(out));
    }
    case dom::element_type::ARRAY: {
      Value::Array out;
      for (dom::element e : dom::array(v)) {
        LADLE_ASSIGN_OR_RETURN(Value child, Convert(e, depth + 1, opts));
        out.push_back(std::move(child));
      }
      return Value::MakeArray(std::move(out));
    }
    case dom::element_type::INT64: return Value::NumberText(std::to_string(int64_t(v)));
    case dom::element_type::UINT64: return Value::NumberText(std::to_string(uint64_t(v)));
    case dom::element_type::DOUBLE: {
      // The text of a float is what Python would print after json.loads: its repr.
      std::string text = PythonFloatRepr(double(v));
      return Value::NumberText(std::move(text));
    }
    case dom::element_type::STRING: return Value::String(std::string(std::string_view(v)));
    case dom::element_type::BOOL: return Value::Bool(bool(v));
    case dom::element_type::NULL_VALUE: return Value::Null();
  }
  return ParseError("invalid JSON value");
}

}  // namespace

Result<Value> Parse(std::string_view text, const ParseOptions& opts) {
  if (text.size() > opts.max_bytes) {
    return ResourceExhausted(fmt::format("JSON document of {} bytes exceeds the {} byte limit", text.size(), opts.max_bytes));
  }
  dom::parser parser;
  dom::element root;
  if (auto e = parser.parse(text.data(), text.size()).get(root)) {
    return ParseError(fmt::format("invalid JSON: {}", simdjson::error_message(e)));
  }
  return Convert(root, 1, opts);
}

// ---- serialising -------------------------------------------------------------------------------

std::string PythonFloatRepr(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);  // e.g. "-1.2345e-05"
  std::string out;
  if (sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits.push_back(c);
  }
  const int exp10 = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  const int decpt = exp10 + 1;  // digits[0] sits at 10^(decpt-1)
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {  // CPython's repr switches to exponent form outside this
    if (decpt <= 0) {
      out += "0.";
      out.append(-decpt, '0');
      out += digits;
    } else if (decpt >= nd) {
      out += digits;
      out.append(decpt - nd, '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out += '.';
      out += digits.substr(decpt);
    }
  } else {
    out += digits[0];
    if (nd > 1) {
      out += '.';
      out += digits.substr(1);
    }
    const int e = decpt - 1;
    out += fmt::format("e{}{:02d}", e < 0 ? '-' : '+', std::abs(e));
  }
  return out;
}

void AppendEscaped(std::string_view s, std::string* out) {
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          fmt::format_to(std::back_inserter(*out), "\\u{:04x}", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
}

void AppendQuoted(std::string_view s, std::string* out) {
  out->push_back('"');
  AppendEscaped(s, out);
  out->push_back('"');
}

namespace {

void DumpNumber(const std::string& text, Style style, std::string* out) {
  if (style == Style::kCompact) {
    *out += text;
    return;
  }
  if (text.find_first_of(".eE") == std::string::npos) {
    // Python int: digits as they are ("-0" loads as 0).
    *out += (text == "-0") ? "0" : text;
    return;
  }
  *out += PythonFloatRepr(std::strtod(text.c_str(), nullptr));
}

}  // namespace

void DumpTo(const Value& v, Style style, std::string* out) {
  const char* item_sep = style == Style::kPython ? ", " : ",";
  const char* key_sep = style == Style::kPython ? ": " : ":";
  switch (v.type()) {
    case Value::Type::kNull: *out += "null"; break;
    case Value::Type::kBool: *out += v.as_bool() ? "true" : "false"; break;
    case Value::Type::kNumber: DumpNumber(v.as_string(), style, out); break;
    case Value::Type::kString: AppendQuoted(v.as_string(), out); break;
    case Value::Type::kArray: {
      out->push_back('[');
      bool first = true;
      for (const auto& e : v.as_array()) {
        if (!first) *out += item_sep;
        first = false;
        DumpTo(e, style, out);
      }
      out->push_back(']');
      break;
    }
    case Value::Type::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, e] : v.as_object()) {
        if (!first) *out += item_sep;
        first = false;
        AppendQuoted(k, out);
        *out += key_sep;
        DumpTo(e, style, out);
      }
      out->push_back('}');
      break;
    }
  }
}

std::string Dump(const Value& v, Style style) {
  std::string out;
  DumpTo(v, style, &out);
  return out;
}

}  // namespace ladle::json
