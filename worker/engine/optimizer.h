// The optimizer side of the engine: the ModelSpec the shard servers run
// (stages 1-3), and the same AdamW run locally for stage 0, with the same
// kernel (common/optim/adamw.h) and the same hyperparameter derivation
// (common/optim/adamw_hyper.h) as the servers' commit, so every stage
// computes the same bits.
//
// Thread-compatible: a LocalAdamW is used by one thread at a time.
#ifndef ZEROSHARD_WORKER_ENGINE_OPTIMIZER_H_
#define ZEROSHARD_WORKER_ENGINE_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/optim/adamw.h"
#include "proto/zeroshard.pb.h"
#include "worker/engine/model.h"
#include "worker/engine/zero_options.h"

namespace zeroshard::engine {

// The spec of `layout` for K = num_servers: tensors in flat order, group 0
// with options.weight_decay, group 1 without; one contribution per step
// (workers reduce fully); no seeded init (rank 0 writes the initial
// weights).
v1::ModelSpec ZeroModelSpec(const ModelLayout& layout,
                            const ZeroOptions& options, uint32_t num_servers,
                            uint32_t alignment);

// Stage 0: AdamW over the whole flat space on this worker, by tensor: here
// (Step, with the moments in host memory) or where the model keeps its
// parameters (Updates, for a ResidentOptimizer, model.h).
class LocalAdamW {
 public:
  LocalAdamW(const v1::ModelSpec& spec, const ModelLayout& layout);

  // p -= AdamW(g · clip_coef); advances the step count. The moments are
  // allocated at the first call.
  void Step(absl::Span<float> params, absl::Span<const float> grads,
            float clip_coef, double lr);
  // Advances the step count and returns the step's updates, tensor by
  // tensor in flat order, for the caller to apply.
  std::vector<TensorUpdate> Updates(float clip_coef, double lr);
  int64_t steps() const { return t_; }
  uint64_t state_bytes() const { return 4 * (m_.size() + v_.size()); }

 private:
  v1::ModelSpec spec_;
  std::vector<TensorInfo> tensors_;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_OPTIMIZER_H_
