#include "worker/elastic/watched_communicator.h"

namespace zeroshard::elastic {

using collective::CollectiveOp;
using collective::DType;

bool WatchedCommunicator::failed() const {
  absl::MutexLock lock(&mu_);
  for (const CollectiveOp& op : recent_) {
    if (op.Done() && !op.Wait().ok()) return true;
  }
  return false;
}

CollectiveOp WatchedCommunicator::Keep(CollectiveOp op) {
  absl::MutexLock lock(&mu_);
  recent_.push_back(op);
  if (recent_.size() > kWatchedOps) recent_.pop_front();
  return op;
}

CollectiveOp WatchedCommunicator::AllReduce(void* buf, uint64_t count,
                                            DType dtype) {
  return Keep(inner_->AllReduce(buf, count, dtype));
}

CollectiveOp WatchedCommunicator::ReduceScatter(void* buf, uint64_t count,
                                                DType dtype) {
  return Keep(inner_->ReduceScatter(buf, count, dtype));
}

CollectiveOp WatchedCommunicator::AllGather(void* buf, uint64_t count,
                                            DType dtype) {
  return Keep(inner_->AllGather(buf, count, dtype));
}

CollectiveOp WatchedCommunicator::Broadcast(void* buf, uint64_t count,
                                            DType dtype, int root) {
  return Keep(inner_->Broadcast(buf, count, dtype, root));
}

CollectiveOp WatchedCommunicator::Barrier() { return Keep(inner_->Barrier()); }

CollectiveOp WatchedCommunicator::AllGatherMany(
    const std::vector<Segment>& segments, DType dtype) {
  return Keep(inner_->AllGatherMany(segments, dtype));
}

}  // namespace zeroshard::elastic
