// Stage 0's optimizer on the GPU (cuda_launch.h): AdamW with the CPU
// kernel's roundings, a scale and a deterministic fp64 sum of squares.
//
// Bits: every operation of AdamW is an explicitly rounded intrinsic
// (__fmul_rn, __fmaf_rn, __fdiv_rn, __fsqrt_rn, __fadd_rn), so nvcc cannot
// contract or reorder them, and each gives the IEEE result the CPU's
// scalar path computes (common/optim/adamw.cc; denormals are kept, as
// this project never builds with -ftz).
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/gpt2/cuda/cuda_common.cuh"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2::cuda_launch {
namespace {

constexpr int kSumBlocks = kSumSquaresScratch - 1;

__device__ inline float Canonical(float x) {
  return x != x ? __int_as_float(0x7FC00000) : x;
}

__global__ void AdamWKernel(AdamWConsts c, float* __restrict__ p,
                            const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n) {
  ZS_GRID_STRIDE_LOOP(i, n) {
    const float gs = __fmul_rn(g[i], c.scale);
    const float pd = __fmul_rn(p[i], c.decay);
    const float mn = __fmaf_rn(gs, c.one_m_beta1, __fmul_rn(m[i], c.beta1));
    const float vn =
        __fmaf_rn(__fmul_rn(c.one_m_beta2, gs), gs, __fmul_rn(v[i], c.beta2));
    const float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vn), c.bc2_sqrt), c.eps);
    p[i] = Canonical(
        __fadd_rn(pd, __fdiv_rn(__fmul_rn(c.neg_step_size, mn), den)));
    m[i] = Canonical(mn);
    v[i] = Canonical(vn);
  }
}

__global__ void ScaleKernel(float* __restrict__ x, int64_t n, float s) {
  ZS_GRID_STRIDE_LOOP(i, n) { x[i] = __fmul_rn(x[i], s); }
}

// Sums kBlock doubles of `sh` in a fixed tree; thread 0 gets the total.
__device__ inline double TreeSum(double* sh) {
  __syncthreads();
  for (int w = kBlock / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  return sh[0];
}

// Block b of kSumBlocks: its threads' grid-stride elements (squares are
// exact in fp64), then a tree over the block.
__global__ void SumSquaresPartialKernel(const float* __restrict__ x, int64_t n,
                                        double* __restrict__ partial) {
  __shared__ double sh[kBlock];
  double s = 0;
  ZS_GRID_STRIDE_LOOP(i, n) {
    const double d = x[i];
    s += d * d;
  }
  sh[threadIdx.x] = s;
  const double total = TreeSum(sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// One block: the kSumBlocks partials into partial[kSumBlocks].
__global__ void SumPartialsKernel(double* partial) {
  __shared__ double sh[kBlock];
  double s = 0;
  for (int i = threadIdx.x; i < kSumBlocks; i += kBlock) s += partial[i];
  sh[threadIdx.x] = s;
  const double total = TreeSum(sh);
  if (threadIdx.x == 0) partial[kSumBlocks] = total;
}

}  // namespace

cudaError_t AdamW(cudaStream_t stream, const AdamWConsts& c, float* p,
                  const float* g, float* m, float* v, int64_t n) {
  if (n <= 0) return cudaSuccess;
  AdamWKernel<<<GridFor(n), kBlock, 0, stream>>>(c, p, g, m, v, n);
  return cudaGetLastError();
}

cudaError_t Scale(cudaStream_t stream, float* x, int64_t n, float s) {
  if (n <= 0) return cudaSuccess;
  ScaleKernel<<<GridFor(n), kBlock, 0, stream>>>(x, n, s);
  return cudaGetLastError();
}

cudaError_t SumSquares(cudaStream_t stream, const float* x, int64_t n,
                       double* scratch) {
  SumSquaresPartialKernel<<<kSumBlocks, kBlock, 0, stream>>>(x, n, scratch);
  ZS_RETURN_IF_LAUNCH_FAILED();
  SumPartialsKernel<<<1, kBlock, 0, stream>>>(scratch);
  return cudaGetLastError();
}

}  // namespace zeroshard::gpt2::cuda_launch
