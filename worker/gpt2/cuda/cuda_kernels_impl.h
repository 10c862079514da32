// CudaKernelsImpl: the CudaKernels (cuda_kernels.h) behind Create, under
// --config=cuda only. Private to this folder; host C++ (g++), calling the
// CUDA runtime, cuBLAS and the launchers of cuda_launch.h.
//
// Files: cuda_kernels.cc (set-up, errors, the fused layers), cuda_gemm.cc
// (the cuBLAS products: Matmul*, Attention*).
//
// Every Kernels method follows one pattern:
//   if (!Begin()) return;                 // an earlier error: do nothing
//   ... enqueue work, Check(...) each step, return on failure ...
//   Finish("Method", last_launch_error);  // check, then synchronise
#ifndef ZEROSHARD_WORKER_GPT2_CUDA_CUDA_KERNELS_IMPL_H_
#define ZEROSHARD_WORKER_GPT2_CUDA_CUDA_KERNELS_IMPL_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <library_types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/gpt2/cuda/causal_plan.h"
#include "worker/gpt2/cuda/cuda_kernels.h"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2 {

class CudaKernelsImpl final : public CudaKernels {
 public:
  // Options already validated; call Init() once before anything else.
  explicit CudaKernelsImpl(const CudaKernelsOptions& options);
  ~CudaKernelsImpl() override;
  CudaKernelsImpl(const CudaKernelsImpl&) = delete;
  CudaKernelsImpl& operator=(const CudaKernelsImpl&) = delete;

  // Sets the device, creates the stream (if not given) and the cuBLAS handle,
  // allocates the scratch. The destructor releases whatever Init got.
  absl::Status Init();

  absl::Status status() const override { return status_; }
  const CudaKernelsOptions& options() const override { return options_; }
  CUstream_st* stream() const override { return stream_; }
  std::vector<CallTime> CallTimes() const override;

  const char* Name() const override { return name_.c_str(); }
  void Zero(float* x, int64_t n) override;
  void EncoderForward(float* out, const int* inp, const float* wte,
                      const float* wpe, int B, int T, int C) override;
  void EncoderBackward(float* dwte, float* dwpe, const float* dout,
                       const int* inp, int B, int T, int C) override;
  void LayernormForward(float* out, float* mean, float* rstd, const float* inp,
                        const float* w, const float* b, int64_t N,
                        int C) override;
  void LayernormBackward(float* dinp, float* dw, float* db, const float* dout,
                         const float* inp, const float* w, const float* mean,
                         const float* rstd, int64_t N, int C) override;
  void MatmulForward(float* out, const float* inp, const float* w,
                     const float* b, int64_t N, int C, int OC) override;
  void MatmulBackward(float* dinp, float* dw, float* db, const float* dout,
                      const float* inp, const float* w, int64_t N, int C,
                      int OC) override;
  void AttentionForward(float* out, float* att, const float* qkv, int B, int T,
                        int C, int NH) override;
  void AttentionBackward(float* dqkv, const float* dout, const float* qkv,
                         const float* att, int B, int T, int C,
                         int NH) override;
  void GeluForward(float* out, const float* inp, int64_t n) override;
  void GeluBackward(float* dinp, const float* inp, const float* dout,
                    int64_t n) override;
  void ResidualForward(float* out, const float* a, const float* b,
                       int64_t n) override;
  void ResidualBackward(float* da, float* db, const float* dout,
                        int64_t n) override;
  void CrossEntropyForward(float* losses, const float* logits,
                           const int* targets, int64_t N, int V,
                           int Vp) override;
  void CrossEntropyBackward(float* dlogits, const float* logits,
                            const int* targets, float dloss, int64_t N, int V,
                            int Vp) override;

 private:
  // One operand of a row-major product: data, element type, leading
  // dimension (row stride) and the stride between batch entries.
  struct Operand {
    const void* data;
    cudaDataType type;
    int64_t ld;
    int64_t batch_stride;
  };

