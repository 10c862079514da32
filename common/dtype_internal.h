// Internal to //common:dtype: the per-level array kernels behind the
// dispatchers in dtype.cc. Do not include from elsewhere.
//
// The AVX2 / AVX-512 kernels live in their own translation units and are
// compiled with function-level __attribute__((target(...))), never with
// -mavx* flags, so the rest of the binary stays baseline x86-64 and the
// kernels are only ever called after DetectSimdLevel() says the CPU has them.
#ifndef ZEROSHARD_COMMON_DTYPE_INTERNAL_H_
#define ZEROSHARD_COMMON_DTYPE_INTERNAL_H_

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#define ZS_DTYPE_X86 1
#else
#define ZS_DTYPE_X86 0
#endif

namespace zeroshard {
namespace dtype_internal {

void Fp32ToBf16Scalar(const float* src, uint16_t* dst, size_t n);
void Bf16ToFp32Scalar(const uint16_t* src, float* dst, size_t n);
void Fp32ToFp16Scalar(const float* src, uint16_t* dst, size_t n);
void Fp16ToFp32Scalar(const uint16_t* src, float* dst, size_t n);

#if ZS_DTYPE_X86
// Require AVX2 + FMA + F16C.
void Fp32ToBf16Avx2(const float* src, uint16_t* dst, size_t n);
void Bf16ToFp32Avx2(const uint16_t* src, float* dst, size_t n);
void Fp32ToFp16Avx2(const float* src, uint16_t* dst, size_t n);
void Fp16ToFp32Avx2(const uint16_t* src, float* dst, size_t n);

// Require AVX-512 F + BW + VL + DQ.
void Fp32ToBf16Avx512(const float* src, uint16_t* dst, size_t n);
void Bf16ToFp32Avx512(const uint16_t* src, float* dst, size_t n);
void Fp32ToFp16Avx512(const float* src, uint16_t* dst, size_t n);
void Fp16ToFp32Avx512(const uint16_t* src, float* dst, size_t n);
#endif

}  // namespace dtype_internal
}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_DTYPE_INTERNAL_H_
