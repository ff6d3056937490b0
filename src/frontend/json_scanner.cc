#include "json_scanner.h"

namespace ladle::frontend::parser {
namespace {

// Nesting deeper than this is treated as malformed: no tool schema needs it, and the stack
// must stay bounded on adversarial output.
constexpr size_t kMaxDepth = 1024;

bool IsWs(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsHex(unsigned char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

void JsonScanner::Reset() {
  mode_ = kValue;
  started_ = false;
  key_ = false;
  stack_.clear();
}

JsonScanner::State JsonScanner::state() const {
  if (mode_ == kDone) return State::kComplete;
  if (mode_ == kError) return State::kError;
  return State::kIncomplete;
}

size_t JsonScanner::Feed(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (mode_ == kDone || mode_ == kError) return i;
    if (!Step(static_cast<unsigned char>(text[i]))) return i;
  }
  return text.size();
}

void JsonScanner::End() {
  if (mode_ == kNumber && stack_.empty() &&
      (num_ == kZero || num_ == kInt || num_ == kFrac || num_ == kExpDigits)) {
    mode_ = kDone;
  }
}

void JsonScanner::ValueDone() { mode_ = stack_.empty() ? kDone : kAfter; }

bool JsonScanner::StartValue(unsigned char c) {
  started_ = true;
  switch (c) {
    case '{':
    case '[':
      if (stack_.size() >= kMaxDepth) break;
      stack_.push_back(c);
      mode_ = c == '{' ? kObjectFirst : kArrayFirst;
      return true;
    case '"':
      key_ = false;
      mode_ = kString;
      return true;
    case '-':
      mode_ = kNumber;
      num_ = kSign;
      return true;
    case 't':
    case 'f':
    case 'n':
      literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
      literal_pos_ = 1;
      mode_ = kLiteral;
      return true;
    default:
      if (IsDigit(c)) {
        mode_ = kNumber;
        num_ = c == '0' ? kZero : kInt;
        return true;
      }
  }
  mode_ = kError;
  return false;
}

bool JsonScanner::Step(unsigned char c) {
  switch (mode_) {
    case kValue:
      if (IsWs(c)) return true;
      return StartValue(c);
    case kArrayFirst:
      if (IsWs(c)) return true;
      if (c == ']') {
        stack_.pop_back();
        ValueDone();
        return true;
      }
      return StartValue(c);
    case kObjectFirst:
    case kKey:
      if (IsWs(c)) return true;
      if (c == '}' && mode_ == kObjectFirst) {
        stack_.pop_back();
        ValueDone();
        return true;
      }
      if (c == '"') {
        key_ = true;
        mode_ = kString;
        return true;
      }
      break;
    case kColon:
      if (IsWs(c)) return true;
      if (c == ':') {
        mode_ = kValue;
        return true;
      }
      break;
    case kAfter:
      if (IsWs(c)) return true;
      if (c == ',') {
        mode_ = stack_.back() == '{' ? kKey : kValue;
        return true;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        ValueDone();
        return true;
      }
      break;
    case kString:
      if (c == '"') {
        if (key_) {
          key_ = false;
          mode_ = kColon;
        } else {
          ValueDone();
        }
        return true;
      }
      if (c == '\\') {
        mode_ = kEscape;
        return true;
      }
      if (c < 0x20) break;  // raw control characters are not allowed in JSON strings
      return true;
    case kEscape:
      if (c == 'u') {
        unicode_left_ = 4;
        mode_ = kUnicode;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        mode_ = kString;
        return true;
      }
      break;
    case kUnicode:
      if (!IsHex(c)) break;
      if (--unicode_left_ == 0) mode_ = kString;
      return true;
    case kNumber: {
      bool terminal = false;
      switch (num_) {
        case kSign:
          if (c == '0') { num_ = kZero; return true; }
          if (IsDigit(c)) { num_ = kInt; return true; }
          break;
        case kZero:
        case kInt:
          if (num_ == kInt && IsDigit(c)) return true;
          if (c == '.') { num_ = kDot; return true; }
          if (c == 'e' || c == 'E') { num_ = kExp; return true; }
          terminal = true;
          break;
        case kDot:
          if (IsDigit(c)) { num_ = kFrac; return true; }
          break;
        case kFrac:
          if (IsDigit(c)) return true;
          if (c == 'e' || c == 'E') { num_ = kExp; return true; }
          terminal = true;
          break;
        case kExp:
          if (c == '+' || c == '-') { num_ = kExpSign; return true; }
          if (IsDigit(c)) { num_ = kExpDigits; return true; }
          break;
        case kExpSign:
          if (IsDigit(c)) { num_ = kExpDigits; return true; }
          break;
        case kExpDigits:
          if (IsDigit(c)) return true;
          terminal = true;
          break;
      }
      if (!terminal) break;
      // The number ended just before c; c belongs to whatever follows it.
      ValueDone();
      if (mode_ == kDone) return false;
      return Step(c);
    }
    case kLiteral:
      if (c != static_cast<unsigned char>(literal_[literal_pos_])) break;
      if (literal_[++literal_pos_] == '\0') ValueDone();
      return true;
    case kDone:
    case kError:
      return false;
  }
  mode_ = kError;
  return false;
}

}  // namespace ladle::frontend::parser
