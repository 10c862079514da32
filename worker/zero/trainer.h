// A deterministic training run of the ZeRO engine on synthetic data, shared
// by the tests and the zeroshard-train-worker binary so that an in-process
// run and a multi-process run compute the same thing.
//
// Initial weights (SeededGpt2Init): GPT-2's scheme from a counter-based
// generator keyed by (seed, flat index) — matrices N(0, std²), LayerNorm
// weights 1, biases and LayerNorm shifts 0 — identical on every process.
// Tokens (SyntheticTokens): uniform in [0, V) keyed by (seed, step, rank,
// micro-batch, position); rank r's micro-batch m of step s is its own.
//
// Threading: RunTraining uses the engine from the calling thread.
#ifndef ZEROSHARD_WORKER_ZERO_TRAINER_H_
#define ZEROSHARD_WORKER_ZERO_TRAINER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "worker/collective/collective.h"
#include "worker/gpt2/config.h"
#include "worker/zero/step_stats.h"
#include "worker/zero/zero_options.h"

namespace zeroshard::zero {

struct TrainSpec {
  gpt2::Config config;
  ZeroOptions zero;
  int steps = 1;
  uint64_t seed = 1;
  double init_std = 0.02;
};

std::vector<float> SeededGpt2Init(const gpt2::ParamLayout& layout,
                                  uint64_t seed, double std);

// inputs then targets (B·T each) of (step, rank, micro).
std::vector<int> SyntheticTokens(const TrainSpec& spec, int step, int rank,
                                 int micro);

struct TrainResult {
  std::vector<float> params;                     // after the last step
  std::vector<std::vector<float>> micro_losses;  // [step][micro]
  std::vector<StepStats> stats;                  // per step
};

// Creates the engine (collective: every rank calls it with its comm) and
// runs spec.steps optimizer steps.
absl::StatusOr<TrainResult> RunTraining(const TrainSpec& spec,
                                        collective::Communicator* comm,
                                        ShardClient* client);

}  // namespace zeroshard::zero

#endif  // ZEROSHARD_WORKER_ZERO_TRAINER_H_
