// The AdamW kernel's hyperparameters (adamw.h) for one parameter group of a
// ModelSpec at one optimizer step — the one derivation shared by the shard
// servers' commit (server/store/shard_store.cc), the workers' local AdamW
// (worker/engine/optimizer.h) and the tests' reference (tests/testing.h), so
// that all of them compute the same bits.
//
// Pure function; thread-safe.
#ifndef ZEROSHARD_COMMON_OPTIM_ADAMW_HYPER_H_
#define ZEROSHARD_COMMON_OPTIM_ADAMW_HYPER_H_

#include <cstdint>

#include "common/optim/adamw.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {

// lr = lr · group.lr_scale (in double), the group's betas, eps and weight
// decay as given (doubles, as Python passes them to torch), grad_scale as
// given (clip coefficient, 1 / loss scale), step (t >= 1, for bias
// correction).
AdamWHyper GroupAdamWHyper(const v1::ParamGroup& group, double lr,
                           float grad_scale, int64_t step);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_OPTIM_ADAMW_HYPER_H_
