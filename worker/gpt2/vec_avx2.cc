// AVX2 + FMA row primitives (see vec.h). Compiled for AVX2 by the target
// pragma below (after the includes, so that no inline library code is built
// for AVX2); Avx2VecOps() hands them out only on CPUs that have it.
//
// Every loop runs 8 lanes at a time; the last partial vector is read with a
// masked load (zeros, or -inf for max) and written with a masked store, so
// each element goes through the same instructions wherever it lies.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "worker/gpt2/vec.h"

namespace zeroshard::gpt2 {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// Lanes [0, rem) set, for 1 <= rem <= 8.
inline __m256i TailMask(int64_t rem) {
  alignas(32) static const int32_t kBits[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(kBits + 8 - static_cast<int>(rem)));
}

// Loads/stores 8 floats, or only the lanes of `mask` when `tail`.
inline __m256 Ld(const float* p, __m256i mask, bool tail) {
  return tail ? _mm256_maskload_ps(p, mask) : _mm256_loadu_ps(p);
}
inline void St(float* p, __m256 v, __m256i mask, bool tail) {
  if (tail) {
    _mm256_maskstore_ps(p, mask, v);
  } else {
    _mm256_storeu_ps(p, v);
  }
}

// Calls body(i, mask, tail) for i = 0, 8, 16, ... < n; tail is true (and
// mask partial) only for a last partial vector.
template <class Body>
inline void ForEach8(int64_t n, Body body) {
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) body(i, all, false);
  if (i < n) body(i, TailMask(n - i), true);
}

// Sum of the 8 lanes in a fixed order.
inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp(x), Cephes' single-precision polynomial (about 2 ulp); inputs below
// -87.3 give 0 or a tiny value, above 88.37 are clamped.
inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3365478515625f));
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                              _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// tanh(u) = 1 - 2 / (exp(2u) + 1); saturates to +-1.
inline __m256 Tanh(__m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = Exp(_mm256_add_ps(u, u));
  return _mm256_sub_ps(
      one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

// u = sqrt(2/pi) * (x + 0.044715 x^3).
inline __m256 GeluArg(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  return _mm256_mul_ps(_mm256_set1_ps(kGeluScale),
                       _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), x3, x));
}

void Add(float* out, const float* a, const float* b, int64_t n) {
  ForEach8(n, [&](int64_t i, __m256i m, bool t) {
    St(out + i, _mm256_add_ps(Ld(a + i, m, t), Ld(b + i, m, t)), m, t);
  });
}

void Acc(float* y, const float* x, int64_t n) { Add(y, y, x, n); }

void Scale(float* x, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  ForEach8(n, [&](int64_t i, __m256i m, bool t) {
    St(x + i, _mm256_mul_ps(Ld(x + i, m, t), vs), m, t);
  });
}

float Max(const float* x, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 acc = ninf;
  ForEach8(n, [&](int64_t i, __m256i m, bool t) {
    __m256 v = Ld(x + i, m, t);
    if (t) v = _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(m));
    acc = _mm256_max_ps(acc, v);
  });
  return HMax(acc);
}

float ExpSum(float* out, const float* x, float mx, int64_t n) {
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  ForEach8(n, [&](int64_t i, __m256i m, bool t) {
    __m256 e = Exp(_mm256_sub_ps(Ld(x + i, m, t), vm));
    if (t) e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
    if (out != nullptr) St(out + i, e, m, t);
    acc = _mm256_add_ps(acc, e);
  });
  return HSum(acc);
}

void SoftmaxBackward(float* ds, const float* p, const float* dp, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  ForEach8(n, [&](int64_t i, __m256i m, bool t) {
    acc = _mm256_fmadd_ps(Ld(p + i, m, t), Ld(dp + i, m, t), acc);
  });
  const __m256 dot = _mm256_set1_ps(HSum(acc));
  ForEach8(n, [&](int64_t i, __m256i m, bool t) {
    const __m256 d = _mm256_sub_ps(Ld(dp + i, m, t), dot);
    St(ds + i, _mm256_mul_ps(Ld(p + i, m, t), d), m, t);
  });
}

void GeluForward(float* out, const float* x, int64_t n) {
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f);
  ForEach8(n, [&](int64_t i, __m256i m, bool t) {
    const __m256 v = Ld(x + i, m, t);
    const __m256 th = Tanh(GeluArg(v));
    St(out + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, th)),
       m, t);
  });
}

