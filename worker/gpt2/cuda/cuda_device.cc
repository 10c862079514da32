#include "worker/gpt2/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace zeroshard::gpt2 {
namespace {

class CudaDevice : public Device {
 public:
  explicit CudaDevice(std::unique_ptr<CudaKernels> kernels)
      : kernels_(std::move(kernels)) {}
  ~CudaDevice() override = default;

  std::string Name() const override {
    return absl::StrFormat("%s, %s", kernels_->Name(),
                           CudaPrecisionName(kernels_->options().precision));
  }

  absl::StatusOr<void*> Alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky
      return absl::ResourceExhaustedError(
          absl::StrFormat("cuda device: cudaMalloc of %d bytes: %s", bytes,
                          cudaGetErrorString(e)));
    }
    if (const cudaError_t z = cudaMemset(p, 0, bytes); z != cudaSuccess) {
      cudaFree(p);
      return Fail("cudaMemset", bytes, z);
    }
    return p;
  }

  void Free(void* device_ptr) override {
    if (device_ptr != nullptr) cudaFree(device_ptr);
  }

  absl::Status ToDevice(void* dst, const void* src, size_t bytes) override {
    ZS_RETURN_IF_ERROR(status());
    const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? absl::OkStatus()
                            : Fail("copy to device", bytes, e);
  }

  absl::Status ToHost(void* dst, const void* src, size_t bytes) override {
    ZS_RETURN_IF_ERROR(status());
    const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? absl::OkStatus() : Fail("copy to host", bytes, e);
  }

  Kernels& kernels() override { return *kernels_; }

  absl::Status status() const override {
    return status_.ok() ? kernels_->status() : status_;
  }

 private:
  absl::Status Fail(const char* what, size_t bytes, cudaError_t e) {
    absl::Status s = absl::InternalError(absl::StrFormat(
        "cuda device: %s of %d bytes: %s", what, bytes, cudaGetErrorString(e)));
    if (status_.ok()) status_ = s;
    return s;
  }

  std::unique_ptr<CudaKernels> kernels_;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(
    const Config& config, int B, int T, CudaPrecision precision, int device) {
  CudaKernelsOptions o;
  o.B = B;
  o.T = T;
  o.C = config.channels;
  o.NH = config.num_heads;
  o.Vp = config.padded_vocab_size;
  o.maxT = config.max_seq_len;
  o.precision = precision;
  o.device = device;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<CudaKernels> k, CudaKernels::Create(o));
  return std::unique_ptr<Device>(new CudaDevice(std::move(k)));
}

}  // namespace zeroshard::gpt2
