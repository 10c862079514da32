// OpQueue: runs a communicator's operations one at a time, in issue order,
// on a dedicated progress thread, and completes their CollectiveOp handles.
// Shared by the backends (host_communicator.h, nccl_communicator.h).
//
// After an operation fails, every later one fails with FAILED_PRECONDITION
// quoting the first error (the ranks can no longer be assumed in step).
// Destruction cancels what has not started (CANCELLED), asks the running
// operation to stop (stopping() turns true, `wake` is called) and joins.
//
// Threading: Submit from any thread; stopping() from the run functions.
#ifndef ZEROSHARD_WORKER_COLLECTIVE_OP_QUEUE_H_
#define ZEROSHARD_WORKER_COLLECTIVE_OP_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "worker/collective/collective.h"

namespace zeroshard {
namespace collective {

class OpQueue {
 public:
  // Runs an operation; `seq` numbers the operations 0, 1, ... in issue
  // order.
  using RunFn = std::function<absl::Status(uint64_t seq, OpStats* stats)>;

  // `wake` (may be empty) interrupts a blocked run function at shutdown.
  explicit OpQueue(std::function<void()> wake);
  ~OpQueue();  // Shutdown()

  // Cancels what has not started, stops the running operation, joins the
  // thread. Idempotent. Call it before destroying what the run functions
  // use.
  void Shutdown();

  // Queues `run`; `description` (e.g. "AllReduce (count 10, fp32)") prefixes
  // the errors the queue itself reports.
  CollectiveOp Submit(std::string description, RunFn run);
  // True once destruction began.
  bool stopping();

 private:
  struct Item {
    std::string description;
    RunFn run;
    uint64_t seq;
    std::shared_ptr<OpState> state;
  };
  void Loop();

  std::function<void()> wake_;
  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_;  // progress thread only
  std::thread thread_;
};

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_OP_QUEUE_H_
