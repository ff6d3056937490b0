#include "stop_checker.h"

namespace ladle::engine {

StopChecker::StopChecker(tokenizer::Tokenizer tok, std::vector<std::string> stops)
    : decoder_(std::move(tok)), stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

Status StopChecker::Push(uint32_t id, std::string* emit, std::string* matched) {
  LADLE_RETURN_IF_ERROR(decoder_.Push(id, &held_));
  if (stops_.empty()) {
    emit->append(held_);
    held_.clear();
    return Status::Ok();
  }
  // Earliest stop string in the held text (the held text starts where no match could have
  // begun earlier, so nothing already emitted is part of a match).
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const auto& s : stops_) {
    size_t at = held_.find(s);
    if (at != std::string::npos && (at < best || (at == best && s.size() > best_stop->size()))) {
      best = at;
      best_stop = &s;
    }
  }
  if (best_stop) {
    emit->append(held_, 0, best);
    *matched = *best_stop;
    held_.clear();
    return Status::Ok();
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_k = std::min(s.size() - 1, held_.size());
    for (size_t k = max_k; k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  emit->append(held_, 0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return Status::Ok();
}

std::string StopChecker::Finish() {
  std::string rest = std::move(held_);
  held_.clear();
  rest += decoder_.Flush();
  return rest;
}

}  // namespace ladle::engine
