// Client-side fault injection (common/fault/fault_spec.h): a gRPC client
// interceptor that drops, fails, loses, duplicates or delays calls as a
// FaultInjector decides.
//
//   drop, fail  the call is hijacked before anything is sent: the server
//               never sees it; writes and reads fail and the caller gets
//               UNAVAILABLE (drop) or the spec's code (fail).
//   lose        the call runs; an OK answer is replaced by UNAVAILABLE.
//   dup         unary: the same request (same metadata) is sent once more
//               through the channel before the original, so the server
//               handles it twice and the caller sees the second answer.
//               Streams: as lose (the client's retry is the second
//               delivery, with the same idempotency key).
//   delay       the call is held before it is sent (deferred, no thread
//               blocked).
// Only methods of the zeroshard.v1 services are touched (the short method
// name is the spec's NAME); health checks and others pass through.
//
// Ordering: append it after every other interceptor (authentication), so
// the metadata those add is already in place when a call is duplicated,
// and the duplicate is sent without running them again.
#ifndef ZEROSHARD_CLIENT_FAULT_INTERCEPTOR_H_
#define ZEROSHARD_CLIENT_FAULT_INTERCEPTOR_H_

#include <memory>

#include "client/shard_client.h"
#include "common/fault/fault_spec.h"
#include "grpcpp/support/client_interceptor.h"

namespace zeroshard {

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewClientFaultInterceptorFactory(
    std::shared_ptr<fault::FaultInjector> injector);

// Makes `options->interceptors` return what it returned before plus the
// fault interceptor last. No change when `injector` is null or its spec is
// empty.
void AddClientFaultInjection(std::shared_ptr<fault::FaultInjector> injector,
                             ClientOptions* options);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_FAULT_INTERCEPTOR_H_
