// GradPath: how a rank's gradients leave backward for the optimizer — the
// engine's one interface for it, with one implementation per mode:
//
//   GradReducer (grad_reducer.h)  reduce among the workers, bucket by
//       bucket while backward runs (all-reduce at stage 0, reduce-scatter
//       at 1-3), accumulating this rank's reduced parts over the step's
//       micro-batches; at the step the parts are scaled and pushed to the
//       servers that own them (stages 1-3) or used by the local optimizer
//       (stage 0: full()).
//   GradPusher (grad_pusher.h)    server-side aggregation: no worker
//       collective; every micro-batch's buckets are scaled and pushed as
//       backward produces them, and the servers sum the W·gas
//       contributions (their prepare then gives the norm).
//
// Call order per step: for each micro-batch BeginMicroBatch, backward with
// OnSegment as the model's gradient hook, EndMicroBatch; then FinishStep,
// Push and SumSquares (beside Push where sum_beside_push).
//
// Threading: one thread (the engine's); the client's RPC threads push.
#ifndef ZEROSHARD_WORKER_ENGINE_GRAD_PATH_H_
#define ZEROSHARD_WORKER_ENGINE_GRAD_PATH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/engine/model.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::engine {

class GradPath {
 public:
  virtual ~GradPath() = default;

  // Where the stats of the current step go (not owned; set before use).
  virtual void set_stats(StepStats* stats) = 0;

  // Before micro-batch `micro` (0-based in step `step`, pushed with
  // `epoch`) runs backward, and before the model's gradients are zeroed.
  virtual void BeginMicroBatch(int micro, uint64_t step, uint64_t epoch) = 0;
  // The model's gradient hook.
  virtual void OnSegment(const GradReady& segment) = 0;
  // After backward: issues what is left.
  virtual absl::Status EndMicroBatch() = 0;

  // After the step's last micro-batch: the step's gradient becomes the
  // mean, ×`scale` = 1/(W·gas) (the pusher scaled each push already).
  virtual void FinishStep(float scale) = 0;
  // fp64 sum of squares of this rank's reduced parts; 0 when the servers
  // sum the gradient (summed_on_servers).
  virtual double SumSquares() const = 0;
  // True when the servers hold the step's sum: the norm comes from their
  // prepare.
  virtual bool summed_on_servers() const = 0;
  // True when SumSquares may run on another thread while Push runs (both
  // only read the step's reduced parts), so the engine overlaps the two.
  virtual bool sum_beside_push() const { return false; }
  // This rank's gradient of `step` onto the servers: pushes its reduced
  // parts (or waits for the pushes backward issued) and returns the first
  // error. OK at once without servers (stage 0).
  virtual absl::Status Push(uint64_t step, uint64_t epoch) = 0;

  // The contributions each element receives per step on a server.
  virtual uint32_t contributions_per_step() const = 0;
  // Bytes this rank holds for the step's gradient.
  virtual uint64_t acc_bytes() const = 0;
  // Stage 0: the whole reduced gradient; empty otherwise.
  virtual absl::Span<const float> full() const { return {}; }
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_GRAD_PATH_H_
