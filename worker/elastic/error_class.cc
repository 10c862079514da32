#include "worker/elastic/error_class.h"

namespace zeroshard::elastic {

ErrorKind ClassifyError(const absl::Status& status, ErrorOrigin origin) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return ErrorKind::kTransient;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return ErrorKind::kPermanent;
    default:
      // FAILED_PRECONDITION, NOT_FOUND, INTERNAL, DATA_LOSS, ...: from a
      // group, a broken collective or the servers' epoch checks.
      return origin == ErrorOrigin::kLocal ? ErrorKind::kPermanent
                                           : ErrorKind::kTransient;
  }
}

const char* ErrorKindName(ErrorKind kind) {
  return kind == ErrorKind::kPermanent ? "permanent" : "transient";
}

}  // namespace zeroshard::elastic
