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
#include "server/shard_store.h"

namespace zeroshard {

grpc::Status ToGrpcStatus(const absl::Status& status);

class ShardServiceImpl final
    : public v1::ShardService::WithRawCallbackMethod_Gather<
          v1::ShardService::WithRawCallbackMethod_PushGradients<
              v1::ShardService::Service>> {
 public:
  // `store` is not owned and must outlive the service.
  explicit ShardServiceImpl(ShardStore* store) : store_(store) {}

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

 private:
  ShardStore* store_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_SERVICE_H_
