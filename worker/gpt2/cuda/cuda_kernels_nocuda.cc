// cuda_kernels.h in the default (non-CUDA) build: Create reports that CUDA
// support was not compiled in. Replaced by cuda_kernels.cc + cuda_gemm.cc
// under --config=cuda (see BUILD).
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/gpt2/cuda/cuda_kernels.h"

namespace zeroshard::gpt2 {

absl::StatusOr<std::unique_ptr<CudaKernels>> CudaKernels::Create(
    const CudaKernelsOptions&) {
  return absl::UnimplementedError("built without --config=cuda");
}

}  // namespace zeroshard::gpt2
