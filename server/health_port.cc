#include "server/health_port.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<HealthPort>> HealthPort::Start(
    const std::string& host, int port) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<HealthPort> h(new HealthPort());
  grpc::ServerBuilder builder;
  // A server needs one registered service before the default health
  // service is added at start: the generic one answers UNIMPLEMENTED to
  // every other method.
  builder.RegisterCallbackGenericService(&h->unimplemented_);
  builder.AddListeningPort(absl::StrCat(host, ":", port),
                           grpc::InsecureServerCredentials(), &h->port_);
  h->server_ = builder.BuildAndStart();
  if (h->server_ == nullptr || h->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for health checks on ", host, ":", port,
                     " (address in use or not available)"));
  }
  h->SetServing(false);
  return h;
}

HealthPort::~HealthPort() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

void HealthPort::SetServing(bool serving) {
  server_->GetHealthCheckService()->SetServingStatus(serving);
}

}  // namespace zeroshard
