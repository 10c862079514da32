#include "worker/elastic/error_class.h"

namespace zeroshard::elastic {

ErrorKind ClassifyError(const absl::Status& status, ErrorOrigin origin) {
  using C = absl::StatusCode;
  const C code = status.code();
  if (code == C::kOk || code == C::kUnavailable ||
      code == C::kDeadlineExceeded || code == C::kAborted ||
      code == C::kCancelled) {
    return ErrorKind::kTransient;
  }
  switch (origin) {
    case ErrorOrigin::kLocal:
      return ErrorKind::kPermanent;
    case ErrorOrigin::kCollective:
      return code == C::kInvalidArgument ? ErrorKind::kPermanent
                                         : ErrorKind::kTransient;
    case ErrorOrigin::kGroup:
      switch (code) {
        case C::kInvalidArgument:
        case C::kFailedPrecondition:
        case C::kOutOfRange:
        case C::kUnimplemented:
        case C::kPermissionDenied:
        case C::kUnauthenticated:
          return ErrorKind::kPermanent;
        default:
          return ErrorKind::kTransient;
      }
  }
  return ErrorKind::kTransient;
}

int WorkerExitCode(const absl::Status& status) {
  const absl::StatusCode c = status.code();
  const bool permanent =
      ClassifyError(status, ErrorOrigin::kGroup) == ErrorKind::kPermanent ||
      c == absl::StatusCode::kDataLoss ||
      c == absl::StatusCode::kResourceExhausted;
  return permanent ? kExitPermanent : 1;
}

const char* ErrorKindName(ErrorKind kind) {
  return kind == ErrorKind::kPermanent ? "permanent" : "transient";
}

}  // namespace zeroshard::elastic
