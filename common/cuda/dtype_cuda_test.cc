#include "common/cuda/dtype_cuda.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/cuda/device.h"
#include "common/dtype.h"
#include "gtest/gtest.h"

#ifdef ZEROSHARD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zeroshard {
namespace cuda {
namespace {

constexpr char kNotBuilt[] = "built without --config=cuda";

#ifndef ZEROSHARD_HAVE_CUDA
#define ZS_SKIP_WITHOUT_CUDA_DEVICE() GTEST_SKIP() << kNotBuilt
#else
#define ZS_SKIP_WITHOUT_CUDA_DEVICE()            \
  do {                                           \
    std::string why;                             \
    if (!CudaAvailable(&why)) {                  \
      GTEST_SKIP() << "no CUDA device: " << why; \
    }                                            \
  } while (0)
#endif

#ifdef ZEROSHARD_HAVE_CUDA

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// All 65536 bf16 / fp16 bit patterns.
std::vector<uint16_t> All16BitPatterns() {
  std::vector<uint16_t> v(1u << 16);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

// fp32 inputs: every top-16-bit pattern combined with low halves that hit
// the rounding ties and their neighbours (bf16 drops 16 bits, fp16 normals
// 13, fp16 subnormals 14..24), then ~1M uniformly random bit patterns (all
// classes: NaN payloads, subnormals, huge values, ...).
std::vector<float> Fp32Inputs() {
  static constexpr uint16_t kLow[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001,
                                      0x7FFF, 0x8000, 0x8001, 0xFFFF};
  std::vector<float> v;
  v.reserve((1u << 16) * 9 + (1u << 20));
  for (uint32_t hi = 0; hi < (1u << 16); ++hi) {
    for (uint16_t lo : kLow) v.push_back(FromBits((hi << 16) | lo));
  }
  std::mt19937 rng(20240611);
  for (int i = 0; i < (1 << 20); ++i) v.push_back(FromBits(rng()));
  return v;
}

// Compares bit patterns; reports the number of mismatches and the first few.
template <typename In, typename Out, typename Ref>
::testing::AssertionResult SameBits(const char* what, const std::vector<In>& in,
                                    const std::vector<Out>& got, Ref ref) {
  if (got.size() != in.size()) {
    return ::testing::AssertionFailure()
           << what << ": got " << got.size() << " results for " << in.size()
           << " inputs";
  }
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < in.size(); ++i) {
    const Out want = ref(in[i]);
    uint32_t w = 0, g = 0, x = 0;
    std::memcpy(&w, &want, sizeof(Out));
    std::memcpy(&g, &got[i], sizeof(Out));
    std::memcpy(&x, &in[i], sizeof(In));
    if (w == g) continue;
    if (++bad <= 8) {
      char line[128];
      std::snprintf(line, sizeof(line),
                    "\n  [%zu] input 0x%08x: want 0x%08x, got 0x%08x", i, x, w,
                    g);
      first += line;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << in.size()
         << " results differ from the CPU reference" << first;
}

#endif  // ZEROSHARD_HAVE_CUDA

TEST(DtypeCudaTest, CudaLibrariesLink) {
  CudaLibraryVersions versions;
  std::string error;
#ifndef ZEROSHARD_HAVE_CUDA
  EXPECT_FALSE(GetCudaLibraryVersions(&versions, &error));
  EXPECT_EQ(error, kNotBuilt);
  std::string why;
  EXPECT_FALSE(CudaAvailable(&why));
  EXPECT_EQ(why, kNotBuilt);
  EXPECT_FALSE(Fp32ToBf16Device(nullptr, nullptr, 0, nullptr, &error));
  EXPECT_EQ(error, kNotBuilt);
  GTEST_SKIP() << kNotBuilt;
#else
  // cudart, cuBLAS and NCCL really resolved at link and load time; none of
  // these calls needs a GPU.
  ASSERT_TRUE(GetCudaLibraryVersions(&versions, &error)) << error;
  std::printf("CUDA libraries: %s\n",
              FormatCudaLibraryVersions(versions).c_str());
  EXPECT_GT(versions.runtime, 0);
  EXPECT_GT(versions.cublas_major, 0);
  EXPECT_GT(versions.nccl, 0);
  std::string why;
  const int n = DeviceCount(&why);
  if (n == 0) {
    std::printf("no CUDA device: %s\n", why.c_str());
  } else {
    std::printf("%d CUDA device(s):\n%s", n, DescribeDevices().c_str());
  }
#endif
}

// The element functions the kernels run, compiled by nvcc for the host:
// checks the transcription of the CPU reference without needing a GPU.
TEST(DtypeCudaTest, DeviceCodeOnHostMatchesCpuReference) {
#ifndef ZEROSHARD_HAVE_CUDA
  GTEST_SKIP() << kNotBuilt;
#else
  namespace dci = dtype_cuda_internal;
  const std::vector<uint16_t> narrow = All16BitPatterns();
  const std::vector<float> wide = Fp32Inputs();
  std::vector<float> f32(narrow.size());
  std::vector<uint16_t> u16(wide.size());

  for (size_t i = 0; i < narrow.size(); ++i) {
    f32[i] = dci::Bf16ToFp32OnHost(narrow[i]);
  }
  EXPECT_TRUE(SameBits("bf16->fp32", narrow, f32, Bf16ToFp32));
  for (size_t i = 0; i < narrow.size(); ++i) {
    f32[i] = dci::Fp16ToFp32OnHost(narrow[i]);
  }
  EXPECT_TRUE(SameBits("fp16->fp32", narrow, f32, Fp16ToFp32));
  for (size_t i = 0; i < wide.size(); ++i) {
    u16[i] = dci::Fp32ToBf16OnHost(wide[i]);
  }
  EXPECT_TRUE(SameBits("fp32->bf16", wide, u16, Fp32ToBf16));
  for (size_t i = 0; i < wide.size(); ++i) {
    u16[i] = dci::Fp32ToFp16OnHost(wide[i]);
  }
  EXPECT_TRUE(SameBits("fp32->fp16", wide, u16, Fp32ToFp16));
#endif
}

#ifdef ZEROSHARD_HAVE_CUDA

// A cudaMalloc'd array, freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    status_ = cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T));
    if (status_ != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  cudaError_t status() const { return status_; }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_;
  cudaError_t status_;
};

#define ZS_CUDA_OK(expr)                                          \
  do {                                                            \
    const cudaError_t zs_err = (expr);                            \
    if (zs_err != cudaSuccess) {                                  \
      return ::testing::AssertionFailure()                        \
             << #expr << ": " << cudaGetErrorName(zs_err) << ": " \
             << cudaGetErrorString(zs_err);                       \
    }                                                             \
  } while (0)

constexpr size_t kGuard = 1024;  // elements after dst that must stay intact
constexpr unsigned char kFill = 0xA5;

// Copies `in` to the device, runs `launch`, copies the n results back into
// *out and checks that the kGuard elements after them were not written.
template <typename Src, typename Dst, typename Launcher>
::testing::AssertionResult RunOnDevice(Launcher launch,
                                       const std::vector<Src>& in,
                                       std::vector<Dst>* out) {
  const size_t n = in.size();
  DeviceArray<Src> d_src(n);
  DeviceArray<Dst> d_dst(n + kGuard);
  ZS_CUDA_OK(d_src.status());
  ZS_CUDA_OK(d_dst.status());
  ZS_CUDA_OK(cudaMemcpy(d_src.get(), in.data(), n * sizeof(Src),
                        cudaMemcpyHostToDevice));
  ZS_CUDA_OK(cudaMemset(d_dst.get(), kFill, (n + kGuard) * sizeof(Dst)));
  std::string error;
  if (!launch(d_src.get(), d_dst.get(), n, nullptr, &error)) {
    return ::testing::AssertionFailure() << "launch failed: " << error;
  }
  ZS_CUDA_OK(cudaDeviceSynchronize());
  std::vector<Dst> all(n + kGuard);
  ZS_CUDA_OK(cudaMemcpy(all.data(), d_dst.get(), all.size() * sizeof(Dst),
                        cudaMemcpyDeviceToHost));
  std::vector<unsigned char> guard(kGuard * sizeof(Dst), kFill);
  if (std::memcmp(all.data() + n, guard.data(), guard.size()) != 0) {
    return ::testing::AssertionFailure()
           << "kernel wrote past the end of dst (n = " << n << ")";
  }
  all.resize(n);
  *out = std::move(all);
  return ::testing::AssertionSuccess();
}

#endif  // ZEROSHARD_HAVE_CUDA

TEST(DtypeCudaTest, Bf16ToFp32AllPatterns) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
#ifdef ZEROSHARD_HAVE_CUDA
  const std::vector<uint16_t> in = All16BitPatterns();
  std::vector<float> out;
  ASSERT_TRUE(RunOnDevice(Bf16ToFp32Device, in, &out));
  EXPECT_TRUE(SameBits("bf16->fp32 (GPU)", in, out, Bf16ToFp32));
#endif
}

TEST(DtypeCudaTest, Fp16ToFp32AllPatterns) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
#ifdef ZEROSHARD_HAVE_CUDA
  const std::vector<uint16_t> in = All16BitPatterns();
  std::vector<float> out;
  ASSERT_TRUE(RunOnDevice(Fp16ToFp32Device, in, &out));
  EXPECT_TRUE(SameBits("fp16->fp32 (GPU)", in, out, Fp16ToFp32));
#endif
}

TEST(DtypeCudaTest, Fp32ToBf16) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
#ifdef ZEROSHARD_HAVE_CUDA
  const std::vector<float> in = Fp32Inputs();
  std::vector<uint16_t> out;
  ASSERT_TRUE(RunOnDevice(Fp32ToBf16Device, in, &out));
  EXPECT_TRUE(SameBits("fp32->bf16 (GPU)", in, out, Fp32ToBf16));
#endif
}

TEST(DtypeCudaTest, Fp32ToFp16) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
#ifdef ZEROSHARD_HAVE_CUDA
  const std::vector<float> in = Fp32Inputs();
  std::vector<uint16_t> out;
  ASSERT_TRUE(RunOnDevice(Fp32ToFp16Device, in, &out));
  EXPECT_TRUE(SameBits("fp32->fp16 (GPU)", in, out, Fp32ToFp16));
#endif
}

