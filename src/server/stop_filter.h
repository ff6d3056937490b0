// Holds back parsed reasoning/content text that could be the start of a stop string and cuts
// the text at the first complete one. The engine (or a remote worker) decides *when* to stop
// and sends token ids only; the server alone turns them into text, so the cut is made here,
// with the same scan (core's StopStrings). See docs/server.md, "Stop strings: who owns what".
// It also repairs the text's UTF-8 first: a model can sample byte tokens that form no valid
// sequence (a stray continuation byte, a lead byte cut short), and JSON (RFC 8259) must be
// UTF-8, so each ill-formed subpart becomes U+FFFD as in a replacing decoder, while a valid
// sequence split across events is held until it completes. Internal to the server.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/stop_strings.h"
#include "ladle/frontend/events.h"

namespace ladle::server {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops);

  // Feeds one parser event; appends the events to send to *out. After a stop string was
  // found, every event but kFinish is dropped, and kFinish becomes kStop with the string.
  void Push(frontend::Event e, std::vector<frontend::Event>* out);

  bool stopped() const { return stopped_; }
  // Appends `in` (after *tail, the incomplete sequence of the previous call) to *out with each
  // maximal ill-formed subpart replaced by U+FFFD; a valid but incomplete sequence at the end
  // is moved to *tail.
  static void RepairUtf8(std::string_view in, std::string* tail, std::string* out);
  const std::string& matched() const { return matched_; }

 private:
  void Flush(std::vector<frontend::Event>* out);
  void PushValid(frontend::Event e, std::vector<frontend::Event>* out);

  StopStrings stops_;
  frontend::Event::Kind held_kind_ = frontend::Event::Kind::kContent;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
  std::string utf8_tail_;  // an incomplete sequence at the end of the last text event
  frontend::Event::Kind utf8_kind_ = frontend::Event::Kind::kContent;
};

}  // namespace ladle::server
