#include "worker/collective/collective.h"

#include <utility>

namespace zeroshard {
namespace collective {

size_t DTypeSize(DType dtype) { return dtype == DType::kBfloat16 ? 2 : 4; }

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBfloat16:
      return "bf16";
  }
  return "unknown-dtype";
}

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "AllReduce";
    case OpKind::kReduceScatter:
      return "ReduceScatter";
    case OpKind::kAllGather:
      return "AllGather";
    case OpKind::kBroadcast:
      return "Broadcast";
    case OpKind::kBarrier:
      return "Barrier";
    case OpKind::kAllGatherMany:
      return "AllGatherMany";
  }
  return "UnknownOp";
}

void OpState::Complete(absl::Status status, OpStats stats) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  done_ = true;
  status_ = std::move(status);
  stats_ = stats;
}

absl::Status OpState::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

bool OpState::Done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

OpStats OpState::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Status CollectiveOp::Wait() const {
  if (state_ == nullptr) {
    return absl::FailedPreconditionError("CollectiveOp: empty handle");
  }
  return state_->Wait();
}

bool CollectiveOp::Done() const { return state_ == nullptr || state_->Done(); }

OpStats CollectiveOp::stats() const {
  return state_ == nullptr ? OpStats{} : state_->stats();
}

CollectiveOp CollectiveOp::Finished(absl::Status status) {
  auto state = std::make_shared<OpState>();
  state->Complete(std::move(status), OpStats{});
  return CollectiveOp(std::move(state));
}

CollectiveOp Communicator::AllGatherMany(const std::vector<Segment>& segments,
                                         DType dtype) {
  CollectiveOp last = CollectiveOp::Finished(absl::OkStatus());
  for (const Segment& s : segments) last = AllGather(s.buf, s.count, dtype);
  return last;
}

}  // namespace collective
}  // namespace zeroshard
