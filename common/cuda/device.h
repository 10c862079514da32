// CUDA device discovery and library versions, usable in every build.
//
// Built without --config=cuda (ZEROSHARD_HAVE_CUDA undefined) nothing here
// touches CUDA: DeviceCount() is 0, CudaAvailable() is false and
// GetCudaLibraryVersions() fails, each with the reason
// "built without --config=cuda".
//
// Under --config=cuda the functions only need the CUDA runtime, cuBLAS and
// NCCL shared libraries, not a GPU or a driver: without them they report the
// CUDA error instead of failing hard, so tests can GTEST_SKIP() on a machine
// without a GPU.
#ifndef ZEROSHARD_COMMON_CUDA_DEVICE_H_
#define ZEROSHARD_COMMON_CUDA_DEVICE_H_

#include <string>

namespace zeroshard {
namespace cuda {

// The number of CUDA devices visible to this process. 0 if there is none or
// if it cannot be determined (no driver, driver too old for the runtime,
// CUDA_VISIBLE_DEVICES empty, ...); then, if why is not null, *why says why,
// e.g. "cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is
// detected". Clears the CUDA error it may have caused (cudaGetLastError), so
// later launch checks are not polluted by it.
int DeviceCount(std::string* why = nullptr);

// DeviceCount() > 0; if false, *why (if not null) holds the reason.
bool CudaAvailable(std::string* why);

// Versions as the libraries encode them (e.g. runtime 13000 = 13.0, NCCL
// 22809 = 2.28.9); 0 where not known.
struct CudaLibraryVersions {
  int runtime = 0;  // cudaRuntimeGetVersion
  int driver = 0;   // cudaDriverGetVersion; 0 without a driver
  int cublas_major = 0, cublas_minor = 0,
      cublas_patch = 0;  // cublasGetProperty
  int nccl = 0;          // ncclGetVersion
};

// Queries the linked cudart, cuBLAS and NCCL (none of these calls needs a
// GPU). Returns false with *error set if a query fails.
bool GetCudaLibraryVersions(CudaLibraryVersions* versions, std::string* error);

// "cudart 13.0, driver 12.8 (or "none"), cuBLAS 13.0.2, NCCL 2.28.9".
std::string FormatCudaLibraryVersions(const CudaLibraryVersions& versions);

// One line per device: "<index>: <name>, sm_<major><minor>, <n> MiB"; empty
// if there is none.
std::string DescribeDevices();

}  // namespace cuda
}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CUDA_DEVICE_H_
