// AVX-512 (F/BW/VL/DQ) array kernels for dtype.h. Compiled with
// function-level target attributes only; called only when
// DetectSimdLevel() >= kAvx512. Tails use masked loads/stores, which never
// touch memory outside [0, n).
#include "common/dtype_internal.h"

#if ZS_DTYPE_X86

// GCC 12 falsely reports the deliberately undefined pass-through operands
// inside its own AVX-512 intrinsic headers (_mm512_undefined_*) as
// "may be used uninitialized" once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#define ZS_TARGET_AVX512                                    \
  __attribute__((                                           \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma," \
             "f16c")))

namespace zeroshard {
namespace dtype_internal {
namespace {

constexpr size_t kLanes = 16;

ZS_TARGET_AVX512 inline __mmask16 TailMask(size_t rest) {
  return static_cast<__mmask16>((1u << rest) - 1u);
}

// An unaligned load the compiler may not re-fold into each of the several
// instructions that use the value (GCC otherwise turns one load into three
// memory operands, which measurably slows the bf16 kernel).
ZS_TARGET_AVX512 inline __m512i LoadOnce(const float* p) {
  __m512i x = _mm512_loadu_si512(p);
  __asm__("" : "+v"(x));
  return x;
}

// Sixteen fp32 bit patterns -> sixteen bf16 patterns in the low 16 bits of
// each 32-bit lane (same rule as the scalar Fp32ToBf16). Integer arithmetic
// only: vcvtneps2bf16 is not used because it flushes subnormals.
ZS_TARGET_AVX512 inline __m512i RoundToBf16(__m512i x) {
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb),
      16);
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)),
      _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_or_epi32(rounded, is_nan, hi, _mm512_set1_epi32(0x0040));
}

// Packs the 16-bit results of two RoundToBf16() vectors, in order. Values
// are in [0, 0xFFFF], so the unsigned-saturating pack is exact; it
// interleaves 128-bit lanes, which the qword permute undoes. One full
// 512-bit store per 32 elements instead of two vpmovdw narrowings.
ZS_TARGET_AVX512 inline __m512i Pack(__m512i a, __m512i b) {
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7),
                                  _mm512_packus_epi32(a, b));
}

ZS_TARGET_AVX512 inline __m512i WidenBf16(__m256i h) {
  return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

}  // namespace

ZS_TARGET_AVX512 void Fp32ToBf16Avx512(const float* src, uint16_t* dst,
                                       size_t n) {
  size_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const __m512i a = RoundToBf16(LoadOnce(src + i));
    const __m512i b = RoundToBf16(LoadOnce(src + i + kLanes));
    _mm512_storeu_si512(dst + i, Pack(a, b));
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = TailMask(n - i < kLanes ? n - i : kLanes);
    _mm256_mask_storeu_epi16(dst + i, m,
                             _mm512_cvtepi32_epi16(RoundToBf16(
                                 _mm512_maskz_loadu_epi32(m, src + i))));
  }
}

ZS_TARGET_AVX512 void Bf16ToFp32Avx512(const uint16_t* src, float* dst,
                                       size_t n) {
  size_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const __m512i a = WidenBf16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m512i b = WidenBf16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + kLanes)));
    _mm512_storeu_si512(dst + i, a);
    _mm512_storeu_si512(dst + i + kLanes, b);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = TailMask(n - i < kLanes ? n - i : kLanes);
    _mm512_mask_storeu_epi32(dst + i, m,
                             WidenBf16(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

ZS_TARGET_AVX512 void Fp32ToFp16Avx512(const float* src, uint16_t* dst,
                                       size_t n) {
  // vcvtps2ph with an explicit round-to-nearest-even immediate; see the
  // AVX2 kernel.
  size_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const __m256i a =
        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    const __m256i b = _mm512_cvtps_ph(_mm512_loadu_ps(src + i + kLanes),
                                      _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + kLanes), b);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = TailMask(n - i < kLanes ? n - i : kLanes);
    _mm256_mask_storeu_epi16(dst + i, m,
                             _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i),
                                             _MM_FROUND_TO_NEAREST_INT));
  }
}

ZS_TARGET_AVX512 void Fp16ToFp32Avx512(const uint16_t* src, float* dst,
                                       size_t n) {
  size_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const __m512 a = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m512 b = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + kLanes)));
    _mm512_storeu_ps(dst + i, a);
    _mm512_storeu_ps(dst + i + kLanes, b);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = TailMask(n - i < kLanes ? n - i : kLanes);
    _mm512_mask_storeu_ps(
        dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

}  // namespace dtype_internal
}  // namespace zeroshard

#endif  // ZS_DTYPE_X86
