// Pre-tokenization: the Split stages of tokenizer.json, applied hierarchically as Hugging
// Face does (each stage runs on every piece the previous stage produced, so a lookahead
// never sees past a piece boundary).
//
// DeepSeek's three Split regexes are recognised by their exact text and run by a hand-written
// scanner over a code-point class table (unicode_classes.h); any other Split regex runs on
// PCRE2. The PCRE2 path doubles as the differential oracle for the scanner in tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::tokenizer {

// A pre-token as a byte range of the input.
struct Piece {
  uint32_t begin;
  uint32_t end;
};

class PreTokenizer {
 public:
  // `split_patterns` are the Split regexes in order (all with behaviour Isolated).
  static Result<PreTokenizer> Create(const std::vector<std::string>& split_patterns);

  // Appends the pre-tokens of `text` to *out, offsets relative to text.data() + base.
  void Split(std::string_view text, std::vector<Piece>* out, uint32_t base = 0) const;

  // True when the stages are exactly DeepSeek's and the hand-written scanner runs them.
  bool fast_path() const { return fast_; }

  // True if encoding text[0, p) and text[p, n) separately is guaranteed to give the same
  // pre-tokens as encoding text whole. Only boundaries the scanner can prove are reported;
  // false is always a safe answer.
  bool IsSafeSplit(std::string_view text, size_t p) const;

  // Runs every stage through PCRE2, even DeepSeek's (for differential tests).
  PreTokenizer WithRegexOnly() const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  struct Regex;
  void SplitRegexStage(size_t stage, const unsigned char* base, uint32_t b, uint32_t e,
                       std::vector<Piece>* out) const;

  std::vector<std::string> patterns_;
  std::vector<std::shared_ptr<const Regex>> regexes_;
  bool fast_ = false;
};

// The DeepSeek V3 family's Split patterns (also used by later versions).
extern const char* const kDeepSeekDigitPattern;
extern const char* const kDeepSeekCjkPattern;
extern const char* const kDeepSeekMainPattern;

}  // namespace ladle::tokenizer
