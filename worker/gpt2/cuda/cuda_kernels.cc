// CudaKernels under --config=cuda: Create, set-up and teardown, error
// recording, and the layers that are a single launcher call (cuda_launch.h).
// The cuBLAS products (Matmul*, Attention*) are in cuda_gemm.cc.
#include "worker/gpt2/cuda/cuda_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/gpt2/cuda/cuda_kernels_impl.h"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2 {
namespace {

// cuBLAS's workspace: NVIDIA's recommendation for Hopper.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

absl::Status ValidateOptions(const CudaKernelsOptions& o) {
  if (o.B < 1 || o.T < 1 || o.C < 1 || o.NH < 1 || o.Vp < 1 || o.maxT < 0 ||
      o.device < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaKernels: B, T, C, NH, Vp must be >= 1 and maxT, device >= 0; got "
        "B=%d T=%d C=%d NH=%d Vp=%d maxT=%d device=%d",
        o.B, o.T, o.C, o.NH, o.Vp, o.maxT, o.device));
  }
  if (o.attention_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaKernels: attention_blocks=%d (want >= 0; 0 chooses from T)",
        o.attention_blocks));
  }
  if (o.C % o.NH != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaKernels: C=%d is not a multiple of NH=%d", o.C, o.NH));
  }
  if (o.maxT != 0 && o.T > o.maxT) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CudaKernels: T=%d > maxT=%d", o.T, o.maxT));
  }
  if (int64_t{o.B} * o.T > INT_MAX || int64_t{o.C} * 4 > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaKernels: B*T=%d*%d or 4*C=%d does not fit an int", o.B, o.T, o.C));
  }
  return absl::OkStatus();
}

CudaKernelsOptions WithDefaults(CudaKernelsOptions o) {
  if (o.maxT == 0) o.maxT = o.T;
  return o;
}

// "CudaKernels: <what>: <error name>: <error text>", RESOURCE_EXHAUSTED for
// an allocation failure, else INTERNAL.
absl::Status CallError(const char* what, const char* name, const char* text,
                       bool out_of_memory) {
  const std::string message =
      absl::StrFormat("CudaKernels: %s: %s: %s", what, name, text);
  return out_of_memory ? absl::ResourceExhaustedError(message)
                       : absl::InternalError(message);
}

