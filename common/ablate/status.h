// Status and StatusOr: how errors cross component boundaries (LevelDB style).
//
// A Status is OK or carries a code and a human-readable message that says what is wrong and where
// ("trial.yaml:12:5: optimizer.p: expected a number in [-1, 1], got 2"). Errors from SQLite, CUDA,
// errno or a parser are converted to a Status once, at the edge; code above passes it along.
// Thread safety: values; safe to copy between threads.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace ablate {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kOutOfRange,
  kDataLoss,
  kInternal,
  kUnavailable,
  kUnimplemented,
  kPermissionDenied,
  kUnauthenticated,
  kResourceExhausted,
  kAborted,
  kCancelled,
  kDeadlineExceeded,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "prefix: message" (no-op when OK).
  Status WithPrefix(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
// errno → Status, with what was being done ("open /x/y").
Status ErrnoToStatus(int err, const std::string& what);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  StatusOr(T value) : value_(std::move(value)) {}                                  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace ablate

#define ABLATE_CONCAT_INNER(a, b) a##b
#define ABLATE_CONCAT(a, b) ABLATE_CONCAT_INNER(a, b)

// Returns from the calling function when `expr` (a Status) is not OK.
#define ABLATE_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::ablate::Status _st = (expr);            \
    if (!_st.ok()) return _st;                \
  } while (0)

// ABLATE_ASSIGN_OR_RETURN(auto x, FunctionReturningStatusOr());
#define ABLATE_ASSIGN_OR_RETURN(lhs, expr) \
  ABLATE_ASSIGN_OR_RETURN_IMPL(ABLATE_CONCAT(_status_or_, __LINE__), lhs, expr)
#define ABLATE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
