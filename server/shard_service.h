// ShardServiceImpl: the gRPC face of a ShardStore. Thin by design: it
// validates stream framing, moves bytes between messages and the store, and
// converts absl::Status to grpc::Status (ToGrpcStatus). All rules live in
// the store.
//
// The data plane (Gather, PushGradients) is served by callback handlers on
// raw byte buffers in the protocol's wire format (server/data_plane.h);
// the control plane by the synchronous generated-message handlers below,
// reached through ServeUnary (server/unary_adapter.h) so that a malformed
// request is INVALID_ARGUMENT naming the method. WriteParameters stages
// its chunks and writes them only once the stream ended well (a rejected
// stream writes nothing). Error messages are cut to kMaxErrorMessageBytes
// and quote client strings through ClientText (common/client_text.h).
//
// Threading: gRPC calls these handlers on its own threads; the store is
// thread-safe.
#ifndef ZEROSHARD_SERVER_SHARD_SERVICE_H_
#define ZEROSHARD_SERVER_SHARD_SERVICE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/zeroshard.grpc.pb.h"
#include "server/auth/request_guard.h"
#include "server/data_plane.h"
#include "server/store/shard_store.h"

namespace zeroshard {

grpc::Status ToGrpcStatus(const absl::Status& status);

using ShardServiceBase = v1::ShardService::WithRawCallbackMethod_Gather<
    v1::ShardService::WithRawCallbackMethod_PushGradients<
        v1::ShardService::WithStreamedUnaryMethod_RegisterModel<
            v1::ShardService::WithStreamedUnaryMethod_GetStats<
                v1::ShardService::WithStreamedUnaryMethod_PrepareStep<
                    v1::ShardService::WithStreamedUnaryMethod_CommitStep<
                        v1::ShardService::WithStreamedUnaryMethod_Checkpoint<
                            v1::ShardService::WithStreamedUnaryMethod_Restore<
                                v1::ShardService::Service>>>>>>>>;

class ShardServiceImpl final : public ShardServiceBase {
 public:
  // `store` (and `guard`) are not owned and must outlive the service.
  // Every handler first asks `guard` (server/auth/request_guard.h) whether
  // the caller may make the call; null: everyone may (in-process tests).
  // Data-plane streams idle for `stream_idle_timeout` are cancelled
  // (IdleStreams; <= 0: never). `shared` (not owned; null: off) serves
  // the data plane's requests that name a shared segment.
  explicit ShardServiceImpl(
      ShardStore* store, const RequestGuard* guard = nullptr,
      absl::Duration stream_idle_timeout = absl::ZeroDuration(),
      SharedSegments* shared = nullptr)
      : store_(store),
        guard_(guard),
        idle_(stream_idle_timeout),
        shared_(shared) {}

  // The unary methods as gRPC calls them (ServeUnary around the typed
  // handlers below).
  grpc::Status StreamedRegisterModel(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::RegisterModelRequest,
                                v1::RegisterModelResponse>* stream) override;
  grpc::Status StreamedGetStats(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::GetStatsRequest, v1::GetStatsResponse>*
          stream) override;
  grpc::Status StreamedPrepareStep(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::PrepareStepRequest,
                                v1::PrepareStepResponse>* stream) override;
  grpc::Status StreamedCommitStep(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::CommitStepRequest, v1::CommitStepResponse>*
          stream) override;
  grpc::Status StreamedCheckpoint(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::CheckpointRequest, v1::CheckpointResponse>*
          stream) override;
  grpc::Status StreamedRestore(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<v1::RestoreRequest, v1::RestoreResponse>*
          stream) override;

  // The typed handlers (also called directly by in-process tests).

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

  // The malformed-request path of ServeUnary for `method`.
  std::function<grpc::Status()> Refuse(grpc::ServerContext* ctx,
                                       const char* method);

  ShardStore* store_;
  const RequestGuard* guard_;
  IdleStreams idle_;
  SharedSegments* shared_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_SERVICE_H_
