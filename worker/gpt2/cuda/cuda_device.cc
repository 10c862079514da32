#include "worker/gpt2/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/gpt2/cuda/cuda_launch.h"

namespace zeroshard::gpt2 {
namespace {

class CudaDevice : public Device {
 public:
  explicit CudaDevice(std::unique_ptr<CudaKernels> kernels)
      : kernels_(std::move(kernels)) {}
  ~CudaDevice() override {
    if (copy_stream_ != nullptr) {
      cudaStreamSynchronize(copy_stream_);
      for (const auto& [ticket, done] : in_flight_) cudaEventDestroy(done);
      for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
      cudaEventDestroy(ready_);
      for (cudaEvent_t e : marks_) cudaEventDestroy(e);
      cudaStreamDestroy(copy_stream_);
    }
    if (sum_scratch_ != nullptr) cudaFree(sum_scratch_);
  }

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

  bool PinHost(void* host, size_t bytes) override {
    if (host == nullptr || bytes == 0) return false;
    if (cudaHostRegister(host, bytes, cudaHostRegisterDefault) != cudaSuccess) {
      cudaGetLastError();  // not sticky: the copies stay pageable
      return false;
    }
    return true;
  }

  void UnpinHost(void* host) override {
    if (host != nullptr && cudaHostUnregister(host) != cudaSuccess) {
      cudaGetLastError();
    }
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

  // On the copy stream, after an event recorded on the compute stream; the
  // copy stream is a blocking one, so the synchronous copies (legacy
  // stream) and cudaFree wait for it.
  absl::StatusOr<uint64_t> ToHostAsync(void* dst, const void* src,
                                       size_t bytes) override {
    ZS_RETURN_IF_ERROR(CopyStream());
    ZS_ASSIGN_OR_RETURN(cudaEvent_t done, DoneEvent());
    cudaError_t e = cudaEventRecord(ready_, stream());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(copy_stream_, ready_, 0);
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                          copy_stream_);
    }
    return Issued(e, done, "asynchronous copy to host", bytes);
  }

