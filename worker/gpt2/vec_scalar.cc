// Portable C++ row primitives (see vec.h); the fallback for CPUs without
// AVX2 and the readable statement of what the AVX2 table computes.
#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "worker/gpt2/vec.h"

namespace zeroshard::gpt2 {
namespace {

void Add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void Acc(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void Scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

float Max(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float ExpSum(float* out, const float* x, float m, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - m);
    if (out != nullptr) out[i] = e;
    sum += e;
  }
  return sum;
}

void SoftmaxBackward(float* ds, const float* p, const float* dp, int64_t n) {
  float dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += p[i] * dp[i];
  for (int64_t i = 0; i < n; ++i) ds[i] = p[i] * (dp[i] - dot);
}

void GeluForward(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    out[i] = 0.5f * v * (1.0f + std::tanh(u));
  }
}

void GeluBackward(float* dinp, const float* x, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    const float th = std::tanh(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    const float grad = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
    dinp[i] = grad * dout[i];
  }
}

void LayernormForward(float* out, float* mean, float* rstd, const float* x,
                      const float* w, const float* b, int C) {
  float sum = 0;
  for (int i = 0; i < C; ++i) sum += x[i];
  const float m = sum / C;
  float var = 0;
  for (int i = 0; i < C; ++i) var += (x[i] - m) * (x[i] - m);
  const float s = 1.0f / std::sqrt(var / C + kLayernormEps);
  for (int i = 0; i < C; ++i) out[i] = (x[i] - m) * s * w[i] + b[i];
  *mean = m;
  *rstd = s;
}

void LayernormBackward(float* dinp, float* dw, float* db, const float* dout,
                       const float* x, const float* w, float mean, float rstd,
                       int C) {
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int i = 0; i < C; ++i) {
    const float norm = (x[i] - mean) * rstd;
    const float dnorm = w[i] * dout[i];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean /= C;
  dnorm_norm_mean /= C;
  for (int i = 0; i < C; ++i) {
    const float norm = (x[i] - mean) * rstd;
    const float dnorm = w[i] * dout[i];
    db[i] += dout[i];
    dw[i] += norm * dout[i];
    dinp[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
  }
}

}  // namespace

const VecOps& ScalarVecOps() {
  static const VecOps ops = ZS_GPT2_VEC_OPS("scalar");
  return ops;
}

const VecOps& Vec() {
  static const VecOps* best = [] {
    const VecOps* avx2 = Avx2VecOps();
    return avx2 != nullptr ? avx2 : &ScalarVecOps();
  }();
  return *best;
}

}  // namespace zeroshard::gpt2
