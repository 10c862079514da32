// A second, plaintext gRPC port that serves only the standard health
// service (grpc.health.v1.Health), for Kubernetes gRPC probes: the kubelet
// cannot speak TLS or send tokens, and the shard port requires them. It
// reveals nothing but SERVING / NOT_SERVING, which the server mirrors here
// (zeroshard-server --health_port), for the whole server ("") and for each
// service by name ("zeroshard.v1.ShardService"); no reflection.
//
// Also the two helpers the shard port uses so that grpcurl-style tools work
// there: the health status by service name, and server reflection.
#ifndef ZEROSHARD_SERVER_HEALTH_PORT_H_
#define ZEROSHARD_SERVER_HEALTH_PORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace zeroshard {

class HealthPort {
 public:
  // Listens on host:port (0 picks a free one), NOT_SERVING until
  // SetServing(true), for "" and each of `services` (full names).
  // UNAVAILABLE naming the address when it cannot listen.
  static absl::StatusOr<std::unique_ptr<HealthPort>> Start(
      const std::string& host, int port,
      const std::vector<std::string>& services);
  ~HealthPort();  // shuts the port down at once

  // "" and every service given to Start.
  void SetServing(bool serving);
  int port() const { return port_; }

 private:
  HealthPort() = default;
  grpc::CallbackGenericService unimplemented_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Whether `builder`'s server serves grpc.reflection.v1alpha.ServerReflection
// (whatever gRPC's process-wide plugin registration says: linking
// libgrpc++_reflection turns it on for every server).
void SetServerReflection(grpc::ServerBuilder* builder, bool on);

// Makes `server`'s default health service answer for each of `services` by
// name (gRPC's answers NOT_FOUND for any name it was not told), with
// `serving`; a later SetServingStatus(bool) changes them all.
void AddHealthNames(grpc::Server* server,
                    const std::vector<std::string>& services, bool serving);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_HEALTH_PORT_H_
