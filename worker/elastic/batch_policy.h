// How an elastic job keeps its global batch when the worker group changes
// size (pure functions; worker/elastic/elastic_trainer.h applies them).
//
// The global batch is G micro-batches of B sequences per optimizer step.
// A group of W workers runs gas = G / W micro-batches each when W divides
// G: the same sequences, the same mean gradient (up to float summation
// order). When W does not divide G the policy decides:
//   kRescale  keep the micro-batch B and take gas = round(G / W) (at least
//             1): the step's batch becomes W·gas micro-batches (the
//             gradient is still their mean; the learning rate is kept);
//   kRefuse   do not train with this group: wait for one whose size
//             divides G (workers joining or leaving).
#ifndef ZEROSHARD_WORKER_ELASTIC_BATCH_POLICY_H_
#define ZEROSHARD_WORKER_ELASTIC_BATCH_POLICY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard::elastic {

enum class BatchPolicy { kRescale, kRefuse };

// "rescale" or "refuse"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<BatchPolicy> ParseBatchPolicy(absl::string_view text);
const char* BatchPolicyName(BatchPolicy policy);

// Micro-batches per worker for a group of `world` workers and a global
// batch of `global` micro-batches. INVALID_ARGUMENT for global or world
// below 1; FAILED_PRECONDITION under kRefuse when world does not divide
// global (the message names both and the policy).
absl::StatusOr<int> AccumulationSteps(int global, int world,
                                      BatchPolicy policy);

}  // namespace zeroshard::elastic

#endif  // ZEROSHARD_WORKER_ELASTIC_BATCH_POLICY_H_
