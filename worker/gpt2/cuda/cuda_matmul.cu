// The element-wise parts of the matmul layer on the GPU (the products are
// cuBLAS calls in cuda_gemm.cc): the bias written into every output row before
// a beta = 1 product, and the bias gradient as deterministic column sums.
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/gpt2/cuda/cuda_common.cuh"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2::cuda_launch {
namespace {

// ===========================================================================
// Kernels.

// out (N,OC)[r, o] = b[o]; one thread per element.
__global__ void BroadcastRowsKernel(float* __restrict__ out,
                                    const float* __restrict__ b, int OC,
                                    int64_t total) {
  ZS_GRID_STRIDE_LOOP(i, total) { out[i] = b[i % OC]; }
}

}  // namespace

// ===========================================================================
// Launchers.

cudaError_t BroadcastRows(cudaStream_t stream, float* out, const float* b,
                          int64_t N, int OC) {
  const int64_t total = N * OC;
  if (total <= 0) return cudaSuccess;
  BroadcastRowsKernel<<<GridFor(total), kBlock, 0, stream>>>(out, b, OC, total);
  return cudaGetLastError();
}

cudaError_t AddColumnSums(cudaStream_t stream, float* acc, const float* x,
                          int64_t N, int C, float* colsum, int colsum_cols) {
  return LaunchColumnSums(stream, acc, N, C, RowMajorTerm{x, C}, colsum,
                          colsum_cols);
}

}  // namespace zeroshard::gpt2::cuda_launch
