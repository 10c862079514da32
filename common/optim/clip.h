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
#include "common/thread_pool.h"

namespace zeroshard {

// The fp64 sum of the squares of a stream of floats, in blocks: element e
// of the stream (counted across Add calls) is in block e / block_size and,
// within it, in lane e % 8; a block's total is its eight lanes added in a
// fixed tree, and Total adds the blocks' totals in stream order. The same
// stream gives the same bits on every machine however it is split into
// Add calls and however a call's whole blocks are shared out among a
// pool's threads (they are independent), with eight independent add chains
// per block. Squares of
// floats are exact in fp64 and cannot overflow it, so Total is NaN or Inf
// exactly when an element is. Used for every sum of squares of a gradient:
// the servers' shards, the workers' reduced parts, the device's
// (host-emulated).
class SquareSum {
 public:
  // Elements per block (a multiple of 8): 256 KiB of floats.
  static constexpr uint64_t kBlockSize = uint64_t{1} << 16;

  // `block_size`: a multiple of 8 (kBlockSize everywhere but in tests).
  explicit SquareSum(uint64_t block_size = kBlockSize);

  // Appends x[0], x[1], ..., x[n-1] to the stream; the whole blocks on
  // `pool`'s threads where one is given (not owned; not in use elsewhere).
  void Add(const float* x, uint64_t n, ThreadPool* pool = nullptr);
  // Appends x[n-1], x[n-2], ..., x[0]: a gradient's elements in the order
  // backward finishes them (descending flat offsets).
  void AddReversed(const float* x, uint64_t n, ThreadPool* pool = nullptr);
  double Total() const;

 private:
  template <bool kReversed>
  void Append(const float* x, uint64_t n, ThreadPool* pool);
  // Elements [k0, k1) of a call into the current block's lanes.
  template <bool kReversed>
  void AddToLanes(const float* x, uint64_t n, uint64_t k0, uint64_t k1);

  uint64_t block_size_;
  double blocks_ = 0;  // the finished blocks' totals, added in order
  double lanes_[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // the current block's
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
