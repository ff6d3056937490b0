// The one stop-string scan, shared by the two places that need it for different ends (see
// docs/server.md, "Stop strings: who owns what"): the engine's StopChecker decides *when* a
// sequence stops, on its decoded tokens, and the server's StopFilter decides *what text* the
// client sees, on the parsed events. Both call this, so they cannot disagree on which string
// matched or where.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ladle {

class StopStrings {
 public:
  // Empty strings are dropped (they would match everywhere).
  explicit StopStrings(std::vector<std::string> stops);

  struct Scan {
    // The earliest complete stop string in the text (at equal starts, the longer one), or
    // npos; `matched` points into this object.
    size_t cut = std::string_view::npos;
    const std::string* matched = nullptr;
    // Without a match: the longest suffix of the text that is a proper prefix of some stop
    // string. Only those bytes can still become part of a match; the rest is settled.
    size_t keep = 0;
  };
  // `text` must start where no match could have begun earlier (callers keep only `keep`).
  Scan Find(std::string_view text) const;

  bool empty() const { return stops_.empty(); }
  const std::vector<std::string>& strings() const { return stops_; }

 private:
  std::vector<std::string> stops_;
};

}  // namespace ladle
