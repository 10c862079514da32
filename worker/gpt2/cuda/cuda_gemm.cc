// CudaKernels: the layers built on cuBLAS products, all fp32 accumulation
// (CUBLAS_COMPUTE_32F):
//
//   MatmulForward   out (N,OC) = inp (N,C) @ w^T (+ b written first, beta 1)
//   MatmulBackward  dinp (N,C) = dout (N,OC) @ w (OC,C)
//                   dw (OC,C) += dout^T @ inp          (beta 1)
//                   db (OC)   += column sums of dout   (cuda_matmul.cu)
//   In kBf16 the operands inp, w, dout are first rounded to bf16 scratch.
//
//   Attention (kPerEntry), per batch entry b, the NH heads as one strided
//   batch (head h of q, k, v starts at column h*hs of its third of qkv; the
//   batch stride is hs, the row stride 3C), P = att (NH,T,T), scale =
//   1/sqrt(hs); kBatched: all B*NH heads per call, in causal row blocks:
//   forward   S = scale Q K^T  ->  P = causal softmax(S)  ->  Y = P V
//   backward  dV = P^T dY;  dP = dY V^T  ->  dS = P * (dP - rowsum(P dP));
//             dQ = scale dS K;  dK = scale dS^T Q
//   All in fp32 in both precisions; dP/dS live in the (NH,T,T) scratch.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/cuda/dtype_cuda.h"
#include "worker/gpt2/cuda/cuda_kernels_impl.h"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2 {

