// Device fp32 <-> bf16 / fp16 conversions; see dtype_cuda.h for the contract.
// The element functions below are the CPU scalar reference of
// common/dtype.cc transcribed to __host__ __device__ code (integer bit
// manipulation only), so the results are identical bit for bit.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/cuda/dtype_cuda.h"
#include "common/dtype_bits.h"

namespace zeroshard {
namespace cuda {
namespace {

// ===========================================================================
// Element functions (host + device).

__host__ __device__ inline uint32_t FloatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

__host__ __device__ inline float BitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

using dtype_bits::Bf16ToFp32Bits;
using dtype_bits::Fp16ToFp32Bits;
using dtype_bits::Fp32BitsToBf16;
using dtype_bits::Fp32BitsToFp16;

// ===========================================================================
// Kernels: grid-stride loops over n elements.

__global__ void Fp32ToBf16Kernel(const float* __restrict__ src,
                                 uint16_t* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = Fp32BitsToBf16(FloatBits(src[i]));
  }
}

__global__ void Bf16ToFp32Kernel(const uint16_t* __restrict__ src,
                                 float* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = BitsFloat(Bf16ToFp32Bits(src[i]));
  }
}

__global__ void Fp32ToFp16Kernel(const float* __restrict__ src,
                                 uint16_t* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = Fp32BitsToFp16(FloatBits(src[i]));
  }
}

__global__ void Fp16ToFp32Kernel(const uint16_t* __restrict__ src,
                                 float* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = BitsFloat(Fp16ToFp32Bits(src[i]));
  }
}

// ===========================================================================
// Launchers.

constexpr unsigned kThreadsPerBlock = 256;
// Enough blocks to fill an H100/H200 many times over; larger arrays are
// covered by the grid-stride loop.
constexpr size_t kMaxBlocks = 65535;

template <typename Src, typename Dst>
bool Launch(void (*kernel)(const Src*, Dst*, size_t), const char* what,
            const Src* src, Dst* dst, size_t n, CUstream_st* stream,
            std::string* error) {
  if (n == 0) return true;
  size_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(
      src, dst, n);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return true;
  if (error != nullptr) {
    *error = std::string(what) + ": " + cudaGetErrorName(err) + ": " +
             cudaGetErrorString(err);
  }
  return false;
}

}  // namespace

bool Fp32ToBf16Device(const float* src, uint16_t* dst, size_t n,
                      CUstream_st* stream, std::string* error) {
  return Launch(Fp32ToBf16Kernel, "Fp32ToBf16Device", src, dst, n, stream,
                error);
}

bool Bf16ToFp32Device(const uint16_t* src, float* dst, size_t n,
                      CUstream_st* stream, std::string* error) {
  return Launch(Bf16ToFp32Kernel, "Bf16ToFp32Device", src, dst, n, stream,
                error);
}

bool Fp32ToFp16Device(const float* src, uint16_t* dst, size_t n,
                      CUstream_st* stream, std::string* error) {
  return Launch(Fp32ToFp16Kernel, "Fp32ToFp16Device", src, dst, n, stream,
                error);
}

bool Fp16ToFp32Device(const uint16_t* src, float* dst, size_t n,
                      CUstream_st* stream, std::string* error) {
  return Launch(Fp16ToFp32Kernel, "Fp16ToFp32Device", src, dst, n, stream,
                error);
}

namespace dtype_cuda_internal {

uint16_t Fp32ToBf16OnHost(float f) { return Fp32BitsToBf16(FloatBits(f)); }
float Bf16ToFp32OnHost(uint16_t h) { return BitsFloat(Bf16ToFp32Bits(h)); }
uint16_t Fp32ToFp16OnHost(float f) { return Fp32BitsToFp16(FloatBits(f)); }
float Fp16ToFp32OnHost(uint16_t h) { return BitsFloat(Fp16ToFp32Bits(h)); }

}  // namespace dtype_cuda_internal

}  // namespace cuda
}  // namespace zeroshard
