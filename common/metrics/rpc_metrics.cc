#include "common/metrics/rpc_metrics.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace zeroshard::metrics {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr char kServerName[] = "grpc_server_handling_seconds";
constexpr char kClientName[] = "grpc_client_handling_seconds";

// Records one finished call: "/pkg.Service/Method" -> service, method.
void Record(Registry* registry, const char* name, absl::string_view path,
            grpc::StatusCode code, absl::Time start) {
  if (!path.empty() && path[0] == '/') path.remove_prefix(1);
  const size_t slash = path.rfind('/');
  const std::string service(
      slash == absl::string_view::npos ? "" : path.substr(0, slash));
  const std::string method(
      slash == absl::string_view::npos ? path : path.substr(slash + 1));
  const std::string code_name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  const bool server = absl::string_view(name) == kServerName;
  registry
      ->GetHistogram(name,
                     server ? "Server-side latency of gRPC calls in seconds."
                            : "Client-side latency of gRPC calls in seconds.",
                     LatencyBounds(),
                     {{"grpc_service", service},
                      {"grpc_method", method},
                      {"grpc_code", code_name}})
      ->Observe(absl::ToDoubleSeconds(absl::Now() - start));
}

class ServerInterceptor : public grpc::experimental::Interceptor {
 public:
  ServerInterceptor(Registry* registry, const char* method)
      : registry_(registry), method_(method == nullptr ? "" : method) {}
  ~ServerInterceptor() override {
    if (!recorded_) {
      Record(registry_, kServerName, method_, grpc::StatusCode::CANCELLED,
             start_);
    }
  }
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(registry_, kServerName, method_, m->GetSendStatus().error_code(),
             start_);
      recorded_ = true;
    }
    m->Proceed();
  }

 private:
  Registry* const registry_;
  const std::string method_;
  const absl::Time start_ = absl::Now();
  bool recorded_ = false;
};

class ClientInterceptor : public grpc::experimental::Interceptor {
 public:
  ClientInterceptor(Registry* registry, const char* method)
      : registry_(registry), method_(method == nullptr ? "" : method) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_STATUS)) {
      Record(registry_, kClientName, method_, m->GetRecvStatus()->error_code(),
             start_);
    }
    m->Proceed();
  }

 private:
  Registry* const registry_;
  const std::string method_;
  const absl::Time start_ = absl::Now();
};

class ServerFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ServerFactory(Registry* registry) : registry_(registry) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ServerInterceptor(registry_, info->method());
  }

 private:
  Registry* const registry_;
};

class ClientFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ClientFactory(Registry* registry) : registry_(registry) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new ClientInterceptor(registry_, info->method());
  }

 private:
  Registry* const registry_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
ServerLatencyInterceptorFactory(Registry* registry) {
  return std::make_unique<ServerFactory>(registry);
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
ClientLatencyInterceptorFactory(Registry* registry) {
  return std::make_unique<ClientFactory>(registry);
}

}  // namespace zeroshard::metrics
