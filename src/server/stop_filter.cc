#include "stop_filter.h"

#include <algorithm>

namespace ladle::server {

using frontend::Event;

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

void StopFilter::Flush(std::vector<Event>* out) {
  if (held_.empty()) return;
  Event e;
  e.kind = held_kind_;
  e.text = std::move(held_);
  held_.clear();
  out->push_back(std::move(e));
}

void StopFilter::RepairUtf8(std::string_view in, std::string* tail, std::string* out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string joined;
  if (!tail->empty()) {
    joined = *tail + std::string(in);
    in = joined;
    tail->clear();
  }
  const auto* s = reinterpret_cast<const unsigned char*>(in.data());
  const size_t n = in.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    // Continuation count and the allowed range of the second byte (Unicode Table 3-7).
    int need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      out->append(kReplacement);  // a stray continuation byte, C0/C1 or F5..FF
      ++i;
      continue;
    }
    int j = 1;
    for (; j <= need; ++j) {
      if (i + j >= n) {
        tail->assign(in.substr(i));  // valid so far: the rest may come with the next event
        return;
      }
      const unsigned char b = s[i + j];
      if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) break;
    }
    if (j <= need) {
      out->append(kReplacement);  // the maximal subpart s[i, i + j) is ill-formed
      i += static_cast<size_t>(j);
      continue;
    }
    out->append(in.substr(i, static_cast<size_t>(need) + 1));
    i += static_cast<size_t>(need) + 1;
  }
}

void StopFilter::Push(Event e, std::vector<Event>* out) {
  const bool text = e.kind == Event::Kind::kContent || e.kind == Event::Kind::kReasoning;
  // A sequence left incomplete when its run of text ends never completes: one U+FFFD.
  if (!utf8_tail_.empty() && (!text || e.kind != utf8_kind_)) {
    utf8_tail_.clear();
    Event r;
    r.kind = utf8_kind_;
    r.text = "\xEF\xBF\xBD";
    PushValid(std::move(r), out);
  }
  if (text) {
    std::string valid;
    RepairUtf8(e.text, &utf8_tail_, &valid);
    utf8_kind_ = e.kind;
    if (valid.empty() && !e.text.empty()) return;  // all held: nothing to send yet
    e.text = std::move(valid);
  }
  PushValid(std::move(e), out);
}

void StopFilter::PushValid(Event e, std::vector<Event>* out) {
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
  // The scan the engine's StopChecker makes too: the earliest complete stop string wins.
  const StopStrings::Scan scan = stops_.Find(held_);
  if (scan.matched != nullptr) {
    matched_ = *scan.matched;
    held_.resize(scan.cut);
    Flush(out);
    stopped_ = true;
    return;
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  const size_t keep = scan.keep;
  if (keep < held_.size()) {
    Event emit;
    emit.kind = held_kind_;
    emit.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    out->push_back(std::move(emit));
  }
}

}  // namespace ladle::server
