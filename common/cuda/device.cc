#include "common/cuda/device.h"

#include <string>

#ifdef ZEROSHARD_HAVE_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <library_types.h>
#include <nccl.h>
#endif

namespace zeroshard {
namespace cuda {
namespace {

constexpr char kNotBuilt[] = "built without --config=cuda";

#ifdef ZEROSHARD_HAVE_CUDA
std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorName(err) + ": " +
         cudaGetErrorString(err);
}
#endif

// "13.0" from 13000, "2.28.9" style is done by the callers.
std::string MajorMinor(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

#ifdef ZEROSHARD_HAVE_CUDA

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: not an error of later calls
    if (why != nullptr) *why = CudaError("cudaGetDeviceCount", err);
    return 0;
  }
  if (count <= 0) {
    if (why != nullptr) *why = "cudaGetDeviceCount found no device";
    return 0;
  }
  return count;
}

bool GetCudaLibraryVersions(CudaLibraryVersions* v, std::string* error) {
  *v = CudaLibraryVersions();
  cudaError_t err = cudaRuntimeGetVersion(&v->runtime);
  if (err != cudaSuccess) {
    if (error != nullptr) *error = CudaError("cudaRuntimeGetVersion", err);
    return false;
  }
  err = cudaDriverGetVersion(&v->driver);  // 0 (and success) if no driver
  if (err != cudaSuccess) {
    if (error != nullptr) *error = CudaError("cudaDriverGetVersion", err);
    return false;
  }
  if (cublasGetProperty(MAJOR_VERSION, &v->cublas_major) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &v->cublas_minor) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &v->cublas_patch) !=
          CUBLAS_STATUS_SUCCESS) {
    if (error != nullptr) *error = "cublasGetProperty failed";
    return false;
  }
  const ncclResult_t nr = ncclGetVersion(&v->nccl);
  if (nr != ncclSuccess) {
    if (error != nullptr) {
      *error = std::string("ncclGetVersion: ") + ncclGetErrorString(nr);
    }
    return false;
  }
  return true;
}

std::string DescribeDevices() {
  std::string out;
  const int n = DeviceCount();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p;
    const cudaError_t err = cudaGetDeviceProperties(&p, i);
    out += std::to_string(i) + ": ";
    if (err != cudaSuccess) {
      out += CudaError("cudaGetDeviceProperties", err) + "\n";
      continue;
    }
    out += std::string(p.name) + ", sm_" + std::to_string(p.major) +
           std::to_string(p.minor) + ", " +
           std::to_string(p.totalGlobalMem >> 20) + " MiB\n";
  }
  return out;
}

#else  // !ZEROSHARD_HAVE_CUDA

int DeviceCount(std::string* why) {
  if (why != nullptr) *why = kNotBuilt;
  return 0;
}

bool GetCudaLibraryVersions(CudaLibraryVersions* v, std::string* error) {
  *v = CudaLibraryVersions();
  if (error != nullptr) *error = kNotBuilt;
  return false;
}

std::string DescribeDevices() { return ""; }

#endif  // ZEROSHARD_HAVE_CUDA

bool CudaAvailable(std::string* why) { return DeviceCount(why) > 0; }

std::string FormatCudaLibraryVersions(const CudaLibraryVersions& v) {
  const int nccl_major = v.nccl >= 10000 ? v.nccl / 10000 : v.nccl / 1000;
  const int nccl_minor =
      v.nccl >= 10000 ? (v.nccl / 100) % 100 : (v.nccl / 100) % 10;
  const int nccl_patch = v.nccl % 100;
  return "cudart " + MajorMinor(v.runtime) + ", driver " +
         (v.driver == 0 ? std::string("none") : MajorMinor(v.driver)) +
         ", cuBLAS " + std::to_string(v.cublas_major) + "." +
         std::to_string(v.cublas_minor) + "." + std::to_string(v.cublas_patch) +
         ", NCCL " + std::to_string(nccl_major) + "." +
         std::to_string(nccl_minor) + "." + std::to_string(nccl_patch);
}

}  // namespace cuda
}  // namespace zeroshard
