// Softmax cross-entropy on the GPU, forward and backward, fused: one pass for
// the row's max, one for the sum of exponentials, one for the outputs. The
// padding columns [V, Vp) of logits are never read.
//
// Shapes: logits, dlogits (N,Vp); targets, losses (N).
// Mapping: one block of kBlock threads per row; thread x owns columns x,
// x + kBlock, ... in every pass, so dlogits may equal logits.
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/gpt2/cuda/cuda_common.cuh"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2::cuda_launch {
namespace {

// ===========================================================================
// Kernels.

// Max and sum of exp(x - max) over the first V entries of row; every thread
// of the block gets both.
__device__ inline void RowSoftmaxStats(const float* row, int V, float* max,
                                       float* sum) {
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += kBlock) m = fmaxf(m, row[j]);
  m = BlockMax(m);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += kBlock) s += expf(row[j] - m);
  *max = m;
  *sum = BlockSum(s);
}

// losses[r] = log(sum) + max - logits[r, target].
__global__ void CrossEntropyForwardKernel(float* __restrict__ losses,
                                          const float* __restrict__ logits,
                                          const int* __restrict__ targets,
                                          int V, int Vp) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * Vp;
  float m, sum;
  RowSoftmaxStats(row, V, &m, &sum);
  if (threadIdx.x == 0) losses[r] = logf(sum) + m - row[targets[r]];
}

// dlogits[r, j] = exp(x - max) * (dloss / sum) - (j == target ? dloss : 0)
// for j < V, 0 in the padding (CpuKernels's order of operations).
// Not __restrict__: dlogits may equal logits. Every thread has finished
// reading the row before any writes: the block reductions end in a barrier.
__global__ void CrossEntropyBackwardKernel(float* dlogits, const float* logits,
                                           const int* targets, float dloss,
                                           int V, int Vp) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * Vp;
  float* drow = dlogits + r * Vp;
  const int target = targets[r];
  float m, sum;
  RowSoftmaxStats(row, V, &m, &sum);
  const float scale = dloss / sum;
  for (int j = threadIdx.x; j < Vp; j += kBlock) {
    float d = 0.0f;
    if (j < V) {
      d = expf(row[j] - m) * scale;
      if (j == target) d -= dloss;
    }
    drow[j] = d;
  }
}

}  // namespace

// ===========================================================================
// Launchers.

cudaError_t CrossEntropyForward(cudaStream_t stream, float* losses,
                                const float* logits, const int* targets,
                                int64_t N, int V, int Vp) {
  if (N <= 0) return cudaSuccess;
  CrossEntropyForwardKernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(
      losses, logits, targets, V, Vp);
  return cudaGetLastError();
}

cudaError_t CrossEntropyBackward(cudaStream_t stream, float* dlogits,
                                 const float* logits, const int* targets,
                                 float dloss, int64_t N, int V, int Vp) {
  if (N <= 0) return cudaSuccess;
  CrossEntropyBackwardKernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(
      dlogits, logits, targets, dloss, V, Vp);
  return cudaGetLastError();
}

}  // namespace zeroshard::gpt2::cuda_launch