template <typename T>
void FreeDevice(T*& p) {
  if (p != nullptr) cudaFree(p);
  p = nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaKernels>> CudaKernels::Create(
    const CudaKernelsOptions& options) {
  ZS_RETURN_IF_ERROR(ValidateOptions(options));
  auto kernels = std::make_unique<CudaKernelsImpl>(WithDefaults(options));
  ZS_RETURN_IF_ERROR(kernels->Init());
  return std::unique_ptr<CudaKernels>(std::move(kernels));
}

CudaKernelsImpl::CudaKernelsImpl(const CudaKernelsOptions& options)
    : options_(options) {}

absl::Status CudaKernelsImpl::Init() {
  const CudaKernelsOptions& o = options_;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();  // not an error of later calls
    Fail(absl::UnavailableError(
        absl::StrFormat("CudaKernels: no CUDA device (cudaGetDeviceCount: %s)",
                        cudaGetErrorName(err))));
    return status_;
  }
  if (o.device >= count) {
    Fail(absl::InvalidArgumentError(absl::StrFormat(
        "CudaKernels: device %d, but only %d visible", o.device, count)));
    return status_;
  }
  cudaDeviceProp prop;
  if (!Check(cudaSetDevice(o.device), "cudaSetDevice") ||
      !Check(cudaGetDeviceProperties(&prop, o.device),
             "cudaGetDeviceProperties")) {
    return status_;
  }
  if (o.stream != nullptr) {
    stream_ = o.stream;
  } else {
    // A blocking stream: ordered after the caller's work on the legacy
    // default stream (cudaMemcpy, cudaMemset), which may still be running.
    if (!Check(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault),
               "cudaStreamCreateWithFlags")) {
      return status_;
    }
    owns_stream_ = true;
  }
  // CUBLAS_DEFAULT_MATH with CUBLAS_COMPUTE_32F: true fp32, no TF32.
  if (!CheckBlas(cublasCreate(&blas_), "cublasCreate") ||
      !CheckBlas(cublasSetStream(blas_, stream_), "cublasSetStream") ||
      !CheckBlas(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode") ||
      !Check(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes),
             "cudaMalloc (cuBLAS workspace)") ||
      !CheckBlas(
          cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes),
          "cublasSetWorkspace")) {
    return status_;
  }
  att_capacity_ = int64_t{o.NH} * o.T * o.T;
  if (o.attention == CudaAttention::kBatched) {
    att_capacity_ *= o.B;
    heads_slot_ = int64_t{o.B} * o.T * o.C;
    if (!Check(cudaMalloc(reinterpret_cast<void**>(&heads_),
                          4 * heads_slot_ * sizeof(float)),
               "cudaMalloc (attention heads)")) {
      return status_;
    }
  }
  if (!Check(cudaMalloc(reinterpret_cast<void**>(&att_scratch_),
                        att_capacity_ * sizeof(float)),
             "cudaMalloc (attention scratch)")) {
    return status_;
  }
  // Column sums (LayerNorm's dw/db, the matmul bias gradient): up to the
  // widest output; the embedding backward's sort: B*T positions.
  colsum_cols_ = std::max(4 * o.C, o.Vp);
  encoder_.capacity = int64_t{o.B} * o.T;
  encoder_.temp_bytes = cuda_launch::EncoderSortTempBytes(encoder_.capacity);
  for (auto [p, bytes] :
       {std::pair{reinterpret_cast<void**>(&colsum_),
                  int64_t{cuda_launch::kColumnChunks} * colsum_cols_ * 4},
        std::pair{reinterpret_cast<void**>(&encoder_.sorted_tokens),
                  encoder_.capacity * 4},
        std::pair{reinterpret_cast<void**>(&encoder_.positions),
                  encoder_.capacity * 4},
        std::pair{reinterpret_cast<void**>(&encoder_.sorted_positions),
                  encoder_.capacity * 4},
        std::pair{&encoder_.temp, static_cast<int64_t>(encoder_.temp_bytes)}}) {
    if (!Check(cudaMalloc(p, std::max<int64_t>(bytes, 1)),
               "cudaMalloc (column sum and sort scratch)")) {
      return status_;
    }
  }
  if (o.precision == CudaPrecision::kBf16) {
    const int64_t widest = std::max<int64_t>(int64_t{4} * o.C, o.Vp);
    act_capacity_ = int64_t{o.B} * o.T * widest;
    weight_capacity_ = int64_t{o.C} * widest;
    for (auto [p, n] : {std::pair{&bf16_inp_, act_capacity_},
                        std::pair{&bf16_w_, weight_capacity_},
                        std::pair{&bf16_dout_, act_capacity_}}) {
      if (!Check(cudaMalloc(reinterpret_cast<void**>(p), n * sizeof(uint16_t)),
                 "cudaMalloc (bf16 operands)")) {
        return status_;
      }
    }
  }
  name_ =
      absl::StrFormat("cuda (%s, sm_%d%d, matmul %s)", prop.name, prop.major,
                      prop.minor, CudaPrecisionName(o.precision));
  return status_;
}

CudaKernelsImpl::~CudaKernelsImpl() {
  // Errors are ignored: nothing can be done about them here. The handle goes
  // before its workspace.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  FreeDevice(blas_workspace_);
  FreeDevice(att_scratch_);
  FreeDevice(heads_);
  FreeDevice(colsum_);
  FreeDevice(encoder_.sorted_tokens);
  FreeDevice(encoder_.positions);
  FreeDevice(encoder_.sorted_positions);
  FreeDevice(encoder_.temp);
  FreeDevice(bf16_inp_);
  FreeDevice(bf16_w_);
  FreeDevice(bf16_dout_);
  if (owns_stream_) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

bool CudaKernelsImpl::Fail(absl::Status error) {
  if (status_.ok()) status_ = std::move(error);
  return status_.ok();
}

bool CudaKernelsImpl::Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return status_.ok();
  return Fail(CallError(what, cudaGetErrorName(err), cudaGetErrorString(err),
                        err == cudaErrorMemoryAllocation));
}

bool CudaKernelsImpl::CheckBlas(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return status_.ok();
  return Fail(CallError(what, cublasGetStatusName(st),
                        cublasGetStatusString(st),
                        st == CUBLAS_STATUS_ALLOC_FAILED));
}

