#include "common/security/access.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/client_text.h"

namespace zeroshard::security {
namespace {

constexpr absl::string_view kWorkerMethods[] = {
    "/zeroshard.v1.ShardService/RegisterModel",
    "/zeroshard.v1.ShardService/WriteParameters",
    "/zeroshard.v1.ShardService/Gather",
    "/zeroshard.v1.ShardService/PushGradients",
    "/zeroshard.v1.ShardService/PrepareStep",
    "/zeroshard.v1.ShardService/CommitStep",
    "/zeroshard.v1.MembershipService/Join",
    "/zeroshard.v1.MembershipService/Heartbeat",
    "/zeroshard.v1.MembershipService/Leave",
    "/zeroshard.v1.MembershipService/Rendezvous",
};

constexpr absl::string_view kMembershipPrefix =
    "/zeroshard.v1.MembershipService/";

}  // namespace

std::optional<Role> RequiredRole(absl::string_view method) {
  if (absl::StartsWith(method, "/grpc.health.v1.Health/")) return std::nullopt;
  for (absl::string_view m : kWorkerMethods) {
    if (m == method) return Role::kWorker;
  }
  return Role::kAdmin;
}

absl::Status Authorize(const Principal* principal, absl::string_view method,
                       absl::string_view server_job,
                       absl::string_view request_job) {
  const std::optional<Role> needed = RequiredRole(method);
  if (!needed.has_value()) return absl::OkStatus();
  if (principal == nullptr) {
    return absl::UnauthenticatedError(
        absl::StrCat(method, ": missing or unknown bearer token"));
  }
  if (*needed == Role::kAdmin && principal->role != Role::kAdmin) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, " needs the admin role; '", principal->name,
                     "' is a ", RoleName(principal->role)));
  }
  // Before RegisterModel only registration may change the model (and it
  // names the job it registers as request_job): a call admitted now
  // cannot land in a job registered a moment later. Membership keeps no
  // model state and workers join before they register; its requests name
  // their job, checked below.
  if (server_job.empty() && *needed == Role::kWorker &&
      method != "/zeroshard.v1.ShardService/RegisterModel" &&
      !absl::StartsWith(method, kMembershipPrefix)) {
    return absl::FailedPreconditionError(
        absl::StrCat(method, ": no model registered yet"));
  }
  if (!server_job.empty() && server_job != principal->job) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, ": '", principal->name, "' belongs to job '", principal->job,
        "', this server holds job '", ClientText(server_job), "'"));
  }
  if (!request_job.empty() && request_job != principal->job) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, ": '", principal->name, "' belongs to job '", principal->job,
        "', the request names job '", ClientText(request_job), "'"));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::security
