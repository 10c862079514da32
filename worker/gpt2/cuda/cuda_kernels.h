// The CUDA implementation of the GPT-2 layer interface (worker/gpt2/kernels.h)
// on DEVICE pointers: every float/int pointer passed to a layer call must be
// device memory (cudaMalloc or managed) valid on options.device.
//
// What runs where:
//   * matrix products (Matmul*, and the products inside Attention*) by cuBLAS
//     (cublasGemmEx, cublasGemmStridedBatchedEx), fp32 accumulation
//     (CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH: no TF32);
//   * everything else by small fused kernels (cuda_*.cu): one block per row
//     for LayerNorm, softmax and cross-entropy, grid-stride loops for the
//     element-wise layers.
//
// Precision (CudaKernelsOptions::precision):
//   kFp32  fp32 operands everywhere; cuda_kernels_test holds every layer to
//          1e-4 of CpuKernels (relative to the output's largest magnitude).
//   kBf16  the operands of MatmulForward / MatmulBackward are rounded to bf16
//          (round to nearest even, common/cuda/dtype_cuda.h) into scratch
//          owned by this object; products accumulate in fp32 and outputs stay
//          fp32. Every other layer, attention's products included, stays in
//          fp32.
//
// Determinism: no float atomics anywhere. Reductions (LayerNorm dw/db, matmul
// db, the embedding scatter of EncoderBackward) run in a fixed order, so a
// call gives the same bits every time for the same inputs, shapes and GPU
// model. EncoderBackward adds in CpuKernels's order (position order per row).
//
// Memory: all scratch is allocated once by Create (plain cudaMalloc) for the
// sizes in the options, cuBLAS's workspace (32 MiB, set with
// cublasSetWorkspace) included; no call allocates. A call whose sizes exceed
// that scratch records OUT_OF_RANGE (see Errors) instead of running.
// Capacities:
//   matmul (kBf16 only): N*C and N*OC <= B*T*max(4C, Vp); OC*C <= C*max(4C,Vp)
//   attention:           NH*T*T <= options NH*T*T (kBatched scratch:
//                        B*NH*T*T floats for dS and 4*B*T*C for the
//                        head-major operands; calls beyond those sizes run
//                        per entry)
//
// Stream and synchronisation: all work is enqueued on one stream
// (options.stream, or one the object creates and owns), and every call ends
// with cudaStreamSynchronize on it, so calls return when their work is done,
// as the Kernels contract says. The stream the object creates is a blocking
// one (cudaStreamDefault flags): its work starts after what the caller put on
// the legacy default stream (plain cudaMemcpy / cudaMemset, whose device side
// may still be running when they return). A stream passed in must give that
// ordering itself; work on other non-blocking streams is not ordered.
//
// Errors: the Kernels calls return void. The first CUDA or cuBLAS error (a
// failed launch, an error surfacing at the synchronisation, a capacity
// overflow) is recorded and returned by status(); from then on every call
// returns immediately without touching memory. The object cannot recover;
// destroy it (the CUDA context may be unusable after a kernel fault anyway).
//
// Threading: like every Kernels, one thread at a time. The calling thread's
// current device must be options.device (Create sets it for the caller).
//
// Built without --config=cuda (ZEROSHARD_HAVE_CUDA undefined), Create returns
// UNIMPLEMENTED "built without --config=cuda".
//
// Example:
//   CudaKernelsOptions o;
//   o.B = 8; o.T = 1024; o.C = 768; o.NH = 12; o.Vp = 50304; o.maxT = 1024;
//   ZS_ASSIGN_OR_RETURN(auto k, CudaKernels::Create(o));
//   k->GeluForward(d_out, d_in, n);  // device pointers
//   ZS_RETURN_IF_ERROR(k->status());
#ifndef ZEROSHARD_WORKER_GPT2_CUDA_CUDA_KERNELS_H_
#define ZEROSHARD_WORKER_GPT2_CUDA_CUDA_KERNELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/gpt2/kernels.h"

// cudaStream_t is `struct CUstream_st*`; declared here so that this header
// does not need the CUDA headers (it is included in non-CUDA builds too).
struct CUstream_st;

namespace zeroshard::gpt2 {

enum class CudaPrecision { kFp32, kBf16 };

// How attention's products run (cuda_gemm.cc): one strided batch of B*NH
// heads per product, with q, k, v and the output gradients copied to
// head-major scratch first (kBatched); or per batch entry, NH heads at a
// time, straight from qkv (kPerEntry: less scratch, more, smaller calls).
// kBatched also cuts each product into row blocks that skip what the
// causal mask hides (causal_plan.h; CudaKernelsOptions::attention_blocks).
enum class CudaAttention { kBatched, kPerEntry };

// "fp32", "bf16".
inline const char* CudaPrecisionName(CudaPrecision precision) {
  return precision == CudaPrecision::kBf16 ? "bf16" : "fp32";
}

// The largest sizes the object will be called with (scratch is sized for
// them): batch B, sequence T (<= maxT), channels C, heads NH (C % NH == 0),
// padded vocabulary Vp, and the position table's rows maxT (0: T).
struct CudaKernelsOptions {
  int B = 0;
  int T = 0;
  int C = 0;
  int NH = 0;
  int Vp = 0;
  int maxT = 0;
  CudaPrecision precision = CudaPrecision::kFp32;
  int device = 0;
  // Not owned; null: the object creates (and destroys) its own stream.
  CUstream_st* stream = nullptr;
  // true: every call synchronises (see the file comment). false: calls
  // return once their work is enqueued, so the GPU runs ahead of the host;
  // a fault while it runs surfaces at the caller's next synchronisation
  // (a cudaMemcpy, which the legacy default stream orders after this
  // stream's work), not in status(), and CallTimes counts enqueue time.
  bool synchronous = true;
  CudaAttention attention = CudaAttention::kBatched;
  // kBatched: attention's products in this many row blocks (causal_plan.h;
  // n blocks do (n+1)/(2n) of the unmasked work in n calls per product);
  // 0: chosen from T (CausalBlockCount), 1: the whole products.
  int attention_blocks = 0;
};

class CudaKernels : public Kernels {
 public:
  // INVALID_ARGUMENT for inconsistent options (checked before any CUDA call),
  // UNAVAILABLE when there is no CUDA device, INTERNAL / RESOURCE_EXHAUSTED
  // when a CUDA or cuBLAS set-up call fails, UNIMPLEMENTED when built without
  // --config=cuda.
  static absl::StatusOr<std::unique_ptr<CudaKernels>> Create(
      const CudaKernelsOptions& options);

  // OK, or the first error of any call so far (see the file comment).
  virtual absl::Status status() const = 0;

  virtual const CudaKernelsOptions& options() const = 0;

  // The stream every call enqueues on (options.stream, or the object's).
  virtual CUstream_st* stream() const = 0;

  // Where the time went: per layer call (by its name), how many calls
  // returned and their wall time from entry to the end of the
  // synchronisation, so the GPU's time plus the launch and wait overhead.
  struct CallTime {
    std::string name;
    int64_t calls = 0;
    double seconds = 0;
  };
  // In name order.
  virtual std::vector<CallTime> CallTimes() const = 0;

 protected:
  CudaKernels() = default;
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_CUDA_CUDA_KERNELS_H_
