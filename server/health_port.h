// A second, plaintext gRPC port that serves only the standard health
// service (grpc.health.v1.Health), for Kubernetes gRPC probes: the kubelet
// cannot speak TLS or send tokens, and the shard port requires them. It
// reveals nothing but SERVING / NOT_SERVING, which the server mirrors here
// (zeroshard-server --health_port).
#ifndef ZEROSHARD_SERVER_HEALTH_PORT_H_
#define ZEROSHARD_SERVER_HEALTH_PORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"

namespace zeroshard {

class HealthPort {
 public:
  // Listens on host:port (0 picks a free one), NOT_SERVING until
  // SetServing(true). UNAVAILABLE naming the address when it cannot listen.
  static absl::StatusOr<std::unique_ptr<HealthPort>> Start(
      const std::string& host, int port);
  ~HealthPort();  // shuts the port down at once

  void SetServing(bool serving);
  int port() const { return port_; }

 private:
  HealthPort() = default;
  grpc::CallbackGenericService unimplemented_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_HEALTH_PORT_H_
