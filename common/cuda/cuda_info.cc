// Prints the CUDA runtime / driver / cuBLAS / NCCL versions this binary
// resolved at run time, and the visible devices. Exits 0 without a GPU (it
// then says why there is none); exits 1 only if a library query fails.
//
//   bazel run --config=cuda //common/cuda:cuda_info
#include <cstdio>
#include <string>

#include "common/cuda/device.h"

int main() {
  namespace zc = zeroshard::cuda;
  zc::CudaLibraryVersions versions;
  std::string error;
  if (!zc::GetCudaLibraryVersions(&versions, &error)) {
    std::printf("CUDA libraries: unavailable: %s\n", error.c_str());
#ifdef ZEROSHARD_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
  }
  std::printf("CUDA libraries: %s\n",
              zc::FormatCudaLibraryVersions(versions).c_str());
  std::string why;
  const int n = zc::DeviceCount(&why);
  if (n == 0) {
    std::printf("no CUDA device: %s\n", why.c_str());
    return 0;
  }
  std::printf("%d CUDA device(s):\n%s", n, zc::DescribeDevices().c_str());
  return 0;
}
