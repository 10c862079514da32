// ParamWindow: stage 3's parameters. Each rank keeps part `rank` of every
// parameter unit (zero_plan.h) — or, with offload_param_server, nothing —
// and fills the model's parameter buffer one unit at a time as the model's
// ParamHook (model.h) asks:
//
//   kNeeded(u):   start u if it is not live or on its way, start the next
//                 `prefetch` units of the need schedule, then wait for u.
//                 Start = copy this rank's part into the model buffer and
//                 issue an all-gather of the unit (in place); with offload,
//                 fetch this rank's part from the shard servers first (the
//                 all-gather is issued when the unit is needed).
//   kReleased(u): drop u (poison it with NaN, stop counting its bytes)
//                 unless one of the next two needs is u again (the final
//                 norm and embeddings stay live from forward's LM head to
//                 backward's).
//
// Every decision depends on the schedule only, never on timing, so all
// ranks issue the same collectives in the same order.
//
// Threading: one thread (the engine's). Errors: a collective's or a server
// call's status; INTERNAL when the model's calls leave the schedule.
#ifndef ZEROSHARD_WORKER_ZERO_PARAM_WINDOW_H_
#define ZEROSHARD_WORKER_ZERO_PARAM_WINDOW_H_

#include <cstdint>
#include <future>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/shard_client.h"
#include "worker/collective/collective.h"
#include "worker/gpt2/model.h"
#include "worker/zero/step_stats.h"
#include "worker/zero/zero_plan.h"

namespace zeroshard::zero {

struct ParamWindowOptions {
  bool offload = false;
  int prefetch = 1;
  bool poison = true;
};

class ParamWindow {
 public:
  // `params` is the model's full-size buffer; comm, client (may be null
  // unless offload or FetchPartition is used) and the buffer must outlive
  // the window.
  ParamWindow(const gpt2::ParamLayout& layout, ParamWindowOptions options,
              collective::Communicator* comm, ShardClient* client,
              absl::Span<float> params);

  // Where the stats of the current step go (not owned; must be set before
  // any other call).
  void set_stats(StepStats* stats) { stats_ = stats; }

  // Fetches this rank's part of every unit from the servers (not offload).
  absl::Status FetchPartition();

  // The model's ParamHook.
  absl::Status OnEvent(const gpt2::ParamEvent& event);
  // After each Backward: checks the schedule ran to its end, nothing live.
  absl::Status EndMicroBatch();

  // Bytes of this rank's parts (0 with offload).
  uint64_t partition_bytes() const { return 4 * partition_.size(); }
  uint64_t live_bytes() const { return live_bytes_; }

 private:
  enum class State { kIdle, kInFlight, kLive };
  struct Unit {
    ParamUnit unit;
    Range part;           // this rank's part (flat)
    uint64_t offset = 0;  // of the part in partition_
    State state = State::kIdle;
    collective::CollectiveOp gather;  // not offload
    std::future<absl::Status> fetch;  // offload
  };
  void Start(Unit& u);
  absl::Status Finish(Unit& u);
  void Poison(const Unit& u);

  ParamWindowOptions options_;
  collective::Communicator* comm_;
  ShardClient* client_;
  absl::Span<float> params_;
  std::vector<Unit> units_;
  std::vector<int> schedule_;
  size_t cursor_ = 0;  // next need in schedule_
  std::vector<float> partition_;
  uint64_t live_bytes_ = 0;
  StepStats* stats_ = nullptr;
};

}  // namespace zeroshard::zero

#endif  // ZEROSHARD_WORKER_ZERO_PARAM_WINDOW_H_
