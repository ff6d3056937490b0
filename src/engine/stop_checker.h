// Turns a sample's tokens into settled text and finds its stop strings. Text that could be
// the start of a stop string is held back until later tokens rule the match in or out, so a
// stop string is never emitted, not even partially. Internal to the engine.
#pragma once

#include <string>
#include <vector>

#include "ladle/core/status.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::engine {

class StopChecker {
 public:
  StopChecker(tokenizer::Tokenizer tok, std::vector<std::string> stops);

  // Decodes `id`; appends newly settled text to *emit. On a stop string, *emit gets the text
  // before it, *matched the stop string, and the checker must not be used again.
  Status Push(uint32_t id, std::string* emit, std::string* matched);
  // End of the sample without a stop string: everything still held back.
  std::string Finish();

 private:
  tokenizer::IncrementalDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;  // decoded but not yet settled
};

}  // namespace ladle::engine
