#include "worker/gpt2/host_device.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/optim/clip.h"
#include "common/status_macros.h"
#include "worker/gpt2/cpu_kernels.h"

namespace zeroshard::gpt2 {

absl::StatusOr<std::unique_ptr<HostEmulatedDevice>> HostEmulatedDevice::Create(
    int threads, absl::Duration copy_lag) {
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<CpuKernels> k,
                      CpuKernels::Create(threads));
  return std::unique_ptr<HostEmulatedDevice>(
      new HostEmulatedDevice(std::move(k), copy_lag));
}

HostEmulatedDevice::~HostEmulatedDevice() {
  copies_->WaitAll().IgnoreError();  // they read the memory freed below
  for (const auto& [p, bytes] : live_) std::free(reinterpret_cast<void*>(p));
}

std::string HostEmulatedDevice::Name() const {
  return absl::StrFormat("host-emulated (%s)", kernels_->Name());
}

uint64_t HostEmulatedDevice::live_bytes() const {
  uint64_t n = 0;
  for (const auto& [p, bytes] : live_) n += bytes;
  return n;
}

absl::StatusOr<void*> HostEmulatedDevice::Alloc(size_t bytes) {
  // aligned_alloc wants a multiple of the alignment; never 0 bytes.
  const size_t rounded = (bytes + 63) / 64 * 64 + (bytes == 0 ? 64 : 0);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "host-emulated device: cannot allocate %d bytes", bytes));
  }
  std::memset(p, 0, rounded);
  live_[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

absl::Status HostEmulatedDevice::Drain() {
  absl::Status s = copies_->WaitAll();
  if (!s.ok()) return Fail(s);
  return CheckUploadSources(UINT64_MAX);
}

absl::Status HostEmulatedDevice::CheckUploadSources(uint64_t ticket) {
  absl::Status s;
  auto it = uploads_.begin();
  for (; it != uploads_.end() && it->ticket <= ticket; ++it) {
    if (s.ok() &&
        HostCopyStream::Checksum(it->src, it->bytes) != it->checksum) {
      s = absl::InternalError(absl::StrFormat(
          "host-emulated device: the source of copy %d to the device (%d "
          "bytes from %p) changed before the copy was waited for",
          it->ticket, it->bytes, it->src));
    }
  }
  uploads_.erase(uploads_.begin(), it);
  return s.ok() ? s : Fail(s);
}

void HostEmulatedDevice::Free(void* device_ptr) {
  if (device_ptr == nullptr) return;
  Drain().IgnoreError();  // as cudaFree, after the copies in flight
  auto it = live_.find(reinterpret_cast<uintptr_t>(device_ptr));
  if (it == live_.end()) {
    Fail(absl::InternalError(absl::StrFormat(
             "host-emulated device: Free(%p) of memory that is not a live "
             "allocation",
             device_ptr)))
        .IgnoreError();
    return;
  }
  live_.erase(it);
  std::free(device_ptr);
}

bool HostEmulatedDevice::Inside(const void* p, size_t bytes) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = live_.upper_bound(a);
  if (it == live_.begin()) return false;
  --it;
  return a >= it->first && a - it->first <= it->second &&
         bytes <= it->second - (a - it->first);
}

bool HostEmulatedDevice::Overlaps(const void* p, size_t bytes) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), end = a + bytes;
  auto it = live_.upper_bound(a);
  if (it != live_.end() && it->first < end) return true;  // starts inside
  if (it == live_.begin()) return false;
  --it;
  return a < it->first + it->second;  // begins inside the one before
}

absl::Status HostEmulatedDevice::Fail(absl::Status s) {
  if (status_.ok()) status_ = s;
  return s;
}

absl::Status HostEmulatedDevice::ToDevice(void* dst, const void* src,
                                          size_t bytes) {
  ZS_RETURN_IF_ERROR(CheckToDevice(dst, src, bytes));
  ZS_RETURN_IF_ERROR(Drain());
  std::memcpy(dst, src, bytes);
  to_device_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> HostEmulatedDevice::Mark(uint64_t mark) {
  ZS_RETURN_IF_ERROR(status_);
  if (mark > marks_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host-emulated device: mark %d was never made (%d so far)", mark,
        marks_));
  }
  return mark == 0 ? ++marks_ : mark;
}

