// A streaming JSON syntax checker for tool-call arguments. It never builds a value: the parser
// passes argument text through as it arrives and only needs to know where the value ends and
// whether it was well formed (to report a malformed call and to drop trailing junk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ladle::frontend::parser {

class JsonScanner {
 public:
  enum class State : uint8_t { kIncomplete, kComplete, kError };

  void Reset();
  // Consumes bytes of one JSON value. Returns how many leading bytes of `text` belong to it
  // (leading whitespace included): all of them while the value is still open, fewer once it
  // completes or turns out invalid. After completion or an error it consumes nothing.
  size_t Feed(std::string_view text);
  // End of input: a top-level number ("2") only completes here.
  void End();
  State state() const;
  bool complete() const { return state() == State::kComplete; }
  // Nothing but whitespace was fed.
  bool empty() const { return mode_ == kValue && stack_.empty() && !started_; }

 private:
  enum Mode : uint8_t {
    kValue,       // a value may start (whitespace skipped)
    kArrayFirst,  // after '[': a value or ']'
    kObjectFirst, // after '{': a key or '}'
    kKey,         // after ',' in an object: a key
    kColon,
    kAfter,       // after a value inside a container: ',' or the closer
    kString,
    kEscape,
    kUnicode,
    kNumber,
    kLiteral,
    kDone,
    kError,
  };
  enum NumberPart : uint8_t { kSign, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

  // Handles one byte; returns false if the byte is not part of the value (the value ended
  // just before it, or it is an error).
  bool Step(unsigned char c);
  void ValueDone();
  bool StartValue(unsigned char c);

  Mode mode_ = kValue;
  bool started_ = false;
  bool key_ = false;          // the current string is an object key
  uint8_t unicode_left_ = 0;
  NumberPart num_ = kSign;
  const char* literal_ = nullptr;
  uint8_t literal_pos_ = 0;
  std::vector<uint8_t> stack_;  // '{' or '[' per open container
};

}  // namespace ladle::frontend::parser
