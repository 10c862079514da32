// The training precision of a run and the rounding that emulates it on
// fp32 buffers.
//
// DeepSpeed's "fp16" and "bf16" modes keep fp32 master weights in the
// optimizer and run forward and backward on a 16-bit copy, producing 16-bit
// gradients. The CPU GPT-2 (worker/gpt2) computes in fp32 throughout; the
// ZeRO engine emulates the two things that matter for the optimizer and the
// loss scaler by rounding fp32 buffers to values the 16-bit type holds:
//   * the weights the model reads are the master weights rounded to the
//     type (round to nearest even, common/dtype.h);
//   * each micro-batch's gradient, multiplied by the loss scale, is rounded
//     to the type: a gradient past the type's range becomes +-Inf, which the
//     step decision sees as an overflow and skips (common/optim/clip.h).
// The held values are exact 16-bit values stored in 4 bytes.
//
// Pure functions; thread-safe.
#ifndef ZEROSHARD_WORKER_ENGINE_PRECISION_H_
#define ZEROSHARD_WORKER_ENGINE_PRECISION_H_

#include "absl/types/span.h"

namespace zeroshard::engine {

enum class Precision { kFp32, kFp16, kBf16 };

// "fp32", "fp16", "bf16".
const char* PrecisionName(Precision precision);

// Each element replaced by the nearest value of `precision` (ties to even,
// overflow to +-Inf, NaN stays NaN); nothing changes for kFp32.
void RoundTo(Precision precision, absl::Span<float> values);

// Each element multiplied by `scale` (in fp32), then rounded as RoundTo.
// `scale` is a loss scale: a power of two, so the product is exact unless
// it leaves fp32's range.
void ScaleAndRoundTo(Precision precision, float scale,
                     absl::Span<float> values);

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_PRECISION_H_
