// CommGroup: a collective::Communicator seen as the step protocol's
// StepGroup (client/step_protocol.h). Words travel as raw bits in fp32
// collectives: a broadcast of ceil(bytes / 4) floats from rank 0, and an
// all-gather in which rank r's bytes start its part of W slots of
// Slot(alignment) floats (part r of a buffer is rank r's slot).
//
// Every collective's traffic and wait go into the step stats it is given
// (broadcast, all_gather, comm_wait_seconds). Threading: the engine's
// thread only.
#ifndef ZEROSHARD_WORKER_ENGINE_COMM_GROUP_H_
#define ZEROSHARD_WORKER_ENGINE_COMM_GROUP_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "client/step_protocol.h"
#include "worker/collective/collective.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::engine {

class CommGroup : public StepGroup {
 public:
  // `comm` must outlive the group; `stats` (not owned) may be changed with
  // set_stats before any call.
  CommGroup(collective::Communicator* comm, StepStats* stats)
      : comm_(comm), stats_(stats) {}
  void set_stats(StepStats* stats) { stats_ = stats; }

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  // At most 16 bytes per rank (Slot holds four floats).
  absl::Status AllGather(const void* mine, size_t bytes, void* all) override;
  absl::Status Broadcast(void* word, size_t bytes) override;
  absl::Status Barrier();

 private:
  // Floats per rank in an all-gather: a multiple of the part alignment, so
  // that part r of W slots is rank r's slot.
  uint64_t Slot() const;

  collective::Communicator* const comm_;
  StepStats* stats_;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_COMM_GROUP_H_
