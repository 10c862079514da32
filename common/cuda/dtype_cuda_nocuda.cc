// dtype_cuda.h in the default (non-CUDA) build: every launcher reports that
// CUDA support was not compiled in. Replaced by dtype_cuda.cu under
// --config=cuda (see zs_cuda_library in tools/defs.bzl).
#include <string>

#include "common/cuda/dtype_cuda.h"

namespace zeroshard {
namespace cuda {
namespace {

bool NotBuilt(std::string* error) {
  if (error != nullptr) *error = "built without --config=cuda";
  return false;
}

}  // namespace

bool Fp32ToBf16Device(const float*, uint16_t*, size_t, CUstream_st*,
                      std::string* error) {
  return NotBuilt(error);
}

bool Bf16ToFp32Device(const uint16_t*, float*, size_t, CUstream_st*,
                      std::string* error) {
  return NotBuilt(error);
}

bool Fp32ToFp16Device(const float*, uint16_t*, size_t, CUstream_st*,
                      std::string* error) {
  return NotBuilt(error);
}

bool Fp16ToFp32Device(const uint16_t*, float*, size_t, CUstream_st*,
                      std::string* error) {
  return NotBuilt(error);
}

}  // namespace cuda
}  // namespace zeroshard
