// The GPU as a GPT-2 Device (worker/gpt2/device.h): memory from cudaMalloc
// (zeroed), synchronous cudaMemcpy copies, and CudaKernels (cuda_kernels.h)
// sized for the model's shape.
//
// Copies go through the legacy default stream; CudaKernels's own stream is a
// blocking one, so a copy after a kernel waits for it and sees its result,
// and a kernel after a copy sees the bytes. ToHostAsync copies on a second
// blocking stream (made at its first call) after an event recorded on the
// kernels' stream, and records an event per copy for CopyDone and
// WaitCopy; the synchronous copies and cudaFree wait for it. ToDeviceAsync
// runs on the same stream after the event of the mark it names (Mark: an
// event per mark, recorded on the kernels' stream), and the kernels'
// stream waits for its event. Kernel calls
// return once enqueued unless `synchronous_kernels`
// (CudaKernelsOptions::synchronous: per-layer timing, CudaKernels::CallTimes);
// the optimizer operations (device.h) return with their work done.
//
// Errors: Create returns CudaKernels::Create's (UNAVAILABLE without a device,
// UNIMPLEMENTED built without --config=cuda); a failed cudaMalloc is
// RESOURCE_EXHAUSTED naming the size, a failed copy INTERNAL naming the
// CUDA error; status() is the first error of a copy or a kernel.
#ifndef ZEROSHARD_WORKER_GPT2_CUDA_CUDA_DEVICE_H_
#define ZEROSHARD_WORKER_GPT2_CUDA_CUDA_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/cuda/cuda_kernels.h"
#include "worker/gpt2/device.h"

namespace zeroshard::gpt2 {

// A device for GPT-2 `config` on micro-batches of B x T tokens.
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(
    const Config& config, int B, int T, CudaPrecision precision, int device = 0,
    bool synchronous_kernels = false);

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_CUDA_CUDA_DEVICE_H_
