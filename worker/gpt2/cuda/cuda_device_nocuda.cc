// cuda_device.h in the default (non-CUDA) build.
#include "absl/status/status.h"
#include "worker/gpt2/cuda/cuda_device.h"

namespace zeroshard::gpt2 {

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const Config&, int,
                                                         int, CudaPrecision,
                                                         int, bool) {
  return absl::UnimplementedError("built without --config=cuda");
}

}  // namespace zeroshard::gpt2
