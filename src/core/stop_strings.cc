#include "ladle/core/stop_strings.h"

#include <algorithm>

namespace ladle {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopStrings::Scan StopStrings::Find(std::string_view text) const {
  Scan r;
  for (const auto& s : stops_) {
    const size_t at = text.find(s);
    if (at == std::string_view::npos) continue;
    if (r.matched == nullptr || at < r.cut || (at == r.cut && s.size() > r.matched->size())) {
      r.cut = at;
      r.matched = &s;
    }
  }
  if (r.matched != nullptr) return r;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, text.size()); k > r.keep; --k) {
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        r.keep = k;
        break;
      }
    }
  }
  return r;
}

}  // namespace ladle
