// The smoke task: minimise f(p) = ½‖p − target‖² / Ψ with AdamW held by the
// shard servers, target[i] = sin(i · 0.001) · 0.5. Its gradient on any
// slice depends only on that slice, so W workers can each compute and push
// their own slice with no collectives. This stands in for a model until
// the GPT-2 worker exists; it exercises register, write, push, prepare,
// commit and gather across real processes.
#ifndef ZEROSHARD_WORKER_QUADRATIC_H_
#define ZEROSHARD_WORKER_QUADRATIC_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "proto/zeroshard.pb.h"

namespace zeroshard {

inline float QuadraticTarget(uint64_t i) {
  return 0.5f * std::sin(static_cast<float>(i) * 0.001f);
}

// The task's loss contribution of p[0, n), the parameters at flat offsets
// [begin, begin + n) of a model of `total` parameters; summed over slices
// it is f(p).
double QuadraticLoss(const float* p, uint64_t begin, uint64_t n,
                     uint64_t total);

// A ModelSpec for the task: a handful of tensors totalling about
// `elements` parameters, one AdamW group without weight decay, seeded
// normal(0, 0.02) init on the servers.
v1::ModelSpec QuadraticSpec(const std::string& job_id, uint32_t num_servers,
                            uint64_t elements);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_QUADRATIC_H_
