// ReduceTree (reduce.h) on the GPU: the same canonical tree, fp32
// additions (__fadd_rn), bf16 widened exactly and rounded once with the
// rules of common/dtype_bits.h — so the NCCL backend gives the same bits as
// the host backends.
//
// `inputs` is a host array of n device pointers (n <= kMaxDeviceTreeInputs),
// `out` a device pointer (may equal one of the inputs). Asynchronous on
// `stream`; returns "" on a successful launch, else the CUDA error (or
// "built without --config=cuda"). Thread-safe as CUDA launches are.
#ifndef ZEROSHARD_WORKER_COLLECTIVE_REDUCE_CUDA_H_
#define ZEROSHARD_WORKER_COLLECTIVE_REDUCE_CUDA_H_

#include <cstddef>
#include <string>

#include "worker/collective/types.h"

struct CUstream_st;

namespace zeroshard {
namespace collective {

constexpr int kMaxDeviceTreeInputs = 64;

std::string DeviceReduceTree(const void* const* inputs, int n, DType in,
                             void* out, DType out_dtype, size_t count,
                             CUstream_st* stream);

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_REDUCE_CUDA_H_
