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

#include <cstdint>

namespace zeroshard::gpt2::cuda_launch {

// --- cuda_norm_act.cu -------------------------------------------------------

// out (B,T,C) = wte[inp] + wpe[t].
cudaError_t EncoderForward(cudaStream_t stream, float* out, const int* inp,
                           const float* wte, const float* wpe, int B, int T,
                           int C);
// dwte (Vp,C) += scatter of dout by inp, dwpe (maxT,C) += sum over b; each
// row summed in position order, bit for bit like CpuKernels.
cudaError_t EncoderBackward(cudaStream_t stream, float* dwte, float* dwpe,
                            const float* dout, const int* inp, int B, int T,
                            int C);
// out (N,C), mean (N), rstd (N) from inp (N,C), w (C), b (C).
cudaError_t LayernormForward(cudaStream_t stream, float* out, float* mean,
                             float* rstd, const float* inp, const float* w,
                             const float* b, int64_t N, int C);
// dinp (N,C) +=, dw (C) +=, db (C) +=.
cudaError_t LayernormBackward(cudaStream_t stream, float* dinp, float* dw,
                              float* db, const float* dout, const float* inp,
                              const float* w, const float* mean,
                              const float* rstd, int64_t N, int C);
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
// acc (C) += column sums of x (N,C).
cudaError_t AddColumnSums(cudaStream_t stream, float* acc, const float* x,
                          int64_t N, int C);

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

// --- cuda_loss.cu -----------------------------------------------------------

// losses (N) from logits (N,Vp) over the first V columns.
cudaError_t CrossEntropyForward(cudaStream_t stream, float* losses,
                                const float* logits, const int* targets,
                                int64_t N, int V, int Vp);
// dlogits (N,Vp); may equal logits.
cudaError_t CrossEntropyBackward(cudaStream_t stream, float* dlogits,
                                 const float* logits, const int* targets,
                                 float dloss, int64_t N, int V, int Vp);

}  // namespace zeroshard::gpt2::cuda_launch

#endif  // ZEROSHARD_WORKER_GPT2_CUDA_CUDA_LAUNCH_H_
