// A Device (device.h) made of host memory, for CI: the GPU path's copies and
// buffer lifetimes, checked, on machines without a GPU.
//
// Every Alloc is recorded; a copy whose device side is not inside one live
// allocation, or whose host side overlaps one, is an error (INTERNAL, naming
// the direction, size and address) and changes nothing, as is freeing
// memory that is not live. So a model that reads device memory through a
// host pointer copy, copies a stale or too-short range, or uses a buffer
// after Free fails here rather than corrupting a GPU's memory. The kernels
// are CpuKernels, so results are bit-identical to the CPU model's.
// ToHostAsync runs on a copy thread (host_copy_stream.h), each copy at
// least `copy_lag` after it was issued and checked against a source
// written in between, so that reading a copy's destination before
// WaitCopy, or writing its source, shows here. ToDeviceAsync runs on the
// same thread and returns once its copy has run (the CPU kernels compute
// at once, on the caller's thread, so they must find the bytes there), but
// its source is watched until WaitCopy: a source written before then (on
// a GPU, racing the copy) is an error naming the copy.
//
// Threading: one thread at a time (the copy thread is the device's own).
// The byte counters are for tests.
#ifndef ZEROSHARD_WORKER_GPT2_HOST_DEVICE_H_
#define ZEROSHARD_WORKER_GPT2_HOST_DEVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "worker/gpt2/device.h"
#include "worker/gpt2/host_copy_stream.h"

namespace zeroshard::gpt2 {

class HostEmulatedDevice : public Device {
 public:
  // INVALID_ARGUMENT when threads < 1 (CpuKernels::Create's errors).
  static absl::StatusOr<std::unique_ptr<HostEmulatedDevice>> Create(
      int threads, absl::Duration copy_lag = absl::ZeroDuration());
  ~HostEmulatedDevice() override;

  std::string Name() const override;
  absl::StatusOr<void*> Alloc(size_t bytes) override;
  void Free(void* device_ptr) override;
  // Host memory is what it is: nothing to pin.
  bool PinHost(void*, size_t) override { return false; }
  void UnpinHost(void*) override {}
  absl::Status ToDevice(void* dst, const void* src, size_t bytes) override;
  absl::Status ToHost(void* dst, const void* src, size_t bytes) override;
  absl::StatusOr<uint64_t> ToHostAsync(void* dst, const void* src,
                                       size_t bytes) override;
  // The kernels run when called: a mark is only an id to check.
  absl::StatusOr<uint64_t> Mark(uint64_t mark) override;
  absl::StatusOr<uint64_t> ToDeviceAsync(void* dst, const void* src,
                                         size_t bytes, uint64_t after) override;
  bool CopyDone(uint64_t ticket) override { return copies_->Done(ticket); }
  absl::Status WaitCopy(uint64_t ticket) override;
  absl::Status AdamW(absl::Span<const AdamWTask> tasks) override;
  absl::Status Scale(float* x, size_t n, float s) override;
  absl::StatusOr<double> SumSquares(const float* x, size_t n) override;
  Kernels& kernels() override { return *kernels_; }
  absl::Status status() const override { return status_; }

  uint64_t bytes_to_device() const { return to_device_; }
  uint64_t bytes_to_host() const { return to_host_; }
  uint64_t live_bytes() const;

 private:
  HostEmulatedDevice(std::unique_ptr<Kernels> kernels, absl::Duration lag)
      : kernels_(std::move(kernels)),
        copies_(std::make_unique<HostCopyStream>(lag)) {}
  // Every asynchronous copy done (a synchronous copy or Free waits).
  absl::Status Drain();
  // The watched sources of uploads up to `ticket` unchanged (then no longer
  // watched); else Fail's error naming the first that changed.
  absl::Status CheckUploadSources(uint64_t ticket);
  // OK when a copy from host `src` to device `dst` is in bounds; else
  // Fail's error naming both.
  absl::Status CheckToDevice(void* dst, const void* src, size_t bytes);
  // OK when a copy from device `src` to host `dst` is in bounds; else
  // Fail's error naming both.
  absl::Status CheckToHost(void* dst, const void* src, size_t bytes);
  // Whether [p, p + bytes) lies inside one live allocation / overlaps any.
  bool Inside(const void* p, size_t bytes) const;
  bool Overlaps(const void* p, size_t bytes) const;
  absl::Status Fail(absl::Status s);
  // OK when [p, p + n floats) lies inside one live allocation; else Fail's
  // error naming `what`.
  absl::Status CheckDevice(const char* what, const void* p, size_t n);

  std::unique_ptr<Kernels> kernels_;
  std::unique_ptr<HostCopyStream> copies_;
  std::map<uintptr_t, size_t> live_;  // address -> bytes
  struct Upload {
    uint64_t ticket;
    const void* src;
    size_t bytes;
    uint64_t checksum;  // HostCopyStream::Checksum of src when issued
  };
  std::vector<Upload> uploads_;  // sources watched until WaitCopy
  uint64_t marks_ = 0;           // ids Mark has returned
  uint64_t to_device_ = 0, to_host_ = 0;
  absl::Status status_;
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_HOST_DEVICE_H_
