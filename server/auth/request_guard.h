// RequestGuard: authenticates and authorizes every call of the shard
// service before its handler touches the request, and writes the audit
// log. The thin gRPC adapter over common/security (tokens.h, access.h).
//
// Every handler of ShardServiceImpl starts with Admit(ctx, method); when
// the request names a job it also calls CheckRequestJob once the request
// is read. (A gRPC server interceptor cannot end a call before its
// handler runs, so the check sits at the top of each handler;
// tests/security_test.cc calls every method of the service without a token
// and fails for any that lets the call through.)
//
// Audit: one line for every admin call let through and every call
// refused here, on stdout:
//   zeroshard-server: audit: allowed who=alice peer=ipv4:127.0.0.1:5555
//       cert=worker-1 method=/zeroshard.v1.ShardService/GetStats
//   zeroshard-server: audit: refused who=anonymous peer=... method=...
//       code=UNAUTHENTICATED why="..."
// `who` is the token's name from the tokens file, never the token. Every
// field is escaped and bounded (ClientText, common/client_text.h: a
// newline is written as \n), so no request can start a line of the log.
// An allowed read-only call (GetStats, which the launcher polls) is
// audited once per caller and method every kReadOnlyAuditInterval, not on
// every call; refusals are always audited.
//
// Without a token table (--insecure without --token_file) every call is
// let through and admin calls are still audited (who=anonymous).
//
// Thread-safety: call from any thread (the read-only call times are
// guarded by a mutex; all else is immutable after construction).
#ifndef ZEROSHARD_SERVER_AUTH_REQUEST_GUARD_H_
#define ZEROSHARD_SERVER_AUTH_REQUEST_GUARD_H_

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security/tokens.h"
#include "grpcpp/grpcpp.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {

// Bytes of RAM the state of `spec` takes on shard `shard_index`: fp32
// master, m and v, one fp32 gradient per contribution slot and the 16-bit
// serving copy over its owned range. Errors of the spec's plan pass
// through.
absl::StatusOr<uint64_t> StateBytes(const v1::ModelSpec& spec,
                                    uint32_t shard_index);

// Metadata key of the bearer token: "authorization: Bearer <token>".
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

class RequestGuard {
 public:
  // `server_job` returns the job whose model the server holds ("" before
  // RegisterModel).
  // `max_state_bytes`: the most RAM a registered model's state may take
  // on this shard (0: no limit).
  RequestGuard(std::optional<security::TokenTable> tokens,
               std::function<std::string()> server_job,
               uint64_t max_state_bytes = 0);

  // Whether calls need a token.
  bool authenticating() const { return tokens_.has_value(); }

  // OK: the call may go on; *principal is the caller (null without a
  // token table). Else the status to end the call with (UNAUTHENTICATED,
  // PERMISSION_DENIED or FAILED_PRECONDITION), already audited. `method`
  // is the full name, "/zeroshard.v1.ShardService/Gather".
  grpc::Status Admit(const grpc::ServerContextBase& ctx,
                     absl::string_view method,
                     const security::Principal** principal) const;

  // PERMISSION_DENIED (audited) when the request names a job other than
  // the principal's; OK without a principal.
  grpc::Status CheckRequestJob(const grpc::ServerContextBase& ctx,
                               absl::string_view method,
                               const security::Principal* principal,
                               absl::string_view job) const;

  // RESOURCE_EXHAUSTED (audited) when `spec`'s state on shard
  // `shard_index` (StateBytes) exceeds max_state_bytes: checked before
  // RegisterModel allocates anything. INVALID_ARGUMENT for a spec without
  // a plan is left to the store.
  grpc::Status CheckModelSize(const grpc::ServerContextBase& ctx,
                              const v1::ModelSpec& spec,
                              uint32_t shard_index) const;

 private:
  void Audit(const grpc::ServerContextBase& ctx, absl::string_view method,
             const security::Principal* principal,
             const grpc::Status* refusal) const;

  // False for an allowed read-only call by the same caller audited less
  // than kReadOnlyAuditInterval ago.
  bool ShouldAuditAllowed(absl::string_view method,
                          const security::Principal* principal) const;

  const std::optional<security::TokenTable> tokens_;
  const std::function<std::string()> server_job_;
  const uint64_t max_state_bytes_;
  mutable absl::Mutex mu_;
  // "<who> <method>" of allowed read-only calls: when last audited.
  mutable std::map<std::string, absl::Time> read_only_audited_
      ABSL_GUARDED_BY(mu_);
};

inline constexpr absl::Duration kReadOnlyAuditInterval = absl::Minutes(10);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_AUTH_REQUEST_GUARD_H_
