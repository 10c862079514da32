#include "server/auth/request_guard.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/client_text.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/security/access.h"

namespace zeroshard {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    default:
      return "ERROR";
  }
}

// The client certificate's common name, or "-" (no TLS, no certificate).
std::string CertName(const grpc::ServerContextBase& ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return "-";
  for (const grpc::string_ref& v :
       auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    return std::string(v.data(), v.size());
  }
  return "-";
}

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      BoundedMessage(s.message()));
}

}  // namespace

absl::StatusOr<uint64_t> StateBytes(const v1::ModelSpec& spec,
                                    uint32_t shard_index) {
  absl::StatusOr<PartitionPlan> plan = PlanForSpec(spec);
  if (!plan.ok()) return plan.status();
  if (shard_index >= plan->num_servers()) return 0;
  const uint64_t owned = plan->ServerRange(shard_index).size();
  const uint64_t slots = std::max<uint64_t>(1, spec.contributions_per_step());
  return owned * (3 * 4 + 2 + 4 * slots);
}

RequestGuard::RequestGuard(std::optional<security::TokenTable> tokens,
                           std::function<std::string()> server_job,
                           uint64_t max_state_bytes)
    : tokens_(std::move(tokens)),
      server_job_(std::move(server_job)),
      max_state_bytes_(max_state_bytes) {}

grpc::Status RequestGuard::CheckModelSize(const grpc::ServerContextBase& ctx,
                                          const v1::ModelSpec& spec,
                                          uint32_t shard_index) const {
  if (max_state_bytes_ == 0) return grpc::Status::OK;
  absl::StatusOr<uint64_t> bytes = StateBytes(spec, shard_index);
  if (!bytes.ok() || *bytes <= max_state_bytes_) return grpc::Status::OK;
  grpc::Status refusal(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat("the model's state on shard ", shard_index, " needs ",
                   *bytes, " bytes; this server allows ", max_state_bytes_,
                   " (--max_state_bytes)"));
  Audit(ctx, "/zeroshard.v1.ShardService/RegisterModel", nullptr, &refusal);
  return refusal;
}

grpc::Status RequestGuard::Admit(const grpc::ServerContextBase& ctx,
                                 absl::string_view method,
                                 const security::Principal** principal) const {
  *principal = nullptr;
  const std::optional<security::Role> needed = security::RequiredRole(method);
  if (!tokens_.has_value()) {
    if (needed == security::Role::kAdmin &&
        ShouldAuditAllowed(method, nullptr)) {
      Audit(ctx, method, nullptr, nullptr);
    }
    return grpc::Status::OK;
  }
  const auto& md = ctx.client_metadata();
  auto [begin, end] = md.equal_range(kAuthorizationKey);
  const security::Principal* who = nullptr;
  grpc::Status refusal;
  if (begin != end && std::next(begin) != end) {
    refusal = grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat(method, ": more than one ", kAuthorizationKey, " header"));
  } else {
    if (begin != end) {
      absl::string_view value(begin->second.data(), begin->second.size());
      if (absl::ConsumePrefix(&value, kBearerPrefix)) {
        who = tokens_->Find(value);
      }
    }
    refusal = ToGrpc(security::Authorize(who, method, server_job_(), ""));
  }
  if (!refusal.ok()) {
    Audit(ctx, method, who, &refusal);
    return refusal;
  }
  if (needed == security::Role::kAdmin && ShouldAuditAllowed(method, who)) {
    Audit(ctx, method, who, nullptr);
  }
  *principal = who;
  return grpc::Status::OK;
}

bool RequestGuard::ShouldAuditAllowed(
    absl::string_view method, const security::Principal* principal) const {
  if (method != "/zeroshard.v1.ShardService/GetStats") return true;
  const std::string key = absl::StrCat(
      principal != nullptr ? principal->name : "anonymous", " ", method);
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  auto [it, fresh] = read_only_audited_.emplace(key, now);
  if (fresh) return true;
  if (now - it->second < kReadOnlyAuditInterval) return false;
  it->second = now;
  return true;
}

grpc::Status RequestGuard::CheckRequestJob(const grpc::ServerContextBase& ctx,
                                           absl::string_view method,
                                           const security::Principal* principal,
                                           absl::string_view job) const {
  if (principal == nullptr) return grpc::Status::OK;
  grpc::Status refusal =
      ToGrpc(security::Authorize(principal, method, server_job_(), job));
  if (!refusal.ok()) Audit(ctx, method, principal, &refusal);
  return refusal;
}

void RequestGuard::Audit(const grpc::ServerContextBase& ctx,
                         absl::string_view method,
                         const security::Principal* principal,
                         const grpc::Status* refusal) const {
  // Every field escaped and bounded: nothing a client sends (a job id in
  // the refusal, its certificate's name) can start a line.
  std::string line = absl::StrCat(
      "zeroshard-server: audit: ", refusal ? "refused" : "allowed",
      " who=", ClientText(principal ? principal->name : "anonymous"),
      " peer=", ClientText(ctx.peer(), 128),
      " cert=", ClientText(CertName(ctx)), " method=", ClientText(method, 128));
  if (refusal != nullptr) {
    absl::StrAppend(&line, " code=", CodeName(refusal->error_code()), " why=\"",
                    ClientText(refusal->error_message(), 256), "\"");
  }
  line += "\n";
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace zeroshard
