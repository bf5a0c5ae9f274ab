// The one error type of weightcast: Status (ok or a code plus a message) and Result<T>.
//
// Contract: a message names the culprit (tensor, file, offset, peer) so that a user can act
// on it without a debugger. Functions that can fail return Status or Result<T>, both
// [[nodiscard]]. Exceptions are used only at API boundaries (CLI, Python) where they are
// converted from a Status.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace weightcast {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed something that can never work
  kDataLoss,            // input bytes are corrupt, truncated or hostile
  kFailedPrecondition,  // state does not allow it (wrong base version or checksum)
  kChecksumMismatch,    // a result did not verify; nothing was left changed
  kOutOfRange,          // a limit was exceeded
  kNotFound,
  kIoError,
  kDeadlineExceeded,  // a wait ran past its deadline
  kUnimplemented,
  kInternal,
  kUnavailable,  // a connection failed earlier and stays broken: make a new one
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE: message", or "OK".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `, keeping the code.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() {
  return Status{};
}
inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status data_loss(std::string m) {
  return {StatusCode::kDataLoss, std::move(m)};
}
inline Status failed_precondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status checksum_mismatch(std::string m) {
  return {StatusCode::kChecksumMismatch, std::move(m)};
}
inline Status out_of_range(std::string m) {
  return {StatusCode::kOutOfRange, std::move(m)};
}
inline Status not_found(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status io_error(std::string m) {
  return {StatusCode::kIoError, std::move(m)};
}
inline Status deadline_exceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}

// A value or the Status explaining why there is none. Never holds an ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok())
      v_ = Status(StatusCode::kInternal, "Result built from ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace weightcast

#define WC_STATUS_CONCAT_INNER(a, b) a##b
#define WC_STATUS_CONCAT(a, b) WC_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (a Status) is not ok.
#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    ::weightcast::Status wc_status_ = (expr); \
    if (!wc_status_.ok()) return wc_status_;  \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, f())`: binds the value of a Result or returns its Status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(WC_STATUS_CONCAT(wc_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
