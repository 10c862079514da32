// The loss a finished run reports in its "end" metrics record
// (run_metrics.h): the loss of the final parameters on a fixed batch, the
// first B·T + 1 tokens of the run's first data file (inputs, then targets
// shifted by one), computed on the CPU with spec.zero.threads threads.
//
// Threading: any thread; reads the file, touches nothing shared.
#ifndef ZEROSHARD_WORKER_TRAIN_EVAL_LOSS_H_
#define ZEROSHARD_WORKER_TRAIN_EVAL_LOSS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train/trainer.h"

namespace zeroshard::train {

struct EvalResult {
  float loss = 0;
  int64_t tokens = 0;  // B·T
};

// The loss of `params` (spec.config's layout) on the eval batch; nullopt
// when there is no such batch (no data, or a first file shorter than
// B·T + 1 tokens). Errors: the token file's and the model's.
absl::StatusOr<std::optional<EvalResult>> EvalLoss(
    const TrainSpec& spec, const std::vector<float>& params);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_EVAL_LOSS_H_
