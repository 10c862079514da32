#include "worker/elastic/batch_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zeroshard::elastic {

absl::StatusOr<BatchPolicy> ParseBatchPolicy(absl::string_view text) {
  if (text == "rescale") return BatchPolicy::kRescale;
  if (text == "refuse") return BatchPolicy::kRefuse;
  return absl::InvalidArgumentError(
      absl::StrCat("batch policy '", text, "' is not one of: rescale, refuse"));
}

const char* BatchPolicyName(BatchPolicy policy) {
  return policy == BatchPolicy::kRescale ? "rescale" : "refuse";
}

absl::StatusOr<int> AccumulationSteps(int global, int world,
                                      BatchPolicy policy) {
  if (global < 1 || world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("global batch of ", global, " micro-batches over ", world,
                     " workers: both must be at least 1"));
  }
  if (global % world == 0) return global / world;
  if (policy == BatchPolicy::kRefuse) {
    return absl::FailedPreconditionError(absl::StrCat(
        world, " workers do not divide the global batch of ", global,
        " micro-batches (batch policy refuse): waiting for a group whose "
        "size divides it"));
  }
  return std::max(1, (global + world / 2) / world);
}

}  // namespace zeroshard::elastic
