#include "worker/collective/faulty_communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace zeroshard {
namespace collective {

FaultyCommunicator::FaultyCommunicator(
    std::unique_ptr<Communicator> inner,
    std::shared_ptr<fault::FaultInjector> injector)
    : inner_(std::move(inner)), injector_(std::move(injector)) {}

std::optional<CollectiveOp> FaultyCommunicator::Inject(OpKind kind) {
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) {
      return CollectiveOp::Finished(absl::FailedPreconditionError(
          absl::StrCat("the communicator is broken by an earlier error: ",
                       broken_.message())));
    }
  }
  const fault::Decision d = injector_->Next(OpKindName(kind));
  if (d.fault.action == fault::Action::kDelay) {
    absl::SleepFor(d.fault.delay);
  } else if (d.fault.action == fault::Action::kFail) {
    const absl::Status status(
        d.fault.code,
        absl::StrCat("fault injection: ", OpKindName(kind), " on rank ", rank(),
                     " failed (", d.reason, ")"));
    absl::MutexLock lock(&mu_);
    broken_ = status;
    return CollectiveOp::Finished(status);
  }
  return std::nullopt;
}

CollectiveOp FaultyCommunicator::AllReduce(void* buf, uint64_t count,
                                           DType dtype) {
  if (auto op = Inject(OpKind::kAllReduce)) return *op;
  return inner_->AllReduce(buf, count, dtype);
}

CollectiveOp FaultyCommunicator::ReduceScatter(void* buf, uint64_t count,
                                               DType dtype) {
  if (auto op = Inject(OpKind::kReduceScatter)) return *op;
  return inner_->ReduceScatter(buf, count, dtype);
}

CollectiveOp FaultyCommunicator::AllGather(void* buf, uint64_t count,
                                           DType dtype) {
  if (auto op = Inject(OpKind::kAllGather)) return *op;
  return inner_->AllGather(buf, count, dtype);
}

CollectiveOp FaultyCommunicator::Broadcast(void* buf, uint64_t count,
                                           DType dtype, int root) {
  if (auto op = Inject(OpKind::kBroadcast)) return *op;
  return inner_->Broadcast(buf, count, dtype, root);
}

CollectiveOp FaultyCommunicator::Barrier() {
  if (auto op = Inject(OpKind::kBarrier)) return *op;
  return inner_->Barrier();
}

}  // namespace collective
}  // namespace zeroshard
