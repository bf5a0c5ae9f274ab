#include "transport/transport.h"

namespace weightcast {

Status StickyError::record(Status s) {
  if (first_.ok() && (s.code() == StatusCode::kIoError || s.code() == StatusCode::kInternal)) {
    first_ = unavailable("connection broken by an earlier error: " + s.to_string());
  }
  return s;
}

Status StickyError::check() const {
  return first_;
}

}  // namespace weightcast
