// The embedding, LayerNorm, GELU and residual layers on the GPU; see
// cuda_launch.h for the launchers' contract and kernels.h for the layers.
//
// Shapes: N = B*T rows of C channels; element-wise layers take n elements.
// Mapping: element-wise layers use grid-stride loops; LayerNorm uses one block
// of kBlock threads per row (thread x takes channels x, x + kBlock, ...);
// parameter gradients are column sums (cuda_common.cuh), no atomics.
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "worker/gpt2/cuda/cuda_common.cuh"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2::cuda_launch {
namespace {

// The same constants as vec.h (not included: it is host-only C++).
constexpr float kLayernormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// ===========================================================================
// Kernels.

// out (N,C) = wte[inp[i]] + wpe[i % T]; one thread per element.
__global__ void EncoderForwardKernel(float* __restrict__ out,
                                     const int* __restrict__ inp,
                                     const float* __restrict__ wte,
                                     const float* __restrict__ wpe, int T,
                                     int C, int64_t total) {
  ZS_GRID_STRIDE_LOOP(idx, total) {
    const int64_t i = idx / C;  // row b*T + t
    const int64_t c = idx % C;
    out[idx] = wte[int64_t{inp[i]} * C + c] + wpe[(i % T) * C + c];
  }
}

// dwpe (T,C) += sum over b of dout[b, t]; one thread per (t, c), b in order.
__global__ void EncoderBackwardWpeKernel(float* __restrict__ dwpe,
                                         const float* __restrict__ dout, int B,
                                         int T, int C) {
  const int64_t TC = int64_t{T} * C;
  ZS_GRID_STRIDE_LOOP(idx, TC) {
    float acc = dwpe[idx];
    for (int b = 0; b < B; ++b) acc += dout[b * TC + idx];
    dwpe[idx] = acc;
  }
}

// dwte[v] += sum of dout[j] over positions j with inp[j] == v, j ascending.
// Without a sort: block i (one per position) works only if i is the first
// position holding its token v, so every row of dwte has exactly one
// writer; no atomics, and the order of the additions is CpuKernels's. It
// scans every later position for each row: the fallback.
__global__ void EncoderBackwardWteKernel(float* __restrict__ dwte,
                                         const float* __restrict__ dout,
                                         const int* __restrict__ inp,
                                         int64_t BT, int C) {
  const int64_t i = blockIdx.x;
  const int v = inp[i];
  int seen_before = 0;
  for (int64_t j = threadIdx.x; j < i; j += blockDim.x) {
    seen_before |= (inp[j] == v);
  }
  if (__syncthreads_or(seen_before)) return;  // uniform across the block
  float* row = dwte + int64_t{v} * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
    for (int64_t j = i; j < BT; ++j) {
      if (inp[j] == v) acc += dout[j * C + c];
    }
    row[c] = acc;
  }
}

// The same sums over the positions sorted by token (stable, so each token's
// positions ascend): block k works only if sorted entry k starts its
// token's run, and adds the run in order; the bits of the kernel above.
__global__ void EncoderBackwardWteSortedKernel(
    float* __restrict__ dwte, const float* __restrict__ dout,
    const int* __restrict__ tokens, const int* __restrict__ positions,
    int64_t BT, int C) {
  const int64_t k = blockIdx.x;
  const int v = tokens[k];
  if (k > 0 && tokens[k - 1] == v) return;  // uniform across the block
  float* row = dwte + int64_t{v} * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
    for (int64_t j = k; j < BT && tokens[j] == v; ++j) {
      acc += dout[int64_t{positions[j]} * C + c];
    }
    row[c] = acc;
  }
}

__global__ void IotaKernel(int* __restrict__ x, int64_t n) {
  ZS_GRID_STRIDE_LOOP(i, n) { x[i] = static_cast<int>(i); }
}

