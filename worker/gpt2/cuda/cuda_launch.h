// The launchers of the fused GPT-2 kernels (cuda_*.cu), private to
// CudaKernels (cuda_kernels.h), which adds the cuBLAS products, the scratch,
// the synchronisation and the error recording around them.
//
// Contract of every launcher:
//   * Pointers are device pointers; shapes and aliasing rules are those of
//     the Kernels method of the same name (worker/gpt2/kernels.h), "+="
//     included. Sizes of 0 launch nothing.
//   * Asynchronous: enqueues its kernels on `stream` and returns the first
//     launch error (cudaGetLastError() after each launch), cudaSuccess
//     otherwise. Errors during execution surface at the caller's next
//     synchronisation.
//   * Deterministic: no atomics; every reduction runs in a fixed order.
//   * Only compiled under --config=cuda.
#ifndef ZEROSHARD_WORKER_GPT2_CUDA_CUDA_LAUNCH_H_
#define ZEROSHARD_WORKER_GPT2_CUDA_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace zeroshard::gpt2::cuda_launch {

// --- cuda_norm_act.cu -------------------------------------------------------

// out (B,T,C) = wte[inp] + wpe[t].
cudaError_t EncoderForward(cudaStream_t stream, float* out, const int* inp,
                           const float* wte, const float* wpe, int B, int T,
                           int C);
// Device scratch of EncoderBackward for up to `capacity` positions (B*T):
// the tokens sorted, the positions before and after the sort (ints), and
// cub's sort storage (temp_bytes, EncoderSortTempBytes(capacity)).
struct EncoderScratch {
  int* sorted_tokens = nullptr;
  int* positions = nullptr;
  int* sorted_positions = nullptr;
  void* temp = nullptr;
  size_t temp_bytes = 0;
  int64_t capacity = 0;
};
// The sort storage EncoderBackward needs for n positions.
size_t EncoderSortTempBytes(int64_t n);
// dwte (Vp,C) += scatter of dout by inp, dwpe (maxT,C) += sum over b; each
// row summed in position order, bit for bit like CpuKernels. The positions
// are sorted by token (a stable radix sort, in `scratch`) so that each
// token's row adds its positions in order without scanning the others;
// without scratch for B*T positions, each row scans them all (slow).
cudaError_t EncoderBackward(cudaStream_t stream, float* dwte, float* dwpe,
                            const float* dout, const int* inp, int B, int T,
                            int C, const EncoderScratch& scratch);
// out (N,C), mean (N), rstd (N) from inp (N,C), w (C), b (C).
cudaError_t LayernormForward(cudaStream_t stream, float* out, float* mean,
                             float* rstd, const float* inp, const float* w,
                             const float* b, int64_t N, int C);
// Rows of column sums are added in this many chunks (cuda_common.cuh).
constexpr int kColumnChunks = 64;
// dinp (N,C) +=, dw (C) +=, db (C) +=. `colsum` (kColumnChunks * colsum_cols
// floats of device scratch, or null): the column sums' (cuda_common.cuh).
cudaError_t LayernormBackward(cudaStream_t stream, float* dinp, float* dw,
                              float* db, const float* dout, const float* inp,
                              const float* w, const float* mean,
                              const float* rstd, int64_t N, int C,
                              float* colsum, int colsum_cols);
cudaError_t GeluForward(cudaStream_t stream, float* out, const float* inp,
                        int64_t n);
cudaError_t GeluBackward(cudaStream_t stream, float* dinp, const float* inp,
                         const float* dout, int64_t n);
cudaError_t ResidualForward(cudaStream_t stream, float* out, const float* a,
                            const float* b, int64_t n);
cudaError_t ResidualBackward(cudaStream_t stream, float* da, float* db,
                             const float* dout, int64_t n);

// --- cuda_matmul.cu ---------------------------------------------------------

// out (N,OC): every row = b (OC); the bias before a beta = 1 product.
cudaError_t BroadcastRows(cudaStream_t stream, float* out, const float* b,
                          int64_t N, int OC);
// acc (C) += column sums of x (N,C); `colsum` as LayernormBackward's.
cudaError_t AddColumnSums(cudaStream_t stream, float* acc, const float* x,
                          int64_t N, int C, float* colsum, int colsum_cols);

// --- cuda_attention.cu ------------------------------------------------------

// att: `rows` rows of length T holding scaled scores; row r is query
// position t = r % T. Row r becomes softmax over columns [0, t], 0 after.
cudaError_t CausalSoftmaxForward(cudaStream_t stream, float* att, int64_t rows,
                                 int T);
// ds (rows, T) = att * (dp - rowsum(att * dp)) over columns [0, t], 0 after;
// ds may equal dp.
cudaError_t CausalSoftmaxBackward(cudaStream_t stream, float* ds,
                                  const float* att, const float* dp,
                                  int64_t rows, int T);

// Attention's operands in head-major order, so that one strided batch of
// B*NH products covers a whole layer: heads (B,NH,T,hs) <- x (B,T) rows
// of stride ld, columns [col, col + NH*hs) (q, k, v: ld 3C, col 0, C, 2C);
// and back (FromHeads writes, "=").
cudaError_t ToHeads(cudaStream_t stream, float* heads, const float* x, int B,
                    int T, int NH, int hs, int64_t ld, int64_t col);
cudaError_t FromHeads(cudaStream_t stream, float* x, const float* heads, int B,
                      int T, int NH, int hs, int64_t ld, int64_t col);

// --- cuda_loss.cu -----------------------------------------------------------

// losses (N) from logits (N,Vp) over the first V columns.
cudaError_t CrossEntropyForward(cudaStream_t stream, float* losses,
                                const float* logits, const int* targets,
                                int64_t N, int V, int Vp);
// dlogits (N,Vp); may equal logits.
cudaError_t CrossEntropyBackward(cudaStream_t stream, float* dlogits,
                                 const float* logits, const int* targets,
                                 float dloss, int64_t N, int V, int Vp);

// --- cuda_optim.cu ----------------------------------------------------------
// Stage 0's optimizer on the device (Device::AdamW, Scale, SumSquares).

// AdamWScalars (common/optim/adamw.h), field for field.
struct AdamWConsts {
  float scale, decay, beta1, one_m_beta1, beta2, one_m_beta2, bc2_sqrt, eps,
      neg_step_size;
};
// AdamWStep's formula over n elements of p, g, m, v, with its roundings:
// the CPU's bits, canonical NaNs included.
cudaError_t AdamW(cudaStream_t stream, const AdamWConsts& c, float* p,
                  const float* g, float* m, float* v, int64_t n);
// x (n) *= s.
cudaError_t Scale(cudaStream_t stream, float* x, int64_t n, float s);
// Doubles of scratch SumSquares needs.
constexpr int kSumSquaresScratch = 1025;
// scratch[kSumSquaresScratch - 1] = sum of x[i]^2 in fp64, added in a tree
// fixed by n alone (the same bits on every call and every GPU).
cudaError_t SumSquares(cudaStream_t stream, const float* x, int64_t n,
                       double* scratch);

}  // namespace zeroshard::gpt2::cuda_launch

#endif  // ZEROSHARD_WORKER_GPT2_CUDA_CUDA_LAUNCH_H_
