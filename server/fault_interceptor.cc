#include "server/fault_interceptor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/fault/delay_queue.h"
#include "grpcpp/grpcpp.h"

namespace zeroshard {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;
using grpc::experimental::ServerRpcInfo;

class ServerFaultInterceptor : public grpc::experimental::Interceptor {
 public:
  ServerFaultInterceptor(ServerRpcInfo* info, fault::Decision decision,
                         std::shared_ptr<fault::DelayQueue> queue)
      : info_(info), decision_(std::move(decision)), queue_(std::move(queue)) {}

  void Intercept(InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const fault::Action a = decision_.fault.action;
      if ((a == fault::Action::kLose || a == fault::Action::kDup) &&
          m->GetSendStatus().ok()) {
        m->ModifySendStatus(grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("fault injection: the server's answer to ",
                         info_->method(), " was lost (", decision_.reason,
                         ")")));
      }
      if (a == fault::Action::kDelay) {
        queue_->RunAfter(decision_.fault.delay, [m] { m->Proceed(); });
        return;
      }
    }
    m->Proceed();
  }

 private:
  ServerRpcInfo* const info_;
  const fault::Decision decision_;
  const std::shared_ptr<fault::DelayQueue> queue_;
};

class ServerFaultInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ServerFaultInterceptorFactory(
      std::shared_ptr<fault::FaultInjector> injector)
      : injector_(std::move(injector)),
        queue_(std::make_shared<fault::DelayQueue>()) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      ServerRpcInfo* info) override {
    fault::Decision d = injector_->NextRpc(info->method());
    if (d.fault.action == fault::Action::kNone) return nullptr;
    return new ServerFaultInterceptor(info, std::move(d), queue_);
  }

 private:
  const std::shared_ptr<fault::FaultInjector> injector_;
  const std::shared_ptr<fault::DelayQueue> queue_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewServerFaultInterceptorFactory(
    std::shared_ptr<fault::FaultInjector> injector) {
  return std::make_unique<ServerFaultInterceptorFactory>(std::move(injector));
}

}  // namespace zeroshard
