#include "common/optim/adamw.h"

#include <cmath>
#include <cstring>

#include "common/dtype.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 reports its own _mm512_undefined_*() placeholders in the AVX-512
// intrinsics as "maybe uninitialized"; the warning is spurious.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define ZS_OPTIM_X86 1
#else
#define ZS_OPTIM_X86 0
#endif

// This file must be compiled without -ffast-math and with -ffp-contract=off
// (see BUILD): the scalar path and the SIMD paths are bit-identical only if
// the compiler performs exactly the roundings written here.
#if defined(__FAST_MATH__)
#error "common/optim/adamw.cc must not be compiled with -ffast-math"
#endif

namespace zeroshard {
namespace {

constexpr uint32_t kCanonicalNan = 0x7FC00000u;

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float Canonical(float x) {
  return x != x ? FromBits(kCanonicalNan) : x;  // NOLINT: NaN test
}

}  // namespace

AdamWScalars MakeAdamWScalars(const AdamWHyper& h) {
  const double lr = h.lr;
  const double b1 = h.beta1;
  const double b2 = h.beta2;
  const double t = static_cast<double>(h.step);
  const double bc1 = h.bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(b2, t) : 1.0;
  AdamWScalars c;
  c.scale = h.grad_scale;
  c.decay = static_cast<float>(1.0 - lr * h.weight_decay);
  c.beta1 = static_cast<float>(b1);
  c.one_m_beta1 = static_cast<float>(1.0 - b1);
  c.beta2 = static_cast<float>(b2);
  c.one_m_beta2 = static_cast<float>(1.0 - b2);
  c.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  c.eps = static_cast<float>(h.eps);
  c.neg_step_size = static_cast<float>(-(lr / bc1));
  return c;
}

namespace {

// The reference formula. The SIMD paths perform exactly these operations in
// this order, with FMA exactly where std::fma appears, and convert the
// serving copy inline (fused into the same pass) with the rules of
// Fp32ToBf16 / Fp32ToFp16 (vcvtps2ph for fp16, which Fp32ToFp16 matches for
// every input).
template <ServingType kSt>
inline void ScalarElement(const AdamWScalars& c, float* p, const float* g,
                          float* m, float* v, uint16_t* s, size_t i) {
  const float gs = g[i] * c.scale;
  const float pd = p[i] * c.decay;
  const float mn = std::fma(gs, c.one_m_beta1, m[i] * c.beta1);
  const float vn = std::fma(c.one_m_beta2 * gs, gs, v[i] * c.beta2);
  const float den = std::sqrt(vn) / c.bc2_sqrt + c.eps;
  const float pn = Canonical(pd + (c.neg_step_size * mn) / den);
  p[i] = pn;
  m[i] = Canonical(mn);
  v[i] = Canonical(vn);
  if constexpr (kSt == ServingType::kBf16) {
    s[i] = Fp32ToBf16(pn);
  } else if constexpr (kSt == ServingType::kFp16) {
    s[i] = Fp32ToFp16(pn);
  }
}

template <ServingType kSt>
void RunScalar(const AdamWScalars& c, float* p, const float* g, float* m,
               float* v, uint16_t* s, size_t n) {
  for (size_t i = 0; i < n; ++i) ScalarElement<kSt>(c, p, g, m, v, s, i);
}

#if ZS_OPTIM_X86

#define ZS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ZS_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define ZS_INLINE inline __attribute__((always_inline))

// ---------------------------------------------------------------- AVX2 ----

struct Avx2Consts {
  __m256 scale, decay, beta1, one_m_beta1, beta2, one_m_beta2, bc2_sqrt, eps,
      neg_step_size, nan;
};

// One vector of 8 elements (unaligned loads and stores).
template <ServingType kSt>
ZS_TARGET_AVX2 ZS_INLINE void Avx2Vec(const Avx2Consts& c, float* p,
                                      const float* g, float* m, float* v,
                                      uint16_t* s) {
  const __m256 gs = _mm256_mul_ps(_mm256_loadu_ps(g), c.scale);
  const __m256 pd = _mm256_mul_ps(_mm256_loadu_ps(p), c.decay);
  __m256 mn = _mm256_fmadd_ps(gs, c.one_m_beta1,
                              _mm256_mul_ps(_mm256_loadu_ps(m), c.beta1));
  __m256 vn = _mm256_fmadd_ps(_mm256_mul_ps(c.one_m_beta2, gs), gs,
                              _mm256_mul_ps(_mm256_loadu_ps(v), c.beta2));
  const __m256 den =
      _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vn), c.bc2_sqrt), c.eps);
  __m256 pn =
      _mm256_add_ps(pd, _mm256_div_ps(_mm256_mul_ps(c.neg_step_size, mn), den));
  pn = _mm256_blendv_ps(pn, c.nan, _mm256_cmp_ps(pn, pn, _CMP_UNORD_Q));
  mn = _mm256_blendv_ps(mn, c.nan, _mm256_cmp_ps(mn, mn, _CMP_UNORD_Q));
  vn = _mm256_blendv_ps(vn, c.nan, _mm256_cmp_ps(vn, vn, _CMP_UNORD_Q));
  _mm256_storeu_ps(p, pn);
  _mm256_storeu_ps(m, mn);
  _mm256_storeu_ps(v, vn);
  if constexpr (kSt == ServingType::kBf16) {
    const __m256i x = _mm256_castps_si256(pn);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)),
                                 _mm256_and_si256(hi, _mm256_set1_epi32(1)));
    r = _mm256_srli_epi32(r, 16);
    const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x0040));
    r = _mm256_blendv_epi8(
        r, quiet, _mm256_castps_si256(_mm256_cmp_ps(pn, pn, _CMP_UNORD_Q)));
    // Values are < 2^16, so unsigned saturation is exact.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r),
                                            _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(s), packed);
  } else if constexpr (kSt == ServingType::kFp16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(s),
                     _mm256_cvtps_ph(pn, _MM_FROUND_TO_NEAREST_INT));
  }
}

