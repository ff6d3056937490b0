// Decides when a sample stops on a stop string: it decodes the sample's tokens and reports the
// first token whose text completes one (the earliest-starting, as core's StopStrings scans).
// It produces no client text: the server alone turns tokens into text and cuts it at the stop
// string (docs/server.md, "Stop strings: who owns what"). It keeps only the decoded tail that
// could still begin a match. Internal to the engine; made only for samples that have stop
// strings, so without them the engine decodes nothing.
#pragma once

#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/core/stop_strings.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::engine {

class StopChecker {
 public:
  StopChecker(tokenizer::Tokenizer tok, std::vector<std::string> stops);

  // Decodes `id`: the stop string its text completes, or empty. After a match the checker
  // must not be used again. Fails on an id the tokenizer does not know.
  Result<std::string> Push(uint32_t id);

 private:
  tokenizer::IncrementalDecoder decoder_;
  StopStrings stops_;
  std::string tail_;  // decoded text that may still begin a stop string
};

}  // namespace ladle::engine
