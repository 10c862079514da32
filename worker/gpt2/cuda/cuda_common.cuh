// Device helpers shared by the GPT-2 kernels (cuda_*.cu): launch sizes,
// deterministic block reductions and a deterministic column-sum kernel.
// Private to this folder; included by .cu files only.
#ifndef ZEROSHARD_WORKER_GPT2_CUDA_CUDA_COMMON_CUH_
#define ZEROSHARD_WORKER_GPT2_CUDA_CUDA_COMMON_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2::cuda_launch {

// Threads of every 1-D block. A multiple of the warp size: the reductions
// below rely on whole warps.
constexpr int kBlock = 256;
constexpr int kWarp = 32;
static_assert(kBlock % kWarp == 0 && kBlock / kWarp <= kWarp, "block size");
// Grid-stride kernels use at most this many blocks (plenty for any GPU).
constexpr int64_t kMaxBlocks = 65535;

// Blocks for a grid-stride loop over n > 0 elements.
inline unsigned GridFor(int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Returns the launch error, if any, from the enclosing launcher.
#define ZS_RETURN_IF_LAUNCH_FAILED()               \
  do {                                             \
    const cudaError_t zs_err = cudaGetLastError(); \
    if (zs_err != cudaSuccess) return zs_err;      \
  } while (0)

// Grid-stride loop over [0, n): `i` is an int64_t.
#define ZS_GRID_STRIDE_LOOP(i, n)                                       \
  for (int64_t i =                                                      \
           static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Sum / max of v over the block (blockDim.x == kBlock); every thread gets the
// result. The order of the additions depends only on kBlock, so results are
// reproducible. Contains __syncthreads(): call from all threads of the block.
__device__ inline float BlockSum(float v) {
  __shared__ float partial[kWarp];
  for (int o = kWarp / 2; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = v;
  __syncthreads();
  float sum = 0.0f;
  for (int w = 0; w < kBlock / kWarp; ++w) sum += partial[w];
  return sum;
}

__device__ inline float BlockMax(float v) {
  __shared__ float partial[kWarp];
  for (int o = kWarp / 2; o > 0; o /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  __syncthreads();
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = v;
  __syncthreads();
  float m = partial[0];
  for (int w = 1; w < kBlock / kWarp; ++w) m = fmaxf(m, partial[w]);
  return m;
}

// acc[c] += sum over r in [0, N) of term(r, c), for c in [0, C).
// Block (kColTile, kRowLanes): thread (x, y) sums rows y, y + kRowLanes, ...
// of column blockIdx.x * kColTile + x (coalesced along the row), then lane 0
// of y adds the kRowLanes partials in order. Grid: ceil(C / kColTile).
constexpr int kColTile = 32;
constexpr int kRowLanes = 16;

// Column sums acc (C) += sum over rows r of term(r, c), deterministic: rows
// split into kColChunks chunks; block (tile, chunk) sums its chunk for 32
// columns, each of kRowLanes lanes every kRowLanes-th row in order, then
// the lanes in order, into scratch[chunk][c]; a second kernel adds the
// chunks in order to acc. The tree depends on N and C alone. Without
// scratch for C columns, one block per column tile sums all rows (the same
// shape with one chunk).
constexpr int kColChunks = kColumnChunks;  // cuda_launch.h

// static: each .cu file gets its own instance (no weak kernel symbols shared
// between separately compiled device modules).
template <typename Term>
static __global__ void ColumnChunkSumsKernel(float* out, int64_t N, int C,
                                             int64_t rows_per_chunk,
                                             bool accumulate, Term term) {
  __shared__ float partial[kRowLanes][kColTile];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float s = 0.0f;
  if (c < C) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) s += term(r, c);
  }
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) total += partial[y][threadIdx.x];
    float* o = out + int64_t{blockIdx.y} * C + c;
    *o = accumulate ? *o + total : total;
  }
}

// acc (C) += sum over k of partial[k][c], k in order.
static __global__ void AddChunkSumsKernel(float* acc, const float* partial,
                                          int chunks, int C) {
  ZS_GRID_STRIDE_LOOP(c, C) {
    float total = 0.0f;
    for (int k = 0; k < chunks; ++k) total += partial[int64_t{k} * C + c];
    acc[c] += total;
  }
}

// The term of a plain column sum: x[r, c] of an (N, C) array.
struct RowMajorTerm {
  const float* x;
  int C;
  __device__ float operator()(int64_t r, int c) const { return x[r * C + c]; }
};

template <typename Term>
cudaError_t LaunchColumnSums(cudaStream_t stream, float* acc, int64_t N, int C,
                             Term term, float* scratch, int scratch_cols) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  const unsigned tiles = static_cast<unsigned>((C + kColTile - 1) / kColTile);
  const dim3 block(kColTile, kRowLanes);
  if (scratch == nullptr || C > scratch_cols) {
    ColumnChunkSumsKernel<<<dim3(tiles, 1), block, 0, stream>>>(
        acc, N, C, N, /*accumulate=*/true, term);
    return cudaGetLastError();
  }
  const int64_t rows = (N + kColChunks - 1) / kColChunks;
  const int chunks = static_cast<int>((N + rows - 1) / rows);
  ColumnChunkSumsKernel<<<dim3(tiles, chunks), block, 0, stream>>>(
      scratch, N, C, rows, /*accumulate=*/false, term);
  ZS_RETURN_IF_LAUNCH_FAILED();
  AddChunkSumsKernel<<<GridFor(C), kBlock, 0, stream>>>(acc, scratch, chunks,
                                                        C);
  return cudaGetLastError();
}

}  // namespace zeroshard::gpt2::cuda_launch

#endif  // ZEROSHARD_WORKER_GPT2_CUDA_CUDA_COMMON_CUH_
