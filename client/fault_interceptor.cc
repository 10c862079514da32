#include "client/fault_interceptor.h"

#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fault/delay_queue.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"

namespace zeroshard {
namespace {

using grpc::experimental::ClientRpcInfo;
using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

// Set on the thread that sends a duplicate: its call is not intercepted
// again (whatever the interceptor positions of the channel).
thread_local bool sending_duplicate = false;

class ClientFaultInterceptor : public grpc::experimental::Interceptor {
 public:
  ClientFaultInterceptor(ClientRpcInfo* info, fault::Decision decision,
                         std::shared_ptr<fault::DelayQueue> queue)
      : info_(info),
        decision_(std::move(decision)),
        queue_(std::move(queue)),
        unary_(info->type() == ClientRpcInfo::Type::UNARY) {}

  void Intercept(InterceptorBatchMethods* m) override {
    using P = InterceptionHookPoints;
    const fault::Action a = decision_.fault.action;
    if (m->QueryInterceptionHookPoint(P::PRE_SEND_INITIAL_METADATA)) {
      if (a == fault::Action::kDrop || a == fault::Action::kFail) {
        // Hijack() runs this interceptor again for the batch's receive
        // ops (the branch below) before it returns.
        refused_ = true;
        m->Hijack();
        return;
      }
      if (a == fault::Action::kDelay) {
        queue_->RunAfter(decision_.fault.delay, [m] { m->Proceed(); });
        return;
      }
      if (a == fault::Action::kDup && unary_ &&
          m->QueryInterceptionHookPoint(P::PRE_SEND_MESSAGE)) {
        SendTwice(m);
        return;
      }
    }
    if (refused_) {
      if (m->QueryInterceptionHookPoint(P::PRE_SEND_MESSAGE)) {
        m->FailHijackedSendMessage();
      }
      if (m->QueryInterceptionHookPoint(P::PRE_RECV_MESSAGE) &&
          info_->type() != ClientRpcInfo::Type::CLIENT_STREAMING) {
        m->FailHijackedRecvMessage();
      }
      if (m->QueryInterceptionHookPoint(P::PRE_RECV_STATUS)) {
        const bool drop = decision_.fault.action == fault::Action::kDrop;
        *m->GetRecvStatus() = grpc::Status(
            drop ? grpc::StatusCode::UNAVAILABLE
                 : static_cast<grpc::StatusCode>(decision_.fault.code),
            absl::StrCat("fault injection: ", info_->method(), " not sent (",
                         decision_.reason, ")"));
      }
      m->Proceed();
      return;
    }
    if (m->QueryInterceptionHookPoint(P::POST_RECV_STATUS) &&
        (a == fault::Action::kLose || (a == fault::Action::kDup && !unary_))) {
      grpc::Status* status = m->GetRecvStatus();
      if (status->ok()) {
        *status = grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("fault injection: the answer of ", info_->method(),
                         " was lost (", decision_.reason, ")"));
      }
    }
    m->Proceed();
  }

 private:
  // Sends a copy of this unary call (same metadata and bytes, through the
  // interceptors after this one) on another thread, then lets the original
  // go: the server handles the request twice, in that order.
  void SendTwice(InterceptorBatchMethods* m) {
    std::vector<std::pair<std::string, std::string>> metadata(
        m->GetSendInitialMetadata()->begin(),
        m->GetSendInitialMetadata()->end());
    grpc::ByteBuffer request = *m->GetSerializedSendMessage();
    std::shared_ptr<grpc::ChannelInterface> channel =
        m->GetInterceptedChannel();
    const auto deadline = info_->client_context()->deadline();
    const char* method = info_->method();
    std::thread([m, metadata = std::move(metadata),
                 request = std::move(request), channel = std::move(channel),
                 deadline, method] {
      sending_duplicate = true;
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline);
      for (const auto& [key, value] : metadata) ctx.AddMetadata(key, value);
      grpc::ByteBuffer response;
      // Its outcome does not matter: the original call's answer is the
      // one the caller sees.
      (void)
          grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
              channel.get(),
              grpc::internal::RpcMethod(method,
                                        grpc::internal::RpcMethod::NORMAL_RPC),
              &ctx, request, &response);
      m->Proceed();
    }).detach();
  }

  ClientRpcInfo* const info_;
  const fault::Decision decision_;
  const std::shared_ptr<fault::DelayQueue> queue_;
  const bool unary_;
  bool refused_ = false;
};

class ClientFaultInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ClientFaultInterceptorFactory(
      std::shared_ptr<fault::FaultInjector> injector)
      : injector_(std::move(injector)),
        queue_(std::make_shared<fault::DelayQueue>()) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      ClientRpcInfo* info) override {
    if (sending_duplicate) return nullptr;
    fault::Decision d = injector_->NextRpc(info->method());
    if (d.fault.action == fault::Action::kNone) return nullptr;
    return new ClientFaultInterceptor(info, std::move(d), queue_);
  }

 private:
  const std::shared_ptr<fault::FaultInjector> injector_;
  const std::shared_ptr<fault::DelayQueue> queue_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
NewClientFaultInterceptorFactory(
    std::shared_ptr<fault::FaultInjector> injector) {
  return std::make_unique<ClientFaultInterceptorFactory>(std::move(injector));
}

void AddClientFaultInjection(std::shared_ptr<fault::FaultInjector> injector,
                             ClientOptions* options) {
  if (injector == nullptr || injector->spec().empty()) return;
  auto before = std::move(options->interceptors);
  options->interceptors = [before = std::move(before),
                           injector = std::move(injector)] {
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        out;
    if (before) out = before();
    out.push_back(NewClientFaultInterceptorFactory(injector));
    return out;
  };
}

}  // namespace zeroshard
