// Holds back parsed reasoning/content text that could be the start of a stop string and cuts
// the text at the first complete one. The engine stops generating on a stop string and never
// reports it in its settled text, but the output parser decodes token ids itself, so without
// this the stop string (and whatever the last token carried after it) would reach the client.
// Internal to the server.
#pragma once

#include <string>
#include <vector>

#include "ladle/frontend/events.h"

namespace ladle::server {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops);

  // Feeds one parser event; appends the events to send to *out. After a stop string was
  // found, every event but kFinish is dropped, and kFinish becomes kStop with the string.
  void Push(frontend::Event e, std::vector<frontend::Event>* out);

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  void Flush(std::vector<frontend::Event>* out);

  std::vector<std::string> stops_;
  frontend::Event::Kind held_kind_ = frontend::Event::Kind::kContent;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace ladle::server
