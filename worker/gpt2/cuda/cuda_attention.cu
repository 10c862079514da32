// The causal softmax of attention on the GPU, forward and backward; the
// products around it (S = scale Q K^T, Y = P V, and their gradients) are
// cuBLAS calls in cuda_gemm.cc.
//
// Rows: att is (B,NH,T,T) seen as B*NH*T rows of T; row r is query position
// t = r % T and keeps columns [0, t] (the causal mask), 0 after.
// Mapping: one block of kBlock threads per row; thread x owns columns x,
// x + kBlock, ... in every pass, so in-place updates never race.
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/gpt2/cuda/cuda_common.cuh"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2::cuda_launch {
namespace {

// ===========================================================================
// Kernels.

// P = softmax(S) over [0, t] in place, as CpuKernels: m = max, e = exp(s - m),
// p = e * (1 / sum e); 0 above the diagonal.
__global__ void CausalSoftmaxForwardKernel(float* att, int T) {
  const int64_t r = blockIdx.x;
  const int len = static_cast<int>(r % T) + 1;
  float* row = att + r * T;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < len; j += kBlock) m = fmaxf(m, row[j]);
  m = BlockMax(m);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < len; j += kBlock) sum += expf(row[j] - m);
  const float inv = 1.0f / BlockSum(sum);
  for (int j = threadIdx.x; j < T; j += kBlock) {
    row[j] = j < len ? expf(row[j] - m) * inv : 0.0f;
  }
}

// dS = P * (dP - dot(P, dP)) over [0, t], 0 above the diagonal; ds may
// equal dp (each element is read and written by the same thread).
__global__ void CausalSoftmaxBackwardKernel(float* ds, const float* att,
                                            const float* dp, int T) {
  const int64_t r = blockIdx.x;
  const int len = static_cast<int>(r % T) + 1;
  const float* p = att + r * T;
  const float* g = dp + r * T;
  float* out = ds + r * T;
  float dot = 0.0f;
  for (int j = threadIdx.x; j < len; j += kBlock) dot += p[j] * g[j];
  dot = BlockSum(dot);
  for (int j = threadIdx.x; j < T; j += kBlock) {
    out[j] = j < len ? p[j] * (g[j] - dot) : 0.0f;
  }
}

// x (B,T, row stride ld) columns [col, col + NH*hs) -> heads (B,NH,T,hs).
__global__ void ToHeadsKernel(float* __restrict__ heads,
                              const float* __restrict__ x, int T, int NH,
                              int hs, int64_t ld, int64_t col, int64_t total) {
  ZS_GRID_STRIDE_LOOP(i, total) {  // i over (B,NH,T,hs)
    const int64_t d = i % hs;
    const int64_t t = (i / hs) % T;
    const int64_t h = (i / (int64_t{hs} * T)) % NH;
    const int64_t b = i / (int64_t{hs} * T * NH);
    heads[i] = x[(b * T + t) * ld + col + h * hs + d];
  }
}

// The inverse: heads (B,NH,T,hs) -> x (B,T, row stride ld) columns
// [col, col + NH*hs).
__global__ void FromHeadsKernel(float* __restrict__ x,
                                const float* __restrict__ heads, int T, int NH,
                                int hs, int64_t ld, int64_t col,
                                int64_t total) {
  ZS_GRID_STRIDE_LOOP(i, total) {  // i over (B,T,NH,hs): writes in order
    const int64_t d = i % hs;
    const int64_t h = (i / hs) % NH;
    const int64_t t = (i / (int64_t{hs} * NH)) % T;
    const int64_t b = i / (int64_t{hs} * NH * T);
    x[(b * T + t) * ld + col + h * hs + d] =
        heads[((b * NH + h) * T + t) * hs + d];
  }
}

}  // namespace

// ===========================================================================
// Launchers.

cudaError_t ToHeads(cudaStream_t stream, float* heads, const float* x, int B,
                    int T, int NH, int hs, int64_t ld, int64_t col) {
  const int64_t total = int64_t{B} * NH * T * hs;
  if (total <= 0) return cudaSuccess;
  ToHeadsKernel<<<GridFor(total), kBlock, 0, stream>>>(heads, x, T, NH, hs, ld,
                                                       col, total);
  return cudaGetLastError();
}

cudaError_t FromHeads(cudaStream_t stream, float* x, const float* heads, int B,
                      int T, int NH, int hs, int64_t ld, int64_t col) {
  const int64_t total = int64_t{B} * NH * T * hs;
  if (total <= 0) return cudaSuccess;
  FromHeadsKernel<<<GridFor(total), kBlock, 0, stream>>>(x, heads, T, NH, hs,
                                                         ld, col, total);
  return cudaGetLastError();
}

cudaError_t CausalSoftmaxForward(cudaStream_t stream, float* att, int64_t rows,
                                 int T) {
  if (rows <= 0 || T <= 0) return cudaSuccess;
  CausalSoftmaxForwardKernel<<<static_cast<unsigned>(rows), kBlock, 0,
                               stream>>>(att, T);
  return cudaGetLastError();
}

cudaError_t CausalSoftmaxBackward(cudaStream_t stream, float* ds,
                                  const float* att, const float* dp,
                                  int64_t rows, int T) {
  if (rows <= 0 || T <= 0) return cudaSuccess;
  CausalSoftmaxBackwardKernel<<<static_cast<unsigned>(rows), kBlock, 0,
                                stream>>>(ds, att, dp, T);
  return cudaGetLastError();
}

}  // namespace zeroshard::gpt2::cuda_launch
