// Helpers over the protocol's ModelSpec shared by servers and clients:
// validation, the partition plan a spec describes, spec comparison, and
// wire dtype sizes. Pure functions; thread-safe.
#ifndef ZEROSHARD_COMMON_MODEL_SPEC_H_
#define ZEROSHARD_COMMON_MODEL_SPEC_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "common/partition.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {

// Largest payload of one stream chunk (Gather, PushGradients,
// WriteParameters).
inline constexpr size_t kMaxChunkBytes = 1 << 20;

// A shared segment (v1::SharedRef, docs/shared_memory.md): a memfd named
// kSharedSegmentName (its /proc link reads "/memfd:<name> (deleted)")
// whose first kSharedTokenBytes bytes are the token; payloads start at or
// after kSharedHeaderBytes.
inline constexpr uint64_t kSharedHeaderBytes = 64;
inline constexpr size_t kSharedTokenBytes = 16;
inline constexpr char kSharedSegmentName[] = "zeroshard-segment";

// Bytes per element of a wire dtype; 0 for an invalid one.
size_t DTypeSize(v1::DType dtype);

// Checks a spec on its own (INVALID_ARGUMENT naming the field); whether it
// fits a given server (num_servers) is the server's business.
absl::Status ValidateSpec(const v1::ModelSpec& spec);

// Builds the plan a spec describes (the same on every process).
absl::StatusOr<PartitionPlan> PlanForSpec(const v1::ModelSpec& spec);

// Describes the first difference between two specs ("" when equal), e.g.
// "tensors[3] ('h.0.fc.w') shape: 768x3072 vs 768x768".
std::string DescribeSpecDifference(const v1::ModelSpec& a,
                                   const v1::ModelSpec& b);

// The usual AdamW group (beta1 0.9, beta2 0.999, eps 1e-8, lr_scale 1).
v1::ParamGroup DefaultParamGroup(double weight_decay);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_MODEL_SPEC_H_
