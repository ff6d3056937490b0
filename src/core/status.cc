#include "ladle/core/status.h"

#include <fmt/format.h>

namespace ladle {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
#define LADLE_X(name, value, http) \
  case StatusCode::name:           \
    return std::string_view(#name).substr(1);
    LADLE_STATUS_CODES(LADLE_X)
#undef LADLE_X
  }
  return "Unknown";
}

int HttpStatusFor(StatusCode code) {
  switch (code) {
#define LADLE_X(name, value, http) \
  case StatusCode::name:           \
    return http;
    LADLE_STATUS_CODES(LADLE_X)
#undef LADLE_X
  }
  return 500;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return fmt::format("{}: {}", StatusCodeName(code_), message_);
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status Unsupported(std::string m) { return Status(StatusCode::kUnsupported, std::move(m)); }
Status ParseError(std::string m) { return Status(StatusCode::kParseError, std::move(m)); }
Status OutOfRange(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
Status IoError(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status ResourceExhausted(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }

}  // namespace ladle