void CudaKernelsImpl::Finish(const char* what, cudaError_t launched) {
  if (!Check(launched, what)) return;
  if (options_.synchronous && !Check(cudaStreamSynchronize(stream_), what)) {
    return;
  }
  CallTime& t = times_[what];
  ++t.calls;
  t.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began_)
          .count();
}

std::vector<CudaKernels::CallTime> CudaKernelsImpl::CallTimes() const {
  std::vector<CallTime> out;
  for (const auto& [name, t] : times_) {
    out.push_back(t);
    out.back().name = name;
  }
  return out;
}

// ===========================================================================
// The layers that are one launcher call.

void CudaKernelsImpl::Zero(float* x, int64_t n) {
  if (!Begin()) return;
  Finish("Zero", n > 0 ? cudaMemsetAsync(x, 0, n * sizeof(float), stream_)
                       : cudaSuccess);
}

void CudaKernelsImpl::EncoderForward(float* out, const int* inp,
                                     const float* wte, const float* wpe, int B,
                                     int T, int C) {
  if (!Begin()) return;
  Finish("EncoderForward",
         cuda_launch::EncoderForward(stream_, out, inp, wte, wpe, B, T, C));
}

void CudaKernelsImpl::EncoderBackward(float* dwte, float* dwpe,
                                      const float* dout, const int* inp, int B,
                                      int T, int C) {
  if (!Begin()) return;
  Finish("EncoderBackward",
         cuda_launch::EncoderBackward(stream_, dwte, dwpe, dout, inp, B, T, C,
                                      encoder_));
}

void CudaKernelsImpl::LayernormForward(float* out, float* mean, float* rstd,
                                       const float* inp, const float* w,
                                       const float* b, int64_t N, int C) {
  if (!Begin()) return;
  Finish("LayernormForward", cuda_launch::LayernormForward(
                                 stream_, out, mean, rstd, inp, w, b, N, C));
}

void CudaKernelsImpl::LayernormBackward(float* dinp, float* dw, float* db,
                                        const float* dout, const float* inp,
                                        const float* w, const float* mean,
                                        const float* rstd, int64_t N, int C) {
  if (!Begin()) return;
  Finish("LayernormBackward", cuda_launch::LayernormBackward(
                                  stream_, dinp, dw, db, dout, inp, w, mean,
                                  rstd, N, C, colsum_, colsum_cols_));
}

void CudaKernelsImpl::GeluForward(float* out, const float* inp, int64_t n) {
  if (!Begin()) return;
  Finish("GeluForward", cuda_launch::GeluForward(stream_, out, inp, n));
}

void CudaKernelsImpl::GeluBackward(float* dinp, const float* inp,
                                   const float* dout, int64_t n) {
  if (!Begin()) return;
  Finish("GeluBackward",
         cuda_launch::GeluBackward(stream_, dinp, inp, dout, n));
}

void CudaKernelsImpl::ResidualForward(float* out, const float* a,
                                      const float* b, int64_t n) {
  if (!Begin()) return;
  Finish("ResidualForward",
         cuda_launch::ResidualForward(stream_, out, a, b, n));
}

void CudaKernelsImpl::ResidualBackward(float* da, float* db, const float* dout,
                                       int64_t n) {
  if (!Begin()) return;
  Finish("ResidualBackward",
         cuda_launch::ResidualBackward(stream_, da, db, dout, n));
}

void CudaKernelsImpl::CrossEntropyForward(float* losses, const float* logits,
                                          const int* targets, int64_t N, int V,
                                          int Vp) {
  if (!Begin()) return;
  Finish("CrossEntropyForward",
         cuda_launch::CrossEntropyForward(stream_, losses, logits, targets, N,
                                          V, Vp));
}

void CudaKernelsImpl::CrossEntropyBackward(float* dlogits, const float* logits,
                                           const int* targets, float dloss,
                                           int64_t N, int V, int Vp) {
  if (!Begin()) return;
  Finish("CrossEntropyBackward",
         cuda_launch::CrossEntropyBackward(stream_, dlogits, logits, targets,
                                           dloss, N, V, Vp));
}

}  // namespace zeroshard::gpt2