// Lengths around block / grid boundaries, and n == 0 with null pointers.
TEST(DtypeCudaTest, LengthsAndEmpty) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
#ifdef ZEROSHARD_HAVE_CUDA
  std::string error;
  EXPECT_TRUE(Fp32ToBf16Device(nullptr, nullptr, 0, nullptr, &error));
  EXPECT_TRUE(Bf16ToFp32Device(nullptr, nullptr, 0, nullptr, &error));
  EXPECT_TRUE(Fp32ToFp16Device(nullptr, nullptr, 0, nullptr, &error));
  EXPECT_TRUE(Fp16ToFp32Device(nullptr, nullptr, 0, nullptr, &error));
  const std::vector<float> all = Fp32Inputs();
  for (size_t n : {size_t{1}, size_t{255}, size_t{256}, size_t{257},
                   size_t{65535} * 256 + 3}) {
    SCOPED_TRACE(n);
    std::vector<float> in(n);
    for (size_t i = 0; i < n; ++i) in[i] = all[(i * 7919) % all.size()];
    std::vector<uint16_t> out;
    ASSERT_TRUE(RunOnDevice(Fp32ToFp16Device, in, &out));
    EXPECT_TRUE(SameBits("fp32->fp16 (GPU)", in, out, Fp32ToFp16));
  }
#endif
}

}  // namespace
}  // namespace cuda
}  // namespace zeroshard