bool CudaKernelsImpl::Gemm(const char* what, bool trans_a, bool trans_b, int M,
                           int N, int K, float alpha, const Operand& a,
                           const Operand& b, float beta, float* c, int64_t ldc,
                           int64_t stride_c, int batch) {
  // cuBLAS is column-major, and a row-major (R,S) matrix with row stride ld
  // is a column-major (S,R) one with the same ld. So row-major
  // C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B goes first, the
  // sizes are (N, M, K), and each operand keeps its own transpose flag.
  // Single products (the matmuls, the only ones that may be bf16) use plain
  // cublasGemmEx.
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_a = static_cast<int>(a.ld), ld_b = static_cast<int>(b.ld);
  const int ld_c = static_cast<int>(ldc);
  if (batch == 1) {
    return CheckBlas(
        cublasGemmEx(blas_, op_b, op_a, N, M, K, &alpha, b.data, b.type, ld_b,
                     a.data, a.type, ld_a, &beta, c, CUDA_R_32F, ld_c,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        what);
  }
  return CheckBlas(cublasGemmStridedBatchedEx(
                       blas_, op_b, op_a, N, M, K, &alpha, b.data, b.type, ld_b,
                       b.batch_stride, a.data, a.type, ld_a, a.batch_stride,
                       &beta, c, CUDA_R_32F, ld_c, stride_c, batch,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   what);
}

bool CudaKernelsImpl::MatmulOperand(const char* what, const float* src,
                                    int64_t n, uint16_t* scratch,
                                    int64_t capacity, int64_t ld,
                                    Operand* out) {
  if (options_.precision == CudaPrecision::kFp32) {
    *out = Operand{src, CUDA_R_32F, ld, 0};
    return true;
  }
  if (n > capacity) {
    return Fail(absl::OutOfRangeError(absl::StrFormat(
        "CudaKernels: %s: %d elements exceed the bf16 scratch of %d (see "
        "CudaKernelsOptions)",
        what, n, capacity)));
  }
  std::string error;
  if (!cuda::Fp32ToBf16Device(src, scratch, static_cast<size_t>(n), stream_,
                              &error)) {
    return Fail(absl::InternalError(
        absl::StrFormat("CudaKernels: %s: %s", what, error)));
  }
  *out = Operand{scratch, CUDA_R_16BF, ld, 0};
  return true;
}

void CudaKernelsImpl::MatmulForward(float* out, const float* inp,
                                    const float* w, const float* b, int64_t N,
                                    int C, int OC) {
  if (!Begin()) return;
  Operand x, wt;
  if (!MatmulOperand("MatmulForward inp", inp, N * C, bf16_inp_, act_capacity_,
                     C, &x) ||
      !MatmulOperand("MatmulForward w", w, int64_t{OC} * C, bf16_w_,
                     weight_capacity_, C, &wt)) {
    return;
  }
  float beta = 0.0f;
  if (b != nullptr) {
    if (!Check(cuda_launch::BroadcastRows(stream_, out, b, N, OC),
               "MatmulForward bias")) {
      return;
    }
    beta = 1.0f;
  }
  if (!Gemm("MatmulForward", false, true, static_cast<int>(N), OC, C, 1.0f, x,
            wt, beta, out, OC, 0, 1)) {
    return;
  }
  Finish("MatmulForward", cudaSuccess);
}

void CudaKernelsImpl::MatmulBackward(float* dinp, float* dw, float* db,
                                     const float* dout, const float* inp,
                                     const float* w, int64_t N, int C, int OC) {
  if (!Begin()) return;
  Operand g, x, wt;
  if (!MatmulOperand("MatmulBackward dout", dout, N * OC, bf16_dout_,
                     act_capacity_, OC, &g) ||
      !MatmulOperand("MatmulBackward inp", inp, N * C, bf16_inp_, act_capacity_,
                     C, &x) ||
      !MatmulOperand("MatmulBackward w", w, int64_t{OC} * C, bf16_w_,
                     weight_capacity_, C, &wt)) {
    return;
  }
  const int n = static_cast<int>(N);
  if (!Gemm("MatmulBackward dinp", false, false, n, C, OC, 1.0f, g, wt, 0.0f,
            dinp, C, 0, 1) ||
      !Gemm("MatmulBackward dw", true, false, OC, C, n, 1.0f, g, x, 1.0f, dw, C,
            0, 1)) {
    return;
  }
  Finish("MatmulBackward",
         db != nullptr ? cuda_launch::AddColumnSums(stream_, db, dout, N, OC,
                                                    colsum_, colsum_cols_)
                       : cudaSuccess);
}

bool CudaKernelsImpl::AttentionForwardPerEntry(float* out, float* att,
                                               const float* qkv, int B, int T,
                                               int C, int NH) {
  const int hs = C / NH;
  const int64_t C3 = int64_t{3} * C, TT = int64_t{T} * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + b * T * C3;
    const Operand qh{q, CUDA_R_32F, C3, hs}, kh{q + C, CUDA_R_32F, C3, hs};
    // S (NH,T,T) = scale Q K^T, written into att.
    if (!Gemm("AttentionForward QK^T", false, true, T, T, hs, scale, qh, kh,
              0.0f, att + b * NH * TT, T, TT, NH)) {
      return false;
    }
  }
  if (!Check(cuda_launch::CausalSoftmaxForward(stream_, att,
                                               int64_t{B} * NH * T, T),
             "AttentionForward softmax")) {
    return false;
  }
  for (int b = 0; b < B; ++b) {
    const Operand p{att + b * NH * TT, CUDA_R_32F, T, TT};
    const Operand vh{qkv + b * T * C3 + 2 * C, CUDA_R_32F, C3, hs};
    // Y (T,hs) per head = P V, into columns h*hs of out (B,T,C).
    if (!Gemm("AttentionForward PV", false, false, T, hs, T, 1.0f, p, vh, 0.0f,
              out + int64_t{b} * T * C, C, hs, NH)) {
      return false;
    }
  }
  return true;
}

bool CudaKernelsImpl::AttentionBackwardPerEntry(float* dqkv, const float* dout,
                                                const float* qkv,
                                                const float* att, int B, int T,
                                                int C, int NH) {
  const int hs = C / NH;
  const int64_t C3 = int64_t{3} * C, TT = int64_t{T} * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* ds = att_scratch_;  // (NH,T,T): dP, then dS in place
  const Operand dsh{ds, CUDA_R_32F, T, TT};
  for (int b = 0; b < B; ++b) {
    const int64_t off = b * T * C3;
    const Operand qh{qkv + off, CUDA_R_32F, C3, hs};
    const Operand kh{qkv + off + C, CUDA_R_32F, C3, hs};
    const Operand vh{qkv + off + 2 * C, CUDA_R_32F, C3, hs};
    const Operand dyh{dout + int64_t{b} * T * C, CUDA_R_32F, C, hs};
    const float* p = att + b * NH * TT;
    const Operand ph{p, CUDA_R_32F, T, TT};
    float* dq = dqkv + off;
    if (!Gemm("AttentionBackward dV", true, false, T, hs, T, 1.0f, ph, dyh,
              0.0f, dq + 2 * C, C3, hs, NH) ||
        !Gemm("AttentionBackward dP", false, true, T, T, hs, 1.0f, dyh, vh,
              0.0f, ds, T, TT, NH) ||
        !Check(cuda_launch::CausalSoftmaxBackward(stream_, ds, p, ds,
                                                  int64_t{NH} * T, T),
               "AttentionBackward softmax") ||
        !Gemm("AttentionBackward dQ", false, false, T, hs, T, scale, dsh, kh,
              0.0f, dq, C3, hs, NH) ||
        !Gemm("AttentionBackward dK", true, false, T, hs, T, scale, dsh, qh,
              0.0f, dq + C, C3, hs, NH)) {
      return false;
    }
  }
  return true;
}

// The whole layer at once: q, k, v (and y / dY) in head-major scratch
// (cuda_launch::ToHeads), each product one strided batch of B*NH per row
// block (causal_plan.h).

bool CudaKernelsImpl::CausalGemm(const char* what, AttentionProduct product,
                                 int T, int hs, float alpha, const Operand& a,
                                 const Operand& b, float* c, int64_t ldc,
                                 int64_t stride_c, int batch) {
  // Block boundaries 32 rows apart at least: every block's operands start
  // 128-byte aligned when the matrices do.
  constexpr int kAlign = 32;
  const int blocks = CausalBlockCount(T, options_.attention_blocks);
  for (const CausalBlock& block : CausalBlocks(T, blocks, kAlign)) {
    const BlockGemm g = PlanBlock(product, block, T, hs);
    auto at = [](const Operand& x, int row, int col) {  // fp32 operands
      return Operand{static_cast<const float*>(x.data) + row * x.ld + col,
                     x.type, x.ld, x.batch_stride};
    };
    if (!Gemm(what, g.trans_a, g.trans_b, g.M, g.N, g.K, alpha,
              at(a, g.a_row, g.a_col), at(b, g.b_row, g.b_col), 0.0f,
              c + g.c_row * ldc, ldc, stride_c, batch)) {
      return false;
    }
  }
  return true;
}

bool CudaKernelsImpl::QkvToHeads(const float* qkv, int B, int T, int C, int NH,
                                 const char* what) {
  const int64_t slot = int64_t{B} * T * C;
  for (int i = 0; i < 3; ++i) {  // q, k, v into slots 0, 1, 2
    if (!Check(cuda_launch::ToHeads(stream_, heads_ + i * slot, qkv, B, T, NH,
                                    C / NH, int64_t{3} * C, int64_t{i} * C),
               what)) {
      return false;
    }
  }
  return true;
}

bool CudaKernelsImpl::AttentionForwardBatched(float* out, float* att,
                                              const float* qkv, int B, int T,
                                              int C, int NH) {
  const int hs = C / NH, BNH = B * NH;
  const int64_t TT = int64_t{T} * T, Ths = int64_t{T} * hs;
  const int64_t slot = int64_t{B} * T * C;
  float *q = heads_, *k = heads_ + slot, *v = heads_ + 2 * slot,
        *y = heads_ + 3 * slot;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  if (!QkvToHeads(qkv, B, T, C, NH, "AttentionForward to heads")) return false;
  const Operand qh{q, CUDA_R_32F, hs, Ths}, kh{k, CUDA_R_32F, hs, Ths},
      vh{v, CUDA_R_32F, hs, Ths}, p{att, CUDA_R_32F, T, TT};
  using P = AttentionProduct;
  return CausalGemm("AttentionForward QK^T", P::kScores, T, hs, scale, qh, kh,
                    att, T, TT, BNH) &&
         Check(cuda_launch::CausalSoftmaxForward(stream_, att, int64_t{BNH} * T,
                                                 T),
               "AttentionForward softmax") &&
         CausalGemm("AttentionForward PV", P::kValues, T, hs, 1.0f, p, vh, y,
                    hs, Ths, BNH) &&
         Check(cuda_launch::FromHeads(stream_, out, y, B, T, NH, hs, C, 0),
               "AttentionForward from heads");
}

bool CudaKernelsImpl::AttentionBackwardBatched(float* dqkv, const float* dout,
                                               const float* qkv,
                                               const float* att, int B, int T,
                                               int C, int NH) {
  const int hs = C / NH, BNH = B * NH;
  const int64_t C3 = int64_t{3} * C, TT = int64_t{T} * T, Ths = int64_t{T} * hs;
  const int64_t slot = int64_t{B} * T * C;
  // Slots: q, k, v, dY; dV goes where V was (after dP read it), dQ where dY
  // was (after dV and dP), dK where K was (after dQ).
  float *q = heads_, *k = heads_ + slot, *v = heads_ + 2 * slot,
        *dy = heads_ + 3 * slot;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* ds = att_scratch_;  // (B,NH,T,T): dP, then dS in place
  if (!QkvToHeads(qkv, B, T, C, NH, "AttentionBackward to heads")) {
    return false;
  }
  const Operand qh{q, CUDA_R_32F, hs, Ths}, kh{k, CUDA_R_32F, hs, Ths},
      vh{v, CUDA_R_32F, hs, Ths}, dyh{dy, CUDA_R_32F, hs, Ths},
      ph{att, CUDA_R_32F, T, TT}, dsh{ds, CUDA_R_32F, T, TT};
  using P = AttentionProduct;
  return Check(cuda_launch::ToHeads(stream_, dy, dout, B, T, NH, hs, C, 0),
               "AttentionBackward to heads") &&
         CausalGemm("AttentionBackward dP", P::kScoresGrad, T, hs, 1.0f, dyh,
                    vh, ds, T, TT, BNH) &&
         CausalGemm("AttentionBackward dV", P::kValuesGrad, T, hs, 1.0f, ph,
                    dyh, v, hs, Ths, BNH) &&
         Check(cuda_launch::CausalSoftmaxBackward(stream_, ds, att, ds,
                                                  int64_t{BNH} * T, T),
               "AttentionBackward softmax") &&
         CausalGemm("AttentionBackward dQ", P::kQueryGrad, T, hs, scale, dsh,
                    kh, dy, hs, Ths, BNH) &&
         CausalGemm("AttentionBackward dK", P::kKeyGrad, T, hs, scale, dsh, qh,
                    k, hs, Ths, BNH) &&
         Check(cuda_launch::FromHeads(stream_, dqkv, dy, B, T, NH, hs, C3, 0),
               "AttentionBackward from heads") &&
         Check(cuda_launch::FromHeads(stream_, dqkv, k, B, T, NH, hs, C3, C),
               "AttentionBackward from heads") &&
         Check(cuda_launch::FromHeads(stream_, dqkv, v, B, T, NH, hs, C3,
                                      2 * int64_t{C}),
               "AttentionBackward from heads");
}

void CudaKernelsImpl::AttentionForward(float* out, float* att, const float* qkv,
                                       int B, int T, int C, int NH) {
  if (!Begin()) return;
  const bool ok = AttentionBatched(B, T, C, NH)
                      ? AttentionForwardBatched(out, att, qkv, B, T, C, NH)
                      : AttentionForwardPerEntry(out, att, qkv, B, T, C, NH);
  if (ok) Finish("AttentionForward", cudaSuccess);
}

void CudaKernelsImpl::AttentionBackward(float* dqkv, const float* dout,
                                        const float* qkv, const float* att,
                                        int B, int T, int C, int NH) {
  if (!Begin()) return;
  const int64_t TT = int64_t{T} * T;
  if (NH * TT > att_capacity_) {
    Fail(absl::OutOfRangeError(absl::StrFormat(
        "CudaKernels: AttentionBackward: NH*T*T = %d exceeds the scratch of %d "
        "(see CudaKernelsOptions)",
        NH * TT, att_capacity_)));
    return;
  }
  const bool ok =
      AttentionBatched(B, T, C, NH)
          ? AttentionBackwardBatched(dqkv, dout, qkv, att, B, T, C, NH)
          : AttentionBackwardPerEntry(dqkv, dout, qkv, att, B, T, C, NH);
  if (ok) Finish("AttentionBackward", cudaSuccess);
}

bool CudaKernelsImpl::AttentionBatched(int B, int T, int C, int NH) const {
  return options_.attention == CudaAttention::kBatched &&
         int64_t{B} * NH * T * T <= att_capacity_ &&
         int64_t{B} * T * C <= heads_slot_;
}

}  // namespace zeroshard::gpt2
