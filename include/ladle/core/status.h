// Status: the one error type of Ladle. Every fallible call returns a Status or a Result<T>
// (result.h); exceptions never cross a module boundary.
//
// The codes live in exactly one list, LADLE_STATUS_CODES, so that adding a code updates its
// name and its HTTP mapping together. Status → HTTP happens only in HttpStatusFor(); the
// Python bindings map codes to exceptions in one place too (python/ladle_py.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace ladle {

// X(enumerator, numeric value, HTTP status)
#define LADLE_STATUS_CODES(X)            \
  X(kOk, 0, 200)                         \
  X(kInvalidArgument, 1, 400)            \
  X(kNotFound, 2, 404)                   \
  X(kAlreadyExists, 3, 409)              \
  X(kUnsupported, 4, 400)                \
  X(kParseError, 5, 400)                 \
  X(kOutOfRange, 6, 400)                 \
  X(kFailedPrecondition, 7, 400)         \
  X(kUnauthenticated, 8, 401)            \
  X(kPermissionDenied, 9, 403)           \
  X(kResourceExhausted, 10, 429)         \
  X(kCancelled, 11, 499)                 \
  X(kDeadlineExceeded, 12, 504)          \
  X(kUnavailable, 13, 503)               \
  X(kIoError, 14, 500)                   \
  X(kDataLoss, 15, 500)                  \
  X(kInternal, 16, 500)                  \
  X(kPayloadTooLarge, 17, 413)           \
  X(kOverloaded, 18, 529)

enum class StatusCode : uint16_t {
#define LADLE_X(name, value, http) name = value,
  LADLE_STATUS_CODES(LADLE_X)
#undef LADLE_X
};

// "kInvalidArgument" → "InvalidArgument".
std::string_view StatusCodeName(StatusCode code);
// The HTTP status a server answers with for this code: the one Status → HTTP map. The
// frontend's ApiError and response writers carry a StatusCode and ask this; nothing else in
// the tree writes an HTTP status number. (kOverloaded is Anthropic's 529; the server picks it
// over kResourceExhausted, 429, for the Messages API.)
int HttpStatusFor(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message"
  std::string ToString() const;

  // Prefix the message with context, keeping the code ("while loading x: ...").
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Shorthand constructors: InvalidArgument("bad {}", x) reads better than Status(code, fmt(...)).
Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status Unsupported(std::string message);
Status ParseError(std::string message);
Status OutOfRange(std::string message);
Status IoError(std::string message);
Status Internal(std::string message);
Status ResourceExhausted(std::string message);

}  // namespace ladle

// Returns the Status from the enclosing function if `expr` is not OK.
#define LADLE_RETURN_IF_ERROR(expr)                     \
  do {                                                  \
    ::ladle::Status ladle_status_tmp_ = (expr);         \
    if (!ladle_status_tmp_.ok()) return ladle_status_tmp_; \
  } while (0)
