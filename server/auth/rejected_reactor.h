// A callback-API reactor that ends its call at once with a status: what a
// streaming handler returns for a call RequestGuard refused, so the
// request is never read.
//
//   return new RejectedReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>(
//       status);
#ifndef ZEROSHARD_SERVER_AUTH_REJECTED_REACTOR_H_
#define ZEROSHARD_SERVER_AUTH_REJECTED_REACTOR_H_

#include "grpcpp/grpcpp.h"

namespace zeroshard {

// `Reactor`: grpc::ServerWriteReactor<T>, ServerReadReactor<T> or
// ServerBidiReactor<T, U>. gRPC owns it once returned; it deletes itself.
template <class Reactor>
class RejectedReactor final : public Reactor {
 public:
  explicit RejectedReactor(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_AUTH_REJECTED_REACTOR_H_
