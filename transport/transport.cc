#include "transport/transport.h"

namespace weightcast {

Status StickyError::record(Status s) {
  if (first_.ok() && (s.code() == StatusCode::kIoError || s.code() == StatusCode::kInternal)) {
    first_ = Status(s.code(), "sticky: " + s.message());
  }
  return s;
}

Status StickyError::check() const {
  return first_;
}

}  // namespace weightcast
