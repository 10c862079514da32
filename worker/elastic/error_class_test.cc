#include "worker/elastic/error_class.h"

#include <string>

#include "gtest/gtest.h"

namespace zeroshard::elastic {
namespace {

constexpr ErrorKind kT = ErrorKind::kTransient;
constexpr ErrorKind kP = ErrorKind::kPermanent;

TEST(ClassifyError, EveryCodeFromEveryOrigin) {
  struct Row {
    absl::StatusCode code;
    ErrorKind local, collective, group;
  };
  using C = absl::StatusCode;
  const Row rows[] = {
      {C::kOk, kT, kT, kT},
      {C::kCancelled, kT, kT, kT},
      {C::kUnknown, kP, kT, kT},
      // Bad data; peers of another config; a request the servers reject.
      {C::kInvalidArgument, kP, kP, kP},
      {C::kDeadlineExceeded, kT, kT, kT},  // a silent peer or server
      {C::kNotFound, kP, kT, kT},
      {C::kAlreadyExists, kP, kT, kT},
      {C::kPermissionDenied, kP, kT, kP},
      {C::kResourceExhausted, kP, kT, kT},  // a busy server
      // A collective broken by a dead peer; another model on the servers.
      {C::kFailedPrecondition, kP, kT, kP},
      {C::kAborted, kT, kT, kT},  // a newer epoch; the step protocol
      {C::kOutOfRange, kP, kT, kP},
      {C::kUnimplemented, kP, kT, kP},
      {C::kInternal, kP, kT, kT},
      {C::kUnavailable, kT, kT, kT},  // a dead peer, a restarting server
      {C::kDataLoss, kP, kT, kT},
      {C::kUnauthenticated, kP, kT, kP},
  };
  for (const Row& r : rows) {
    const absl::Status s(r.code, "x");
    const std::string code = absl::StatusCodeToString(r.code);
    EXPECT_EQ(ClassifyError(s, ErrorOrigin::kLocal), r.local) << code;
    EXPECT_EQ(ClassifyError(s, ErrorOrigin::kCollective), r.collective) << code;
    EXPECT_EQ(ClassifyError(s, ErrorOrigin::kGroup), r.group) << code;
  }
  EXPECT_STREQ(ErrorKindName(kP), "permanent");
  EXPECT_STREQ(ErrorKindName(kT), "transient");
}

// A worker's exit code tells the launcher whether restarting it helps.
TEST(WorkerExitCodeTest, PermanentErrorsExit3) {
  using C = absl::StatusCode;
  for (C c : {C::kInvalidArgument, C::kFailedPrecondition, C::kOutOfRange,
              C::kUnimplemented, C::kPermissionDenied, C::kUnauthenticated,
              C::kDataLoss, C::kResourceExhausted}) {
    EXPECT_EQ(WorkerExitCode(absl::Status(c, "x")), kExitPermanent)
        << absl::StatusCodeToString(c);
  }
  for (C c : {C::kUnavailable, C::kDeadlineExceeded, C::kAborted, C::kCancelled,
              C::kInternal, C::kUnknown, C::kNotFound, C::kAlreadyExists}) {
    EXPECT_EQ(WorkerExitCode(absl::Status(c, "x")), 1)
        << absl::StatusCodeToString(c);
  }
}

}  // namespace
}  // namespace zeroshard::elastic
