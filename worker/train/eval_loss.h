// The eval loss of a run: the loss of parameters on a fixed eval set,
// computed on the CPU (spec.zero.threads threads) by rank 0 every
// --eval_every steps and at the end (zeroshard-worker, worker_run.h).
//
// The eval set is held-out data when --val_data names it
// (`zeroshard-tokenize --val_fraction` writes such a file): up to
// kMaxEvalBatches batches of B·T + 1 tokens (inputs, then targets shifted
// by one) spread evenly over its first file. Without --val_data it is what
// it always was: the first B·T + 1 tokens of the first training file.
//
// Records (rank 0's --metrics_file, beside run_metrics.h's):
//   {"event":"eval","step":50,"loss":2.31,"tokens":8192,"held_out":true}
//
// Threading: any thread; reads files, touches nothing shared.
#ifndef ZEROSHARD_WORKER_TRAIN_EVAL_LOSS_H_
#define ZEROSHARD_WORKER_TRAIN_EVAL_LOSS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train/trainer.h"

namespace zeroshard::train {

inline constexpr int kMaxEvalBatches = 8;

struct EvalSet {
  std::vector<std::vector<int>> inputs, targets;  // [batch][B·T]
  bool held_out = false;                          // from --val_data
  std::string file;                               // where it was read
  int64_t tokens() const;                         // batches · B·T
};

struct EvalResult {
  float loss = 0;  // mean over the batches
  int64_t tokens = 0;
  bool held_out = false;
};

// The eval set of `spec` (batch B·T from spec.zero) from `val_data`
// (patterns, comma-separated; empty: the training data). nullopt without
// any data, or when the first training file has fewer than B·T + 1 tokens.
// Errors: the token file's; INVALID_ARGUMENT naming --val_data when it
// matches no file or its first file has fewer than B·T + 1 tokens.
absl::StatusOr<std::optional<EvalSet>> OpenEvalSet(const TrainSpec& spec,
                                                   const std::string& val_data);

// The loss of `params` (spec.config's layout) on `set`. Errors: the
// model's (a token id >= the vocabulary, naming it).
absl::StatusOr<EvalResult> EvalLoss(const TrainSpec& spec, const EvalSet& set,
                                    const std::vector<float>& params);

// --eval_every as a period in steps: n > 0 is n; 0 (auto) is about 20
// evals per run, ceil(steps / 20); -1 (only at the end) is `steps`.
int64_t EvalPeriod(int64_t eval_every, int64_t steps);

// True when step `step` (1-based) of `steps` is evaluated: every period
// and the last.
bool IsEvalStep(int64_t step, int64_t steps, int64_t period);

// {"event":"eval", step, loss, tokens, held_out}.
std::string EvalRecord(int64_t step, const EvalResult& r);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_EVAL_LOSS_H_