  // On the copy stream after the mark's event (if any); the compute stream
  // waits for the copy's event.
  absl::StatusOr<uint64_t> ToDeviceAsync(void* dst, const void* src,
                                         size_t bytes,
                                         uint64_t after) override {
    ZS_RETURN_IF_ERROR(CopyStream());
    if (after > marks_.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cuda device: copy to the device after mark %d, which was never "
          "made (%d so far)",
          after, marks_.size()));
    }
    ZS_ASSIGN_OR_RETURN(cudaEvent_t done, DoneEvent());
    cudaError_t e = cudaSuccess;
    if (after != 0) {
      e = cudaStreamWaitEvent(copy_stream_, marks_[after - 1], 0);
    }
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                          copy_stream_);
    }
    absl::StatusOr<uint64_t> ticket =
        Issued(e, done, "asynchronous copy to the device", bytes);
    if (!ticket.ok()) return ticket;
    e = cudaStreamWaitEvent(stream(), done, 0);
    if (e != cudaSuccess) return Fail("wait for a copy to the device", 0, e);
    return ticket;
  }

  // An event per mark, recorded again on the compute stream at each call
  // (a copy that waited for it earlier keeps the point it waited for).
  absl::StatusOr<uint64_t> Mark(uint64_t mark) override {
    ZS_RETURN_IF_ERROR(CopyStream());
    if (mark > marks_.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cuda device: mark %d was never made (%d so far)",
                          mark, marks_.size()));
    }
    if (mark == 0) {
      cudaEvent_t made = nullptr;
      const cudaError_t e =
          cudaEventCreateWithFlags(&made, cudaEventDisableTiming);
      if (e != cudaSuccess) return Fail("mark event", 0, e);
      marks_.push_back(made);
      mark = marks_.size();
    }
    const cudaError_t e = cudaEventRecord(marks_[mark - 1], stream());
    if (e != cudaSuccess) return Fail("mark", 0, e);
    return mark;
  }

  bool CopyDone(uint64_t ticket) override {
    for (const auto& [t, done] : in_flight_) {
      if (t != ticket) continue;
      const cudaError_t e = cudaEventQuery(done);
      if (e == cudaErrorNotReady) cudaGetLastError();  // not an error
      return e != cudaErrorNotReady;  // an error shows in WaitCopy
    }
    return ticket <= issued_;
  }

  absl::Status WaitCopy(uint64_t ticket) override {
    if (ticket > issued_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cuda device: wait for copy %d, but only %d were issued", ticket,
          issued_));
    }
    while (!in_flight_.empty() && in_flight_.front().first <= ticket) {
      const cudaEvent_t done = in_flight_.front().second;
      in_flight_.pop_front();
      const cudaError_t e = cudaEventSynchronize(done);
      free_events_.push_back(done);
      if (e != cudaSuccess) return Fail("asynchronous copy", 0, e);
    }
    return status();
  }

  absl::Status AdamW(absl::Span<const AdamWTask> tasks) override {
    ZS_RETURN_IF_ERROR(status());
    for (const AdamWTask& t : tasks) {
      const AdamWScalars a = MakeAdamWScalars(t.hyper);
      const cuda_launch::AdamWConsts c{a.scale,       a.decay, a.beta1,
                                       a.one_m_beta1, a.beta2, a.one_m_beta2,
                                       a.bc2_sqrt,    a.eps,   a.neg_step_size};
      const cudaError_t e = cuda_launch::AdamW(stream(), c, t.p, t.g, t.m, t.v,
                                               static_cast<int64_t>(t.n));
      if (e != cudaSuccess) return Fail("AdamW launch", t.n * 4, e);
    }
    return Sync("AdamW");
  }

  absl::Status Scale(float* x, size_t n, float s) override {
    ZS_RETURN_IF_ERROR(status());
    const cudaError_t e =
        cuda_launch::Scale(stream(), x, static_cast<int64_t>(n), s);
    if (e != cudaSuccess) return Fail("scale launch", n * 4, e);
    return Sync("scale");
  }

  absl::StatusOr<double> SumSquares(const float* x, size_t n) override {
    ZS_RETURN_IF_ERROR(status());
    const size_t scratch = cuda_launch::kSumSquaresScratch * sizeof(double);
    if (sum_scratch_ == nullptr) {
      ZS_ASSIGN_OR_RETURN(void* p, Alloc(scratch));
      sum_scratch_ = static_cast<double*>(p);
    }
    cudaError_t e = cuda_launch::SumSquares(
        stream(), x, static_cast<int64_t>(n), sum_scratch_);
    if (e != cudaSuccess) return Fail("sum of squares launch", n * 4, e);
    double sum = 0;
    e = cudaMemcpyAsync(&sum,
                        sum_scratch_ + cuda_launch::kSumSquaresScratch - 1,
                        sizeof(double), cudaMemcpyDeviceToHost, stream());
    if (e != cudaSuccess) return Fail("sum of squares copy", n * 4, e);
    ZS_RETURN_IF_ERROR(Sync("sum of squares"));
    return sum;
  }

  Kernels& kernels() override { return *kernels_; }

  absl::Status status() const override {
    return status_.ok() ? kernels_->status() : status_;
  }

 private:
  // `bytes` 0: an operation with no size of its own (a synchronisation).
  absl::Status Fail(const char* what, size_t bytes, cudaError_t e) {
    absl::Status s = absl::InternalError(
        bytes == 0 ? absl::StrFormat("cuda device: %s: %s", what,
                                     cudaGetErrorString(e))
                   : absl::StrFormat("cuda device: %s of %d bytes: %s", what,
                                     bytes, cudaGetErrorString(e)));
    if (status_.ok()) status_ = s;
    return s;
  }

  cudaStream_t stream() const { return kernels_->stream(); }

  // The copy stream and its events, made at the first asynchronous copy.
  absl::Status CopyStream() {
    ZS_RETURN_IF_ERROR(status());
    if (copy_stream_ != nullptr) return absl::OkStatus();
    cudaError_t e = cudaStreamCreate(&copy_stream_);
    if (e == cudaSuccess) {
      e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
    }
    return e == cudaSuccess ? absl::OkStatus() : Fail("copy stream", 0, e);
  }

  // An event for a copy's end: a free one, else a new one.
  absl::StatusOr<cudaEvent_t> DoneEvent() {
    if (!free_events_.empty()) {
      cudaEvent_t done = free_events_.back();
      free_events_.pop_back();
      return done;
    }
    cudaEvent_t done = nullptr;
    const cudaError_t e =
        cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e != cudaSuccess) return Fail("copy event", 0, e);
    return done;
  }

  // After a copy was enqueued with status `e`: its ticket, `done` recorded
  // on the copy stream; else `what`'s error (`done` back to the free ones).
  absl::StatusOr<uint64_t> Issued(cudaError_t e, cudaEvent_t done,
                                  const char* what, size_t bytes) {
    if (e == cudaSuccess) e = cudaEventRecord(done, copy_stream_);
    if (e != cudaSuccess) {
      free_events_.push_back(done);
      return Fail(what, bytes, e);
    }
    in_flight_.emplace_back(++issued_, done);
    return issued_;
  }

  absl::Status Sync(const char* what) {
    const cudaError_t e = cudaStreamSynchronize(stream());
    return e == cudaSuccess ? absl::OkStatus() : Fail(what, 0, e);
  }

  std::unique_ptr<CudaKernels> kernels_;
  absl::Status status_;
  double* sum_scratch_ = nullptr;  // cuda_launch::SumSquares's
  // ToHostAsync: made at its first call.
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;     // recorded on the compute stream per copy
  std::vector<cudaEvent_t> marks_;  // Mark's, by id - 1
  uint64_t issued_ = 0;
  std::deque<std::pair<uint64_t, cudaEvent_t>> in_flight_;  // ticket, done
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(
    const Config& config, int B, int T, CudaPrecision precision, int device,
    bool synchronous_kernels) {
  CudaKernelsOptions o;
  o.B = B;
  o.T = T;
  o.C = config.channels;
  o.NH = config.num_heads;
  o.Vp = config.padded_vocab_size;
  o.maxT = config.max_seq_len;
  o.precision = precision;
  o.device = device;
  o.synchronous = synchronous_kernels;
  // ZEROSHARD_CUDA_ATTENTION=per-entry|batched (docs/cuda.md): the kit's
  // A/B of attention's two ways.
  if (const char* a = std::getenv("ZEROSHARD_CUDA_ATTENTION"); a != nullptr) {
    const std::string v = a;
    if (v == "per-entry") {
      o.attention = CudaAttention::kPerEntry;
    } else if (v != "batched" && !v.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ZEROSHARD_CUDA_ATTENTION='%s': want batched or per-entry", v));
    }
  }
  // ZEROSHARD_CUDA_ATTENTION_BLOCKS=N: attention's causal row blocks (the
  // kit's A/B; unset or 0: chosen from T).
  if (const char* n = std::getenv("ZEROSHARD_CUDA_ATTENTION_BLOCKS");
      n != nullptr && *n != '\0') {
    if (!absl::SimpleAtoi(n, &o.attention_blocks) || o.attention_blocks < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ZEROSHARD_CUDA_ATTENTION_BLOCKS='%s': want a count >= 0", n));
    }
  }
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<CudaKernels> k, CudaKernels::Create(o));
  return std::unique_ptr<Device>(new CudaDevice(std::move(k)));
}

}  // namespace zeroshard::gpt2
