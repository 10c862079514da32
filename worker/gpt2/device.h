// Where a GPT-2 model computes (model.h's ModelOptions::device): its memory,
// copies between that memory and host memory, and the Kernels (kernels.h)
// that compute on it. Without a Device the model computes in host memory with
// CpuKernels, as before.
//
//   HostEmulatedDevice (host_device.h)  host memory standing in for a GPU's:
//       every copy is checked against the live allocations, so the device
//       path's staging and buffer lifetimes run (and fail loudly) in CI;
//       CpuKernels compute, so the bits are the CPU model's.
//   CudaDevice (cuda/cuda_device.h)     cudaMalloc'd memory, cudaMemcpy,
//       CudaKernels.
//
// Copies are synchronous: they return with the bytes in place, after the
// kernels enqueued before them have finished — except ToHostAsync and
// ToDeviceAsync, which return at once and run beside kernels (gradients on
// their way down while backward goes on, parameters on their way up while
// forward computes: CUDA's copy stream, the host-emulated device's copy
// thread); a synchronous copy or Free first waits for every asynchronous
// copy in flight.
//
// Errors: Alloc and the copies return them; kernels (whose calls return
// void) record theirs, and status() gives the first error of either. After
// an error the device is unusable: destroy it.
//
// Threading: one thread at a time, like the Kernels.
#ifndef ZEROSHARD_WORKER_GPT2_DEVICE_H_
#define ZEROSHARD_WORKER_GPT2_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/optim/adamw.h"
#include "worker/gpt2/kernels.h"

namespace zeroshard::gpt2 {

class Device {
 public:
  virtual ~Device() = default;

  // "host-emulated (cpu, 2 threads)", "cuda (NVIDIA H200, sm_90, fp32)".
  virtual std::string Name() const = 0;

  // `bytes` of device memory, 64-byte aligned and zeroed. RESOURCE_EXHAUSTED
  // naming the size when it cannot be had.
  virtual absl::StatusOr<void*> Alloc(size_t bytes) = 0;
  // Returns memory from Alloc (null: nothing).
  virtual void Free(void* device_ptr) = 0;

  // Makes host memory the copies use page-locked (CUDA: cudaHostRegister),
  // so that they run at the link's speed; false when it cannot (the copies
  // still work, slower). Unpin before the memory is freed.
  virtual bool PinHost(void* host, size_t bytes) = 0;
  virtual void UnpinHost(void* host) = 0;

  // dst (device) <- src (host); dst (host) <- src (device).
  virtual absl::Status ToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status ToHost(void* dst, const void* src, size_t bytes) = 0;

  // dst (host) <- src (device), asynchronously: the copy sees every kernel
  // enqueued before the call and runs beside later ones. Returns a ticket
  // (1, 2, ... in issue order). Until WaitCopy(ticket) has returned, `dst`
  // must not be read, no later kernel may write `src`, and both must stay
  // allocated.
  virtual absl::StatusOr<uint64_t> ToHostAsync(void* dst, const void* src,
                                               size_t bytes) = 0;
  // A point in the kernels' order that copies up can wait for: records, in
  // mark `mark` (0: a new one), the end of every kernel enqueued so far,
  // and returns the mark's id (1, 2, ...). A mark lives as long as the
  // device; record the same one again rather than making one per use.
  // INVALID_ARGUMENT for an id never returned.
  virtual absl::StatusOr<uint64_t> Mark(uint64_t mark) = 0;
  // dst (device) <- src (host), asynchronously: the copy waits only for the
  // kernels before mark `after` as last recorded (0: none), and every
  // kernel enqueued after the call waits for it — so the next unit's
  // parameters go up while the kernels before the call compute. Returns a
  // ticket (shared with ToHostAsync's). Until WaitCopy(ticket) (or a
  // synchronous copy, or Free) has returned, `src` must not change and must
  // stay allocated; no kernel enqueued after the mark and before the call
  // may touch `dst`. INVALID_ARGUMENT for an unknown mark.
  virtual absl::StatusOr<uint64_t> ToDeviceAsync(void* dst, const void* src,
                                                 size_t bytes,
                                                 uint64_t after) = 0;
  // Whether asynchronous copy `ticket` has finished (does not wait).
  virtual bool CopyDone(uint64_t ticket) = 0;
  // Waits until copy `ticket` and every copy issued before it have
  // finished: OK, or the first error of an asynchronous copy.
  virtual absl::Status WaitCopy(uint64_t ticket) = 0;

  // Stage 0's optimizer on this device's memory (engine/model.h's
  // ResidentOptimizer). Like the copies, each returns with its work done;
  // every pointer is device memory.
  struct AdamWTask {
    AdamWHyper hyper;
    float* p;
    const float* g;
    float* m;
    float* v;
    size_t n;
  };
  // AdamWStep (common/optim/adamw.h, no serving copy) of every task: its
  // bits, canonical NaNs included.
  virtual absl::Status AdamW(absl::Span<const AdamWTask> tasks) = 0;
  // x (n floats) *= s, each product rounded once.
  virtual absl::Status Scale(float* x, size_t n, float s) = 0;
  // The sum of x[i]^2 in fp64: host-emulated in SquareSum's lanes from
  // x[n-1] down to x[0] (common/optim/clip.h; the CPU engine's order and
  // bits, grad_reducer.h), CUDA in a fixed tree (the same bits every call).
  virtual absl::StatusOr<double> SumSquares(const float* x, size_t n) = 0;

  // The kernels computing on this device's memory; owned by the device.
  virtual Kernels& kernels() = 0;

  // OK, or the first error of a copy or a kernel.
  virtual absl::Status status() const = 0;
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_DEVICE_H_
