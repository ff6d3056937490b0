#include "stop_checker.h"

namespace ladle::engine {

StopChecker::StopChecker(tokenizer::Tokenizer tok, std::vector<std::string> stops)
    : decoder_(std::move(tok)), stops_(std::move(stops)) {}

Result<std::string> StopChecker::Push(uint32_t id) {
  LADLE_RETURN_IF_ERROR(decoder_.Push(id, &tail_));
  const StopStrings::Scan scan = stops_.Find(tail_);
  if (scan.matched != nullptr) {
    std::string m = *scan.matched;
    tail_.clear();
    return m;
  }
  tail_.erase(0, tail_.size() - scan.keep);
  return std::string();
}

}  // namespace ladle::engine
