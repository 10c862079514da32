// Test support: trains the MLP (mlp.h) through the ZeRO engine on W ranks
// that are threads of this process, against real shard servers (the
// engine's harness, worker/engine/testing.h), on seeded synthetic data.
#ifndef ZEROSHARD_WORKER_MLP_MLP_TESTING_H_
#define ZEROSHARD_WORKER_MLP_MLP_TESTING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "fleet/local_fleet.h"
#include "worker/engine/zero_options.h"
#include "worker/mlp/mlp.h"

namespace zeroshard::mlp {

struct MlpRun {
  MlpConfig config{12, {24, 16}, 5};
  int steps = 10;
  uint64_t seed = 3;         // parameters and data
  engine::ZeroOptions zero;  // micro_batch = B rows; stage, ...
};

// The tests' common run: B = 4, gas = 2, constant lr 1e-2, AdamW betas
// (0.9, 0.95), eps 1e-8, weight decay 0.1 (weights only), clipping at 0.5
// (it engages), buckets of 300 elements, stage `stage`.
MlpRun TestRun(int stage);

// Sample `index` of the data: features N(0, 1) keyed by (seed, index), the
// label the class of a fixed random linear map of them.
void Sample(uint64_t seed, const MlpConfig& config, uint64_t index, float* x,
            int* label);

// Step s uses samples [s·N, (s+1)·N), N = W·gas·B: rank r's micro-batch m
// holds rows ((s·gas + m)·W + r)·B ... + B - 1.
uint64_t FirstRow(const MlpRun& run, int world, int step, int micro, int rank);

struct MlpResult {
  std::vector<float> params;  // rank 0's after the run
  std::vector<float> losses;  // rank 0's micro-batch losses
  std::vector<float> clips;   // rank 0's clip coefficients per step
};

// Runs `run` on `world` ranks against `fleet` (null for stage 0); prints a
// "digest:" line of the final parameters.
absl::StatusOr<MlpResult> TrainMlp(const MlpRun& run, int world,
                                   LocalFleet* fleet);

}  // namespace zeroshard::mlp

#endif  // ZEROSHARD_WORKER_MLP_MLP_TESTING_H_
