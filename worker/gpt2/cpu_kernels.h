// The CPU implementation of Kernels (kernels.h): matrix products through
// OpenBLAS's cblas_sgemm, everything else through the vectorised row
// primitives of vec.h, all split over a ThreadPool.
//
// Threads: the pool has `threads` threads (the caller's included), and every
// call splits its work into exactly `threads` fixed pieces (rows, columns or
// heads), so results are deterministic for a given thread count. OpenBLAS is
// set to ONE thread, process-wide (openblas_set_num_threads(1)), when a
// CpuKernels is created: each pool thread calls sgemm on its own piece, so
// OpenBLAS's own threads never compete with the pool's for the cores.
//
// Memory: per-thread scratch (LayerNorm partial sums, attention
// probabilities' gradients) grows on first use and is kept, so steady-state
// steps allocate nothing.
//
// Example:
//   ZS_ASSIGN_OR_RETURN(std::unique_ptr<CpuKernels> k, CpuKernels::Create(2));
//   k->GeluForward(out, in, n);
#ifndef ZEROSHARD_WORKER_GPT2_CPU_KERNELS_H_
#define ZEROSHARD_WORKER_GPT2_CPU_KERNELS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "worker/gpt2/kernels.h"
#include "worker/gpt2/vec.h"

namespace zeroshard::gpt2 {

class CpuKernels final : public Kernels {
 public:
  // INVALID_ARGUMENT unless 1 <= threads <= 1024.
  static absl::StatusOr<std::unique_ptr<CpuKernels>> Create(int threads);

  int threads() const { return pool_.threads(); }

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
  explicit CpuKernels(int threads);

  // Runs fn(begin, end) on piece p of [0, n) for p in [0, threads()), in
  // parallel; piece bounds are multiples of `align` (except n itself).
  void Split(int64_t n, int64_t align,
             const std::function<void(int64_t, int64_t)>& fn);
  // Runs fn(p) for p in [0, threads()) in parallel.
  void ForEachThread(const std::function<void(int)>& fn);
  // Scratch of at least n floats per thread (64-byte aligned), kept.
  float* Scratch(int64_t n_per_thread);

  ThreadPool pool_;
  const VecOps& vec_;
  std::string name_;
  std::vector<float> scratch_;
  int64_t scratch_stride_ = 0;
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_CPU_KERNELS_H_