void GeluBackward(float* dinp, const float* x, const float* dout, int64_t n) {
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 scale = _mm256_set1_ps(kGeluScale);
  const __m256 cubic3 = _mm256_set1_ps(3.0f * kGeluCubic);
  ForEach8(n, [&](int64_t i, __m256i m, bool t) {
    const __m256 v = Ld(x + i, m, t);
    const __m256 th = Tanh(GeluArg(v));
    // du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    const __m256 du =
        _mm256_mul_ps(scale, _mm256_fmadd_ps(cubic3, _mm256_mul_ps(v, v), one));
    const __m256 sech2 = _mm256_fnmadd_ps(th, th, one);
    const __m256 grad =
        _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(half, v), sech2), du,
                        _mm256_mul_ps(half, _mm256_add_ps(one, th)));
    St(dinp + i, _mm256_mul_ps(grad, Ld(dout + i, m, t)), m, t);
  });
}

void LayernormForward(float* out, float* mean, float* rstd, const float* x,
                      const float* w, const float* b, int C) {
  __m256 acc = _mm256_setzero_ps();
  ForEach8(C, [&](int64_t i, __m256i m, bool t) {
    acc = _mm256_add_ps(acc, Ld(x + i, m, t));
  });
  const float mu = HSum(acc) / C;
  const __m256 vmu = _mm256_set1_ps(mu);
  acc = _mm256_setzero_ps();
  ForEach8(C, [&](int64_t i, __m256i m, bool t) {
    __m256 d = _mm256_sub_ps(Ld(x + i, m, t), vmu);
    if (t) d = _mm256_and_ps(d, _mm256_castsi256_ps(m));
    acc = _mm256_fmadd_ps(d, d, acc);
  });
  const float s = 1.0f / std::sqrt(HSum(acc) / C + kLayernormEps);
  const __m256 vs = _mm256_set1_ps(s);
  ForEach8(C, [&](int64_t i, __m256i m, bool t) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(Ld(x + i, m, t), vmu), vs);
    St(out + i, _mm256_fmadd_ps(norm, Ld(w + i, m, t), Ld(b + i, m, t)), m, t);
  });
  *mean = mu;
  *rstd = s;
}

void LayernormBackward(float* dinp, float* dw, float* db, const float* dout,
                       const float* x, const float* w, float mean, float rstd,
                       int C) {
  const __m256 vmu = _mm256_set1_ps(mean);
  const __m256 vs = _mm256_set1_ps(rstd);
  __m256 acc_d = _mm256_setzero_ps(), acc_dn = _mm256_setzero_ps();
  ForEach8(C, [&](int64_t i, __m256i m, bool t) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(Ld(x + i, m, t), vmu), vs);
    const __m256 dnorm = _mm256_mul_ps(Ld(w + i, m, t), Ld(dout + i, m, t));
    acc_d = _mm256_add_ps(acc_d, dnorm);
    acc_dn = _mm256_fmadd_ps(dnorm, norm, acc_dn);
  });
  const __m256 dmean = _mm256_set1_ps(HSum(acc_d) / C);
  const __m256 dnmean = _mm256_set1_ps(HSum(acc_dn) / C);
  ForEach8(C, [&](int64_t i, __m256i m, bool t) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(Ld(x + i, m, t), vmu), vs);
    const __m256 g = Ld(dout + i, m, t);
    const __m256 dnorm = _mm256_mul_ps(Ld(w + i, m, t), g);
    St(db + i, _mm256_add_ps(Ld(db + i, m, t), g), m, t);
    St(dw + i, _mm256_fmadd_ps(norm, g, Ld(dw + i, m, t)), m, t);
    const __m256 d =
        _mm256_fnmadd_ps(norm, dnmean, _mm256_sub_ps(dnorm, dmean));
    St(dinp + i, _mm256_fmadd_ps(d, vs, Ld(dinp + i, m, t)), m, t);
  });
}

#pragma GCC pop_options

}  // namespace

const VecOps* Avx2VecOps() {
  static const VecOps ops = ZS_GPT2_VEC_OPS("avx2");
  return SimdLevelUsable(SimdLevel::kAvx2) ? &ops : nullptr;
}

}  // namespace zeroshard::gpt2