  // Row-major, batched: for each of `batch` entries,
  //   C (M,N) = alpha op(A) (M,K) op(B) (K,N) + beta C,
  // op(X) = X^T when trans_X; C is fp32 with leading dimension ldc.
  // Records the error and returns false on failure.
  bool Gemm(const char* what, bool trans_a, bool trans_b, int M, int N, int K,
            float alpha, const Operand& a, const Operand& b, float beta,
            float* c, int64_t ldc, int64_t stride_c, int batch);

  // fp32 (n) -> the operand the products read: `src` itself in kFp32, else a
  // bf16 copy in `scratch` (capacity elements). False (error recorded) if n
  // exceeds the capacity or the conversion fails.
  bool MatmulOperand(const char* what, const float* src, int64_t n,
                     uint16_t* scratch, int64_t capacity, int64_t ld,
                     Operand* out);

  // Attention's two ways (CudaAttention); false: an error was recorded.
  bool AttentionBatched(int B, int T, int C, int NH) const;
  // q, k, v of qkv (B,T,3C) into heads_'s slots 0-2 (head-major).
  bool QkvToHeads(const float* qkv, int B, int T, int C, int NH,
                  const char* what);
  // One product of kBatched attention, block by block (causal_plan.h): A, B
  // and C per head as in the table there, each with its row stride; the
  // batch of B*NH heads with strides a.batch_stride, b.batch_stride,
  // stride_c.
  bool CausalGemm(const char* what, AttentionProduct product, int T, int hs,
                  float alpha, const Operand& a, const Operand& b, float* c,
                  int64_t ldc, int64_t stride_c, int batch);
  bool AttentionForwardBatched(float* out, float* att, const float* qkv, int B,
                               int T, int C, int NH);
  bool AttentionBackwardBatched(float* dqkv, const float* dout,
                                const float* qkv, const float* att, int B,
                                int T, int C, int NH);
  bool AttentionForwardPerEntry(float* out, float* att, const float* qkv, int B,
                                int T, int C, int NH);
  bool AttentionBackwardPerEntry(float* dqkv, const float* dout,
                                 const float* qkv, const float* att, int B,
                                 int T, int C, int NH);

  bool Begin() {
    began_ = std::chrono::steady_clock::now();
    return status_.ok();
  }
  // Records `error` if it is the first; returns status_.ok().
  bool Fail(absl::Status error);
  bool Check(cudaError_t err, const char* what);
  bool CheckBlas(cublasStatus_t st, const char* what);
  // Checks the last launch, then waits for the stream and checks again.
  void Finish(const char* what, cudaError_t launched);

  const CudaKernelsOptions options_;
  std::string name_;
  absl::Status status_;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  std::chrono::steady_clock::time_point began_;  // of the call in progress
  std::map<std::string, CallTime> times_;        // by name (CallTimes)
  cublasHandle_t blas_ = nullptr;

  // Scratch (see cuda_kernels.h for the capacities): attention's dP/dS for
  // one batch entry (NH,T,T); the bf16 operands of a product (kBf16 only):
  // activations (inp), weights (w), output gradients (dout).
  void* blas_workspace_ = nullptr;
  float* att_scratch_ = nullptr;
  // kBatched: q, k, v and y / dY head-major, heads_slot_ floats each.
  float* heads_ = nullptr;
  int64_t heads_slot_ = 0;
  // The column sums' chunks (kColumnChunks x colsum_cols_ floats) and the
  // embedding backward's sort (cuda_launch.h).
  float* colsum_ = nullptr;
  int colsum_cols_ = 0;
  cuda_launch::EncoderScratch encoder_;
  int64_t att_capacity_ = 0;
  uint16_t* bf16_inp_ = nullptr;
  uint16_t* bf16_w_ = nullptr;
  uint16_t* bf16_dout_ = nullptr;
  int64_t act_capacity_ = 0;
  int64_t weight_capacity_ = 0;
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_CUDA_CUDA_KERNELS_IMPL_H_