template <ServingType kSt>
ZS_TARGET_AVX2 void RunAvx2(const AdamWScalars& k, float* p, const float* g,
                            float* m, float* v, uint16_t* s, size_t n) {
  Avx2Consts c;
  c.scale = _mm256_set1_ps(k.scale);
  c.decay = _mm256_set1_ps(k.decay);
  c.beta1 = _mm256_set1_ps(k.beta1);
  c.one_m_beta1 = _mm256_set1_ps(k.one_m_beta1);
  c.beta2 = _mm256_set1_ps(k.beta2);
  c.one_m_beta2 = _mm256_set1_ps(k.one_m_beta2);
  c.bc2_sqrt = _mm256_set1_ps(k.bc2_sqrt);
  c.eps = _mm256_set1_ps(k.eps);
  c.neg_step_size = _mm256_set1_ps(k.neg_step_size);
  c.nan = _mm256_castsi256_ps(_mm256_set1_epi32(kCanonicalNan));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    Avx2Vec<kSt>(c, p + i, g + i, m + i, v + i, s + i);
    Avx2Vec<kSt>(c, p + i + 8, g + i + 8, m + i + 8, v + i + 8, s + i + 8);
  }
  if (i + 8 <= n) {
    Avx2Vec<kSt>(c, p + i, g + i, m + i, v + i, s + i);
    i += 8;
  }
  // Tail: the scalar formula, which gives the same bits.
  for (; i < n; ++i) ScalarElement<kSt>(k, p, g, m, v, s, i);
}

// ------------------------------------------------------------- AVX-512 ----

struct Avx512Consts {
  __m512 scale, decay, beta1, one_m_beta1, beta2, one_m_beta2, bc2_sqrt, eps,
      neg_step_size, nan;
};

// One vector of 16 elements; with kMasked only the lanes in `k` are read and
// written (masked-off lanes compute on zeros, which raises nothing visible).
template <ServingType kSt, bool kMasked>
ZS_TARGET_AVX512 ZS_INLINE void Avx512Vec(const Avx512Consts& c, float* p,
                                          const float* g, float* m, float* v,
                                          uint16_t* s, __mmask16 k) {
  __m512 gv, pv, mv, vv;
  if constexpr (kMasked) {
    gv = _mm512_maskz_loadu_ps(k, g);
    pv = _mm512_maskz_loadu_ps(k, p);
    mv = _mm512_maskz_loadu_ps(k, m);
    vv = _mm512_maskz_loadu_ps(k, v);
  } else {
    gv = _mm512_loadu_ps(g);
    pv = _mm512_loadu_ps(p);
    mv = _mm512_loadu_ps(m);
    vv = _mm512_loadu_ps(v);
  }
  const __m512 gs = _mm512_mul_ps(gv, c.scale);
  const __m512 pd = _mm512_mul_ps(pv, c.decay);
  __m512 mn = _mm512_fmadd_ps(gs, c.one_m_beta1, _mm512_mul_ps(mv, c.beta1));
  __m512 vn = _mm512_fmadd_ps(_mm512_mul_ps(c.one_m_beta2, gs), gs,
                              _mm512_mul_ps(vv, c.beta2));
  const __m512 den =
      _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vn), c.bc2_sqrt), c.eps);
  __m512 pn =
      _mm512_add_ps(pd, _mm512_div_ps(_mm512_mul_ps(c.neg_step_size, mn), den));
  const __mmask16 pnan = _mm512_cmp_ps_mask(pn, pn, _CMP_UNORD_Q);
  pn = _mm512_mask_mov_ps(pn, pnan, c.nan);
  mn = _mm512_mask_mov_ps(mn, _mm512_cmp_ps_mask(mn, mn, _CMP_UNORD_Q), c.nan);
  vn = _mm512_mask_mov_ps(vn, _mm512_cmp_ps_mask(vn, vn, _CMP_UNORD_Q), c.nan);
  if constexpr (kMasked) {
    _mm512_mask_storeu_ps(p, k, pn);
    _mm512_mask_storeu_ps(m, k, mn);
    _mm512_mask_storeu_ps(v, k, vn);
  } else {
    _mm512_storeu_ps(p, pn);
    _mm512_storeu_ps(m, mn);
    _mm512_storeu_ps(v, vn);
  }
  if constexpr (kSt == ServingType::kBf16) {
    const __m512i x = _mm512_castps_si512(pn);
    const __m512i hi = _mm512_srli_epi32(x, 16);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)),
                                 _mm512_and_si512(hi, _mm512_set1_epi32(1)));
    r = _mm512_srli_epi32(r, 16);
    r = _mm512_mask_or_epi32(r, pnan, hi, _mm512_set1_epi32(0x0040));
    if constexpr (kMasked) {
      _mm512_mask_cvtepi32_storeu_epi16(s, k, r);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s),
                          _mm512_cvtepi32_epi16(r));
    }
  } else if constexpr (kSt == ServingType::kFp16) {
    const __m256i h = _mm512_cvtps_ph(pn, _MM_FROUND_TO_NEAREST_INT);
    if constexpr (kMasked) {
      _mm256_mask_storeu_epi16(s, k, h);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s), h);
    }
  }
}

