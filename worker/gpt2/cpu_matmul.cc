// CpuKernels: matmul (torch.nn.Linear) forward and backward through
// single-threaded cblas_sgemm calls, one per pool thread on a fixed piece:
//   forward   out = inp @ w^T + b        pieces of the N rows
//   backward  dinp = dout @ w            pieces of the N rows
//             dw += dout^T @ inp         pieces of the OC rows of dw
//             db += column sums of dout  same pieces of OC
#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "worker/gpt2/cpu_kernels.h"

namespace zeroshard::gpt2 {

void CpuKernels::MatmulForward(float* out, const float* inp, const float* w,
                               const float* b, int64_t N, int C, int OC) {
  Split(N, 4, [&](int64_t r0, int64_t r1) {
    float* o = out + r0 * OC;
    const int rows = static_cast<int>(r1 - r0);
    float beta = 0.0f;
    if (b != nullptr) {
      for (int r = 0; r < rows; ++r) {
        std::copy(b, b + OC, o + int64_t{r} * OC);
      }
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, C, 1.0f,
                inp + r0 * C, C, w, C, beta, o, OC);
  });
}

void CpuKernels::MatmulBackward(float* dinp, float* dw, float* db,
                                const float* dout, const float* inp,
                                const float* w, int64_t N, int C, int OC) {
  const int n = static_cast<int>(N);
  Split(N, 4, [&](int64_t r0, int64_t r1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                static_cast<int>(r1 - r0), C, OC, 1.0f, dout + r0 * OC, OC, w,
                C, 0.0f, dinp + r0 * C, C);
  });
  Split(OC, 16, [&](int64_t o0, int64_t o1) {
    const int cols = static_cast<int>(o1 - o0);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, C, n, 1.0f,
                dout + o0, OC, inp, C, 1.0f, dw + o0 * C, C);
    if (db != nullptr) {
      for (int64_t r = 0; r < N; ++r)
        vec_.acc(db + o0, dout + r * OC + o0, cols);
    }
  });
}

}  // namespace zeroshard::gpt2
