// ShardServiceImpl: the gRPC face of a ShardStore. Thin by design: it
// validates stream framing, moves bytes between messages and the store, and
// converts absl::Status to grpc::Status (ToGrpcStatus). All rules live in
// the store.
//
// The data plane (Gather, PushGradients) is served by callback handlers on
// raw byte buffers in the protocol's wire format (server/data_plane.h);
// the control plane by the synchronous generated-message handlers below.
//
// Threading: gRPC calls these handlers on its own threads; the store is
// thread-safe.
#ifndef ZEROSHARD_SERVER_SHARD_SERVICE_H_
#define ZEROSHARD_SERVER_SHARD_SERVICE_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/zeroshard.grpc.pb.h"
#include "server/auth/request_guard.h"
#include "server/store/shard_store.h"

namespace zeroshard {

grpc::Status ToGrpcStatus(const absl::Status& status);

class ShardServiceImpl final
    : public v1::ShardService::WithRawCallbackMethod_Gather<
          v1::ShardService::WithRawCallbackMethod_PushGradients<
              v1::ShardService::Service>> {
 public:
  // `store` (and `guard`) are not owned and must outlive the service.
  // Every handler first asks `guard` (server/auth/request_guard.h) whether
  // the caller may make the call; null: everyone may (in-process tests).
  explicit ShardServiceImpl(ShardStore* store,
                            const RequestGuard* guard = nullptr)
      : store_(store), guard_(guard) {}

  grpc::Status RegisterModel(grpc::ServerContext* ctx,
                             const v1::RegisterModelRequest* req,
                             v1::RegisterModelResponse* resp) override;
  grpc::Status WriteParameters(
      grpc::ServerContext* ctx,
      grpc::ServerReader<v1::WriteParametersRequest>* reader,
      v1::WriteParametersResponse* resp) override;
  grpc::Status GetStats(grpc::ServerContext* ctx,
                        const v1::GetStatsRequest* req,
                        v1::GetStatsResponse* resp) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Gather(
      grpc::CallbackServerContext* ctx,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PushGradients(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) override;
  grpc::Status PrepareStep(grpc::ServerContext* ctx,
                           const v1::PrepareStepRequest* req,
                           v1::PrepareStepResponse* resp) override;
  grpc::Status CommitStep(grpc::ServerContext* ctx,
                          const v1::CommitStepRequest* req,
                          v1::CommitStepResponse* resp) override;
  grpc::Status Checkpoint(grpc::ServerContext* ctx,
                          const v1::CheckpointRequest* req,
                          v1::CheckpointResponse* resp) override;
  grpc::Status Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                       v1::RestoreResponse* resp) override;

 private:
  // OK when the caller may call `method` (and the request's `job`, if
  // given); else the status to answer with.
  grpc::Status Admit(const grpc::ServerContextBase* ctx, const char* method,
                     const std::string* job = nullptr) const;

  ShardStore* store_;
  const RequestGuard* guard_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_SERVICE_H_
