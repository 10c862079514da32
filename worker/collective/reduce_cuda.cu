// Kernels, then launchers: the canonical reduction tree (reduce.h) on the
// GPU, one thread per element.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/dtype_bits.h"
#include "worker/collective/reduce_cuda.h"

namespace zeroshard {
namespace collective {
namespace {

struct Inputs {
  const void* ptr[kMaxDeviceTreeInputs];
};

// ---- kernels ---------------------------------------------------------------

__device__ float LoadAsFp32(const void* p, bool bf16, size_t i) {
  if (!bf16) return static_cast<const float*>(p)[i];
  const uint32_t bits =
      static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
  return __uint_as_float(bits);
}

// T over x[0..n): the right spine of the tree is a chain of perfect
// power-of-two blocks B1 + (B2 + (... + Bk)) (reduce.h); each block is
// summed pairwise.
__global__ void ReduceTreeKernel(Inputs in, int n, bool in_bf16, void* out,
                                 bool out_bf16, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float block_sum[8];  // one per block of the spine (n <= 64 -> <= 7)
    int blocks = 0;
    int pos = 0, rem = n;
    while (rem > 0) {
      int p = 1;
      if (rem == 1) {
        p = 1;
      } else {
        while (2 * p < rem) p *= 2;
      }
      float v[kMaxDeviceTreeInputs];
      for (int k = 0; k < p; ++k)
        v[k] = LoadAsFp32(in.ptr[pos + k], in_bf16, i);
      for (int s = 1; s < p; s *= 2) {
        for (int k = 0; k + s < p; k += 2 * s) v[k] = __fadd_rn(v[k], v[k + s]);
      }
      block_sum[blocks++] = v[0];
      pos += p;
      rem -= p;
    }
    float acc = block_sum[blocks - 1];
    for (int b = blocks - 2; b >= 0; --b) acc = __fadd_rn(block_sum[b], acc);
    if (out_bf16) {
      static_cast<uint16_t*>(out)[i] =
          dtype_bits::Fp32BitsToBf16(__float_as_uint(acc));
    } else {
      static_cast<float*>(out)[i] = acc;
    }
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------

std::string DeviceReduceTree(const void* const* inputs, int n, DType in,
                             void* out, DType out_dtype, size_t count,
                             CUstream_st* stream) {
  if (n < 1 || n > kMaxDeviceTreeInputs) {
    return "DeviceReduceTree: n out of range";
  }
  if (count == 0) return "";
  Inputs args{};
  for (int k = 0; k < n; ++k) args.ptr[k] = inputs[k];
  const int threads = 256;
  const size_t blocks_needed = (count + threads - 1) / threads;
  const int grid =
      static_cast<int>(blocks_needed < 4096 ? blocks_needed : 4096);
  ReduceTreeKernel<<<grid, threads, 0, stream>>>(
      args, n, in == DType::kBfloat16, out, out_dtype == DType::kBfloat16,
      count);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return std::string("DeviceReduceTree: ") + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e);
  }
  return "";
}

}  // namespace collective
}  // namespace zeroshard
