// CpuKernels: causal multi-head self-attention, forward and backward, with
// the products of each (batch, head) done by cblas_sgemm on the strided
// q, k, v columns of qkv (B,T,3C). The (batch, head) pairs are split over the
// pool's threads. Rows are taken in blocks of kRowBlock so that the products
// skip most of the masked upper triangle: block [r0, r1) only needs keys
// [0, r1).
//
// Per (b, h), with Q, K, V, Y (T,hs) and P, S (T,T), scale = 1/sqrt(hs):
//   forward   S = scale Q K^T; P = softmax(S) over j <= i; Y = P V
//   backward  dP = dY V^T; dS = P * (dP - rowsum(P * dP))
//             dQ = scale dS K; dK = scale dS^T Q; dV = P^T dY
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "worker/gpt2/cpu_kernels.h"

namespace zeroshard::gpt2 {
namespace {

constexpr int kRowBlock = 64;

}  // namespace

void CpuKernels::AttentionForward(float* out, float* att, const float* qkv,
                                  int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  Split(int64_t{B} * NH, 1, [&](int64_t bh0, int64_t bh1) {
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* p = att + bh * T * T;
      float* y = out + b * T * C + h * hs;
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock);
        float* pb = p + int64_t{r0} * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs,
                    scale, q + int64_t{r0} * C3, C3, k, C3, 0.0f, pb, T);
        for (int i = r0; i < r1; ++i) {
          float* row = p + int64_t{i} * T;
          const float m = vec_.max(row, i + 1);
          const float sum = vec_.exp_sum(row, row, m, i + 1);
          vec_.scale(row, 1.0f / sum, i + 1);
          std::fill(row + i + 1, row + T, 0.0f);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1,
                    1.0f, pb, T, v, C3, 0.0f, y + int64_t{r0} * C, C);
      }
    }
  });
}

void CpuKernels::AttentionBackward(float* dqkv, const float* dout,
                                   const float* qkv, const float* att, int B,
                                   int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t block = int64_t{std::min(T, kRowBlock)} * T;
  float* scratch = Scratch(block);
  const int64_t stride = scratch_stride_;
  const int64_t pairs = int64_t{B} * NH;
  const int parts = threads();
  ForEachThread([&](int part) {
    float* ds = scratch + part * stride;  // (kRowBlock, T): dP, then dS
    for (int64_t bh = pairs * part / parts; bh < pairs * (part + 1) / parts;
         ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const int64_t off = b * T * C3 + h * hs;
      const float* q = qkv + off;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + off;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* p = att + bh * T * T;
      const float* dy = dout + b * T * C + h * hs;
      for (int t = 0; t < T; ++t) {
        std::fill(dk + int64_t{t} * C3, dk + int64_t{t} * C3 + hs, 0.0f);
        std::fill(dv + int64_t{t} * C3, dv + int64_t{t} * C3 + hs, 0.0f);
      }
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
        const float* pb = p + int64_t{r0} * T;
        const float* dyb = dy + int64_t{r0} * C;
        // dP (rows, r1) = dY[r0:r1] V[0:r1]^T, row stride T.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f,
                    dyb, C, v, C3, 0.0f, ds, T);
        for (int i = r0; i < r1; ++i) {
          float* row = ds + int64_t{i - r0} * T;
          vec_.softmax_backward(row, p + int64_t{i} * T, row, i + 1);
          std::fill(row + i + 1, row + r1, 0.0f);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1,
                    scale, ds, T, k, C3, 0.0f, dq + int64_t{r0} * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows,
                    scale, ds, T, q + int64_t{r0} * C3, C3, 1.0f, dk, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f,
                    pb, T, dyb, C, 1.0f, dv, C3);
      }
    }
  });
}

}  // namespace zeroshard::gpt2
