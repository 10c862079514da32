// gRPC interceptors that record every call's latency into a Registry, under
// the names go-grpc-prometheus made conventional:
//   grpc_server_handling_seconds{grpc_service,grpc_method,grpc_code}
//       (histogram) on a server: from the call's arrival to its status;
//   grpc_client_handling_seconds{grpc_service,grpc_method,grpc_code}
//       (histogram) on a client: from the call's start to its status.
// grpc_code is the status code's name (OK, UNAVAILABLE, ...); a server call
// that ends without sending a status (the client went away) counts as
// CANCELLED. Buckets: LatencyBounds().
//
//   interceptors.push_back(metrics::ServerLatencyInterceptorFactory(&registry));
//   builder.experimental().SetInterceptorCreators(std::move(interceptors));
//
// The registry must outlive every call; the factories are thread-safe.
#ifndef ZEROSHARD_COMMON_METRICS_RPC_METRICS_H_
#define ZEROSHARD_COMMON_METRICS_RPC_METRICS_H_

#include <memory>

#include "common/metrics/registry.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/support/server_interceptor.h"

namespace zeroshard::metrics {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
ServerLatencyInterceptorFactory(Registry* registry);

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
ClientLatencyInterceptorFactory(Registry* registry);

}  // namespace zeroshard::metrics

#endif  // ZEROSHARD_COMMON_METRICS_RPC_METRICS_H_
