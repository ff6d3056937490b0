#include "stop_filter.h"

#include <algorithm>

namespace ladle::server {

using frontend::Event;

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

void StopFilter::Flush(std::vector<Event>* out) {
  if (held_.empty()) return;
  Event e;
  e.kind = held_kind_;
  e.text = std::move(held_);
  held_.clear();
  out->push_back(std::move(e));
}

void StopFilter::Push(Event e, std::vector<Event>* out) {
  const bool text = e.kind == Event::Kind::kContent || e.kind == Event::Kind::kReasoning;
  if (e.kind == Event::Kind::kFinish) {
    if (stopped_) {
      e.finish = frontend::FinishReason::kStop;
      e.text = matched_;
    } else {
      Flush(out);
    }
    out->push_back(std::move(e));
    return;
  }
  if (stopped_) return;
  if (stops_.empty()) {
    out->push_back(std::move(e));
    return;
  }
  if (!text) {
    // A tool call or another kind of text ends the run a stop string could span.
    Flush(out);
    out->push_back(std::move(e));
    return;
  }
  if (e.kind != held_kind_) Flush(out);
  held_kind_ = e.kind;
  held_ += e.text;
  // The earliest complete stop string wins, as in the engine.
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && (cut == std::string::npos || at < cut || (at == cut && s.size() > matched_.size()))) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    held_.resize(cut);
    Flush(out);
    stopped_ = true;
    return;
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  if (keep < held_.size()) {
    Event emit;
    emit.kind = held_kind_;
    emit.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    out->push_back(std::move(emit));
  }
}

}  // namespace ladle::server
