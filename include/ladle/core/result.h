// Result<T>: a value or a non-OK Status. Modelled on 3FS's Result: cheap to move, explicit
// to unwrap, and paired with LADLE_ASSIGN_OR_RETURN so error paths stay one line.
#pragma once

#include <cstdlib>
#include <type_traits>
#include <utility>
#include <variant>

#include "ladle/core/status.h"

namespace ladle {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : data_(std::in_place_index<1>, std::move(status)) {  // NOLINT
    if (std::get<1>(data_).ok()) {
      // An OK status carries no value: that is a programming error, not a runtime condition.
      std::abort();
    }
  }

  bool ok() const { return data_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // Precondition: ok().
  T& value() & { return std::get<0>(data_); }
  const T& value() const& { return std::get<0>(data_); }
  T&& value() && { return std::get<0>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<1>(data_); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace ladle

#define LADLE_CONCAT_INNER_(a, b) a##b
#define LADLE_CONCAT_(a, b) LADLE_CONCAT_INNER_(a, b)

// LADLE_ASSIGN_OR_RETURN(auto x, MakeX()); declares/assigns x or returns the error.
#define LADLE_ASSIGN_OR_RETURN(lhs, expr) \
  LADLE_ASSIGN_OR_RETURN_IMPL_(LADLE_CONCAT_(ladle_result_, __LINE__), lhs, expr)
#define LADLE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
