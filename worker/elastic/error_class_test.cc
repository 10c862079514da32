#include "worker/elastic/error_class.h"

#include "gtest/gtest.h"

namespace zeroshard::elastic {
namespace {

constexpr ErrorKind kT = ErrorKind::kTransient;
constexpr ErrorKind kP = ErrorKind::kPermanent;

TEST(ClassifyError, EveryCodeFromEveryOrigin) {
  struct Row {
    absl::StatusCode code;
    ErrorKind local, group;
  };
  using C = absl::StatusCode;
  const Row rows[] = {
      {C::kOk, kT, kT},
      {C::kCancelled, kT, kT},
      {C::kUnknown, kP, kT},
      {C::kInvalidArgument, kP, kP},  // bad data, a mismatched model
      {C::kDeadlineExceeded, kT, kT},
      {C::kNotFound, kP, kT},  // a missing file; a member expired: rejoin
      {C::kAlreadyExists, kP, kT},
      {C::kPermissionDenied, kP, kP},
      {C::kResourceExhausted, kP, kT},
      {C::kFailedPrecondition, kP, kT},  // collective broken, epoch moved
      {C::kAborted, kT, kT},             // a newer epoch: regroup
      {C::kOutOfRange, kP, kP},
      {C::kUnimplemented, kP, kP},
      {C::kInternal, kP, kT},
      {C::kUnavailable, kT, kT},  // a dead peer, a restarting server
      {C::kDataLoss, kP, kT},
      {C::kUnauthenticated, kP, kP},
  };
  for (const Row& r : rows) {
    const absl::Status s(r.code, "x");
    EXPECT_EQ(ClassifyError(s, ErrorOrigin::kLocal), r.local)
        << absl::StatusCodeToString(r.code) << " local";
    EXPECT_EQ(ClassifyError(s, ErrorOrigin::kGroup), r.group)
        << absl::StatusCodeToString(r.code) << " group";
  }
  EXPECT_STREQ(ErrorKindName(kP), "permanent");
  EXPECT_STREQ(ErrorKindName(kT), "transient");
}

}  // namespace
}  // namespace zeroshard::elastic
