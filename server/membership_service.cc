#include "server/membership_service.h"

#include <utility>

#include "server/shard_service.h"
#include "server/unary_adapter.h"

namespace zeroshard {
namespace {

constexpr char kJoin[] = "/zeroshard.v1.MembershipService/Join";
constexpr char kHeartbeat[] = "/zeroshard.v1.MembershipService/Heartbeat";
constexpr char kLeave[] = "/zeroshard.v1.MembershipService/Leave";
constexpr char kRendezvous[] = "/zeroshard.v1.MembershipService/Rendezvous";

// Moves an OK result into *resp; converts an error.
template <typename T>
grpc::Status Answer(absl::StatusOr<T> result, T* resp) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *resp = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status MembershipServiceImpl::Admit(const grpc::ServerContextBase* ctx,
                                          const char* method,
                                          const std::string& job) const {
  if (guard_ == nullptr) return grpc::Status::OK;
  const security::Principal* who = nullptr;
  grpc::Status s = guard_->Admit(*ctx, method, &who);
  if (!s.ok()) return s;
  return guard_->CheckRequestJob(*ctx, method, who, job);
}

#define ZS_SERVE_UNARY(Name, method)                                      \
  grpc::Status MembershipServiceImpl::Streamed##Name(                     \
      grpc::ServerContext* ctx,                                           \
      grpc::ServerUnaryStreamer<v1::Name##Request, v1::Name##Response>*   \
          stream) {                                                       \
    return ServeUnary<v1::Name##Request, v1::Name##Response>(             \
        method, ctx, stream,                                              \
        [this, ctx] {                                                     \
          if (guard_ == nullptr) return grpc::Status::OK;                 \
          const security::Principal* who = nullptr;                       \
          return guard_->Admit(*ctx, method, &who);                       \
        },                                                                \
        [this](grpc::ServerContext* c, const v1::Name##Request* req,      \
               v1::Name##Response* resp) { return Name(c, req, resp); }); \
  }
ZS_SERVE_UNARY(Join, kJoin)
ZS_SERVE_UNARY(Heartbeat, kHeartbeat)
ZS_SERVE_UNARY(Leave, kLeave)
ZS_SERVE_UNARY(Rendezvous, kRendezvous)
#undef ZS_SERVE_UNARY

grpc::Status MembershipServiceImpl::Join(grpc::ServerContext* ctx,
                                         const v1::JoinRequest* req,
                                         v1::JoinResponse* resp) {
  if (grpc::Status a = Admit(ctx, kJoin, req->job_id()); !a.ok()) return a;
  return Answer(membership_->Join(*req), resp);
}

grpc::Status MembershipServiceImpl::Heartbeat(grpc::ServerContext* ctx,
                                              const v1::HeartbeatRequest* req,
                                              v1::HeartbeatResponse* resp) {
  if (grpc::Status a = Admit(ctx, kHeartbeat, req->job_id()); !a.ok()) {
    return a;
  }
  return Answer(membership_->Heartbeat(*req), resp);
}

grpc::Status MembershipServiceImpl::Leave(grpc::ServerContext* ctx,
                                          const v1::LeaveRequest* req,
                                          v1::LeaveResponse* resp) {
  if (grpc::Status a = Admit(ctx, kLeave, req->job_id()); !a.ok()) return a;
  return Answer(membership_->Leave(*req), resp);
}

grpc::Status MembershipServiceImpl::Rendezvous(grpc::ServerContext* ctx,
                                               const v1::RendezvousRequest* req,
                                               v1::RendezvousResponse* resp) {
  if (grpc::Status a = Admit(ctx, kRendezvous, req->job_id()); !a.ok()) {
    return a;
  }
  return Answer(membership_->Rendezvous(*req), resp);
}

}  // namespace zeroshard
