// WatchedCommunicator: a Communicator that forwards every operation to
// another one and can tell afterwards whether one of them failed — the
// origin of an elastic group's error (error_class.h): a failed collective
// (a dead or mismatched peer) or something else (the servers, the engine).
//
// It keeps the handles of the last kWatchedOps operations; once an
// operation fails the communicator is broken and every later one fails at
// once, so the newest handles show it.
//
// Ownership: `inner` is not owned and must outlive this. Threading: as
// the inner communicator's; failed() may be called from any thread.
#ifndef ZEROSHARD_WORKER_ELASTIC_WATCHED_COMMUNICATOR_H_
#define ZEROSHARD_WORKER_ELASTIC_WATCHED_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "worker/collective/collective.h"

namespace zeroshard::elastic {

inline constexpr size_t kWatchedOps = 256;

class WatchedCommunicator : public collective::Communicator {
 public:
  explicit WatchedCommunicator(collective::Communicator* inner)
      : inner_(inner) {}

  // Whether one of the last kWatchedOps operations finished with an error.
  bool failed() const;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  collective::MemorySpace memory_space() const override {
    return inner_->memory_space();
  }
  uint32_t part_alignment() const override { return inner_->part_alignment(); }
  collective::CollectiveOp AllReduce(void* buf, uint64_t count,
                                     collective::DType dtype) override;
  collective::CollectiveOp ReduceScatter(void* buf, uint64_t count,
                                         collective::DType dtype) override;
  collective::CollectiveOp AllGather(void* buf, uint64_t count,
                                     collective::DType dtype) override;
  collective::CollectiveOp Broadcast(void* buf, uint64_t count,
                                     collective::DType dtype,
                                     int root) override;
  collective::CollectiveOp Barrier() override;
  collective::CollectiveOp AllGatherMany(const std::vector<Segment>& segments,
                                         collective::DType dtype) override;

 private:
  collective::CollectiveOp Keep(collective::CollectiveOp op);

  collective::Communicator* const inner_;
  mutable absl::Mutex mu_;
  std::deque<collective::CollectiveOp> recent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard::elastic

#endif  // ZEROSHARD_WORKER_ELASTIC_WATCHED_COMMUNICATOR_H_
