// Device fp32 <-> bf16 / fp16 conversions; see dtype_cuda.h for the contract.
// The element functions below are the CPU scalar reference of
// common/dtype.cc transcribed to __host__ __device__ code (integer bit
// manipulation only), so the results are identical bit for bit.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/cuda/dtype_cuda.h"

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

__host__ __device__ inline uint16_t Fp32BitsToBf16(uint32_t x) {
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: quiet, keep sign + payload.
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; a carry out of the
  // mantissa bumps the exponent (up to Inf). No uint32 overflow: x <=
  // 0xFF800000 here.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

__host__ __device__ inline uint32_t Bf16ToFp32Bits(uint16_t h) {
  return static_cast<uint32_t>(h) << 16;  // exact; NaN bit-preserving
}

__host__ __device__ inline uint16_t Fp32BitsToFp16(uint32_t x) {
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {  // NaN: quiet, keep sign + top 10 payload bits.
    return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x03FFu));
  }
  if (a >= 0x477FF000u) {  // >= 65520 (incl. Inf): rounds to Inf.
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (a >= 0x38800000u) {  // >= 2^-14: fp16 normal range.
    // Rebias the exponent (127 -> 15), round 13 bits to nearest even.
    const uint32_t r = a - (112u << 23);
    return static_cast<uint16_t>(sign |
                                 ((r + 0x0FFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) {  // <= 2^-25 (incl. fp32 subnormals): rounds to 0.
    return sign;
  }
  // fp16 subnormal: m >> (126 - e), rounded to nearest even; 102 <= e <= 112.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may reach 0x400: ok.
  return static_cast<uint16_t>(sign | q);
}

__host__ __device__ inline uint32_t Fp16ToFp32Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x03FFu;
  if (exp == 0x1Fu) {  // Inf, or NaN (quieted; payload and sign kept).
    return sign | 0x7F800000u | (mant != 0 ? 0x00400000u : 0u) | (mant << 13);
  }
  if (exp != 0) return sign | ((exp + 112u) << 23) | (mant << 13);
  if (mant == 0) return sign;
  // Subnormal: mant * 2^-24; normalize.
  uint32_t e = 127u - 14u;
  while ((mant & 0x0400u) == 0) {
    mant <<= 1;
    --e;
  }
  return sign | (e << 23) | ((mant & 0x03FFu) << 13);
}

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
