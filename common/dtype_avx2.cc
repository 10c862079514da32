// AVX2 (+F16C) array kernels for dtype.h. Compiled with function-level
// target attributes only; called only when DetectSimdLevel() >= kAvx2.
#include <cstring>

#include "common/dtype_internal.h"

#if ZS_DTYPE_X86

#include <immintrin.h>

#define ZS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace zeroshard {
namespace dtype_internal {
namespace {

constexpr size_t kBlock = 16;  // elements per main-loop iteration

// An unaligned load the compiler may not re-fold into each of the several
// instructions that use the value (GCC otherwise turns one load into three
// memory operands, which measurably slows the bf16 kernel).
ZS_TARGET_AVX2 inline __m256i LoadOnce(const float* p) {
  __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  __asm__("" : "+x"(x));
  return x;
}

// Eight fp32 bit patterns -> eight bf16 patterns in the low 16 bits of each
// 32-bit lane (same rule as the scalar Fp32ToBf16).
ZS_TARGET_AVX2 inline __m256i RoundToBf16(__m256i x) {
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb),
      16);
  const __m256i quiet_nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x0040));
  const __m256i is_nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)),
                         _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

// Converts exactly kBlock elements.
ZS_TARGET_AVX2 inline void Fp32ToBf16Block(const float* src, uint16_t* dst) {
  const __m256i a = RoundToBf16(LoadOnce(src));
  const __m256i b = RoundToBf16(LoadOnce(src + 8));
  // Values are in [0, 0xFFFF], so the unsigned-saturating pack is exact; it
  // interleaves 128-bit lanes, which the permute undoes.
  const __m256i packed =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), packed);
}

ZS_TARGET_AVX2 inline void Bf16ToFp32Block(const uint16_t* src, float* dst) {
  const __m256i a = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  const __m256i b = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_slli_epi32(a, 16));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8),
                      _mm256_slli_epi32(b, 16));
}

ZS_TARGET_AVX2 inline void Fp32ToFp16Block(const float* src, uint16_t* dst) {
  // vcvtps2ph with an explicit round-to-nearest-even immediate (independent
  // of MXCSR.RC); IEEE-correct incl. subnormal outputs and overflow to Inf.
  const __m128i a =
      _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT);
  const __m128i b =
      _mm256_cvtps_ph(_mm256_loadu_ps(src + 8), _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), a);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 8), b);
}

ZS_TARGET_AVX2 inline void Fp16ToFp32Block(const uint16_t* src, float* dst) {
  _mm256_storeu_ps(
      dst,
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
  _mm256_storeu_ps(dst + 8, _mm256_cvtph_ps(_mm_loadu_si128(
                                reinterpret_cast<const __m128i*>(src + 8))));
}

// Runs `block` over whole blocks, then over the tail (< kBlock elements)
// through zero-padded stack buffers, so every element goes through the same
// vector code and nothing is read or written past src[n-1] / dst[n-1].
template <typename Src, typename Dst, typename Block>
ZS_TARGET_AVX2 inline void Run(const Src* src, Dst* dst, size_t n,
                               Block block) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) block(src + i, dst + i);
  const size_t rest = n - i;
  if (rest != 0) {
    Src in[kBlock] = {};
    Dst out[kBlock];
    std::memcpy(in, src + i, rest * sizeof(Src));
    block(in, out);
    std::memcpy(dst + i, out, rest * sizeof(Dst));
  }
}

}  // namespace

ZS_TARGET_AVX2 void Fp32ToBf16Avx2(const float* src, uint16_t* dst, size_t n) {
  Run(src, dst, n, Fp32ToBf16Block);
}

ZS_TARGET_AVX2 void Bf16ToFp32Avx2(const uint16_t* src, float* dst, size_t n) {
  Run(src, dst, n, Bf16ToFp32Block);
}

ZS_TARGET_AVX2 void Fp32ToFp16Avx2(const float* src, uint16_t* dst, size_t n) {
  Run(src, dst, n, Fp32ToFp16Block);
}

ZS_TARGET_AVX2 void Fp16ToFp32Avx2(const uint16_t* src, float* dst, size_t n) {
  Run(src, dst, n, Fp16ToFp32Block);
}

}  // namespace dtype_internal
}  // namespace zeroshard

#endif  // ZS_DTYPE_X86
