// MembershipServiceImpl: the gRPC face of a Membership
// (server/membership/membership.h), served by shard 0. Thin by design:
// each handler admits the caller through the RequestGuard, calls the
// Membership and converts its absl::Status (ToGrpcStatus).
//
// The methods are registered as streamed unary ones and reach the typed
// handlers through ServeUnary (server/unary_adapter.h): a malformed
// request is INVALID_ARGUMENT naming the method.
//
// Threading: gRPC calls these synchronous handlers on its own threads;
// Rendezvous holds its thread for at most kMaxRendezvousWaitMs.
#ifndef ZEROSHARD_SERVER_MEMBERSHIP_SERVICE_H_
#define ZEROSHARD_SERVER_MEMBERSHIP_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "proto/zeroshard.grpc.pb.h"
#include "server/auth/request_guard.h"
#include "server/membership/membership.h"

namespace zeroshard {

using MembershipServiceBase =
    v1::MembershipService::WithStreamedUnaryMethod_Join<
        v1::MembershipService::WithStreamedUnaryMethod_Heartbeat<
            v1::MembershipService::WithStreamedUnaryMethod_Leave<
                v1::MembershipService::WithStreamedUnaryMethod_Rendezvous<
                    v1::MembershipService::Service>>>>;

class MembershipServiceImpl final : public MembershipServiceBase {
 public:
  // `membership` (and `guard`) are not owned and must outlive the service.
  // Null `guard`: everyone may call (in-process tests).
  explicit MembershipServiceImpl(Membership* membership,
                                 const RequestGuard* guard = nullptr)
      : membership_(membership), guard_(guard) {}

  grpc::Status StreamedJoin(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::JoinRequest, v1::JoinResponse>* stream)
      override;
  grpc::Status StreamedHeartbeat(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::HeartbeatRequest, v1::HeartbeatResponse>*
          stream) override;
  grpc::Status StreamedLeave(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::LeaveRequest, v1::LeaveResponse>* stream)
      override;
  grpc::Status StreamedRendezvous(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::RendezvousRequest, v1::RendezvousResponse>*
          stream) override;

  // The typed handlers.
  grpc::Status Join(grpc::ServerContext* ctx, const v1::JoinRequest* req,
                    v1::JoinResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx,
                         const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req,
                     v1::LeaveResponse* resp) override;
  grpc::Status Rendezvous(grpc::ServerContext* ctx,
                          const v1::RendezvousRequest* req,
                          v1::RendezvousResponse* resp) override;

 private:
  // OK when the caller may call `method` for `job`; else the refusal.
  grpc::Status Admit(const grpc::ServerContextBase* ctx, const char* method,
                     const std::string& job) const;

  Membership* membership_;
  const RequestGuard* guard_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_MEMBERSHIP_SERVICE_H_