// One block per row r: out, mean[r], rstd[r] as vec_scalar.cc's
// LayernormForward (two passes: mean, then variance).
__global__ void LayernormForwardKernel(float* __restrict__ out,
                                       float* __restrict__ mean,
                                       float* __restrict__ rstd,
                                       const float* __restrict__ inp,
                                       const float* __restrict__ w,
                                       const float* __restrict__ b, int C) {
  const int64_t r = blockIdx.x;
  const float* x = inp + r * C;
  float* y = out + r * C;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += kBlock) sum += x[c];
  const float m = BlockSum(sum) / C;
  float var = 0.0f;
  for (int c = threadIdx.x; c < C; c += kBlock) {
    const float d = x[c] - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(BlockSum(var) / C + kLayernormEps);
  for (int c = threadIdx.x; c < C; c += kBlock) {
    y[c] = (x[c] - m) * s * w[c] + b[c];
  }
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

// One block per row r: dinp[r] += (dnorm - mean(dnorm) - norm *
// mean(dnorm * norm)) * rstd, dnorm = w * dout (vec_scalar.cc's formula).
__global__ void LayernormBackwardDinpKernel(
    float* __restrict__ dinp, const float* __restrict__ dout,
    const float* __restrict__ inp, const float* __restrict__ w,
    const float* __restrict__ mean, const float* __restrict__ rstd, int C) {
  const int64_t r = blockIdx.x;
  const float* x = inp + r * C;
  const float* dy = dout + r * C;
  float* dx = dinp + r * C;
  const float m = mean[r], s = rstd[r];
  float dsum = 0.0f, dnsum = 0.0f;
  for (int c = threadIdx.x; c < C; c += kBlock) {
    const float dnorm = w[c] * dy[c];
    dsum += dnorm;
    dnsum += dnorm * (x[c] - m) * s;
  }
  const float dnorm_mean = BlockSum(dsum) / C;
  const float dnorm_norm_mean = BlockSum(dnsum) / C;
  for (int c = threadIdx.x; c < C; c += kBlock) {
    const float norm = (x[c] - m) * s;
    const float dnorm = w[c] * dy[c];
    dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// Column-sum terms (cuda_common.cuh) of LayerNorm's dw and db.
struct LayernormDwTerm {
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ float operator()(int64_t r, int c) const {
    const int64_t i = r * C + c;
    return (inp[i] - mean[r]) * rstd[r] * dout[i];
  }
};

// GELU (tanh approximation) and its derivative, as vec_scalar.cc.
__global__ void GeluForwardKernel(float* out, const float* inp, int64_t n) {
  ZS_GRID_STRIDE_LOOP(i, n) {
    const float v = inp[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    out[i] = 0.5f * v * (1.0f + tanhf(u));
  }
}

__global__ void GeluBackwardKernel(float* dinp, const float* inp,
                                   const float* dout, int64_t n) {
  ZS_GRID_STRIDE_LOOP(i, n) {
    const float v = inp[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    const float th = tanhf(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    const float grad = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
    dinp[i] = grad * dout[i];
  }
}

// out may alias a or b: each element is read, then written, by one thread.
__global__ void ResidualForwardKernel(float* out, const float* a,
                                      const float* b, int64_t n) {
  ZS_GRID_STRIDE_LOOP(i, n) { out[i] = a[i] + b[i]; }
}

__global__ void ResidualBackwardKernel(float* __restrict__ da,
                                       float* __restrict__ db,
                                       const float* __restrict__ dout,
                                       int64_t n) {
  ZS_GRID_STRIDE_LOOP(i, n) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace

// ===========================================================================
// Launchers.

cudaError_t EncoderForward(cudaStream_t stream, float* out, const int* inp,
                           const float* wte, const float* wpe, int B, int T,
                           int C) {
  const int64_t total = int64_t{B} * T * C;
  if (total <= 0) return cudaSuccess;
  EncoderForwardKernel<<<GridFor(total), kBlock, 0, stream>>>(out, inp, wte,
                                                              wpe, T, C, total);
  return cudaGetLastError();
}

size_t EncoderSortTempBytes(int64_t n) {
  size_t bytes = 0;
  if (n <= 0 ||
      cub::DeviceRadixSort::SortPairs(
          nullptr, bytes, static_cast<const int*>(nullptr),
          static_cast<int*>(nullptr), static_cast<const int*>(nullptr),
          static_cast<int*>(nullptr), static_cast<int>(n)) != cudaSuccess) {
    return 0;
  }
  return bytes;
}

cudaError_t EncoderBackward(cudaStream_t stream, float* dwte, float* dwpe,
                            const float* dout, const int* inp, int B, int T,
                            int C, const EncoderScratch& scratch) {
  const int64_t BT = int64_t{B} * T;
  if (BT <= 0 || C <= 0) return cudaSuccess;
  EncoderBackwardWpeKernel<<<GridFor(int64_t{T} * C), kBlock, 0, stream>>>(
      dwpe, dout, B, T, C);
  ZS_RETURN_IF_LAUNCH_FAILED();
  if (BT > scratch.capacity || scratch.temp == nullptr) {
    EncoderBackwardWteKernel<<<static_cast<unsigned>(BT), kBlock, 0, stream>>>(
        dwte, dout, inp, BT, C);
    return cudaGetLastError();
  }
  IotaKernel<<<GridFor(BT), kBlock, 0, stream>>>(scratch.positions, BT);
  ZS_RETURN_IF_LAUNCH_FAILED();
  size_t temp_bytes = scratch.temp_bytes;
  const cudaError_t sorted = cub::DeviceRadixSort::SortPairs(
      scratch.temp, temp_bytes, inp, scratch.sorted_tokens, scratch.positions,
      scratch.sorted_positions, static_cast<int>(BT), 0, 8 * sizeof(int),
      stream);
  if (sorted != cudaSuccess) return sorted;
  EncoderBackwardWteSortedKernel<<<static_cast<unsigned>(BT), kBlock, 0,
                                   stream>>>(dwte, dout, scratch.sorted_tokens,
                                             scratch.sorted_positions, BT, C);
  return cudaGetLastError();
}

cudaError_t LayernormForward(cudaStream_t stream, float* out, float* mean,
                             float* rstd, const float* inp, const float* w,
                             const float* b, int64_t N, int C) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  LayernormForwardKernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(
      out, mean, rstd, inp, w, b, C);
  return cudaGetLastError();
}

cudaError_t LayernormBackward(cudaStream_t stream, float* dinp, float* dw,
                              float* db, const float* dout, const float* inp,
                              const float* w, const float* mean,
                              const float* rstd, int64_t N, int C,
                              float* colsum, int colsum_cols) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  LayernormBackwardDinpKernel<<<static_cast<unsigned>(N), kBlock, 0, stream>>>(
      dinp, dout, inp, w, mean, rstd, C);
  ZS_RETURN_IF_LAUNCH_FAILED();
  const cudaError_t err = LaunchColumnSums(
      stream, dw, N, C, LayernormDwTerm{dout, inp, mean, rstd, C}, colsum,
      colsum_cols);
  if (err != cudaSuccess) return err;
  return LaunchColumnSums(stream, db, N, C, RowMajorTerm{dout, C}, colsum,
                          colsum_cols);
}

cudaError_t GeluForward(cudaStream_t stream, float* out, const float* inp,
                        int64_t n) {
  if (n <= 0) return cudaSuccess;
  GeluForwardKernel<<<GridFor(n), kBlock, 0, stream>>>(out, inp, n);
  return cudaGetLastError();
}

cudaError_t GeluBackward(cudaStream_t stream, float* dinp, const float* inp,
                         const float* dout, int64_t n) {
  if (n <= 0) return cudaSuccess;
  GeluBackwardKernel<<<GridFor(n), kBlock, 0, stream>>>(dinp, inp, dout, n);
  return cudaGetLastError();
}

cudaError_t ResidualForward(cudaStream_t stream, float* out, const float* a,
                            const float* b, int64_t n) {
  if (n <= 0) return cudaSuccess;
  ResidualForwardKernel<<<GridFor(n), kBlock, 0, stream>>>(out, a, b, n);
  return cudaGetLastError();
}

cudaError_t ResidualBackward(cudaStream_t stream, float* da, float* db,
                             const float* dout, int64_t n) {
  if (n <= 0) return cudaSuccess;
  ResidualBackwardKernel<<<GridFor(n), kBlock, 0, stream>>>(da, db, dout, n);
  return cudaGetLastError();
}

}  // namespace zeroshard::gpt2::cuda_launch