template <ServingType kSt>
ZS_TARGET_AVX512 void RunAvx512(const AdamWScalars& k, float* p, const float* g,
                                float* m, float* v, uint16_t* s, size_t n) {
  Avx512Consts c;
  c.scale = _mm512_set1_ps(k.scale);
  c.decay = _mm512_set1_ps(k.decay);
  c.beta1 = _mm512_set1_ps(k.beta1);
  c.one_m_beta1 = _mm512_set1_ps(k.one_m_beta1);
  c.beta2 = _mm512_set1_ps(k.beta2);
  c.one_m_beta2 = _mm512_set1_ps(k.one_m_beta2);
  c.bc2_sqrt = _mm512_set1_ps(k.bc2_sqrt);
  c.eps = _mm512_set1_ps(k.eps);
  c.neg_step_size = _mm512_set1_ps(k.neg_step_size);
  c.nan = _mm512_castsi512_ps(_mm512_set1_epi32(kCanonicalNan));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    Avx512Vec<kSt, false>(c, p + i, g + i, m + i, v + i, s + i, 0);
    Avx512Vec<kSt, false>(c, p + i + 16, g + i + 16, m + i + 16, v + i + 16,
                          s + i + 16, 0);
  }
  if (i + 16 <= n) {
    Avx512Vec<kSt, false>(c, p + i, g + i, m + i, v + i, s + i, 0);
    i += 16;
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    Avx512Vec<kSt, true>(c, p + i, g + i, m + i, v + i, s + i, mask);
  }
}

#endif  // ZS_OPTIM_X86

using KernelFn = void (*)(const AdamWScalars&, float*, const float*, float*,
                          float*, uint16_t*, size_t);

KernelFn SelectKernel(SimdLevel level, ServingType st) {
  switch (level) {
#if ZS_OPTIM_X86
    case SimdLevel::kAvx512:
      switch (st) {
        case ServingType::kNone:
          return &RunAvx512<ServingType::kNone>;
        case ServingType::kBf16:
          return &RunAvx512<ServingType::kBf16>;
        case ServingType::kFp16:
          return &RunAvx512<ServingType::kFp16>;
      }
      break;
    case SimdLevel::kAvx2:
      switch (st) {
        case ServingType::kNone:
          return &RunAvx2<ServingType::kNone>;
        case ServingType::kBf16:
          return &RunAvx2<ServingType::kBf16>;
        case ServingType::kFp16:
          return &RunAvx2<ServingType::kFp16>;
      }
      break;
#endif
    default:
      break;
  }
  switch (st) {
    case ServingType::kBf16:
      return &RunScalar<ServingType::kBf16>;
    case ServingType::kFp16:
      return &RunScalar<ServingType::kFp16>;
    case ServingType::kNone:
    default:
      return &RunScalar<ServingType::kNone>;
  }
}

}  // namespace

void AdamWStep(const AdamWHyper& h, float* p, const float* g, float* m,
               float* v, uint16_t* serve, ServingType st, size_t n) {
  if (n == 0) return;
  SelectKernel(DetectSimdLevel(), st)(MakeAdamWScalars(h), p, g, m, v, serve,
                                      n);
}

bool AdamWStepAt(SimdLevel level, const AdamWHyper& h, float* p, const float* g,
                 float* m, float* v, uint16_t* serve, ServingType st,
                 size_t n) {
  // DetectSimdLevel() reports kAvx2 only with AVX2 + FMA + F16C and kAvx512
  // only with AVX-512 F/BW/VL/DQ on top (and OS register support): exactly
  // what RunAvx2 and RunAvx512 are compiled for.
  if (!SimdLevelUsable(level)) return false;
  if (n == 0) return true;
  SelectKernel(level, st)(MakeAdamWScalars(h), p, g, m, v, serve, n);
  return true;
}

}  // namespace zeroshard
