// FaultyCommunicator: a Communicator wrapper that injects faults into
// collective operations as a FaultInjector decides (common/fault/
// fault_spec.h; names AllReduce, ReduceScatter, AllGather, Broadcast,
// Barrier), e.g. "fail_at=AllReduce#3" or "delay=0.1:5ms,only=AllGather".
//
//   fail   the operation is not issued; it finishes at once with the spec's
//          code and a message naming the operation, its call number and
//          the term. As with any failed operation the communicator is then
//          broken: later operations fail with FAILED_PRECONDITION carrying
//          that first error. Peers waiting on this rank fail too once the
//          process exits (UCX: UNAVAILABLE naming it) or after their
//          op_timeout: an error, never a hang.
//   delay  the issuing thread sleeps before it issues the operation (a slow
//          rank); issue order is kept.
//
// Threading and ownership: as Communicator; owns `inner`. The injector is
// shared (a worker's RPC interceptor may use the same one).
#ifndef ZEROSHARD_WORKER_COLLECTIVE_FAULTY_COMMUNICATOR_H_
#define ZEROSHARD_WORKER_COLLECTIVE_FAULTY_COMMUNICATOR_H_

#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "common/fault/fault_spec.h"
#include "worker/collective/collective.h"

namespace zeroshard {
namespace collective {

class FaultyCommunicator : public Communicator {
 public:
  FaultyCommunicator(std::unique_ptr<Communicator> inner,
                     std::shared_ptr<fault::FaultInjector> injector);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  MemorySpace memory_space() const override { return inner_->memory_space(); }
  uint32_t part_alignment() const override { return inner_->part_alignment(); }

  CollectiveOp AllReduce(void* buf, uint64_t count, DType dtype) override;
  CollectiveOp ReduceScatter(void* buf, uint64_t count, DType dtype) override;
  CollectiveOp AllGather(void* buf, uint64_t count, DType dtype) override;
  CollectiveOp Broadcast(void* buf, uint64_t count, DType dtype,
                         int root) override;
  CollectiveOp Barrier() override;

 private:
  // The injected outcome of the next `kind` operation: a finished op when
  // it fails (or the communicator is broken), else nullopt after any delay.
  std::optional<CollectiveOp> Inject(OpKind kind);

  const std::unique_ptr<Communicator> inner_;
  const std::shared_ptr<fault::FaultInjector> injector_;
  absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_FAULTY_COMMUNICATOR_H_
