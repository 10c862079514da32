#include "server/health_port.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<HealthPort>> HealthPort::Start(
    const std::string& host, int port,
    const std::vector<std::string>& services) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<HealthPort> h(new HealthPort());
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a busy port fails
  // A server needs one registered service before the default health
  // service is added at start: the generic one answers UNIMPLEMENTED to
  // every other method.
  builder.RegisterCallbackGenericService(&h->unimplemented_);
  SetServerReflection(&builder, false);
  builder.AddListeningPort(absl::StrCat(host, ":", port),
                           grpc::InsecureServerCredentials(), &h->port_);
  h->server_ = builder.BuildAndStart();
  if (h->server_ == nullptr || h->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for health checks on ", host, ":", port,
                     " (address in use or not available)"));
  }
  AddHealthNames(h->server_.get(), services, false);
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

namespace {

// Sets whether one builder's server has reflection. Linking
// libgrpc++_reflection registers the plugin for every builder of the
// process (a static initializer), so this first removes it, then adds one
// back when `on` (ServerBuilder applies its options' plugins at
// BuildAndStart).
class ReflectionOption : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool on) : on_(on) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    auto reflection =
        std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>();
    const std::string name = reflection->name();
    for (auto it = plugins->begin(); it != plugins->end();) {
      it = (*it)->name() == name ? plugins->erase(it) : it + 1;
    }
    if (on_) plugins->push_back(std::move(reflection));
  }

 private:
  const bool on_;
};

}  // namespace

void SetServerReflection(grpc::ServerBuilder* builder, bool on) {
  builder->SetOption(std::make_unique<ReflectionOption>(on));
}

void AddHealthNames(grpc::Server* server,
                    const std::vector<std::string>& services, bool serving) {
  for (const std::string& name : services) {
    server->GetHealthCheckService()->SetServingStatus(name, serving);
  }
}

}  // namespace zeroshard
