// CpuKernels: the pool plumbing and the element-wise, embedding, LayerNorm
// and cross-entropy layers. Matrix products: cpu_matmul.cc; attention:
// cpu_attention.cc.
#include "worker/gpt2/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"

namespace zeroshard::gpt2 {

absl::StatusOr<std::unique_ptr<CpuKernels>> CpuKernels::Create(int threads) {
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CpuKernels: threads must be in [1, 1024], got %d", threads));
  }
  return std::unique_ptr<CpuKernels>(new CpuKernels(threads));
}

CpuKernels::CpuKernels(int threads) : pool_(threads), vec_(Vec()) {
  openblas_set_num_threads(1);
  name_ = absl::StrFormat("cpu (%d threads, %s, OpenBLAS 1 thread each)",
                          threads, vec_.name);
}

void CpuKernels::ForEachThread(const std::function<void(int)>& fn) {
  pool_.ParallelFor(static_cast<size_t>(threads()),
                    [&](size_t p) { fn(static_cast<int>(p)); });
}

void CpuKernels::Split(int64_t n, int64_t align,
                       const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t parts = threads();
  const int64_t units = (n + align - 1) / align;
  ForEachThread([&](int p) {
    const int64_t b = std::min(n, units * p / parts * align);
    const int64_t e = std::min(n, units * (p + 1) / parts * align);
    if (b < e) fn(b, e);
  });
}

float* CpuKernels::Scratch(int64_t n_per_thread) {
  const int64_t stride = (n_per_thread + 15) / 16 * 16;
  if (stride > scratch_stride_) {
    scratch_stride_ = stride;
    scratch_.assign(static_cast<size_t>(stride * threads() + 16), 0.0f);
  }
  // 64-byte aligned base; each thread's part starts at p * scratch_stride_.
  const uintptr_t base = reinterpret_cast<uintptr_t>(scratch_.data());
  return reinterpret_cast<float*>((base + 63) / 64 * 64);
}

void CpuKernels::Zero(float* x, int64_t n) {
  Split(n, 16, [&](int64_t b, int64_t e) {
    std::memset(x + b, 0, static_cast<size_t>(e - b) * sizeof(float));
  });
}

void CpuKernels::EncoderForward(float* out, const int* inp, const float* wte,
                                const float* wpe, int B, int T, int C) {
  Split(int64_t{B} * T, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      vec_.add(out + i * C, wte + int64_t{inp[i]} * C, wpe + (i % T) * C, C);
    }
  });
}

void CpuKernels::EncoderBackward(float* dwte, float* dwpe, const float* dout,
                                 const int* inp, int B, int T, int C) {
  // Columns are split, so that rows of dwte hit by repeated tokens are
  // updated by one thread, in position order.
  Split(C, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < int64_t{B} * T; ++i) {
      const float* g = dout + i * C + c0;
      vec_.acc(dwte + int64_t{inp[i]} * C + c0, g, c1 - c0);
      vec_.acc(dwpe + (i % T) * C + c0, g, c1 - c0);
    }
  });
}

void CpuKernels::LayernormForward(float* out, float* mean, float* rstd,
                                  const float* inp, const float* w,
                                  const float* b, int64_t N, int C) {
  Split(N, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      vec_.layernorm_forward(out + r * C, mean + r, rstd + r, inp + r * C, w, b,
                             C);
    }
  });
}

void CpuKernels::LayernormBackward(float* dinp, float* dw, float* db,
                                   const float* dout, const float* inp,
                                   const float* w, const float* mean,
                                   const float* rstd, int64_t N, int C) {
  // Each thread sums dw, db of its rows into its own scratch (dw then db);
  // the partials are added to dw, db in thread order.
  const int64_t stride = (int64_t{C} + 15) / 16 * 16;
  float* partial = Scratch(2 * stride);
  const int64_t pstride = scratch_stride_;
  const int parts = threads();
  const int64_t per = N / parts, extra = N % parts;
  ForEachThread([&](int p) {
    float* pdw = partial + p * pstride;
    float* pdb = pdw + stride;
    std::memset(pdw, 0, sizeof(float) * 2 * stride);
    const int64_t r0 = p * per + std::min<int64_t>(p, extra);
    const int64_t r1 = r0 + per + (p < extra ? 1 : 0);
    for (int64_t r = r0; r < r1; ++r) {
      vec_.layernorm_backward(dinp + r * C, pdw, pdb, dout + r * C, inp + r * C,
                              w, mean[r], rstd[r], C);
    }
  });
  Split(C, 16, [&](int64_t c0, int64_t c1) {
    for (int p = 0; p < parts; ++p) {
      vec_.acc(dw + c0, partial + p * pstride + c0, c1 - c0);
      vec_.acc(db + c0, partial + p * pstride + stride + c0, c1 - c0);
    }
  });
}

void CpuKernels::GeluForward(float* out, const float* inp, int64_t n) {
  Split(n, 16, [&](int64_t b, int64_t e) {
    vec_.gelu_forward(out + b, inp + b, e - b);
  });
}

void CpuKernels::GeluBackward(float* dinp, const float* inp, const float* dout,
                              int64_t n) {
  Split(n, 16, [&](int64_t b, int64_t e) {
    vec_.gelu_backward(dinp + b, inp + b, dout + b, e - b);
  });
}

void CpuKernels::ResidualForward(float* out, const float* a, const float* b,
                                 int64_t n) {
  Split(n, 16,
        [&](int64_t i, int64_t e) { vec_.add(out + i, a + i, b + i, e - i); });
}

void CpuKernels::ResidualBackward(float* da, float* db, const float* dout,
                                  int64_t n) {
  Split(n, 16, [&](int64_t i, int64_t e) {
    vec_.acc(da + i, dout + i, e - i);
    vec_.acc(db + i, dout + i, e - i);
  });
}

void CpuKernels::CrossEntropyForward(float* losses, const float* logits,
                                     const int* targets, int64_t N, int V,
                                     int Vp) {
  Split(N, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = logits + r * Vp;
      const float m = vec_.max(row, V);
      const float sum = vec_.exp_sum(nullptr, row, m, V);
      losses[r] = std::log(sum) + m - row[targets[r]];
    }
  });
}

void CpuKernels::CrossEntropyBackward(float* dlogits, const float* logits,
                                      const int* targets, float dloss,
                                      int64_t N, int V, int Vp) {
  Split(N, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = logits + r * Vp;
      float* drow = dlogits + r * Vp;
      const float m = vec_.max(row, V);
      const float sum = vec_.exp_sum(drow, row, m, V);
      vec_.scale(drow, dloss / sum, V);
      drow[targets[r]] -= dloss;
      std::fill(drow + V, drow + Vp, 0.0f);
    }
  });
}

}  // namespace zeroshard::gpt2
