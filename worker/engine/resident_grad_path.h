// ResidentGradPath: the GradPath (grad_path.h) of stage 0 with the optimizer
// in the model's memory (model.h's ResidentOptimizer): one rank, so nothing
// is reduced or pushed, and the gradients never leave the model. At the step
// it scales them there and takes their sum of squares there; the first
// device error comes back from Push, before anything is updated.
//
// Threading: the engine's thread.
#ifndef ZEROSHARD_WORKER_ENGINE_RESIDENT_GRAD_PATH_H_
#define ZEROSHARD_WORKER_ENGINE_RESIDENT_GRAD_PATH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/engine/grad_path.h"
#include "worker/engine/model.h"

namespace zeroshard::engine {

class ResidentGradPath : public GradPath {
 public:
  // `optimizer` (not owned) outlives this; `num_params`: the model's size.
  ResidentGradPath(ResidentOptimizer* optimizer, uint64_t num_params)
      : optimizer_(optimizer), num_params_(num_params) {}

  void set_stats(StepStats*) override {}
  void BeginMicroBatch(int, uint64_t, uint64_t) override {}
  void OnSegment(const GradReady&) override {}
  absl::Status EndMicroBatch() override { return absl::OkStatus(); }

  void FinishStep(float scale) override {
    status_ = scale == 1.0f ? absl::OkStatus() : optimizer_->ScaleGrads(scale);
    sum_squares_ = 0;
    if (!status_.ok()) return;
    absl::StatusOr<double> sum = optimizer_->GradSumSquares();
    if (sum.ok()) {
      sum_squares_ = *sum;
    } else {
      status_ = sum.status();
    }
  }
  double SumSquares() const override { return sum_squares_; }
  bool summed_on_servers() const override { return false; }
  absl::Status Push(uint64_t, uint64_t) override { return status_; }
  uint32_t contributions_per_step() const override { return 1; }
  // The model's full-size gradient (in its memory).
  uint64_t acc_bytes() const override { return 4 * num_params_; }

 private:
  ResidentOptimizer* const optimizer_;
  const uint64_t num_params_;
  absl::Status status_;
  double sum_squares_ = 0;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_RESIDENT_GRAD_PATH_H_
