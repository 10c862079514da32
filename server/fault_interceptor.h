// Server-side fault injection (common/fault/fault_spec.h): a gRPC server
// interceptor that acts on a call's answer once its handler has run.
//
//   lose, dup  an OK status is replaced by UNAVAILABLE: the server applied
//              the call but the client sees a failure and retries, so the
//              server receives it a second time (exactly-once is the
//              store's job: idempotency keys, commits acknowledged once
//              applied).
//   delay      the answer is held back (deferred, no thread blocked).
// A server cannot drop or fail a call before its handler (gRPC has no such
// hook); ParseFaultSpec(Side::kServer) refuses those terms. Only methods of
// the zeroshard.v1 services are touched.
//
// Ordering: append it after authentication, so rejected calls are not
// counted or delayed.
#ifndef ZEROSHARD_SERVER_FAULT_INTERCEPTOR_H_
#define ZEROSHARD_SERVER_FAULT_INTERCEPTOR_H_

#include <memory>

#include "common/fault/fault_spec.h"
#include "grpcpp/support/server_interceptor.h"

namespace zeroshard {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewServerFaultInterceptorFactory(
    std::shared_ptr<fault::FaultInjector> injector);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_FAULT_INTERCEPTOR_H_
