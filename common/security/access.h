// Who may call what: the role each RPC needs and the decision for one
// call, as pure functions (no gRPC; server/auth/request_guard.h applies
// them to calls).
//
// Roles: a `worker` token may call what a training job does
// (RegisterModel, WriteParameters, Gather, PushGradients, PrepareStep,
// CommitStep, and the membership service's Join, Heartbeat, Leave,
// Rendezvous); an `admin` token may call everything (also GetStats,
// Checkpoint, Restore and any method not listed as a worker's: new methods
// are admin-only until someone decides otherwise). grpc.health.v1.Health
// needs no token (probes).
//
// A token is bound to one job: it is refused on a server that holds
// another job's model, and for a request that names another job.
#ifndef ZEROSHARD_COMMON_SECURITY_ACCESS_H_
#define ZEROSHARD_COMMON_SECURITY_ACCESS_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/security/tokens.h"

namespace zeroshard::security {

// The role `method` ("/package.Service/Method") needs; nullopt for methods
// open to anyone (health checks).
std::optional<Role> RequiredRole(absl::string_view method);

// The decision for one call to `method` by `principal` (null: no or an
// unknown token) on a server holding `server_job` (empty: none yet) for a
// request naming `request_job` (empty: the request names none, or it is
// not read yet). UNAUTHENTICATED without a principal; PERMISSION_DENIED
// for a role that does not suffice or another job; FAILED_PRECONDITION for
// a worker method other than RegisterModel and the membership service's
// before any model is registered (its job cannot be checked yet; those
// name their job in the request, which must be the token's). Messages
// name the method, role and jobs, never a token.
absl::Status Authorize(const Principal* principal, absl::string_view method,
                       absl::string_view server_job,
                       absl::string_view request_job);

}  // namespace zeroshard::security

#endif  // ZEROSHARD_COMMON_SECURITY_ACCESS_H_
