// The step leader's decision between prepare and commit: the global
// gradient norm from the shards' partial sums of squares, the clip
// coefficient, and the fp16 overflow skip.
//
// The clip coefficient is torch.nn.utils.clip_grad_norm_'s (torch 1.13),
// in its float32 arithmetic, bit for bit:
//
//   clip_coef = max_norm / (total_norm + 1e-6)   // fp32; Tensor.__rtruediv__
//             = float(1 / float(total_norm + 1e-6f)) * float(max_norm)
//   grads *= min(clip_coef, 1)
//
// (multiplying by 1 changes nothing, so "applied only when < 1"). A
// gradient_clipping of 0 (DeepSpeed's default) means no clipping.
//
// Loss scale: the pushed gradients are the scaled ones, so their norm is
// divided by the loss scale before clipping, and the server's single
// grad_scale is clip_coef / loss_scale. Loss scales are powers of two, so
// g * (clip_coef / scale) equals (g / scale) * clip_coef exactly (barring
// subnormals): the same as torch unscaling then clipping.
//
// Pure functions; thread-safe.
#ifndef ZEROSHARD_COMMON_OPTIM_CLIP_H_
#define ZEROSHARD_COMMON_OPTIM_CLIP_H_

#include <cstdint>

#include "absl/types/span.h"

namespace zeroshard {

// The fp64 sum of the squares of a stream of floats, in eight lanes:
// element e of the stream (counted across Add calls) goes to lane e % 8,
// and Total adds the lanes in a fixed tree. The same stream gives the same
// bits on every machine however it is split into Add calls, with eight
// independent add chains instead of one. Squares of floats are exact in
// fp64 and cannot overflow it, so Total is NaN or Inf exactly when an
// element is. Used for every sum of squares of a gradient: the servers'
// shards, the workers' reduced parts, the device's (host-emulated).
class SquareSum {
 public:
  // Appends x[0], x[1], ..., x[n-1] to the stream.
  void Add(const float* x, uint64_t n);
  // Appends x[n-1], x[n-2], ..., x[0]: a gradient's elements in the order
  // backward finishes them (descending flat offsets).
  void AddReversed(const float* x, uint64_t n);
  double Total() const;

 private:
  double lanes_[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint64_t count_ = 0;
};

// sqrt of the partial sums of squares added in the given order (shard
// order), in fp64. Infinite or NaN if any partial is.
double GlobalGradNorm(absl::Span<const double> partial_sums_of_squares);

// torch 1.13's clamped clip coefficient for the (unscaled) `total_norm`;
// 1 when max_norm <= 0 (clipping off).
float ClipCoefficient(double total_norm, double max_norm);

struct StepDecision {
  // Non-finite gradients (fp16 overflow, or NaN/Inf in any precision): skip
  // the optimizer update and the lr schedule; feed `true` to
  // LossScaler::Update.
  bool skip = false;
  double grad_norm = 0;  // global norm of the unscaled gradients
  float grad_scale = 1;  // AdamWHyper::grad_scale: clip_coef / loss_scale
};

// `any_nonfinite`: some shard reported a NaN/Inf gradient. `loss_scale`: the
// scale the gradients carry (1 for bf16/fp32). `max_norm`: the config's
// gradient_clipping.
StepDecision DecideStep(absl::Span<const double> partial_sums_of_squares,
                        bool any_nonfinite, double loss_scale, double max_norm);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_OPTIM_CLIP_H_
