// GradPusher: the GradPath (grad_path.h) of server-side aggregation
// (ZeroOptions::server_aggregation).
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
// the step is kept and returned by Push() at the step, so that every rank
// reaches the step's collective decision (client/step_protocol.h).
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
#include "worker/engine/grad_path.h"
#include "worker/engine/model.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::engine {

class GradPusher : public GradPath {
 public:
  // `grads`: the model's gradient buffer; it and `client` must outlive the
  // pusher. `world` ranks, this one `rank`; `alignment`: the plan's.
  GradPusher(uint64_t bucket_size, uint32_t alignment, bool overlap, int world,
             int rank, int gas, ShardClient* client, absl::Span<float> grads);
  ~GradPusher() override;  // waits for pushes in flight

  void set_stats(StepStats* stats) override { stats_ = stats; }

  // Waits for the previous micro-batch's pushes (they read the gradients
  // about to be zeroed).
  void BeginMicroBatch(int micro, uint64_t step, uint64_t epoch) override;
  void OnSegment(const GradReady& segment) override;
  // Pushes what is left (does not wait).
  absl::Status EndMicroBatch() override;

  void FinishStep(float scale) override {}  // each push was scaled
  double SumSquares() const override { return 0; }
  bool summed_on_servers() const override { return true; }
  // Waits for every push in flight; the first push error of the step.
  absl::Status Push(uint64_t step, uint64_t epoch) override;
  // W·gas.
  uint32_t contributions_per_step() const override {
    return static_cast<uint32_t>(world_) * static_cast<uint32_t>(gas_);
  }
  uint64_t acc_bytes() const override { return 0; }

 private:
  void Issue(size_t k);
  void WaitPushes();

  const bool overlap_;
  const int world_, rank_, gas_;
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
