// A small MLP classifier, the ZeRO engine's second model (model.h): it shows
// that anything declaring a flat layout of units trains through the engine.
//
//   x (B, D) → Linear(D, H1) → tanh → … → Linear(Hk, C) → logits (B, C)
//   loss = mean over the B rows of cross-entropy(logits, label)
//
// Parameters: per layer l, W_l (out, in) in parameter group 0 (weight
// decay) and b_l (out) in group 1, laid out W_0, b_0, W_1, b_1, …; unit l is
// layer l. The need schedule: layers 0..n-1 (forward), then n-1..0
// (backward). Forward needs and releases each layer around its use;
// backward needs layer l (its W for the input gradient), then announces its
// gradients final and releases it, last layer first.
//
// Layers (shapes in comments) come in forward/backward pairs; the
// arithmetic is fp32, dot products summed in index order, so results do not
// depend on threads or timing.
//
// Threading: one thread. Errors: INVALID_ARGUMENT for a bad config or batch
// (naming the row and label), FAILED_PRECONDITION for Backward without a
// Forward; a hook's error stops the call.
#ifndef ZEROSHARD_WORKER_MLP_MLP_H_
#define ZEROSHARD_WORKER_MLP_MLP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/model.h"

namespace zeroshard::mlp {

struct MlpConfig {
  int inputs = 8;           // D
  std::vector<int> hidden;  // H1..Hk (may be empty)
  int classes = 4;          // C
};

// INVALID_ARGUMENT naming the field unless every size is in [1, 1<<16].
absl::Status ValidateMlpConfig(const MlpConfig& config);

// The engine's layout of `config`.
absl::StatusOr<engine::ModelLayout> MlpLayout(const MlpConfig& config);

// The MLP of `config` on micro-batches of `batch` rows (MicroBatch::features
// B × D floats, ::targets B labels in [0, C)).
absl::StatusOr<engine::ModelDef> MlpModel(const MlpConfig& config, int batch);

// Seeded initial parameters: W ~ N(0, 1/in) (row-major), b = 0.
std::vector<float> MlpInitialParams(const engine::ModelLayout& layout,
                                    uint64_t seed);

}  // namespace zeroshard::mlp

#endif  // ZEROSHARD_WORKER_MLP_MLP_H_
