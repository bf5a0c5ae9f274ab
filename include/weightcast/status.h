// The error type of weightcast's public API: Status (ok, or a code and a message) and
// Result<T> (a value, or the Status saying why there is none).
//
// Contract: every call that can fail returns one of them, never throws; a message names what
// failed (the file, the tensor, the version, the peer). Both are [[nodiscard]].
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace weightcast::api {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed something that can never work
  kDataLoss,            // bytes read back are corrupt or truncated
  kFailedPrecondition,  // the state does not allow it (call order, a version not newer)
  kChecksumMismatch,    // a result did not verify; nothing was left changed
  kOutOfRange,          // a limit was exceeded
  kNotFound,            // a file, a tensor or a version does not exist
  kIoError,
  kDeadlineExceeded,  // a wait ran past its deadline
  kUnimplemented,
  kInternal,
  kUnavailable,  // a connection failed earlier and stays broken: make a new one
};

// "INVALID_ARGUMENT", ...
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE: message", or "OK".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status explaining why there is none; never holds an ok Status.
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

// Where the endpoints write their control log: one line per event (connections, versions
// published, applied, nacked). Called on weightcast's own threads; must be thread safe.
using LogCallback = std::function<void(const std::string& line)>;

}  // namespace weightcast::api