absl::StatusOr<uint64_t> HostEmulatedDevice::ToDeviceAsync(void* dst,
                                                           const void* src,
                                                           size_t bytes,
                                                           uint64_t after) {
  if (after > marks_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host-emulated device: copy to the device after mark %d, which was "
        "never made (%d so far)",
        after, marks_));
  }
  ZS_RETURN_IF_ERROR(CheckToDevice(dst, src, bytes));
  const uint64_t ticket = copies_->Issue(dst, src, bytes);
  if (absl::Status s = copies_->Wait(ticket); !s.ok()) return Fail(s);
  uploads_.push_back(
      Upload{ticket, src, bytes, HostCopyStream::Checksum(src, bytes)});
  to_device_ += bytes;
  return ticket;
}

absl::Status HostEmulatedDevice::CheckToDevice(void* dst, const void* src,
                                               size_t bytes) {
  ZS_RETURN_IF_ERROR(status_);
  if (!Inside(dst, bytes) || Overlaps(src, bytes)) {
    return Fail(absl::InternalError(absl::StrFormat(
        "host-emulated device: copy of %d bytes to the device at %p from %p: "
        "%s",
        bytes, dst, src,
        Inside(dst, bytes) ? "the source is device memory"
                           : "the destination is not inside a live "
                             "allocation")));
  }
  return absl::OkStatus();
}

absl::Status HostEmulatedDevice::CheckToHost(void* dst, const void* src,
                                             size_t bytes) {
  ZS_RETURN_IF_ERROR(status_);
  if (!Inside(src, bytes) || Overlaps(dst, bytes)) {
    return Fail(absl::InternalError(absl::StrFormat(
        "host-emulated device: copy of %d bytes to the host at %p from %p: %s",
        bytes, dst, src,
        Inside(src, bytes) ? "the destination is device memory"
                           : "the source is not inside a live allocation")));
  }
  return absl::OkStatus();
}

absl::Status HostEmulatedDevice::ToHost(void* dst, const void* src,
                                        size_t bytes) {
  ZS_RETURN_IF_ERROR(CheckToHost(dst, src, bytes));
  ZS_RETURN_IF_ERROR(Drain());
  std::memcpy(dst, src, bytes);
  to_host_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> HostEmulatedDevice::ToHostAsync(void* dst,
                                                         const void* src,
                                                         size_t bytes) {
  ZS_RETURN_IF_ERROR(CheckToHost(dst, src, bytes));
  to_host_ += bytes;
  return copies_->Issue(dst, src, bytes);
}

absl::Status HostEmulatedDevice::WaitCopy(uint64_t ticket) {
  absl::Status s = copies_->Wait(ticket);
  if (!s.ok()) return Fail(s);
  return CheckUploadSources(ticket);
}

absl::Status HostEmulatedDevice::CheckDevice(const char* what, const void* p,
                                             size_t n) {
  if (Inside(p, n * sizeof(float))) return absl::OkStatus();
  return Fail(absl::InternalError(absl::StrFormat(
      "host-emulated device: %s: %d floats at %p are not inside a live "
      "allocation",
      what, n, p)));
}

absl::Status HostEmulatedDevice::AdamW(absl::Span<const AdamWTask> tasks) {
  ZS_RETURN_IF_ERROR(status_);
  for (const AdamWTask& t : tasks) {
    ZS_RETURN_IF_ERROR(CheckDevice("AdamW parameters", t.p, t.n));
    ZS_RETURN_IF_ERROR(CheckDevice("AdamW gradients", t.g, t.n));
    ZS_RETURN_IF_ERROR(CheckDevice("AdamW m", t.m, t.n));
    ZS_RETURN_IF_ERROR(CheckDevice("AdamW v", t.v, t.n));
  }
  for (const AdamWTask& t : tasks) {
    AdamWStep(t.hyper, t.p, t.g, t.m, t.v, nullptr, ServingType::kNone, t.n);
  }
  return absl::OkStatus();
}

absl::Status HostEmulatedDevice::Scale(float* x, size_t n, float s) {
  ZS_RETURN_IF_ERROR(status_);
  ZS_RETURN_IF_ERROR(CheckDevice("Scale", x, n));
  for (size_t i = 0; i < n; ++i) x[i] *= s;
  return absl::OkStatus();
}

absl::StatusOr<double> HostEmulatedDevice::SumSquares(const float* x,
                                                      size_t n) {
  ZS_RETURN_IF_ERROR(status_);
  ZS_RETURN_IF_ERROR(CheckDevice("SumSquares", x, n));
  SquareSum sum;  // the CPU engine's order (grad_reducer.h): last first
  sum.AddReversed(x, n);
  return sum.Total();
}

}  // namespace zeroshard::gpt2
