// GradPusher: server-side aggregation (ZeroOptions::server_aggregation).
// Ranks do not reduce gradients among themselves; each pushes every
// micro-batch's gradient to the shard servers, which sum the contributions.
//
//   per micro-batch m of a step, per bucket (zero_plan.h GradientBuckets,
//   backward order): the model's gradient buffer over the bucket *= 1/(W·gas)
//   in place (one fp32 multiply), then pushed as contribution m·W + rank of
//   the step (the servers' ModelSpec has contributions_per_step = W·gas and
//   sums them in contribution order at prepare).
//
// With overlap, a bucket is pushed from the gradient hook as soon as
// backward has finished every gradient in it; without, after backward. The
// pushes of a micro-batch run while the next micro-batch's forward does:
// WaitPushes() (before the model's gradients are zeroed again, and before
// the step) waits for them. The rank keeps no gradient accumulator.
//
// Errors: a failed push does not fail the micro-batch; the first error of
// the step is kept and returned by TakeStatus() at the step, so that every
// rank reaches the step's collective decision (engine.h recovery).
//
// Threading: one thread (the engine's); the client's RPC threads push.
#ifndef ZEROSHARD_WORKER_ENGINE_GRAD_PUSHER_H_
#define ZEROSHARD_WORKER_ENGINE_GRAD_PUSHER_H_

#include <cstdint>
#include <future>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/shard_client.h"
#include "worker/engine/step_stats.h"
#include "worker/gpt2/model.h"

namespace zeroshard::engine {

class GradPusher {
 public:
  // `grads`: the model's gradient buffer; it and `client` must outlive the
  // pusher. `world` ranks, this one `rank`; `alignment`: the plan's.
  GradPusher(uint64_t bucket_size, uint32_t alignment, bool overlap, int world,
             int rank, int gas, ShardClient* client, absl::Span<float> grads);
  ~GradPusher();  // waits for pushes in flight

  // Where the stats of the current step go (not owned; set before use).
  void set_stats(StepStats* stats) { stats_ = stats; }

  // Before micro-batch `micro` (0-based in the step) of step `step`, pushed
  // with `epoch`. Waits for the previous micro-batch's pushes.
  void BeginMicroBatch(int micro, uint64_t step, uint64_t epoch);
  // The model's GradHook.
  void OnSegment(const gpt2::GradSegment& segment);
  // After Backward: pushes what is left (does not wait).
  void EndMicroBatch();

  // Waits for every push in flight.
  void WaitPushes();
  // At the step, after WaitPushes: the first push error since the last
  // call (OK if none), and resets it.
  absl::Status TakeStatus();

  // Contributions each element receives per step: W·gas.
  static uint32_t Contributions(int world, int gas) {
    return static_cast<uint32_t>(world) * static_cast<uint32_t>(gas);
  }

 private:
  void Issue(size_t k);

  const bool overlap_;
  const int world_, rank_;
  const float scale_;  // 1/(W·gas)
  ShardClient* client_;
  absl::Span<float> grads_;
  std::vector<Range> buckets_;  // backward order
  std::vector<std::future<absl::Status>> pushes_;
  size_t next_ = 0;  // next bucket to push
  int micro_ = 0;
  uint64_t step_ = 0, epoch_ = 0;
  absl::Status status_;
  StepStats* stats_ = nullptr;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_GRAD_PUSHER_H_
